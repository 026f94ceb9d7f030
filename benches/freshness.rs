//! How soon a like is visible in its post's count after it was put, at a low rate (about 2 likes
//! per second, one shard), and how long a new worker takes to count the first record; for the
//! default settings beside `counter.close_when_caught_up` (with the default and a shorter idle
//! poll; on Kinesis also read by enhanced fan-out), with the write units each setting spends per
//! like. The embedded backend always; the
//! local AWS API peers too when `TEST_KINESIS_ENDPOINT` and `TEST_DYNAMODB_ENDPOINT` are set
//! (`eval "$(scripts/local-aws.sh env)"`). Prints numbers; asserts nothing about time.
//!
//! Under load (`cargo bench --bench freshness -- load` runs only that part): 1,000 likes/s per
//! shard on 4 shards (Zipf 1.1 over 100,000 posts, `tally produce --rate`), a probe like put every
//! 250 ms, and how soon each is visible through `tally serve`'s `/api/counts` — for today's three
//! settings (stored counts only) beside 10 s windows with provisional counts (the workers' open
//! windows added), with the write units each spends per like.
//!
//! A like's cost by rate (`cargo bench --bench freshness -- rates`): one shard at 1, 2, 10, 100
//! and 1,000 likes/s, each count mode, default settings with a worker's `--http` (provisional
//! counts, windows sized by cost): write units per like beside one `UpdateItem` per like, and put
//! → visible through `/api/counts`.
//!
//! Run: `cargo bench --bench freshness` (a test build of it exits at once).
#![allow(clippy::unwrap_used)]

mod common;
use common::stack::{aws_args, tally};

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_core::ports::{CounterStore, PutEntry, Stream};

/// Likes put per setting.
const LIKES: usize = 40;
/// Pause between puts: about 2 likes per second.
const GAP: Duration = Duration::from_millis(500);

struct Backend {
    name: &'static str,
    args: Vec<String>,
    stream: Arc<dyn Stream>,
    counter: Arc<dyn CounterStore>,
    _dir: tempfile::TempDir,
}

async fn embedded() -> Backend {
    embedded_shards(1).await
}

async fn aws(kinesis: &str, dynamodb: &str, run: &str) -> Backend {
    aws_shards(kinesis, dynamodb, run, 1).await
}

async fn aws_shards(kinesis: &str, dynamodb: &str, run: &str, shards: usize) -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let unique = format!("fresh-{run}-{}", std::process::id());
    let args = aws_args(kinesis, dynamodb, &unique, None);
    let mut setup: Vec<String> = args.clone();
    setup.extend(["--data-dir".into(), dir.path().display().to_string()]);
    let ok = tally(&setup, &["setup", "--shards", &shards.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "setup on the local peers");
    let aws = tally_aws::Aws::connect(&tally_aws::AwsSettings {
        stream: format!("s-{unique}"),
        table_prefix: format!("t-{unique}"),
        kinesis_endpoint_url: Some(kinesis.into()),
        dynamodb_endpoint_url: Some(dynamodb.into()),
        stream_retention_hours: 24,
        recent_likers_index: false,
    })
    .await
    .unwrap();
    Backend {
        name: "local AWS peers",
        args,
        stream: Arc::new(aws.stream),
        counter: Arc::new(aws.tables),
        _dir: dir,
    }
}

async fn put(b: &Backend, post: &str, i: usize) {
    let now = tally_core::clock::now_ms();
    let data = format!(
        r#"{{"event_id":"{post}-{i}","post_id":"{post}","user_id":"u{i}","action":"like","created_at":{now}}}"#
    );
    let out = b
        .stream
        .put_records(&[PutEntry {
            partition_key: post.into(),
            data: data.into_bytes(),
        }])
        .await
        .unwrap();
    assert!(
        out.iter()
            .all(|o| matches!(o, tally_core::ports::PutOutcome::Ok { .. })),
        "put failed"
    );
}

/// Waits until `post` counts `n`; returns how long that took.
async fn visible(b: &Backend, post: &str, n: i64, since: Instant) -> Duration {
    loop {
        if b.counter.post_count(post, None).await.unwrap().total >= n {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{post} never counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn pct(sorted: &[Duration], p: f64) -> u128 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_millis()
}

/// Starts a counter worker reporting JSON on exit, with `extra` flags and these settings.
fn start_worker(b: &Backend, tag: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let mut args = vec!["count", "--json", "--worker-id", tag];
    args.extend_from_slice(extra);
    let mut c = tally(&b.args, &args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Stops a worker with SIGTERM; the write units it spent per like counted, by its own report.
fn stop_worker(worker: Child) -> f64 {
    stop_worker_report(worker).0
}

/// Stops a worker with SIGTERM; the write units it spent per like counted, and per like by
/// purpose (those above zero), by its own report.
fn stop_worker_report(worker: Child) -> (f64, String) {
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = worker.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let counted = v["counted"].as_f64().unwrap_or(f64::NAN);
    let units = v["write_units"]["total"].as_f64().unwrap_or(f64::NAN);
    let by = v["write_units"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, n)| *k != "total" && n.as_f64().unwrap_or(0.0) > 0.0)
        .map(|(k, n)| format!("{k} {:.3}", n.as_f64().unwrap_or(0.0) / counted))
        .collect::<Vec<_>>()
        .join(", ");
    let leases = &v["leases"];
    let by = format!(
        "{by}\n    lease writes: taken {}, renewed {}, heartbeats {}, released {}",
        leases["taken"], leases["renewed"], leases["heartbeats"], leases["released"]
    );
    (units / counted, by)
}

async fn measure(b: &Backend, setting: &str, env: &[(&str, &str)]) {
    let tag = setting.replace(|c: char| !c.is_ascii_alphanumeric(), "");
    // Start-up: a record is already in the stream when the worker starts.
    let first = format!("first-{tag}");
    put(b, &first, 0).await;
    let spawned = Instant::now();
    let worker = start_worker(b, &tag, &[], env);
    let startup = visible(b, &first, 1, spawned).await;

    let mut lat = Vec::with_capacity(LIKES);
    for i in 0..LIKES {
        let post = format!("{tag}-{i}");
        let t0 = Instant::now();
        put(b, &post, i).await;
        lat.push(visible(b, &post, 1, t0).await);
        if let Some(rest) = GAP.checked_sub(t0.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    let per_like = stop_worker(worker);
    lat.sort();
    println!(
        "{:<16} {:<44} p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  start-up to first record {:>5} ms  write units per like {:.2}",
        b.name,
        setting,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().unwrap().as_millis(),
        startup.as_millis(),
        per_like
    );
}

async fn run(b: Backend) {
    let settings: [(&str, &[(&str, &str)]); 3] = [
        ("default (window 1 s, idle poll 500 ms)", &[]),
        (
            "close_when_caught_up",
            &[("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "true")],
        ),
        (
            "close_when_caught_up, idle poll 100 ms",
            &[
                ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "true"),
                ("TALLY_LEASE__IDLE_POLL_MS", "100"),
            ],
        ),
    ];
    for (name, env) in settings {
        measure(&b, name, env).await;
    }
    if b.name != "embedded" {
        // Enhanced fan-out: records pushed instead of polled (kinesis-local pushes an event a
        // second; Kinesis pushes as records arrive).
        measure(
            &b,
            "read_mode efo, close_when_caught_up",
            &[
                ("TALLY_COUNTER__READ_MODE", "efo"),
                ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "true"),
            ],
        )
        .await;
    }
}

/// Shards, likes per second per shard, and seconds of load per setting, under load.
const LOAD_SHARDS: usize = 4;
const LOAD_RATE: usize = 1_000;
const LOAD_SECS: u64 = 20;

/// One GET to 127.0.0.1 (HTTP/1.0, read to the end): the body.
async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned()
}

/// Starts `tally serve` on a free port; its address. (A serve that never says where it listens
/// fails the bench, which then ends with its children.)
#[allow(clippy::zombie_processes)]
fn start_serve(b: &Backend, log: &std::path::Path) -> (Child, String) {
    let f = std::fs::File::create(log).unwrap();
    let child = tally(&b.args, &["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(f)
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text.split("serving on http://").nth(1) {
            return (child, rest.split('/').next().unwrap().to_owned());
        }
        assert!(start.elapsed() < Duration::from_secs(30), "serve: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Probe likes: each a new post, put every `gap` and timed until `tally serve` at `addr` shows it
/// (`pending`: provisional counts, else stored counts only).
struct Probes<'a> {
    tag: &'a str,
    addr: &'a str,
    pending: bool,
    gap: Duration,
}

impl Probes<'_> {
    /// Probes for `how_long`; each probe's put → visible time, and its put's own.
    async fn run(&self, b: &Backend, how_long: Duration) -> Vec<(Duration, Duration)> {
        let mut lat = Vec::new();
        let started = Instant::now();
        let mut i = 0;
        while started.elapsed() < how_long {
            let post = format!("probe-{}-{i}", self.tag);
            let t0 = Instant::now();
            put(b, &post, i).await;
            let put_took = t0.elapsed();
            let path = format!("/api/counts?ids={post}&pending={}", self.pending);
            loop {
                let body = http_get(self.addr, &path).await;
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if v["counts"][0]["count"].as_i64().unwrap_or(0) >= 1 {
                    lat.push((t0.elapsed(), put_took));
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "{post} never counted: {body}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            i += 1;
            if let Some(rest) = self.gap.checked_sub(t0.elapsed()) {
                tokio::time::sleep(rest).await;
            }
        }
        lat
    }
}

async fn measure_load(b: &Backend, setting: &str, env: &[(&str, &str)], pending: bool) {
    let tag = setting.replace(|c: char| !c.is_ascii_alphanumeric(), "");
    let logs = tempfile::tempdir().unwrap();
    let worker = start_worker(b, &tag, &["--http", "127.0.0.1:0"], env);
    let (serve, addr) = start_serve(b, &logs.path().join("serve.log"));
    let events = (LOAD_SHARDS * LOAD_RATE) as u64 * LOAD_SECS;
    let mut producer = tally(
        &b.args,
        &[
            "produce",
            "--events",
            &events.to_string(),
            "--rate",
            &(LOAD_SHARDS * LOAD_RATE).to_string(),
            "--posts",
            "100000",
            "--zipf",
            "1.1",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Let the worker take its leases and the load settle before probing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let probing = Probes {
        tag: &tag,
        addr: &addr,
        pending,
        gap: Duration::from_millis(250),
    };
    let probes = probing.run(b, Duration::from_secs(LOAD_SECS - 5)).await;
    let _ = producer.wait();
    let per_like = stop_worker(worker);
    stop_serve(serve);
    let mut lat: Vec<Duration> = probes.iter().map(|p| p.0).collect();
    lat.sort();
    // What the slowest probe spent putting its like (the store's one writer is shared with the
    // counter's applies) before it was read at all.
    let slowest_put = probes
        .iter()
        .max_by_key(|p| p.0)
        .map_or(0, |p| p.1.as_millis());
    let mut puts: Vec<Duration> = probes.iter().map(|p| p.1).collect();
    puts.sort();
    println!(
        "{:<16} {:<46} probes {:>3}  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  write units per like {:.3}  (puts: p99 {} ms; the slowest probe's put {} ms)",
        b.name,
        setting,
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().unwrap().as_millis(),
        per_like,
        pct(&puts, 0.99),
        slowest_put,
    );
}

async fn run_load(b: Backend) {
    const LONG: [(&str, &str); 3] = [
        ("TALLY_COUNTER__WINDOW_MS", "10000"),
        ("TALLY_COUNTER__WINDOW_RECORDS", "20000"),
        ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "false"),
    ];
    const LONG_FAST: [(&str, &str); 4] = [
        ("TALLY_COUNTER__WINDOW_MS", "10000"),
        ("TALLY_COUNTER__WINDOW_RECORDS", "20000"),
        ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "false"),
        ("TALLY_LEASE__IDLE_POLL_MS", "100"),
    ];
    // (name, environment, provisional counts)
    type Setting<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let settings: [Setting; 5] = [
        ("default (window 1 s), stored counts", &[], false),
        (
            "close_when_caught_up, stored counts",
            &[("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "true")],
            false,
        ),
        ("10 s windows, stored counts", &LONG, false),
        ("10 s windows, provisional counts", &LONG, true),
        (
            "10 s windows, idle poll 100 ms, provisional",
            &LONG_FAST,
            true,
        ),
    ];
    // FRESHNESS_LOAD_ONLY=<part of a setting's name> runs those settings alone.
    let only = std::env::var("FRESHNESS_LOAD_ONLY").ok();
    for (name, env, pending) in settings {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        measure_load(&b, name, env, pending).await;
    }
}

async fn embedded_shards(n: usize) -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let e = tally_embedded::Embedded::open(dir.path(), n).unwrap();
    Backend {
        name: "embedded",
        args: vec!["--data-dir".into(), dir.path().display().to_string()],
        stream: Arc::new(e.clone()),
        counter: Arc::new(e),
        _dir: dir,
    }
}

async fn under_load() {
    println!(
        "under load: {LOAD_RATE} likes/s per shard on {LOAD_SHARDS} shards (Zipf 1.1 over 100,000 \
         posts), a probe like every 250 ms, put → visible through tally serve's /api/counts"
    );
    if std::env::var("FRESHNESS_PEERS_ONLY").is_err() {
        run_load(embedded_shards(LOAD_SHARDS).await).await;
    }
    if let (Ok(k), Ok(d)) = (
        std::env::var("TEST_KINESIS_ENDPOINT"),
        std::env::var("TEST_DYNAMODB_ENDPOINT"),
    ) {
        let b = aws_shards(&k, &d, "load", LOAD_SHARDS).await;
        let args = b.args.clone();
        run_load(b).await;
        let _ = tally(&args, &["teardown", "--yes"]).status();
    }
}

/// Likes per second per shard in the rates table, and seconds each runs.
const RATES: [usize; 5] = [1, 2, 10, 100, 1_000];
const RATE_SECS: u64 = 20;

/// One shard at `rate` likes/s for [`RATE_SECS`] with the default settings, a worker with
/// `--http` (provisional counts) and `tally serve`: probe likes (one every 250 ms, or the whole
/// rate below 4/s) timed until `/api/counts` shows them, the rest put by `tally produce`; the
/// write units per like by the worker's own report, lease rows and start-up included.
async fn measure_rate(b: &Backend, mode: &str, rate: usize, sized: bool) {
    let tag = format!("{mode}{rate}{}", if sized { "s" } else { "f" });
    let logs = tempfile::tempdir().unwrap();
    let mut env = vec![("TALLY_COUNTER__COUNT", mode)];
    if !sized {
        // Every window closes at window_ms (1 s), as before windows were sized by cost.
        env.push(("TALLY_COUNTER__WINDOW_MAX_MS", "1000"));
    }
    let worker = start_worker(b, &tag, &["--http", "127.0.0.1:0"], &env);
    let (serve, addr) = start_serve(b, &logs.path().join("serve.log"));
    let gap = Duration::from_millis((1_000 / rate.min(4)) as u64);
    let probes_per_sec = 1_000 / gap.as_millis() as usize;
    let rest = rate.saturating_sub(probes_per_sec);
    let mut producer = (rest > 0).then(|| {
        let events = rest as u64 * RATE_SECS;
        let mut c = tally(
            &b.args,
            &[
                "produce",
                "--events",
                &events.to_string(),
                "--rate",
                &rest.to_string(),
                "--posts",
                "100000",
                "--zipf",
                "1.1",
            ],
        );
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    // Probes from when the worker holds the shard (its start-up is in the units, not the times).
    wait_held(&addr).await;
    let probing = Probes {
        tag: &tag,
        addr: &addr,
        pending: true,
        gap,
    };
    let mut lat: Vec<Duration> = probing
        .run(b, Duration::from_secs(RATE_SECS))
        .await
        .into_iter()
        .map(|p| p.0)
        .collect();
    if let Some(p) = producer.as_mut() {
        let _ = p.wait();
    }
    let (per_like, by) = stop_worker_report(worker);
    stop_serve(serve);
    lat.sort();
    println!(
        "{:<16} {:<7} {:>5} likes/s  {:<14} probes {:>3}  p50 {:>5} ms  p99 {:>5} ms  write units per like {:.3}  (one UpdateItem per like: 1.000)\n    by purpose per like: {by}",
        b.name,
        mode,
        rate,
        if sized { "sized by cost" } else { "1 s windows" },
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        per_like
    );
}

/// Stops a `tally serve` with SIGTERM and waits for it.
fn stop_serve(mut serve: Child) {
    Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    let _ = serve.wait();
}

/// Waits until `tally serve` at `addr` says every shard is held.
async fn wait_held(addr: &str) {
    let t0 = Instant::now();
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&http_get(addr, "/api/leases").await).unwrap_or_default();
        let rows = v.as_array().cloned().unwrap_or_default();
        if !rows.is_empty() && rows.iter().all(|l| l["held"] == true) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never held: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The rates table (`cargo bench --bench freshness -- rates`): each count mode at 1 to 1,000
/// likes/s on one shard, each on a fresh store.
async fn rates() {
    println!(
        "a like's cost and freshness by rate, one shard, default settings, worker with --http, \
         put → visible through tally serve's /api/counts"
    );
    // FRESHNESS_RATES=2 and FRESHNESS_MODES=events pick a part of the table.
    let picked = |var: &str, v: &str| {
        std::env::var(var).map_or(true, |l| l.split(',').any(|x| x.trim() == v))
    };
    for mode in ["events", "likers"]
        .into_iter()
        .filter(|m| picked("FRESHNESS_MODES", m))
    {
        for rate in RATES
            .into_iter()
            .filter(|r| picked("FRESHNESS_RATES", &r.to_string()))
        {
            for sized in [true, false] {
                measure_rate(&embedded_shards(1).await, mode, rate, sized).await;
            }
        }
    }
    if let (Ok(k), Ok(d)) = (
        std::env::var("TEST_KINESIS_ENDPOINT"),
        std::env::var("TEST_DYNAMODB_ENDPOINT"),
    ) {
        // kinesis-local takes a few hundred records a second here: up to 100 likes/s.
        for mode in ["events", "likers"]
            .into_iter()
            .filter(|m| picked("FRESHNESS_MODES", m))
        {
            for rate in RATES[..4]
                .iter()
                .filter(|r| picked("FRESHNESS_RATES", &r.to_string()))
            {
                let b = aws_shards(&k, &d, &format!("r{mode}{rate}"), 1).await;
                let args = b.args.clone();
                measure_rate(&b, mode, *rate, true).await;
                let _ = tally(&args, &["teardown", "--yes"]).status();
            }
        }
    }
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` builds and runs benches as tests: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::args().any(|a| a == "load") {
        return under_load().await;
    }
    if std::env::args().any(|a| a == "rates") {
        return rates().await;
    }
    println!(
        "put → visible in the post's count, {LIKES} likes at about 2/s on one shard; each worker \
         started with one record waiting"
    );
    run(embedded().await).await;
    match (
        std::env::var("TEST_KINESIS_ENDPOINT"),
        std::env::var("TEST_DYNAMODB_ENDPOINT"),
    ) {
        (Ok(k), Ok(d)) => {
            let b = aws(&k, &d, "1").await;
            let args = b.args.clone();
            run(b).await;
            // The peers cap shards in total: leave nothing behind.
            let _ = tally(&args, &["teardown", "--yes"]).status();
        }
        _ => println!(
            "(local AWS peers not set: eval \"$(scripts/local-aws.sh env)\" to measure them too)"
        ),
    }
}
