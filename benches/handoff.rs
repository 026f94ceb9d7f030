//! How long shards stay unowned when a worker leaves: after SIGTERM (it releases its leases) and
//! after SIGKILL (its leases must expire), with the default lease settings, on the embedded
//! backend. Prints numbers; asserts nothing about time.
//!
//! `cargo bench --bench handoff -- fleet`: the fleet at scale instead — for 4, 64, 256 and 1,000
//! shards and 1, 8 and 20 workers started together: the time until every shard is held and the
//! fleet balanced, the time a 9th worker joining 8 takes to reach its share, lease writes and
//! lease-listing reads per shard per minute over 20 s of steady state, and each worker's memory
//! and CPU per held shard; then, with 8 or 20 workers, a fresh fleet on the same store, one
//! worker SIGTERMed and then another SIGKILLed: the time until every shard is held again.
//!
//! `cargo bench --bench handoff -- counting`: the same shard and worker counts with the same
//! 200,000 events in the stream before the fleet starts: the time from start to the first like
//! counted and to the last, the counter's throughput over that span, and its DynamoDB write units
//! per like (leases included), every total checked against the producer's.
//!
//! `-- fleet aws` (with `eval "$(scripts/local-aws.sh env)"`): the fleet on the local AWS peers,
//! a stream and tables of its own per size, at 4 and 64 shards.
//!
//! Run: `cargo bench --bench handoff` (a test build of it exits at once).
#![allow(clippy::unwrap_used)]

mod common;
use common::stack::{aws_args, peers};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `tally` on a store: `dir` is an embedded store's data dir, or `aws:<name>` for a stream and
/// tables of that name on the local AWS peers (`-- fleet aws`).
fn tally(dir: &str, args: &[&str]) -> Command {
    let store = match dir.strip_prefix("aws:") {
        Some(name) => {
            let (kinesis, dynamodb) = peers();
            aws_args(&kinesis, &dynamodb, name, None)
        }
        None => vec!["--data-dir".to_owned(), dir.to_owned()],
    };
    common::stack::tally(&store, args)
}

fn worker(dir: &str, id: &str) -> Child {
    tally(dir, &["count", "--worker-id", id])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker")
}

/// (shard, owner, held) for every lease.
fn leases(dir: &str) -> Vec<(String, Option<String>, bool)> {
    let out = tally(dir, &["leases", "--json"]).output().expect("leases");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|l| {
                    (
                        l["shard_id"].as_str().unwrap_or("").to_owned(),
                        l["owner"].as_str().map(str::to_owned),
                        l["held"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn wait_until(what: &str, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what} did not happen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

fn signal(child: &Child, sig: &str) {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
}

/// Held leases per owner.
fn per_owner(dir: &str) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for (_, owner, held) in leases(dir) {
        if let (Some(o), true) = (owner, held) {
            *m.entry(o).or_insert(0) += 1;
        }
    }
    m
}

/// Whether `workers` workers hold every one of `shards` leases, balanced (at most one apart).
fn balanced(dir: &str, shards: usize, workers: usize) -> bool {
    let m = per_owner(dir);
    let held: usize = m.values().sum();
    let (lo, hi) = (m.values().min().copied(), m.values().max().copied());
    held == shards && m.len() == workers.min(shards) && hi.zip(lo).is_some_and(|(h, l)| h - l <= 1)
}

/// A process's resident memory (KB) and CPU time so far (clock ticks), from /proc.
fn usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    (rss, ticks)
}

fn json_worker(dir: &str, id: &str) -> Child {
    tally(dir, &["count", "--json", "--worker-id", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker")
}

fn fleet_at(shards: usize, workers: usize) {
    let (_tmp, dir) = store(shards);
    let started = Instant::now();
    let mut fleet: Vec<Child> = (0..workers)
        .map(|i| json_worker(&dir, &format!("w{i}")))
        .collect();
    let balance = wait_until("balance", || balanced(&dir, shards, workers));
    let join = (workers == 8).then(|| {
        fleet.push(json_worker(&dir, "joiner"));
        wait_until("the joiner's share", || balanced(&dir, shards, workers + 1))
    });
    // Steady state: what upkeep costs.
    let before: Vec<(u64, u64)> = fleet.iter().map(|c| usage(c.id())).collect();
    let steady = Duration::from_secs(20);
    std::thread::sleep(steady);
    let after: Vec<(u64, u64)> = fleet.iter().map(|c| usage(c.id())).collect();
    let held = per_owner(&dir);
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    for c in &fleet {
        signal(c, "TERM");
    }
    let (mut writes, mut listings) = (0u64, 0u64);
    for c in fleet {
        let out = c.wait_with_output().expect("worker");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let l = &v["leases"];
        writes += l["renewed"].as_u64().unwrap_or(0) + l["heartbeats"].as_u64().unwrap_or(0);
        listings += l["listings"].as_u64().unwrap_or(0);
    }
    // Then a fresh fleet on the same store: one worker leaves on SIGTERM, then another dies on
    // SIGKILL — how long until every shard is held again by the rest.
    let (term, kill) = if workers > 2 {
        let mut fleet: Vec<Child> = (0..workers)
            .map(|i| worker(&dir, &format!("w{i}")))
            .collect();
        wait_until("balance again", || balanced(&dir, shards, workers));
        let (term, mut a) = leave(&dir, &mut fleet, "TERM", shards, "w0");
        let (kill, mut b) = leave(&dir, &mut fleet, "KILL", shards, "w1");
        for c in &fleet {
            signal(c, "TERM");
        }
        for mut c in fleet {
            let _ = c.wait();
        }
        let _ = (a.wait(), b.wait());
        (Some(term), Some(kill))
    } else {
        (None, None)
    };
    let rss_kb: u64 = after.iter().map(|u| u.0).sum();
    let ticks: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.1.saturating_sub(b.1))
        .sum();
    let tick_hz = 100.0;
    let cpu_pct = ticks as f64 / tick_hz / steady.as_secs_f64() * 100.0;
    println!(
        "{shards:>5} shards {workers:>2} workers | balanced {:>6} ms | 9th joins {:>6} | SIGTERM {:>6} | SIGKILL {:>8} | lease writes/shard/min {:>5.1} | listings/worker/min {:>5.1} (rows read/shard/min {:>6.1}) | memory/shard {:>6} KB | CPU/shard {:>6.3} %",
        balance.as_millis(),
        join.map_or("-".to_owned(), |j| format!("{} ms", j.as_millis())),
        term.map_or("-".to_owned(), |t| format!("{} ms", t.as_millis())),
        kill.map_or("-".to_owned(), |t| format!("{} ms", t.as_millis())),
        writes as f64 / shards as f64 / minutes,
        listings as f64 / held.len().max(1) as f64 / minutes,
        listings as f64 / minutes,
        rss_kb / shards as u64,
        cpu_pct / shards as f64,
    );
}

/// Signals the fleet's first worker, `id`, and times until every shard is held again by the
/// others; returns that time and the worker (to collect its report).
fn leave(
    dir: &str,
    fleet: &mut Vec<Child>,
    sig: &str,
    shards: usize,
    id: &str,
) -> (Duration, Child) {
    let c = fleet.remove(0);
    signal(&c, sig);
    let t = wait_until("the shards held again", || {
        let m = per_owner(dir);
        m.values().sum::<usize>() == shards && !m.contains_key(id)
    });
    (t, c)
}

/// The global total as `tally total` reads it.
fn total(dir: &str) -> i64 {
    let out = tally(dir, &["total", "--json"]).output().expect("total");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["total"].as_i64().unwrap_or(0)
}

/// W workers started together on N shards holding the same 200,000 events: start-up to the
/// first like counted, to every like counted, and what the counting cost.
fn counting_at(shards: usize, workers: usize) {
    let (_tmp, dir) = store(shards);
    let out = tally(
        &dir,
        &["produce", "--events", "200000", "--seed", "1", "--json"],
    )
    .output()
    .expect("produce");
    let put: serde_json::Value = serde_json::from_slice(&out.stdout).expect("produce --json");
    let expected = put["expected_total"].as_i64().expect("expected_total");
    let events = put["events"].as_u64().expect("events");
    let started = Instant::now();
    let fleet: Vec<Child> = (0..workers)
        .map(|i| json_worker(&dir, &format!("w{i}")))
        .collect();
    // `tally total` every 100 ms (a process each: polled faster, the polling would take CPU from
    // the workers on 2 cores), so both times are within 100 ms and a few of the read's own.
    let until = |what: &str, done: &dyn Fn(i64) -> bool| {
        while !done(total(&dir)) {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "{what} did not happen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        started.elapsed()
    };
    let first = until("the first like counted", &|t| t != 0);
    let all = until("every like counted", &|t| t == expected);
    for c in &fleet {
        signal(c, "TERM");
    }
    let (mut units, mut counted) = (0u64, 0u64);
    for c in fleet {
        let out = c.wait_with_output().expect("worker");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        units += v["write_units"]["total"].as_u64().unwrap_or(0);
        counted += v["counted"].as_u64().unwrap_or(0);
    }
    assert_eq!(total(&dir), expected, "every count exact");
    println!(
        "{shards:>5} shards {workers:>2} workers | first like {:>6} ms | all {:>7} ms | {:>7.0} events/s from start | {:.3} WCU/like (counted {counted} of {events} events, total {expected} exact)",
        first.as_millis(),
        all.as_millis(),
        events as f64 / all.as_secs_f64(),
        units as f64 / counted.max(1) as f64,
    );
}

/// `run(shards, workers)` for 4, 64, 256 and 1,000 shards and 1, 8 and 20 workers.
fn at_every_size(run: fn(usize, usize)) {
    // On the local peers: 4 and 64 shards (kinesis-local takes 256 per account as
    // `scripts/local-aws.sh` starts it, across every stream a run has).
    let sizes: &[usize] = if on_aws() {
        &[4, 64]
    } else {
        &[4, 64, 256, 1_000]
    };
    // `-- fleet 1000`: one size only.
    let only: Option<usize> = std::env::args().find_map(|a| a.parse().ok());
    let sizes: Vec<usize> = sizes
        .iter()
        .copied()
        .filter(|s| only.is_none_or(|o| o == *s))
        .collect();
    for shards in sizes {
        for workers in [1, 8, 20] {
            run(shards, workers);
        }
    }
}

/// Whether the bench runs on the local AWS peers (`aws` after the mode) instead of embedded.
fn on_aws() -> bool {
    std::env::args().any(|a| a == "aws")
}

/// What a fresh store leaves behind: its directory, or its stream and tables on the peers.
struct Fresh {
    _tmp: tempfile::TempDir,
    dir: String,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        if self.dir.starts_with("aws:") {
            let _ = tally(&self.dir, &["teardown", "--yes"])
                .stdout(Stdio::null())
                .status();
        }
    }
}

/// A fresh store of `shards` shards: an embedded one in a directory removed when dropped, or a
/// stream and tables of their own on the local peers, deleted when dropped.
fn store(shards: usize) -> (Fresh, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = if on_aws() {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() % 1_000_000_000);
        format!("aws:bench-{}-{shards}-{ms}", std::process::id())
    } else {
        tmp.path().to_str().expect("utf-8 path").to_owned()
    };
    assert!(tally(&dir, &["setup", "--shards", &shards.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("setup")
        .success());
    (
        Fresh {
            _tmp: tmp,
            dir: dir.clone(),
        },
        dir,
    )
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::args().any(|a| a == "counting") {
        println!("the fleet counting 200,000 events put before it starts, embedded backend, default settings");
        return at_every_size(counting_at);
    }
    if std::env::args().any(|a| a == "fleet") {
        let backend = if on_aws() {
            "the local AWS peers (kinesis-local, DynamoDB Local)"
        } else {
            "embedded backend"
        };
        println!("the fleet at scale, {backend}, default lease settings (duration 10 s, renewals 3.5 s, poll 0.5 s), no records");
        return at_every_size(fleet_at);
    }
    let (_tmp, dir) = store(8);
    let rounds = 3;
    println!("handoff with default lease settings (duration 10 s, poll 0.5 s), 8 shards, 2 workers, {rounds} rounds");
    for kind in ["TERM", "KILL"] {
        let mut times = Vec::new();
        for round in 0..rounds {
            let mut a = worker(&dir, &format!("a{round}{kind}"));
            let mut b = worker(&dir, &format!("b{round}{kind}"));
            let (ida, idb) = (format!("a{round}{kind}"), format!("b{round}{kind}"));
            wait_until("balance", || {
                let l = leases(&dir);
                let n = |id: &str| {
                    l.iter()
                        .filter(|x| x.1.as_deref() == Some(id) && x.2)
                        .count()
                };
                n(&ida) == 4 && n(&idb) == 4
            });
            signal(&a, kind);
            let t = wait_until("takeover", || {
                leases(&dir)
                    .iter()
                    .all(|x| x.1.as_deref() == Some(idb.as_str()) && x.2)
            });
            let _ = a.wait();
            times.push(t);
            signal(&b, "TERM");
            let _ = b.wait();
        }
        let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
        println!(
            "SIG{kind}: shards unowned for {:?} ms (max {} ms)",
            ms,
            ms.iter().max().unwrap_or(&0)
        );
    }
}
