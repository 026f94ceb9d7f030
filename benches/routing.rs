//! The router at scale (docs/REGIONS.md): two regions on the embedded backend, region a's stream
//! of N shards (4, 64, 256, 1,000) holding 200,000 events put before the routers start (the
//! demo's posts, about half homed in region b), and W routers (1, 8, 20) started together. It
//! prints the time from their start until every shard is routed to its tip (each router lease
//! row's checkpoint at the last record, as region a's counter, run first, found it), records read
//! and put per second over that span — beside region a's counter alone counting the same
//! records (one worker, `--until-idle`, start-up included) and the producer putting them
//! (the routers' lease upkeep is the workers', measured by
//! `cargo bench --bench handoff -- fleet`); then region b's counter counts what was put to it,
//! and the two homes' totals must add up to the producer's. Prints numbers; asserts exactness
//! only.
//!
//! Run: `cargo bench --bench routing` (`-- 1000`: one size). A test build of it exits at once.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Region `this`'s two stores: its own data dir, and the config naming the other's.
struct Region {
    dir: String,
    config: String,
}

impl Region {
    fn tally(&self, args: &[&str]) -> Command {
        common::stack::tally(
            &[
                "--data-dir".to_owned(),
                self.dir.clone(),
                "--config".to_owned(),
                self.config.clone(),
            ],
            args,
        )
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.tally(args).output().expect("tally");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// Each shard's checkpoint of `app`.
    fn checkpoints(&self, app: &str) -> BTreeMap<String, Option<String>> {
        let v = self.json(&["leases", "--app", app, "--json"]);
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["shard_id"].as_str().unwrap().to_owned(),
                    l["checkpoint"].as_str().map(str::to_owned),
                )
            })
            .collect()
    }
}

/// Two regions `a` and `b` in `tmp`, a's stream of `shards` shards, b's of 4.
fn regions(tmp: &std::path::Path, shards: usize) -> (Region, Region) {
    let (da, db) = (tmp.join("a"), tmp.join("b"));
    let config = |this: &str, that: &str, peer: &std::path::Path| {
        let f = tmp.join(format!("{this}.toml"));
        std::fs::write(
            &f,
            format!(
                "[regions]\nthis = \"{this}\"\nhomes = [\"a\", \"b\"]\n[regions.peers.{that}]\ndata_dir = \"{}\"\n",
                peer.display()
            ),
        )
        .unwrap();
        f.display().to_string()
    };
    let a = Region {
        dir: da.display().to_string(),
        config: config("a", "b", &db),
    };
    let b = Region {
        dir: db.display().to_string(),
        config: config("b", "a", &da),
    };
    for (r, n) in [(&a, shards), (&b, 4)] {
        let ok = r
            .tally(&["setup", "--shards", &n.to_string()])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "setup");
    }
    (a, b)
}

fn router(a: &Region, id: &str) -> Child {
    a.tally(&["route", "--json", "--worker-id", id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn router")
}

fn signal(c: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &c.id().to_string()])
        .status();
}

fn routing_at(shards: usize, workers: usize) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (a, b) = regions(tmp.path(), shards);
    let t = Instant::now();
    let put = a.json(&["produce", "--events", "200000", "--seed", "1", "--json"]);
    let producing = t.elapsed();
    let expected = put["expected_total"].as_i64().expect("expected_total");
    // Region a's counter first: its checkpoints are each shard's last record, the routers' goal;
    // its time (one worker, start-up included) is the baseline.
    let t = Instant::now();
    a.json(&["count", "--until-idle", "--json"]);
    let counting = t.elapsed();
    let tips = a.checkpoints("counter");
    let started = Instant::now();
    let fleet: Vec<Child> = (0..workers).map(|i| router(&a, &format!("r{i}"))).collect();
    loop {
        if a.checkpoints("router") == tips {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the routers did not reach the tips"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    for c in &fleet {
        signal(c, "TERM");
    }
    let (mut read, mut routed) = (0u64, 0u64);
    for c in fleet {
        let out = c.wait_with_output().expect("router");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        read += v["records"].as_u64().unwrap_or(0);
        routed += v["routed"].as_u64().unwrap_or(0);
    }
    b.json(&["count", "--until-idle", "--json"]);
    // Across regions `total` adds every home's: a's posts from a's store, b's from b's.
    let both = a.json(&["total", "--json"])["total"].as_i64().unwrap();
    assert_eq!(
        both, expected,
        "both homes' totals add up to the producer's"
    );
    println!(
        "{shards:>5} shards {workers:>2} routers | routed to the tips in {:>7} ms | {:>8.0} records read/s | {:>8.0} put/s | beside: a's counter alone {:>6} ms, the producer {:>6} ms | read {read}, put {routed}; total of both homes {both} = {expected} exact",
        took.as_millis(),
        read as f64 / took.as_secs_f64(),
        routed as f64 / took.as_secs_f64(),
        counting.as_millis(),
        producing.as_millis(),
    );
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let only: Option<usize> = std::env::args().find_map(|a| a.parse().ok());
    println!("the router at scale: two regions, embedded backend, 200,000 events in region a's stream before the routers start, default settings");
    for shards in [4usize, 64, 256, 1_000] {
        if only.is_some_and(|o| o != shards) {
            continue;
        }
        for workers in [1, 8, 20] {
            routing_at(shards, workers);
        }
    }
}
