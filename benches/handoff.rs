//! How long shards stay unowned when a worker leaves: after SIGTERM (it releases its leases) and
//! after SIGKILL (its leases must expire), with the default lease settings, on the embedded
//! backend. Prints numbers; asserts nothing about time.
//!
//! Run: `cargo bench --bench handoff` (a test build of it exits at once).
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tally(dir: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tally"));
    c.args(args)
        .args(["--data-dir", dir])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    c
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

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_str().expect("utf-8 path").to_owned();
    assert!(tally(&dir, &["setup", "--shards", "8"])
        .status()
        .expect("setup")
        .success());
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
