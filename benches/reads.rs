//! The read side at a feed's scale: what one answer of `tally serve` costs as the shard count
//! grows. For stores of 4, 64 and 1,024 shards on the embedded backend (and 64 on the local AWS
//! peers when `TEST_KINESIS_ENDPOINT` and `TEST_DYNAMODB_ENDPOINT` are set), the same events are
//! counted, then `GET /api/posts/{id}` (one count) and `GET /api/counts?ids=…` (100 counts) are
//! timed over HTTP, in turns, with the read units each answer reports. Prints numbers and the
//! ratios the goals are stated in (in one run, so a busy machine slows every row alike); asserts
//! only that the counts are right.
//!
//! Run: `cargo bench --bench reads` (a test build of it exits at once).
#![allow(clippy::unwrap_used)]

mod common;
use common::stack::{aws_args, tally};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Events produced per store (Zipf 1.1 over `POSTS` posts); fewer on the local AWS peers, which
/// take a few hundred writes a second.
const EVENTS: &str = "20000";
const AWS_EVENTS: &str = "3000";
const POSTS: usize = 2_000;
/// Timed requests per kind and store.
const SINGLES: usize = 300;
const BATCHES: usize = 60;

fn ok(mut c: Command) {
    let st = c.status().unwrap();
    assert!(st.success(), "{c:?}");
}

/// One HTTP/1.1 GET: status and body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[String]) -> Served {
    let mut c = tally(args, &["serve", "--addr", "127.0.0.1:0"]);
    c.stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    let addr = loop {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0, "serve ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(rest) = text.split("serving on http://").nth(1) {
            if let Some(a) = rest.split('/').next().filter(|_| rest.contains('/')) {
                break a.to_owned();
            }
        }
    };
    // Keep draining its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = err.read_to_end(&mut sink);
    });
    Served { child, addr }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A row of the table: p50 and p99 (ms) of each kind, read units per answer.
struct Row {
    name: String,
    single: (f64, f64, f64),
    batch: (f64, f64, f64),
}

fn measure(name: &str, args: &[String], shards: usize, events: &str) -> Row {
    ok(tally(args, &["setup", "--shards", &shards.to_string()]));
    ok(tally(
        args,
        &[
            "produce",
            "--events",
            events,
            "--posts",
            &POSTS.to_string(),
            "--seed",
            "3",
        ],
    ));
    ok(tally(args, &["count", "--until-idle"]));
    let s = serve(args);
    let posts: Vec<String> = (1..=POSTS).map(|i| format!("p{i}")).collect();
    let (mut single, mut batch) = (Vec::new(), Vec::new());
    let (mut single_units, mut batch_units) = (0.0, 0.0);
    for i in 0..SINGLES.max(BATCHES) {
        if i < SINGLES {
            let post = &posts[(i * 37) % POSTS];
            let t = Instant::now();
            let (status, body) = get(&s.addr, &format!("/api/posts/{post}"));
            single.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            single_units += v["read_units"].as_f64().unwrap();
        }
        if i < BATCHES {
            let from = (i * 100) % (POSTS - 100);
            let ids = posts[from..from + 100].join(",");
            let t = Instant::now();
            let (status, body) = get(&s.addr, &format!("/api/counts?ids={ids}"));
            batch.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["counts"].as_array().unwrap().len(), 100);
            batch_units += v["read_units"].as_f64().unwrap();
        }
    }
    drop(s);
    let _ = tally(args, &["teardown", "--yes"]).status();
    Row {
        name: name.to_owned(),
        single: (
            pct(&mut single, 0.5),
            pct(&mut single, 0.99),
            single_units / SINGLES as f64,
        ),
        batch: (
            pct(&mut batch, 0.5),
            pct(&mut batch, 0.99),
            batch_units / BATCHES as f64,
        ),
    }
}

fn embedded(shards: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let args = vec!["--data-dir".to_owned(), dir.path().display().to_string()];
    measure(&format!("embedded, {shards} shards"), &args, shards, EVENTS)
}

fn aws(kinesis: &str, dynamodb: &str, shards: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let unique = format!("reads-{shards}-{}", std::process::id());
    let args = aws_args(kinesis, dynamodb, &unique, Some(dir.path()));
    measure(
        &format!("local AWS peers, {shards} shards"),
        &args,
        shards,
        AWS_EVENTS,
    )
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut rows = vec![embedded(4), embedded(64), embedded(1_024)];
    if let (Ok(k), Ok(d)) = (
        std::env::var("TEST_KINESIS_ENDPOINT"),
        std::env::var("TEST_DYNAMODB_ENDPOINT"),
    ) {
        rows.push(aws(&k, &d, 4));
        rows.push(aws(&k, &d, 64));
    } else {
        println!(
            "(local AWS peers not set: eval \"$(scripts/local-aws.sh env)\" to measure them too)"
        );
    }
    println!("{EVENTS} events ({AWS_EVENTS} on the local peers) over {POSTS} posts; {SINGLES} single counts and {BATCHES} calls of 100, in turns, over HTTP");
    println!("| store | one count p50 / p99 (ms) | read units | 100 counts p50 / p99 (ms) | read units |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} / {:.2} | {:.1} | {:.2} / {:.2} | {:.1} |",
            r.name, r.single.0, r.single.1, r.single.2, r.batch.0, r.batch.1, r.batch.2
        );
    }
    println!(
        "embedded: 1,024-shard p50 / 4-shard p50 = {:.2} (goal ≤ 1.5); 100-id p99 / one p99 at 4 shards = {:.2}, at 1,024 = {:.2} (goal ≤ 5)",
        rows[2].single.0 / rows[0].single.0,
        rows[0].batch.1 / rows[0].single.1,
        rows[2].batch.1 / rows[2].single.1
    );
    if rows.len() > 4 {
        println!(
            "local peers: 64-shard p50 / 4-shard p50 = {:.2}; 100-id p99 / one p99 at 64 shards = {:.2}",
            rows[4].single.0 / rows[3].single.0,
            rows[4].batch.1 / rows[4].single.1
        );
    }
}
