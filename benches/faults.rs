//! The counter's throughput when a tenth of its requests fail, beside the fault-free run, on the
//! local AWS API peers (kinesis-local and DynamoDB Local) behind the tests' fault proxy: the same
//! records, counted once through a proxy that forwards everything and once through one that fails
//! 10 % of requests (4 % answers lost after the peer applied them, 3 % HTTP 500s, 3 % throttles),
//! each on a fresh stream and tables, in turns, so that a busy machine slows both alike. Every
//! count is checked; the numbers are printed, nothing about time is asserted.
//!
//! Run: `eval "$(scripts/local-aws.sh env)"; cargo bench --bench faults` (a test build exits at
//! once).
#![allow(clippy::unwrap_used, dead_code)]

#[path = "../tests/e2e/common/fault_proxy.rs"]
mod fault_proxy;

mod common;
use common::stack::{aws_args, tally};

use std::process::{Command, Stdio};
use std::time::Instant;

use fault_proxy::{FaultMix, FaultProxy};

/// Events per run (kinesis-local and DynamoDB Local are slow: thousands, not millions).
const EVENTS: usize = 3_000;
/// Rounds: each counts the same records fault-free and faulted.
const ROUNDS: usize = 3;

fn json(c: &mut Command) -> serde_json::Value {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// NDJSON likes over 200 posts; every post's expected count.
fn likes(path: &std::path::Path) -> Vec<(String, i64)> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..EVENTS {
        let post = format!("p{}", (i * 7919) % 200);
        writeln!(
            f,
            r#"{{"event_id":"e{i}","post_id":"{post}","user_id":"u{i}","action":"like","created_at":{now}}}"#
        )
        .unwrap();
        *counts.entry(post).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// Sets a stack up at the peers, replays the likes directly, then counts them through proxies
/// with `mix`; returns records per second of the counter and the faults met.
fn run(
    kinesis: &str,
    dynamodb: &str,
    file: &std::path::Path,
    mix: FaultMix,
    tag: &str,
) -> (f64, usize) {
    let unique = format!("faults-{tag}-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let base = |k: &str, d: &str| aws_args(k, d, &unique, Some(dir.path()));
    let direct = base(kinesis, dynamodb);
    let quiet = |args: &[&str]| {
        let ok = tally(&direct, args).stdout(Stdio::null()).status().unwrap();
        assert!(ok.success(), "tally {args:?}");
    };
    quiet(&["setup", "--shards", "2"]);
    quiet(&["replay", file.to_str().unwrap()]);
    let (kp, dp) = (
        FaultProxy::with_mix(kinesis, mix.clone()),
        FaultProxy::with_mix(
            dynamodb,
            FaultMix {
                seed: mix.seed + 1,
                ..mix
            },
        ),
    );
    let proxied = base(&kp.url, &dp.url);
    let started = Instant::now();
    let c = json(&mut tally(&proxied, &["count", "--until-idle", "--json"]));
    let secs = started.elapsed().as_secs_f64();
    kp.calm();
    dp.calm();
    let faults: usize = [&kp, &dp]
        .iter()
        .flat_map(|p| {
            ["DropAfterForward", "ServerError", "Error"].map(|k| p.seen(&format!("fault:{k}")))
        })
        .sum();
    let total = json(&mut tally(&direct, &["total", "--json"]));
    assert_eq!(total["total"], EVENTS as u64, "{c}");
    quiet(&["teardown", "--yes"]);
    (c["records"].as_f64().unwrap() / secs, faults)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let (Ok(kinesis), Ok(dynamodb)) = (
        std::env::var("TEST_KINESIS_ENDPOINT"),
        std::env::var("TEST_DYNAMODB_ENDPOINT"),
    ) else {
        println!("local AWS peers not set: eval \"$(scripts/local-aws.sh env)\" first");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("likes.ndjson");
    let expected = likes(&file);
    assert_eq!(expected.iter().map(|(_, n)| n).sum::<i64>(), EVENTS as i64);
    println!(
        "counter on the local peers, {EVENTS} likes over 200 posts, 2 shards, default settings"
    );
    println!(
        "round | fault-free records/s | 10 % faulted records/s | faults met | faulted / fault-free"
    );
    for round in 0..ROUNDS {
        let clean = FaultMix {
            seed: round as u64,
            ..FaultMix::default()
        };
        let faulty = FaultMix {
            seed: round as u64,
            lost_answer: 0.04,
            server_error: 0.03,
            throttle: 0.03,
            ..FaultMix::default()
        };
        let (a, _) = run(&kinesis, &dynamodb, &file, clean, &format!("c{round}"));
        let (b, faults) = run(&kinesis, &dynamodb, &file, faulty, &format!("f{round}"));
        println!("{round} | {a:.0} | {b:.0} | {faults} | {:.2}", b / a);
    }
}
