//! The read side over HTTP (`tally serve`, a worker's `--http`): the JSON API answers a store of
//! known contents exactly and says how fresh it is, `/metrics` parses with a real Prometheus
//! parser and agrees with the API, and the dashboard page — loaded in headless Chromium — shows
//! the known numbers and follows new events without a reload.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{file_in, write_contract_file, Bg, Expected, Target};
use serde_json::Value;

/// The address a `tally serve` or `--http` process printed ("serving on http://ADDR/").
pub(crate) fn served_addr(bg: &Bg) -> String {
    let start = Instant::now();
    loop {
        let log = bg.log_text();
        if let Some(rest) = log.split("serving on http://").nth(1) {
            return rest.split('/').next().unwrap().to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server did not start:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 GET to 127.0.0.1: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    try_get(addr, path).unwrap_or_else(|| panic!("GET {path} from {addr}: no HTTP answer"))
}

/// [`get`], or `None` when the connection closes without an answer.
fn try_get(addr: &str, path: &str) -> Option<(u16, String)> {
    request(addr, "GET", path, None)
}

/// One HTTP/1.1 POST of a JSON body: the status and the body.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    request(addr, "POST", path, Some(body))
        .unwrap_or_else(|| panic!("POST {path} to {addr}: no HTTP answer"))
}

fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    request_with(addr, method, path, body, &[]).map(|(status, _, body)| (status, body))
}

/// One HTTP/1.1 request with extra headers: the status, the head (lower case) and the body.
pub(crate) fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Option<(u16, String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    match body {
        None => write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\r\n"
        ),
        Some(b) => write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ),
    }
    .ok()?;
    // Read the head, then the body by its length (a server may keep the connection open).
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(len) => {
            while raw.len() < head_end + len {
                let n = s.read(&mut buf).ok()?;
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
            }
        }
        None => {
            s.read_to_end(&mut raw).ok()?;
        }
    }
    let body = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(&body)
    } else {
        body
    };
    Some((status, head, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

pub(crate) fn get_json(addr: &str, path: &str) -> Value {
    let (status, body) = get(addr, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Parses `/metrics` with a real Prometheus parser; the value of `name` with these labels.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

/// A store with known contents: a replayed contract file, counted and analysed.
fn known_store(t: &Target, seed: u64) -> Expected {
    let file = file_in(t, "likes.ndjson");
    let exp = write_contract_file(&file, 1_500, 40, seed);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    t.run(&["analytics", "--until-idle"]);
    exp
}

fn the_api_answers_a_known_store(t: Target) {
    let exp = known_store(&t, 31);
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    for (post, n) in exp.counts.iter().take(8) {
        let v = get_json(&addr, &format!("/api/posts/{post}?since=1h"));
        assert_eq!(v["count"], *n, "{post}: {v}");
        assert_eq!(
            v["count_since"],
            exp.recent.get(post).copied().unwrap_or(0),
            "{post}: {v}"
        );
        assert!(
            v["applied_through"]["arrival_ms"].as_i64().unwrap() > 0,
            "{v}"
        );
        assert!(v["applied_through"]["lag_ms"].as_i64().unwrap() >= 0, "{v}");
        // In event time: the latest like counted on the slowest shard, within the file's times.
        let event = v["applied_through"]["event_ms"].as_i64().unwrap();
        assert!(
            event > crate::common::now_ms() - 30 * 60_000 && event <= crate::common::now_ms(),
            "{v}"
        );
        // As of an hour ago: refused counting likers (no store of latest actions keeps what a
        // past count needs), with the reason.
        let then = crate::common::now_ms() - 3_600_000;
        let (status, text) = get(&addr, &format!("/api/posts/{post}?as_of_ms={then}"));
        assert_eq!(status, 400, "{post}: {text}");
        assert!(text.contains("counts likers"), "{text}");
    }
    assert_eq!(get_json(&addr, "/api/total")["total"], exp.total());
    // What the counting cost, kept in the shards' rows.
    let cost = get_json(&addr, "/api/cost");
    // Counting likers, a copy met outside its original's window is read as an action too.
    let distinct = (exp.lines - exp.malformed - exp.duplicates) as u64;
    let counted = cost["counted"].as_u64().unwrap();
    assert!(
        (distinct..=distinct + exp.duplicates as u64).contains(&counted),
        "{cost}"
    );
    assert!(
        cost["write_units"]["counts"].as_u64().unwrap() > 0,
        "{cost}"
    );
    assert!(
        cost["write_units"]["checkpoints"].as_u64().unwrap() >= 2,
        "{cost}"
    );
    let per_like = cost["units_per_like"].as_f64().unwrap();
    assert!(per_like > 0.0 && per_like < 2.0, "{cost}");
    // A feed page's counts in one call, GET and POST alike, each exactly as alone; eventually
    // consistent at half the read units, as the answer says.
    let ids: Vec<&String> = exp.counts.keys().take(20).collect();
    let list = ids.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
    let many = get_json(&addr, &format!("/api/counts?ids={list}&since=1h"));
    let counts = many["counts"].as_array().unwrap();
    assert_eq!(counts.len(), ids.len(), "{many}");
    for (c, id) in counts.iter().zip(&ids) {
        assert_eq!(c["post_id"], id.as_str());
        assert_eq!(c["count"], exp.counts[*id], "{c}");
        assert_eq!(
            c["count_since"],
            exp.recent.get(*id).copied().unwrap_or(0),
            "{c}"
        );
    }
    assert!(many["applied_through"]["lag_ms"].is_i64(), "{many}");
    let strong = many["read_units"].as_f64().unwrap();
    let body =
        serde_json::json!({"ids": ids, "since": "1h", "consistency": "eventual"}).to_string();
    let (status, text) = post(&addr, "/api/counts", &body);
    assert_eq!(status, 200, "{text}");
    let eventual: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(eventual["consistency"], "eventual");
    assert_eq!(
        eventual["counts"],
        many["counts"]
            .clone()
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c["read_units"] = serde_json::json!(c["read_units"].as_f64().unwrap() / 2.0);
                c
            })
            .collect::<Value>()
    );
    assert_eq!(eventual["read_units"].as_f64().unwrap(), strong / 2.0);
    // Bad input names what is wrong: too many ids, an invalid one among valid ones.
    let too_many: Vec<String> = (0..101).map(|i| format!("p{i}")).collect();
    let (status, body) = get(&addr, &format!("/api/counts?ids={}", too_many.join(",")));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("at most 100") && body.contains("got 101"),
        "{body}"
    );
    let (status, body) = get(&addr, "/api/counts?ids=p1,bad!id,p2");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("bad!id") && body.contains("id 2 of 3"),
        "{body}"
    );
    let (status, body) = post(&addr, "/api/counts", "{\"ids\": 3}");
    assert_eq!(status, 400, "{body}");
    let (status, body) = get(&addr, "/api/counts?ids=p1&consistency=maybe");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`strong` or `eventual`"), "{body}");
    // Dead letters page by key: the pages follow one another, each letter once.
    let mut seen = std::collections::BTreeSet::new();
    let mut url = "/api/dead-letters?limit=2".to_owned();
    loop {
        let dl = get_json(&addr, &url);
        assert_eq!(dl["total"], exp.malformed as u64);
        let page = dl["dead_letters"].as_array().unwrap();
        assert!(page.len() <= 2, "{dl}");
        for d in page {
            let id = (d["shard_id"].to_string(), d["sequence_number"].to_string());
            assert!(seen.insert(id), "a letter on two pages: {d}");
        }
        match dl["next"].as_str() {
            Some(next) => url = format!("/api/dead-letters?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), exp.malformed);
    // Every error is JSON naming what is wrong: a bad query string, an unknown path.
    let (status, body) = get(&addr, "/api/trending?k=abc");
    assert_eq!(status, 400, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("bad query string"),
        "{body}"
    );
    let (status, body) = get(&addr, "/api/nope");
    assert_eq!(status, 404, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"].as_str().unwrap().contains("/api/nope"), "{body}");
    let (status, body) = get(&addr, "/api/dead-letters?offset=1");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`after`"), "{body}");
    let top = get_json(&addr, "/api/trending?k=3");
    assert_eq!(top["trending"].as_array().unwrap().len(), 3, "{top}");
    // All-time most liked: ranked by the sketch, each with its exact count from the counter.
    let liked = get_json(&addr, "/api/top-liked?k=3");
    let liked = liked["top_liked"].as_array().unwrap().clone();
    assert_eq!(liked.len(), 3, "{liked:?}");
    for e in &liked {
        let post = e["post_id"].as_str().unwrap();
        assert_eq!(e["count"], exp.counts[post], "{e}");
        assert!(
            e["likes"].as_f64().unwrap() >= e["count"].as_f64().unwrap(),
            "{e}"
        );
    }
    let leases = get_json(&addr, "/api/leases?app=counter");
    assert!(
        leases
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["checkpoint"].is_string()),
        "{leases}"
    );
    let lat = get_json(&addr, "/api/latency");
    let n = lat["creation_ms"]["count"].as_u64().unwrap();
    assert!(n > 0, "{lat}");
    assert_eq!(lat["buckets"]["creation_ms"]["count"], n, "{lat}");
    let windows = lat["per_window"].as_array().unwrap();
    assert_eq!(windows.len() as u64, lat["windows"].as_u64().unwrap());
    let per_window: u64 = windows
        .iter()
        .map(|w| w["creation_ms"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(per_window, n, "the windows add up to the merge");
    // Bad input is a 400 that says what was expected.
    let (status, body) = get(&addr, "/api/posts/bad%20id");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("A-Za-z0-9"), "{body}");
    assert_eq!(get(&addr, "/api/trending?k=0").0, 400);
    assert_eq!(get(&addr, "/api/leases?app=nope").0, 400);
    // `since` is a duration of the document's grammar (`0s` is none).
    let (status, body) = get(&addr, "/api/posts/p1?since=0s");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("`since` must be a duration"), "{body}");
    assert_eq!(get(&addr, "/healthz").0, 200);
    assert_eq!(get(&addr, "/readyz").0, 200);
    // Prometheus: parses, and agrees with the API.
    let (status, text) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        metric(&text, "tally_likes", &[]),
        Some(exp.total() as f64),
        "{text}"
    );
    assert_eq!(
        metric(&text, "tally_dead_letters", &[]),
        Some(exp.malformed as f64)
    );
    assert!(
        metric(&text, "tally_shard_lag_ms", &[("app", "counter")]).is_some(),
        "{text}"
    );
    assert!(
        metric(
            &text,
            "tally_latency_ms",
            &[("kind", "creation"), ("quantile", "0.99")]
        )
        .unwrap()
            > 0.0,
        "{text}"
    );
    // The merged histogram, as a Prometheus histogram: its count is the API's.
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let h = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "tally_latency_histogram_ms" && s.labels.get("kind") == Some("creation")
        })
        .unwrap_or_else(|| panic!("no histogram in {text}"));
    let prometheus_parse::Value::Histogram(buckets) = &h.value else {
        panic!("{:?}", h.value)
    };
    assert_eq!(buckets.last().unwrap().count, n as f64, "{text}");
}

on_backends! {
    the_api_answers_a_known_store {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            the_api_answers_a_known_store(t);
        },
        aws => the_api_answers_a_known_store(Target::aws("serve", 2)),
    }
}

/// A worker's `--http` endpoint: its own counters as Prometheus text, and health.
/// An idle, caught-up pipeline is not shown as lagging: with the counter running and read to the
/// tip of every shard, lag is 0 in the CLI, the API and `/metrics`, however long ago the last
/// record arrived — which is its own figure (`since_last_record_ms`), growing meanwhile. Once the
/// counter stops, every answer says so (`unread_shards`), and its lag grows instead of staying 0.
fn an_idle_caught_up_pipeline_shows_no_lag(t: Target) {
    let exp = known_store(&t, 5);
    let worker = t.spawn("count", &["count"], &[]);
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    // Wait until every shard's reader has reported the tip, then stay idle a while.
    let start = Instant::now();
    loop {
        let q = t.query_one(&["query", exp.counts.keys().next().unwrap(), "--json"]);
        if q["applied_through"]["lag_ms"] == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never at the tip: {q}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    let q = t.query_one(&["query", exp.counts.keys().next().unwrap(), "--json"]);
    let f = &q["applied_through"];
    assert_eq!(f["lag_ms"], 0, "{q}");
    assert!(f["since_last_record_ms"].as_i64().unwrap() >= 3_000, "{q}");
    let text = t.run(&["query", exp.counts.keys().next().unwrap()]);
    // Each figure says what it is about: the tip as the readers last reported it, and no
    // "last record" figure read as the posts' (issue 74, item 5).
    assert!(
        text.contains("to the stream's tip on every shard as the readers reported"),
        "{text}"
    );
    assert!(!text.contains("last record"), "{text}");
    let shards = get_json(&addr, "/api/leases?app=counter");
    for l in shards.as_array().unwrap() {
        assert_eq!(l["lag_ms"], 0, "{l}");
        assert!(l["since_last_record_ms"].as_i64().unwrap() >= 3_000, "{l}");
    }
    std::thread::sleep(Duration::from_millis(1_200)); // the read side's next listing
    let total = get_json(&addr, "/api/total");
    assert_eq!(total["applied_through"]["lag_ms"], 0, "{total}");
    let (_, metrics) = get(&addr, "/metrics");
    for l in shards.as_array().unwrap() {
        let shard = l["shard_id"].as_str().unwrap();
        let labels = [("app", "counter"), ("shard", shard)];
        assert_eq!(
            metric(&metrics, "tally_shard_lag_ms", &labels),
            Some(0.0),
            "{metrics}"
        );
        assert!(
            metric(&metrics, "tally_shard_since_last_record_ms", &labels).unwrap() >= 3_000.0,
            "{metrics}"
        );
    }
    // The counter stopped (its leases released): no answer says "at the tip" any more.
    assert_eq!(f["unread_shards"], 0, "{q}");
    let mut worker = worker;
    worker.signal("TERM");
    assert!(
        worker.wait(Duration::from_secs(60)).success(),
        "{}",
        worker.log_text()
    );
    std::thread::sleep(Duration::from_millis(1_200));
    let q = t.query_one(&["query", exp.counts.keys().next().unwrap(), "--json"]);
    let f = &q["applied_through"];
    assert_eq!(f["unread_shards"], 2, "{q}");
    assert!(f["lag_ms"].as_i64().unwrap() >= 1_000, "{q}");
    let text = t.run(&["query", exp.counts.keys().next().unwrap()]);
    assert!(text.contains("no worker is reading 2 shards"), "{text}");
    std::thread::sleep(Duration::from_millis(1_200)); // the read side's next listing
    let total = get_json(&addr, "/api/total");
    assert_eq!(total["applied_through"]["unread_shards"], 2, "{total}");
    assert!(
        total["applied_through"]["lag_ms"].as_i64().unwrap() >= 1_000,
        "{total}"
    );
    for l in get_json(&addr, "/api/leases?app=counter")
        .as_array()
        .unwrap()
    {
        assert_eq!(l["read"], false, "{l}");
        assert!(l["lag_ms"].as_i64().unwrap() >= 1_000, "{l}");
    }
}

/// A shard that never had a record has nothing to apply: once its reader reports the tip, it
/// does not hide how long ago the other shards' last record arrived (issue 31, item 7).
fn a_shard_without_records_hides_no_freshness(t: Target) {
    // Every like of one post: one key, one shard; the other shard stays empty.
    let file = file_in(&t, "solo.ndjson");
    let counts = crate::common::write_likes(&file, "solo", 1);
    t.run(&["replay", file.to_str().unwrap()]);
    let post = counts.keys().next().unwrap().clone();
    let worker = t.spawn("count", &["count"], &[]);
    t.eventually(
        "the like counted and every shard's reader at the tip",
        Duration::from_secs(60),
        &[&worker],
        || {
            let q = t.query_one(&["query", &post, "--json"]);
            q["stored"] == 1 && q["applied_through"]["lag_ms"] == 0
        },
    );
    let leases = t.json(&["leases", "--json"]);
    let empty = leases
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["applied_arrival_ms"].is_null())
        .count();
    assert_eq!(empty, 1, "one shard never had a record: {leases}");
    for v in [
        t.query_one(&["query", &post, "--json"]),
        t.json(&["total", "--json"]),
    ] {
        let f = &v["applied_through"];
        assert!(f["since_last_record_ms"].as_i64().is_some(), "{v}");
        assert!(f["arrival_ms"].as_i64().is_some(), "{v}");
    }
    drop(worker);
}

on_backends! {
    a_shard_without_records_hides_no_freshness {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            a_shard_without_records_hides_no_freshness(t);
        },
        aws => a_shard_without_records_hides_no_freshness(Target::aws("solo", 2)),
    }
}

on_backends! {
    an_idle_caught_up_pipeline_shows_no_lag {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            an_idle_caught_up_pipeline_shows_no_lag(t);
        },
        aws => an_idle_caught_up_pipeline_shows_no_lag(Target::aws("idle", 2)),
    }
}

/// A counter worker serves its own metrics, both of its stages' (the stream's, app `counter`;
/// the edges' change log's, app `changes`) as samples of one family each, by `app`; and its
/// health.
#[test]
fn a_worker_serves_its_metrics() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 800, 20, 5);
    t.run(&["replay", file.to_str().unwrap()]);
    let mut w = t.spawn("count", &["count", "--http", "127.0.0.1:0"], &[]);
    let addr = served_addr(&w);
    // Counting likers, a copy outside its original's window is counted as read (it changes
    // nothing): the stream's stage (app `counter`) has counted and dropped as duplicates every
    // valid record, and the change log's (app `changes`) has counted each change of an edge
    // the first wrote.
    let valid = (exp.lines - exp.malformed) as f64;
    t.eventually(
        "the worker to count everything",
        Duration::from_secs(60),
        &[&w],
        || {
            let (_, text) = get(&addr, "/metrics");
            let of = |m: &str, app: &str| metric(&text, m, &[("app", app)]).unwrap_or(0.0);
            let changed = of("tally_edges_changed_total", "counter");
            of("tally_counted_total", "counter") + of("tally_duplicates_total", "counter") == valid
                && changed > 0.0
                && of("tally_counted_total", "changes") == changed
        },
    );
    let (_, text) = get(&addr, "/metrics");
    // Each family once (a name repeated is a scrape Prometheus refuses), its stages by `app`.
    for family in [
        "tally_records",
        "tally_write_units",
        "tally_leases_held",
        "tally_retries",
    ] {
        let types = text
            .lines()
            .filter(|l| l.starts_with(&format!("# TYPE {family} ")))
            .count();
        assert_eq!(types, 1, "{family}: {text}");
    }
    let units = |app: &str, purpose: &str| {
        metric(
            &text,
            "tally_write_units_total",
            &[("app", app), ("purpose", purpose)],
        )
        .unwrap()
    };
    assert!(
        metric(&text, "tally_duplicates_total", &[("app", "counter")]).unwrap()
            <= exp.duplicates as f64
    );
    // The stream's stage writes the edges, the change log's the counts.
    assert!(units("counter", "edges") > 0.0, "{text}");
    assert_eq!(units("counter", "counts"), 0.0, "{text}");
    assert!(units("changes", "counts") > 0.0, "{text}");
    assert_eq!(units("changes", "edges"), 0.0, "{text}");
    // Two stream shards, and the change log's shards, one per edges file.
    let edge_files = tally_embedded::edge_files(t.dir.path()).unwrap().len() as f64;
    for (app, held) in [("counter", 2.0), ("changes", edge_files)] {
        assert_eq!(
            metric(&text, "tally_leases_held", &[("app", app)]),
            Some(held),
            "{app}: {text}"
        );
    }
    assert_eq!(get(&addr, "/healthz").0, 200);
    assert_eq!(get(&addr, "/readyz").0, 200);
    // `/` says what the worker serves (not an empty 404 behind a "serving on" line).
    let (status, index) = get(&addr, "/");
    assert_eq!(status, 200);
    assert!(
        index.contains("/metrics") && index.contains("/api/open"),
        "{index}"
    );
    // The container health check (terraform/ecs.tf) asks /healthz with `tally probe`.
    t.run(&["probe", &format!("http://{addr}/healthz")]);
    let out = t.fail(&["probe", &format!("http://{addr}/nowhere")], &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
    w.signal("TERM");
    assert!(w.wait(Duration::from_secs(30)).success());
    let out = t.fail(&["probe", &format!("http://{addr}/healthz")], &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

/// Headless Chromium, driven over the DevTools protocol (a WebSocket on 127.0.0.1).
struct Browser {
    child: std::process::Child,
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Opens `url` in a fresh headless Chromium (`chromium`, or `$CHROMIUM`).
    fn open(url: &str) -> Browser {
        let bin = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let profile = tempfile::tempdir().unwrap();
        // Its own process group: Debian's `chromium` is a wrapper script, and the browser it
        // starts must end with the test too.
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new(&bin)
            .process_group(0)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--window-size=1280,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                url,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} ({e}): scripts/test.sh installs Debian's chromium")
            });
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
        let mut err = child.stderr.take().unwrap();
        let mut seen = String::new();
        let port = loop {
            let mut buf = [0u8; 512];
            let n = err.read(&mut buf).unwrap();
            assert!(n > 0, "chromium exited: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            if let Some(rest) = seen.split("ws://127.0.0.1:").nth(1) {
                if let Some(p) = rest.split('/').next().filter(|p| rest.len() > p.len()) {
                    break p.to_owned();
                }
            }
        };
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let devtools = format!("127.0.0.1:{port}");
        let start = Instant::now();
        let page_ws = loop {
            let body = try_get(&devtools, "/json/list")
                .map(|(_, b)| b)
                .unwrap_or_default();
            let pages: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if let Some(ws) = pages.as_array().and_then(|ps| {
                ps.iter()
                    .find(|p| p["type"] == "page")
                    .and_then(|p| p["webSocketDebuggerUrl"].as_str().map(str::to_owned))
            }) {
                break ws;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no page target: {body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let (ws, _) = tungstenite::connect(page_ws.as_str()).unwrap();
        Browser {
            child,
            ws,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Calls a DevTools method and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = serde_json::json!({"id": id, "method": method, "params": params});
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.ws.read().unwrap();
            if let tungstenite::Message::Text(t) = m {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["id"] == id {
                    assert!(v.get("error").is_none(), "{method}: {v}");
                    return v["result"].clone();
                }
            }
        }
    }

    /// The text of an element of the page.
    fn text(&mut self, id: &str) -> String {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": format!("document.getElementById('{id}')?.innerText ?? ''"), "returnByValue": true}),
        );
        r["result"]["value"].as_str().unwrap_or_default().to_owned()
    }

    /// Waits until `id`'s text satisfies `ok`.
    fn wait_for(&mut self, id: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let t = self.text(id);
            if ok(&t) {
                return t;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the page's #{id} never showed {what}; it shows {t:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The value of a JavaScript expression evaluated in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": expression, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    fn screenshot(&mut self, path: &std::path::Path) {
        use base64::Engine;
        let r = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png"}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group this test started (the wrapper and the browser), by its id.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn grouped(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// The dashboard in headless Chromium: it loads, shows the store's known total, trending posts
/// and dead letters, then follows new likes as they are counted, without a reload. The test saves
/// a screenshot to `target/dashboard.png`.
#[test]
fn the_dashboard_shows_the_numbers_and_follows_new_likes() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let exp = known_store(&t, 44);
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    let mut b = Browser::open(&format!("http://{addr}/?refresh_ms=300"));
    let total = grouped(exp.total());
    b.wait_for("total", &total, |t| t == total);
    let dead = exp.malformed.to_string();
    b.wait_for("dead-total", &dead, |t| t == dead);
    b.wait_for("cost", "a cost per like", |t| {
        t.parse::<f64>().is_ok_and(|c| c > 0.0)
    });
    let top = get_json(&addr, "/api/trending?k=1")["trending"][0]["post_id"]
        .as_str()
        .unwrap()
        .to_owned();
    b.wait_for("trending", &top, |t| t.contains(&top));
    // New likes, counted while the page is open.
    let more = file_in(&t, "more.ndjson");
    let later = write_contract_file(&more, 300, 40, 45);
    t.run(&["replay", more.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let now_total = grouped(exp.total() + later.total());
    b.wait_for("total", &now_total, |t| t == now_total);
    // It says how often it polls, what a trending score is, and where the shards stand.
    assert_eq!(b.text("every"), "300 ms");
    assert!(
        b.text("score-unit").contains("halved every"),
        "{}",
        b.text("score-unit")
    );
    b.wait_for("shards", "each shard's counter and analytics lag", |t| {
        t.contains("shard 0") && t.contains("shard 1")
    });
    assert_eq!(b.text("shards-hint"), "");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    b.screenshot(&shot);
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    drop(serve);

    // A server that asks for a token, the page opened without one: it says how to give it.
    let token = file_in(&t, "token");
    std::fs::write(&token, "a-token-of-twenty-chars\n").unwrap();
    let args = ["serve", "--addr", "127.0.0.1:0", "--auth-token-file"];
    let args: Vec<&str> = args.into_iter().chain([token.to_str().unwrap()]).collect();
    let guarded = t.spawn("serve-token", &args, &[]);
    let addr = served_addr(&guarded);
    b.call(
        "Page.navigate",
        serde_json::json!({"url": format!("http://{addr}/?refresh_ms=300")}),
    );
    b.wait_for("error", "how to give the token", |t| {
        t.contains("401") && t.contains("/#token=")
    });
}

/// At a thousand shards the dashboard stays a summary: the 20 shards furthest behind and a line
/// counting the open shards by state, every row only when "all shards" is ticked.
#[test]
fn the_dashboard_summarizes_a_thousand_shards() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1000"]);
    // A counter that creates the thousand lease rows, takes them all, finds nothing to count and
    // gives them back.
    t.run(&["count", "--until-idle"]);
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    let mut b = Browser::open(&format!("http://{addr}/?refresh_ms=300"));
    let summary = b.wait_for("shards-summary", "a summary of the shards", |t| {
        !t.is_empty()
    });
    assert_eq!(
        summary,
        "1,000 open shards: 0 held, 1,000 free, 0 applying a window; the 20 furthest behind shown"
    );
    let rows = "document.querySelectorAll('#shards tbody tr').length";
    assert_eq!(b.eval(rows), 20);
    b.eval("document.getElementById('all-shards').click()");
    let start = Instant::now();
    while b.eval(rows) != 1000 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "every row once ticked"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    b.wait_for("shards-summary", "all shown", |t| t.ends_with("all shown"));
    drop(serve);
}

/// `tally demo --serve`: after its check the demo keeps the pipeline going — new likes trickle in,
/// are counted, and the API (and so the page) shows them — until SIGTERM, which it obeys.
#[test]
fn the_demo_keeps_serving_a_moving_pipeline() {
    let t = Target::embedded();
    let mut demo = t.spawn(
        "demo",
        &[
            "demo",
            "--events",
            "3000",
            "--posts",
            "50",
            "--shards",
            "2",
            "--serve",
            "127.0.0.1:0",
        ],
        &[],
    );
    let addr = served_addr(&demo);
    let first = get_json(&addr, "/api/total")["total"].as_i64().unwrap();
    assert!(first > 2_000, "the demo's likes are counted: {first}");
    t.eventually(
        "new likes to be counted",
        Duration::from_secs(60),
        &[&demo],
        || get_json(&addr, "/api/total")["total"].as_i64().unwrap() > first + 50,
    );
    assert_eq!(get(&addr, "/").0, 200);
    demo.signal("TERM");
    let status = demo.wait(Duration::from_secs(30));
    assert!(status.success(), "{}", demo.log_text());
}

/// A counts call for these posts: `count`, `stored` and `pending` per post, and whether every
/// held shard's worker answered.
fn provisional(addr: &str, posts: &[&String]) -> (Vec<(i64, i64, i64)>, Value) {
    let ids: Vec<&str> = posts.iter().map(|p| p.as_str()).collect();
    let v = get_json(addr, &format!("/api/counts?ids={}", ids.join(",")));
    let counts = v["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let (n, s, p) = (&c["count"], &c["stored"], &c["pending"]);
            (
                n.as_i64().unwrap(),
                s.as_i64().unwrap(),
                p.as_i64().unwrap(),
            )
        })
        .collect();
    (counts, v)
}

/// Counts include what the counter's workers have read and not written — once: a window landing
/// between asking the worker and reading the store is not added again; a worker killed with a
/// window open stays in the answer (its shards named, the answer not complete, also once its
/// lease expired) until its successor's rebuilt window reaches as far — never less, never more;
/// after the windows land, stored = counts exactly.
///
/// Counting likers, the stream's stage writes the edges as soon as its read reaches the tip, and
/// the open windows are the change log's (app `changes`): a third round likes again, unlikes
/// and likes the first round's posts, and the open window shows exactly the change its write
/// then makes (a like again changes no count, an unlike of a stored like takes it away, an
/// unlike of nothing changes nothing).
fn provisional_counts_are_exact(t: Target, likers: bool) {
    let t = if likers { t } else { t.counting_events() };
    // Windows that stay open until the worker stops: nothing is written before that.
    let open = [
        ("TALLY_COUNTER__WINDOW_MS", "600000"),
        ("TALLY_COUNTER__WINDOW_RECORDS", "20000"),
        ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "false"),
        ("TALLY_LEASE__DURATION_MS", "3000"),
        ("TALLY_LEASE__RENEW_MS", "500"),
    ];
    let file = file_in(&t, "first.ndjson");
    let first = crate::common::write_likes(&file, "pv", 300);
    t.run(&["replay", file.to_str().unwrap()]);
    let posts: Vec<&String> = first.keys().collect();
    let want: Vec<i64> = first.values().copied().collect();
    let worker = |name: &str| {
        t.spawn(
            name,
            &["count", "--worker-id", name, "--http", "127.0.0.1:0"],
            &open,
        )
    };
    let mut a = worker("a");
    let serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    let all_pending = |counts: &[(i64, i64, i64)], want: &[i64]| {
        counts
            .iter()
            .zip(want)
            .all(|(&(n, s, p), &w)| n == w && s == 0 && p == w)
    };
    t.eventually(
        "the open window in every count",
        Duration::from_secs(60),
        &[&a],
        || {
            let (counts, v) = provisional(&addr, &posts);
            assert!(
                counts.iter().zip(&want).all(|((n, ..), w)| n <= w),
                "never more: {v}"
            );
            all_pending(&counts, &want) && v["provisional"]["every_shard_answered"] == true
        },
    );
    let stored: i64 = t.json(&["total", "--json"])["total"].as_i64().unwrap();
    assert_eq!(stored, 0, "nothing written while the window is open");
    // `tally query` says what the API says: the open window's likes, not yet written.
    let (post, w) = (posts[0].as_str(), want[0]);
    let q = t.query_one(&["query", post, "--json"]);
    assert_eq!(
        (q["count"].as_i64(), q["stored"].as_i64()),
        (Some(w), Some(0)),
        "{q}"
    );
    assert_eq!(q["pending"].as_i64(), Some(w), "{q}");
    let text = t.run(&["query", post]);
    assert!(
        text.starts_with(&format!(
            "{post}: {w} likes (+{w} of them read by the counter, not yet written)"
        )),
        "{text}"
    );
    let q = t.query_one(&["query", post, "--json", "--stored"]);
    assert_eq!(
        (q["count"].as_i64(), q["pending"].as_i64()),
        (Some(0), Some(0)),
        "{q}"
    );

    // A window landing between the two reads: a read side that pauses after asking the worker
    // reads the store only after the worker has flushed its window and exited.
    let paused = t.spawn(
        "serve-paused",
        &["serve", "--addr", "127.0.0.1:0"],
        &[("TALLY_FAILPOINT_SERVE_PAUSE_MS", "6000")],
    );
    let paused_addr = served_addr(&paused);
    let ids: Vec<String> = posts.iter().map(|p| p.to_string()).collect();
    let call = std::thread::spawn(move || {
        let refs: Vec<&String> = ids.iter().collect();
        provisional(&paused_addr, &refs)
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let flushed_at = Instant::now();
    a.signal("TERM");
    assert!(
        a.wait(Duration::from_secs(30)).success(),
        "{}",
        a.log_text()
    );
    assert!(
        flushed_at.elapsed() < Duration::from_secs(4),
        "the window landed within the pause"
    );
    let (counts, v) = call.join().unwrap();
    for ((n, s, p), w) in counts.iter().zip(&want) {
        assert_eq!((*n, *s, *p), (*w, *w, 0), "counted once, by the store: {v}");
    }

    // A worker killed with a window open; its successor rebuilds the same window.
    let file = file_in(&t, "second.ndjson");
    let second = crate::common::write_likes(&file, "pk", 200);
    t.run(&["replay", file.to_str().unwrap()]);
    let posts: Vec<&String> = second.keys().collect();
    let want: Vec<i64> = second.values().copied().collect();
    let mut b = worker("b");
    t.eventually("b's open window", Duration::from_secs(60), &[&b], || {
        let (counts, v) = provisional(&addr, &posts);
        all_pending(&counts, &want) && v["provisional"]["every_shard_answered"] == true
    });
    b.signal("KILL");
    b.wait(Duration::from_secs(10));
    // Not taken back: the dead worker's last answer is given until a successor's reaches as far;
    // and not complete, the shards named — while the lease is b's, and once it has expired
    // (its holder gone: it used to be skipped, and the answer called complete).
    let killed = Instant::now();
    while killed.elapsed() < Duration::from_secs(5) {
        let (counts, v) = provisional(&addr, &posts);
        assert!(
            all_pending(&counts, &want),
            "taken back after the kill: {v}"
        );
        assert_eq!(
            v["provisional"]["every_shard_answered"], false,
            "a worker did not answer: {v}"
        );
        // Every shard whose windows hold counts is named, unanswered and its last answer
        // remembered: counting likers the change log's (embedded: one per edges file, two;
        // DynamoDB Local: the edges table's stream, one), counting events the stream's two.
        let held = if likers && t.is_aws() { 1 } else { 2 };
        for field in ["unanswered_shards", "remembered_shards"] {
            let named = v["provisional"][field].as_array().unwrap();
            assert_eq!(named.len(), held, "{field}: {v}");
        }
        assert_eq!(
            v["provisional"]["unanswered_shards"], v["provisional"]["remembered_shards"],
            "{v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut c = worker("c");
    t.eventually("c's rebuilt window", Duration::from_secs(60), &[&c], || {
        let (counts, v) = provisional(&addr, &posts);
        assert!(
            counts.iter().zip(&want).all(|((n, ..), w)| n == w),
            "never more, never less: {v}"
        );
        v["provisional"]["every_shard_answered"] == true
            && v["provisional"]["remembered_shards"] == serde_json::json!([])
    });
    assert!(all_pending(&provisional(&addr, &posts).0, &want));
    c.signal("TERM");
    assert!(
        c.wait(Duration::from_secs(30)).success(),
        "{}",
        c.log_text()
    );
    let (counts, v) = provisional(&addr, &posts);
    for ((n, s, p), w) in counts.iter().zip(&want) {
        assert_eq!((*n, *s, *p), (*w, *w, 0), "{v}");
    }
    assert_eq!(t.mismatches(&first), vec![]);
    assert_eq!(t.mismatches(&second), vec![]);
    if likers {
        open_likers_over_stored_edges(&t, &addr, &first, &worker);
    }
}

/// Likers: a change log's window over the first round's stored edges shows, while open, exactly
/// what its write does; the likers themselves are the edges, written already.
fn open_likers_over_stored_edges(
    t: &Target,
    addr: &str,
    first: &BTreeMap<String, i64>,
    worker: &dyn Fn(&str) -> Bg,
) {
    // The first round: u{i} liked pv-p{i % 10}, i < 300.
    let file = file_in(t, "third.ndjson");
    let now = crate::common::now_ms();
    let mut want = first.clone();
    let mut lines = Vec::new();
    let mut act = |i: usize, user: String, action: &str, change: i64| {
        let post = format!("pv-p{}", i % 10);
        lines.push(format!(
            r#"{{"event_id":"third-{}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{now}}}"#,
            lines.len()
        ));
        *want.get_mut(&post).unwrap() += change;
    };
    for i in 0..40 {
        act(i, format!("u{i}"), "like", 0); // a like again
    }
    for i in 40..100 {
        act(i, format!("u{i}"), "unlike", -1); // a stored like taken back
    }
    for i in 0..30 {
        act(i, format!("nobody{i}"), "unlike", 0); // an unlike of nothing
    }
    for i in 300..350 {
        act(i, format!("u{i}"), "like", 1); // a new like
    }
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    let posts: Vec<&String> = want.keys().collect();
    let (had, now_want): (Vec<i64>, Vec<i64>) = posts
        .iter()
        .map(|p| (first[p.as_str()], want[p.as_str()]))
        .unzip();
    let mut d = worker("d");
    t.eventually("d's open window", Duration::from_secs(60), &[&d], || {
        let (counts, v) = provisional(addr, &posts);
        let shown = counts
            .iter()
            .zip(had.iter().zip(&now_want))
            .all(|(&(n, s, p), (&h, &w))| n == w && s == h && p == w - h);
        shown && v["provisional"]["every_shard_answered"] == true
    });
    // The viewer's state comes from the same view as the count: a stored like unliked in the
    // open window is not liked any more, a new like is, a like again stays, an unlike of nothing
    // stays not liked, and a user the window does not hold is as stored.
    let viewers = [
        ("u40", false),
        ("u300", true),
        ("u0", true),
        ("nobody0", false),
        ("u10", true),
    ];
    let check_viewers = |how: &str| {
        for (u, liked) in viewers {
            let v = get_json(addr, &format!("/api/counts?ids=pv-p0&viewer={u}"));
            assert_eq!(v["counts"][0]["viewer_liked"], liked, "{how}, {u}: {v}");
            let v = get_json(addr, &format!("/api/posts/pv-p0?viewer={u}"));
            assert_eq!(v["viewer_liked"], liked, "{how}, {u}: {v}");
            assert_eq!(v["count"].as_i64(), Some(want["pv-p0"]), "{how}, {u}: {v}");
            let q = t.query_one(&["query", "pv-p0", "--viewer", u, "--json"]);
            assert_eq!(q["viewer_liked"], liked, "{how}, {u}: {q}");
        }
        // Which of them like it (a viewer's friends), in one batch read, from the same view.
        let among: Vec<&str> = viewers.iter().map(|(u, _)| *u).collect();
        let v = get_json(
            addr,
            &format!("/api/posts/pv-p0/likers/among?users={}", among.join(",")),
        );
        let liking: Vec<&str> = viewers
            .iter()
            .filter(|(_, l)| *l)
            .map(|(u, _)| *u)
            .collect();
        assert_eq!(v["likers"], serde_json::json!(liking), "{how}: {v}");
        assert_eq!(v["count"].as_i64(), Some(want["pv-p0"]), "{how}: {v}");
        assert!(v["read_units"].as_u64().unwrap() >= 5, "an edge each: {v}");
    };
    check_viewers("open");
    // The likers page too: while open it already is the page the window's write makes (in pages
    // of 7 or one of 1,000), with the count from the same view. The page is the stored edges,
    // which the stream's stage wrote at the tip: the stored page alone is that page already,
    // only its count waits for the change log's window.
    let likers = |limit: usize, pending: bool| {
        let mut users = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut url = format!("/api/posts/pv-p0/likers?limit={limit}&pending={pending}");
            if let Some(a) = &after {
                url.push_str(&format!("&after={a}"));
            }
            let v = get_json(addr, &url);
            if pending {
                assert_eq!(v["count"].as_i64(), Some(want["pv-p0"]), "{v}");
            }
            users.extend(
                v["likers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|u| u.as_str().unwrap().to_owned()),
            );
            match v["next"].as_str() {
                Some(n) => after = Some(n.to_owned()),
                None => return users,
            }
        }
    };
    let open_page = likers(1_000, true);
    assert_eq!(open_page.len() as i64, want["pv-p0"], "{open_page:?}");
    assert!(open_page.iter().any(|u| u == "u300"), "{open_page:?}");
    assert!(!open_page.iter().any(|u| u == "u40"), "{open_page:?}");
    assert_eq!(likers(7, true), open_page);
    assert_eq!(
        likers(1_000, false),
        open_page,
        "the edges are written before the count"
    );
    // Most recent first, from the same view: the third round's likes on top (u0–u39 liked
    // again, u300–u349 new), each with its like's time, then the first round's it does not
    // touch; every liker once, in pages of 7 (DynamoDB's index catches up on its own time).
    let open_likes: BTreeSet<String> = (0..40)
        .chain(300..350)
        .filter(|i| i % 10 == 0)
        .map(|i| format!("u{i}"))
        .collect();
    let third = now;
    t.eventually(
        "the recent index, open",
        Duration::from_secs(30),
        &[&d],
        || {
            let pages = recent_pages(addr, 7, true, want["pv-p0"]);
            let on_top: BTreeSet<String> = pages
                .iter()
                .take_while(|(_, at)| *at == Some(third))
                .map(|(u, _)| u.clone())
                .collect();
            let shown: BTreeSet<String> = pages.iter().map(|(u, _)| u.clone()).collect();
            on_top == open_likes
                && pages
                    .iter()
                    .skip(on_top.len())
                    .all(|(_, at)| at.is_some_and(|at| at < third))
                && shown.len() == pages.len()
                && shown == open_page.iter().cloned().collect::<BTreeSet<_>>()
        },
    );
    d.signal("TERM");
    assert!(
        d.wait(Duration::from_secs(30)).success(),
        "{}",
        d.log_text()
    );
    let (counts, v) = provisional(addr, &posts);
    for ((n, s, p), w) in counts.iter().zip(&now_want) {
        assert_eq!((*n, *s, *p), (*w, *w, 0), "written as shown: {v}");
    }
    check_viewers("written");
    assert_eq!(likers(1_000, false), open_page, "written as shown");
    assert_eq!(likers(7, true), open_page);
    // Written, most recent first (DynamoDB's index catches up on its own time): the same likers,
    // each with its like's time, newest first.
    t.eventually("the recent index", Duration::from_secs(30), &[], || {
        let pages = recent_pages(addr, 7, false, want["pv-p0"]);
        let shown: BTreeSet<String> = pages.iter().map(|(u, _)| u.clone()).collect();
        shown == open_page.iter().cloned().collect::<BTreeSet<_>>()
            && pages.len() == shown.len()
            && pages.windows(2).all(|w| w[0].1 >= w[1].1)
            && pages.iter().all(|(_, at)| at.is_some())
    });
    assert_eq!(t.mismatches(&want), vec![]);
}

/// Every page of pv-p0's likers most recent first (`pending`: from the same view as its count,
/// which must be `count`): each liker with its like's time (`None`: held by an open window).
fn recent_pages(addr: &str, limit: usize, pending: bool, count: i64) -> Vec<(String, Option<i64>)> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut url = format!("/api/posts/pv-p0/likers/recent?limit={limit}&pending={pending}");
        if let Some(a) = &after {
            url.push_str(&format!("&after={a}"));
        }
        let v = get_json(addr, &url);
        if pending {
            assert_eq!(v["count"].as_i64(), Some(count), "{v}");
        }
        for l in v["likers"].as_array().unwrap() {
            out.push((
                l["user_id"].as_str().unwrap().to_owned(),
                l["liked_at_ms"].as_i64(),
            ));
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => return out,
        }
    }
}

on_backends! {
    provisional_counts_are_exact {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            provisional_counts_are_exact(t, true);
        },
        aws => provisional_counts_are_exact(Target::aws("provisional", 2), true),
    }
}

/// The same counting events, whose open windows need no edges (embedded).
#[test]
fn provisional_counts_are_exact_counting_events() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    provisional_counts_are_exact(t, false);
}

on_backends! {
    recent_likers_ask_for_the_index_and_setup_adds_it {
        embedded => recent_likers_ask_for_the_index_and_setup_adds_it(
            Target::embedded().without_env(crate::common::RECENT_INDEX_VAR)
        ),
        aws => recent_likers_ask_for_the_index_and_setup_adds_it(Target::aws_with("recent", 1, &[])),
    }
}

/// Likers most recent first read the store's recent index. A store made without it
/// (`recent_likers_index` off, the default) answers 501 naming the index and the setting that
/// adds it; `setup` with the setting adds it to the store as it is, and the likes stored before
/// are then listed from it, newest first.
fn recent_likers_ask_for_the_index_and_setup_adds_it(t: Target) {
    let f = file_in(&t, "likes.ndjson");
    let t0 = crate::common::now_ms() - 600_000;
    let lines: Vec<String> = ["ann", "bob", "cat"]
        .iter()
        .enumerate()
        .map(|(i, u)| {
            format!(
                r#"{{"event_id":"r{i}","post_id":"pv-p0","user_id":"{u}","action":"like","created_at":{}}}"#,
                t0 + i as i64 * 1_000
            )
        })
        .collect();
    std::fs::write(&f, lines.join("\n") + "\n").unwrap();
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let mut serve = t.spawn("serve", &["serve", "--addr", "127.0.0.1:0"], &[]);
    let addr = served_addr(&serve);
    let (status, body) = get(&addr, "/api/posts/pv-p0/likers/recent");
    assert_eq!(status, 501, "{body}");
    assert!(
        body.contains("index `recent`") && body.contains("recent_likers_index = true"),
        "{body}"
    );
    let out = t.run_env(&["setup"], &[(crate::common::RECENT_INDEX_VAR, "true")]);
    assert!(out.contains("index recent"), "{out}");
    t.eventually(
        "the index filled",
        Duration::from_secs(60),
        &[&serve],
        || {
            let pages = recent_pages(&addr, 2, true, 3);
            let users: Vec<&str> = pages.iter().map(|(u, _)| u.as_str()).collect();
            users == ["cat", "bob", "ann"]
        },
    );
    let v = get_json(&addr, "/api/posts/pv-p0/likers/recent?limit=1");
    assert_eq!(v["likers"][0]["liked_at_ms"], t0 + 2_000, "{v}");
    assert_eq!(v["next"], format!("{}:cat", t0 + 2_000), "{v}");
    serve.signal("TERM");
    assert!(serve.wait(Duration::from_secs(30)).success());
}
