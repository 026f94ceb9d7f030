//! The crash and stale-writer harness: a replay with producer retries and malformed records, the
//! counter SIGKILLed at 20 random moments on the embedded store and 12 on the local peers (most
//! inside windows that take several atomic writes), and three times SIGSTOPped past its lease while another worker takes over, then
//! SIGCONTed. Every post's count, the global total and the dead letters exact at the end.
//! Bounded: a fixed number of rounds, each with its own timeout.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{file_in, write_contract_file, Bg, Target};

/// Small windows (each written in many store calls by `TALLY_COUNTER__POSTS_PER_BATCH`, so that
/// kills land inside windows), short leases.
const CHUNKY: &[(&str, &str)] = &[
    ("TALLY_COUNTER__WINDOW_RECORDS", "150"),
    ("TALLY_COUNTER__WINDOW_MS", "300"),
    ("TALLY_LEASE__DURATION_MS", "1500"),
    ("TALLY_LEASE__RENEW_MS", "300"),
    ("TALLY_LEASE__POLL_MS", "100"),
    ("TALLY_LEASE__DISCOVERY_MS", "500"),
    ("TALLY_LEASE__IDLE_POLL_MS", "100"),
];

const PAUSES: usize = 3;

/// A reproducible schedule (an LCG; the seed is printed on failure through the assertion text).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn owners(t: &Target) -> BTreeMap<String, Option<String>> {
    t.json(&["leases", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["finished"] != true)
        .map(|l| {
            (
                l["shard_id"].as_str().unwrap().to_owned(),
                l["owner"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// How a backend is driven: events per part, posts per store call, and the range of delays
/// (ms) after which a counter is killed — within the time a part takes to apply, so that kills
/// land inside windows.
struct Pace {
    /// SIGKILLs (each a round with its own part of the stream).
    kills: usize,
    events_per_part: usize,
    posts_per_batch: &'static str,
    kill_after_ms: std::ops::Range<u64>,
    /// Count the kill's delay from when the worker's log first shows this line, not from its
    /// start (how long a worker takes to start reading varies more than its work).
    kill_after_log: Option<&'static str>,
    /// Timeouts scale with it.
    slower: u64,
}

fn harness(t: Target, pace: Pace) {
    let Pace {
        kills: rounds,
        events_per_part,
        posts_per_batch,
        kill_after_ms,
        kill_after_log,
        slower,
    } = pace;
    let mut chunky = CHUNKY.to_vec();
    chunky.push(("TALLY_COUNTER__POSTS_PER_BATCH", posts_per_batch));
    let chunky = chunky.as_slice();
    // One part per round, each replayed twice (the second time every event is a producer retry
    // and every malformed line a new dead letter at its own sequence number), fed while the kills
    // go on, so that every kill finds work in progress.
    let parts: Vec<(std::path::PathBuf, crate::common::Expected)> = (0..(rounds + PAUSES + 1)
        as u64)
        .map(|i| {
            let f = file_in(&t, &format!("part-{i}.ndjson"));
            let e = write_contract_file(&f, events_per_part, 60, 100 + i);
            (f, e)
        })
        .collect();
    let mut fed = 0;
    // Feeds the next part; false when all were fed.
    let mut feed = |t: &Target| match parts.get(fed) {
        Some((f, _)) => {
            t.run(&["replay", f.to_str().unwrap()]);
            t.run(&["replay", f.to_str().unwrap()]);
            fed += 1;
            true
        }
        None => false,
    };

    // A worker without --until-idle never exits on its own: every kill lands, at a random moment
    // of its reading, folding and committing.
    let mut rng = Rng(7);
    let (mut kills, mut inside_windows) = (0, 0);
    for round in 0..rounds {
        feed(&t);
        let mut bg = t.spawn(
            &format!("kill-{round}"),
            &["count", "--worker-id", "w"],
            chunky,
        );
        let delay = kill_after_ms.start + rng.below(kill_after_ms.end - kill_after_ms.start);
        if let Some(line) = kill_after_log {
            t.eventually(
                "the worker to start",
                Duration::from_secs(30),
                &[&bg],
                || bg.log_text().contains(line),
            );
        }
        std::thread::sleep(Duration::from_millis(delay));
        assert!(
            bg.child.try_wait().unwrap().is_none(),
            "the counter exited before its kill:\n{}",
            bg.log_text()
        );
        bg.child.kill().unwrap(); // SIGKILL
        bg.child.wait().unwrap();
        kills += 1;
        let leases = t.json(&["leases", "--json"]);
        if leases
            .as_array()
            .unwrap()
            .iter()
            .any(|l| !l["pending"].is_null())
        {
            inside_windows += 1;
        }
    }
    assert_eq!(kills, rounds);
    eprintln!("{inside_windows} of {rounds} kills left a window applied in part");
    assert!(
        inside_windows >= 3,
        "only {inside_windows} of {rounds} kills left a window applied in part"
    );

    // Stale writers: each holds read-but-unapplied records when paused past its lease.
    for i in 0..PAUSES {
        let mut held = chunky.to_vec();
        held.retain(|(k, _)| !k.starts_with("TALLY_COUNTER__WINDOW"));
        held.push(("TALLY_COUNTER__WINDOW_RECORDS", "20000"));
        held.push(("TALLY_COUNTER__WINDOW_MS", "600000"));
        // Its closed windows are not what this part cuts: written in large batches.
        held.retain(|(k, _)| *k != "TALLY_COUNTER__POSTS_PER_BATCH");
        held.push(("TALLY_COUNTER__POSTS_PER_BATCH", "1000"));
        let stale_id = format!("stale-{i}");
        let mut stale = t.spawn(&stale_id, &["count", "--worker-id", &stale_id], &held);
        let owned_by = |who: &str| {
            let o = owners(&t);
            !o.is_empty() && o.values().all(|o| o.as_deref() == Some(who))
        };
        t.eventually(
            "the stale-to-be worker to own every shard",
            Duration::from_secs(60 * slower),
            &[&stale],
            || owned_by(&stale_id),
        );
        feed(&t);
        // It is paused holding an open window only: every window it closed (the backlog the kills
        // left comes in windows of 20,000) applied and every shard read to its tip. On the
        // embedded store a process paused inside a write transaction holds SQLite's write lock,
        // which every other writer waits for (a lock, not a lease: no fencing takes it over).
        let settled = || {
            t.json(&["leases", "--json"])
                .as_array()
                .unwrap()
                .iter()
                .filter(|l| l["finished"] != true)
                .all(|l| l["pending"].is_null() && l["lag_ms"] == 0)
        };
        t.eventually(
            "the stale-to-be worker to apply the windows it closed and read to the tip",
            Duration::from_secs(120 * slower),
            &[&stale],
            || owned_by(&stale_id) && settled(),
        );
        std::thread::sleep(Duration::from_millis(700 * slower));
        pause_between_writes(&t, &stale);
        let fresh_id = format!("fresh-{i}");
        let mut fresh: Bg = t.spawn(&fresh_id, &["count", "--worker-id", &fresh_id], chunky);
        t.eventually(
            "the fresh worker to take every lease",
            Duration::from_secs(60 * slower),
            &[&fresh],
            || owned_by(&fresh_id),
        );
        // Let the fresh worker apply some windows, then wake the stale one: fenced.
        std::thread::sleep(Duration::from_millis(500 * slower));
        stale.signal("CONT");
        t.eventually(
            "the stale worker to notice it lost its leases",
            Duration::from_secs(60 * slower),
            &[&stale, &fresh],
            || stale.log_text().contains("lease lost"),
        );
        stale.signal("TERM");
        fresh.signal("TERM");
        stale.wait(Duration::from_secs(60 * slower));
        fresh.wait(Duration::from_secs(60 * slower));
    }
    while feed(&t) {}
    t.run_env(&["count", "--until-idle", "--worker-id", "final"], chunky);

    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut malformed = 0;
    for (_, e) in &parts {
        for (p, n) in &e.counts {
            *counts.entry(p.clone()).or_insert(0) += n;
        }
        malformed += 2 * e.malformed as u64;
    }
    assert_eq!(t.mismatches(&counts), vec![]);
    assert_eq!(
        t.json(&["total", "--json"])["total"],
        counts.values().sum::<i64>()
    );
    assert_eq!(t.json(&["dead-letters", "--json"])["total"], malformed);
    t.assert_read_as_configured();
}

/// Pauses `stale` where it holds no write lock of the embedded store's files: a process paused
/// inside a write transaction (a lease renewal, a heartbeat) holds its file's lock, which every
/// other writer waits for and no lease takes over, so a worker started beside it could not take
/// the leases this test hands it. Paused again until it holds none; on DynamoDB, as it is.
fn pause_between_writes(t: &Target, stale: &Bg) {
    for _ in 0..100 {
        stale.signal("STOP");
        stale.wait_stopped();
        let files = std::fs::read_dir(t.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path());
        let mut dbs = files.filter(|p| p.extension().is_some_and(|x| x == "db"));
        if !dbs.any(|db| write_locked(&db)) {
            return;
        }
        stale.signal("CONT");
        std::thread::sleep(Duration::from_millis(23));
    }
    panic!("the stale worker held a write lock at each of 100 pauses");
}

/// Whether another connection holds `db`'s write lock now.
fn write_locked(db: &std::path::Path) -> bool {
    let c = rusqlite::Connection::open(db).unwrap();
    c.busy_timeout(Duration::ZERO).unwrap();
    c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_err()
}

on_backends! {
    crashes_and_stale_writers_keep_counts_exact {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            harness(
                t,
                Pace {
                    kills: 20,
                    events_per_part: 2_500,
                    posts_per_batch: "1",
                    kill_after_ms: 20..250,
                    kill_after_log: None,
                    slower: 1,
                },
            );
        },
        aws => {
            harness(
                Target::aws("harness", 2),
                Pace {
                    kills: 12,
                    events_per_part: 400,
                    posts_per_batch: "2",
                    // Counted from the first lease taken: a worker's start (its SDK clients, its first
                    // listing) takes longer than its windows on a busy machine, and a kill before it reads
                    // finds no window to cut.
                    kill_after_ms: 40..500,
                    kill_after_log: Some("lease taken"),
                    slower: 2,
                },
            );
        },
        aws_efo => {
            harness(
                Target::aws_efo("harness-efo", 2),
                Pace {
                    kills: 12,
                    events_per_part: 400,
                    posts_per_batch: "2",
                    // kinesis-local pushes an event a second after a subscription: a kill before the
                    // first one lands before any reading; counted from the first lease taken.
                    kill_after_ms: 900..2_400,
                    kill_after_log: Some("lease taken"),
                    slower: 2,
                },
            );
        },
    }
}
