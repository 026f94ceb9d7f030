//! The read side under the crash harness: while likes keep arriving and counter workers are
//! SIGKILLed (their leases expire, and successors take them over and rebuild their windows),
//! readers sample counts at random through `tally serve` — a feed page or one post, with and
//! without "since", provisional and stored. The stream holds likes only, so each post's count over
//! any prefix of its records is between 0 and its final count, and only grows: no sample may show
//! more than the stream has, and no sample may show less than one that ended before it began (a
//! count taken back).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{file_in, now_ms, Target};
use crate::serve::{request_with, served_addr};

const POSTS: usize = 12;

/// One post's count as one answer showed it, and when the answer was asked and received.
#[derive(Clone, Debug)]
struct Sample {
    post: String,
    /// (count, count_since) as shown: with provisional counts, or stored only.
    shown: (i64, Option<i64>),
    stored: (i64, Option<i64>),
    provisional: bool,
    since: bool,
    asked: Instant,
    answered: Instant,
    #[allow(dead_code)] // printed with a failure
    url: String,
}

/// `n` likes by distinct users, created over the last 20 minutes, over `POSTS` posts; each
/// post's final count, and its count since `since_ms`.
fn likes(path: &std::path::Path, n: usize, since_ms: i64) -> BTreeMap<String, (i64, i64)> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let now = now_ms();
    for i in 0..n {
        let post = format!("r-p{}", (i * 7 + i / 13) % POSTS);
        let created = now - 1_000 - ((i as i64 * 7_919) % (20 * 60_000));
        writeln!(
            f,
            r#"{{"event_id":"r-{i}","post_id":"{post}","user_id":"u{i}","action":"like","created_at":{created}}}"#
        )
        .unwrap();
        let e = out.entry(post).or_default();
        e.0 += 1;
        if created - created.rem_euclid(60_000) >= since_ms - since_ms.rem_euclid(60_000) {
            e.1 += 1;
        }
    }
    out
}

/// A reader: random feed pages and single posts until `stop`, every answer's samples.
fn reader(addr: String, seed: u64, since_ms: i64, stop: Arc<AtomicBool>) -> Vec<Sample> {
    let mut state = seed;
    let mut rnd = move |m: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let since = rnd(2) == 0;
        let provisional = rnd(4) != 0;
        let mut q = String::new();
        if since {
            q.push_str(&format!("&since_ms={since_ms}"));
        }
        if !provisional {
            q.push_str("&pending=false");
        }
        let (url, single) = if rnd(3) == 0 {
            let p = rnd(POSTS as u64);
            (
                format!("/api/posts/r-p{p}?{}", q.trim_start_matches('&')),
                true,
            )
        } else {
            let k = 1 + rnd(POSTS as u64);
            let ids: Vec<String> = (0..k)
                .map(|_| format!("r-p{}", rnd(POSTS as u64)))
                .collect();
            (format!("/api/counts?ids={}{q}", ids.join(",")), false)
        };
        let asked = Instant::now();
        let Some((status, _, body)) = request_with(&addr, "GET", &url, None, &[]) else {
            continue;
        };
        let answered = Instant::now();
        assert_eq!(status, 200, "{url}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let entries: Vec<Value> = if single {
            vec![v]
        } else {
            v["counts"].as_array().unwrap().clone()
        };
        for e in entries {
            let n = |k: &str| e[k].as_i64();
            let since_of = |k: &str| since.then(|| n(k).unwrap());
            out.push(Sample {
                post: e["post_id"].as_str().unwrap().to_owned(),
                shown: (n("count").unwrap(), since_of("count_since")),
                stored: (
                    n("stored").unwrap(),
                    since_of("count_since").map(|c| c - n("pending_since").unwrap()),
                ),
                provisional,
                since,
                asked,
                answered,
                url: url.clone(),
            });
        }
    }
    out
}

/// Every sample within what the stream has, and none below one that ended before it began.
fn check(samples: &[Sample], finals: &BTreeMap<String, (i64, i64)>) {
    let mut by_post: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        let (total, since) = finals[&s.post];
        for (what, (n, ns)) in [("shown", s.shown), ("stored", s.stored)] {
            assert!(
                (0..=total).contains(&n),
                "{} {what} {n}, beyond 0..={total}: {s:?}",
                s.post
            );
            if let Some(ns) = ns {
                assert!(
                    (0..=since.min(n)).contains(&ns),
                    "{} {what} since {ns}, beyond 0..={since} (count {n}): {s:?}",
                    s.post
                );
            }
        }
        by_post.entry(&s.post).or_default().push(s);
    }
    for (post, list) in by_post {
        // Stored counts never go down; a provisional count never goes below one shown before it
        // (a stored-only answer may show less than a provisional one: it leaves out the windows).
        let provisional: Vec<&Sample> = list.iter().copied().filter(|s| s.provisional).collect();
        never_less(post, "provisional", &provisional, |s| s.shown);
        never_less(post, "stored", &list, |s| s.stored);
    }
}

/// No sample's value (total, and since when it was asked) below that of a sample answered before
/// it was asked.
fn never_less(
    post: &str,
    what: &str,
    list: &[&Sample],
    value: impl Fn(&Sample) -> (i64, Option<i64>),
) {
    let mut by_asked: Vec<&Sample> = list.to_vec();
    by_asked.sort_by_key(|s| s.asked);
    let mut by_answered: Vec<&Sample> = list.to_vec();
    by_answered.sort_by_key(|s| s.answered);
    let mut j = 0;
    let mut best: Option<&Sample> = None;
    let mut best_since: Option<&Sample> = None;
    for s in by_asked {
        while j < by_answered.len() && by_answered[j].answered < s.asked {
            let e = by_answered[j];
            if best.is_none_or(|b| value(e).0 > value(b).0) {
                best = Some(e);
            }
            if e.since && best_since.is_none_or(|b| value(e).1 > value(b).1) {
                best_since = Some(e);
            }
            j += 1;
        }
        if let Some(b) = best {
            assert!(
                value(s).0 >= value(b).0,
                "{post}: a {what} count taken back: {} after {}\n  before: {b:?}\n  after:  {s:?}",
                value(s).0,
                value(b).0
            );
        }
        if let (Some(b), true) = (best_since, s.since) {
            assert!(
                value(s).1 >= value(b).1,
                "{post}: a {what} count since taken back: {:?} after {:?}\n  before: {b:?}\n  after:  {s:?}",
                value(s).1,
                value(b).1
            );
        }
    }
}

fn readers_under_kills(t: Target, events: usize, kills: usize, slower: u64) {
    let since_ms = now_ms() - 10 * 60_000;
    let f = file_in(&t, "likes.ndjson");
    let finals = likes(&f, events, since_ms);
    // Windows that close by their size while records keep coming, short leases: kills land with
    // windows open and being applied, and successors take over within a couple of seconds.
    let env = [
        ("TALLY_COUNTER__WINDOW_RECORDS", "150"),
        ("TALLY_COUNTER__WINDOW_MS", "2000"),
        ("TALLY_LEASE__DURATION_MS", "1500"),
        ("TALLY_LEASE__RENEW_MS", "300"),
        ("TALLY_LEASE__POLL_MS", "100"),
        ("TALLY_LEASE__DISCOVERY_MS", "500"),
    ];
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3u64)
        .map(|i| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || reader(addr, 31 + i, since_ms, stop))
        })
        .collect();
    let rate = (events as u64 * 1000 / (kills as u64 * 700 * slower))
        .max(50)
        .to_string();
    let mut producer = t.spawn(
        "producer",
        &["replay", f.to_str().unwrap(), "--rate", &rate],
        &[],
    );
    let mut rng = 7u64;
    for k in 0..kills {
        let mut w = t.spawn(
            &format!("w{k}"),
            &[
                "count",
                "--worker-id",
                &format!("w{k}"),
                "--http",
                "127.0.0.1:0",
            ],
            &env,
        );
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
        let delay = (300 + (rng >> 33) % 900) * slower;
        std::thread::sleep(Duration::from_millis(delay));
        if w.child.try_wait().unwrap().is_none() {
            w.child.kill().unwrap(); // SIGKILL: its windows open, its lease held until it expires
        }
        w.child.wait().unwrap();
    }
    assert!(producer.wait(Duration::from_secs(120 * slower)).success());
    let mut last = t.spawn(
        "last",
        &["count", "--worker-id", "last", "--http", "127.0.0.1:0"],
        &env,
    );
    let counts: BTreeMap<String, i64> = finals.iter().map(|(p, (n, _))| (p.clone(), *n)).collect();
    t.eventually(
        "every like counted",
        Duration::from_secs(120 * slower),
        &[&last],
        || t.mismatches(&counts).is_empty(),
    );
    // Readers on a settled store for a moment, then stopped.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let samples: Vec<Sample> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    last.signal("TERM");
    last.wait(Duration::from_secs(60));
    let provisional = samples
        .iter()
        .filter(|s| s.provisional && s.shown != s.stored)
        .count();
    eprintln!(
        "{} samples, {} with a provisional part, {} with since",
        samples.len(),
        provisional,
        samples.iter().filter(|s| s.since).count()
    );
    assert!(
        samples.len() > 500,
        "{} samples; the read side's log:\n{}",
        samples.len(),
        serve.log_text()
    );
    assert!(
        provisional > 20,
        "only {provisional} samples had a provisional part"
    );
    check(&samples, &finals);
}

on_backends! {
    readers_never_see_a_count_taken_back_or_one_the_stream_never_had {
        embedded => {
            // Counting events, an open window's deltas are known as it is read: the most
            // provisional answers to check.
            let t = Target::embedded().counting_events();
            t.run(&["setup", "--shards", "2"]);
            readers_under_kills(t, 4_000, 8, 1);
        },
        aws => {
            let t = Target::aws("readers", 2).counting_events();
            readers_under_kills(t, 1_500, 6, 2);
        },
    }
}
