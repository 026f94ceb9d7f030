//! End to end, on the embedded backend and (feature `aws-local`) on the local AWS API peers:
//! replay a hand-written contract-v1 file, count, analytics, query — every count exact.
#![allow(clippy::unwrap_used)]

use crate::common::{file_in, write_contract_file, Target};

on_backends! {
    replay_count_query_is_exact {
        embedded => replay_count_query_is_exact(Target::embedded(), 4),
        aws => replay_count_query_is_exact(Target::aws("replay", 2), 2),
        aws_efo => replay_count_query_is_exact(Target::aws_efo("replay-efo", 2), 2),
    }
}

fn replay_count_query_is_exact(t: Target, shards: usize) {
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 3_000, 40, 7);
    assert!(exp.malformed > 0 && exp.duplicates > 0);

    let replayed = t.json(&["replay", file.to_str().unwrap(), "--json"]);
    assert_eq!(replayed["records"], exp.lines as u64);
    let counted = t.json(&["count", "--until-idle", "--json"]);
    assert_eq!(counted["records"], exp.lines as u64);
    crate::common::assert_read_all(&counted, exp.lines - exp.malformed, exp.duplicates);
    assert_eq!(counted["malformed"], exp.malformed as u64);

    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    // "Likes since": the last hour holds exactly the recent events.
    for (post, recent) in exp.recent.iter().take(10) {
        let q = t.query_one(&["query", post, "--since", "1h", "--json"]);
        assert_eq!(q["count_since"], *recent, "{post}");
        assert_eq!(q["post_id"], post.as_str());
        // Never a scan: three Queries of a few small items (the post's live items, the hour
        // archives of T's hour, the day archives from T's day on), one read unit each.
        assert_eq!(q["read_units"], 3, "{q}");
    }
    let q = t.query_one(&["query", "post-0", "--json"]);
    assert_eq!(
        q["read_units"], 1,
        "a total is one Query of the live items: {q}"
    );
    // A post nobody liked counts zero.
    assert_eq!(t.count("never-liked"), 0);

    let dl = t.json(&["dead-letters", "--json"]);
    assert_eq!(dl["total"], exp.malformed as u64);
    let first = &dl["dead_letters"][0];
    assert!(first["shard_id"].as_str().unwrap().starts_with("shardId-"));
    assert!(!first["sequence_number"].as_str().unwrap().is_empty());
    assert!(!first["reason"].as_str().unwrap().is_empty());

    // A second run finds nothing new: counts unchanged.
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());

    // Analytics over the same stream, with its own checkpoints.
    let a = t.json(&["analytics", "--until-idle", "--json"]);
    assert_eq!(a["records"], exp.lines as u64);
    let top = t.json(&["top", "--k", "5", "--json"]);
    assert!(
        top["applied_through"]["arrival_ms"].as_i64().unwrap() > 0,
        "{top}"
    );
    let top = top["trending"].as_array().unwrap();
    assert_eq!(top.len(), 5);
    let hot: Vec<&str> = top.iter().map(|e| e["post_id"].as_str().unwrap()).collect();
    for p in &hot {
        let n: usize = p.trim_start_matches("post-").parse().unwrap();
        assert!(n < 5, "the five skewed posts lead trending, got {hot:?}");
    }
    let lat = t.json(&["latency", "--json"]);
    assert_eq!(
        lat["creation_ms"]["count"],
        (exp.lines - exp.malformed - exp.duplicates) as u64
    );
    assert!(lat["windows"].as_u64().unwrap() >= 1);
    let leases = t.json(&["leases", "--json"]);
    assert_eq!(leases.as_array().unwrap().len(), shards);
    t.assert_read_as_configured();
}

#[test]
fn gzip_replay_and_record_round_trip() {
    let t = Target::embedded();
    let plain = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&plain, 500, 10, 3);
    let gz = file_in(&t, "likes.ndjson.gz");
    {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
        enc.finish().unwrap();
    }
    t.run(&["replay", gz.to_str().unwrap()]);
    // Record the stream to a file, replay it into a second store: the same counts.
    let rec = file_in(&t, "recorded.ndjson");
    let r = t.json(&["record", rec.to_str().unwrap(), "--json"]);
    assert_eq!(r["records"], exp.lines as u64);
    let t2 = Target::embedded();
    t2.run(&["replay", rec.to_str().unwrap()]);
    t2.run(&["count", "--until-idle"]);
    assert_eq!(t2.mismatches(&exp.counts), vec![]);

    // Teardown asks first, then deletes the store: reads then say there is none, and a fresh
    // one counts nothing.
    assert!(!t2.fail(&["teardown"], &[]).status.success());
    let gone = t2.run(&["teardown", "--yes"]);
    assert!(
        gone.contains("tally.db") && gone.contains("edges.db"),
        "{gone}"
    );
    let left: Vec<_> = std::fs::read_dir(t2.dir.path())
        .unwrap()
        .map(|f| f.unwrap().file_name())
        .filter(|f| f.to_string_lossy().ends_with(".db"))
        .collect();
    assert_eq!(
        left,
        Vec::<std::ffi::OsString>::new(),
        "teardown leaves no store file"
    );
    let err = t2.fail(&["total"], &[]);
    assert!(String::from_utf8_lossy(&err.stderr).contains("tally.db does not exist"));
    t2.run(&["setup"]);
    assert_eq!(t2.json(&["total", "--json"])["total"], 0);
}

#[test]
fn demo_reports_exact_counts() {
    let t = Target::embedded();
    let v = t.json(&[
        "demo", "--events", "5000", "--posts", "300", "--shards", "3", "--seed", "9", "--json",
    ]);
    assert_eq!(v["exact"], true, "{v}");
    assert_eq!(v["events"], 5000);
    assert_eq!(v["counted_total"], v["expected_total"]);
    assert_eq!(v["dead_letters"], v["malformed_injected"]);
    assert!(v["duplicates_injected"].as_u64().unwrap() > 0);
    let (writes, wcu) = (
        v["writes_per_event"].as_f64().unwrap(),
        v["dynamodb_wcu_per_event"].as_f64().unwrap(),
    );
    assert!(
        writes > 0.0 && wcu >= writes && wcu < 1.0,
        "each write costs at least a unit, and a like less than one UpdateItem: {writes} {wcu}"
    );
    assert_eq!(v["trending"].as_array().unwrap().len(), 10);
    assert!(v["latency_ms"]["max"].as_u64().unwrap() >= v["latency_ms"]["p50"].as_u64().unwrap());
}

#[test]
fn bad_configuration_names_the_key() {
    let t = Target::embedded();
    let out = t.fail(&["total"], &[("TALLY_COUNTER__WINDOW_RECORDS", "0")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("counter.window_records") && err.contains("between 1 and 100000"),
        "{err}"
    );

    let out = t.fail(&["total"], &[("TALLY_LEASE__JOIN_MS", "700000")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lease.join_ms") && err.contains("between 0 and 600000"),
        "{err}"
    );

    let out = t.fail(&["total"], &[("TALLY_LEASE__DURATION_MS", "soon")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("duration_ms"), "{err}");

    let cfg = file_in(&t, "tally.toml");
    std::fs::write(&cfg, "[counter]\nwindow_recrods = 10\n").unwrap();
    let out = t.fail(&["--config", cfg.to_str().unwrap(), "total"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("window_recrods"), "{err}");

    let out = t.fail(&["--config", "/nonexistent/tally.toml", "total"], &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));

    // A TALLY_ variable that is no setting is named; TALLY_LOG sets the log filter.
    let out = t.fail(&["total"], &[("TALLY_WINDOW_MS", "5")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TALLY_WINDOW_MS is not a tally setting") && err.contains("TALLY_COUNTER"),
        "{err}"
    );
    let log = |level: Option<&str>| {
        let mut c = t.cmd(&["count", "--until-idle"]);
        c.env_remove("RUST_LOG").env("NO_COLOR", "1");
        if let Some(l) = level {
            c.env("TALLY_LOG", l);
        }
        let out = crate::common::output(c);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        err
    };
    assert!(
        log(None).contains(" INFO "),
        "the counter logs at info by default"
    );
    assert!(
        !log(Some("warn")).contains(" INFO "),
        "TALLY_LOG=warn quiets it"
    );
}

/// The counter meters what its writes cost in DynamoDB write units, by purpose, by DynamoDB's
/// rules: `count --json` reports both likers stages' together, every window emits its own as EMF
/// (by app), and the two agree. Every window of either stage pays for its lease row twice
/// (pending, checkpoint); the stream's windows (app `counter`) write edges and no counts, the
/// change log's (app `changes`) the counts and no edges, each change the first logged counted
/// once by the second.
#[test]
fn write_units_are_metered_by_purpose() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let file = t.dir.path().join("likes.ndjson");
    let exp = crate::common::write_contract_file(&file, 3_000, 200, 17);
    t.run(&["replay", file.to_str().unwrap()]);
    let mut c = t.cmd(&["count", "--until-idle", "--json"]);
    c.env("TALLY_METRICS__EMF", "true")
        .env("TALLY_COUNTER__WINDOW_RECORDS", "500")
        .env("TALLY_COUNTER__POSTS_PER_BATCH", "50");
    let out = crate::common::output(c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let u = &v["write_units"];
    let windows = v["windows"].as_u64().unwrap();
    let changes = &v["changes"];
    let change_windows = changes["windows"].as_u64().unwrap();
    assert!(windows > 0 && change_windows > 0, "{v}");
    assert_eq!(u["checkpoints"], 2 * (windows + change_windows), "{v}");
    // Each of the change log's windows writes its global total and its posts' live items.
    assert!(u["counts"].as_u64().unwrap() >= 2 * change_windows, "{v}");
    // Counting likers: edges, no dedup records; a copy of an action met in a later window than
    // its original's is a refused edge write. Each change of an edge is logged once, and the
    // second stage counts each logged change once.
    assert!(
        u["buckets"].as_u64().unwrap() > 0 && u["edges"].as_u64().unwrap() > 0,
        "{v}"
    );
    let edges_changed = v["edges_changed"].as_u64().unwrap();
    assert!(edges_changed > 0, "{v}");
    assert_eq!(changes["records"], edges_changed, "{v}");
    assert!(u["edges"].as_u64().unwrap() >= edges_changed, "{v}");
    assert_eq!(u["dedup"], 0, "{v}");
    assert!(
        u["failed_conditions"].as_u64().unwrap() <= exp.duplicates as u64,
        "{v}"
    );
    assert!(
        u["leases"].as_u64().unwrap() >= 4,
        "two takes and two releases at least: {v}"
    );
    let log = String::from_utf8_lossy(&out.stderr);
    // What the windows of `app` (None: of both stages) emitted of `metric`.
    let emitted = |metric: &str, app: Option<&str>| -> u64 {
        log.lines()
            .filter(|l| l.starts_with('{'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| app.is_none_or(|a| e["App"] == a))
            .filter_map(|e| e.get(metric).and_then(|m| m.as_f64()))
            .sum::<f64>() as u64
    };
    for (part, metric) in [
        ("counts", "WriteUnitsCounts"),
        ("buckets", "WriteUnitsBuckets"),
        ("edges", "WriteUnitsEdges"),
        ("dead_letters", "WriteUnitsDeadLetters"),
        ("checkpoints", "WriteUnitsCheckpoints"),
    ] {
        assert_eq!(u[part], emitted(metric, None), "{part}: {v}");
    }
    // Each stage's own: the stream's windows write the edges (and the malformed records' dead
    // letters), the change log's the counts.
    assert_eq!(
        emitted("WriteUnitsCheckpoints", Some("counter")),
        2 * windows,
        "{v}"
    );
    assert_eq!(
        emitted("WriteUnitsCheckpoints", Some("changes")),
        2 * change_windows,
        "{v}"
    );
    assert_eq!(
        u["edges"],
        emitted("WriteUnitsEdges", Some("counter")),
        "{v}"
    );
    assert_eq!(emitted("WriteUnitsEdges", Some("changes")), 0, "{v}");
    assert_eq!(
        u["dead_letters"],
        emitted("WriteUnitsDeadLetters", Some("counter")),
        "{v}"
    );
    for metric in ["WriteUnitsCounts", "WriteUnitsBuckets"] {
        assert_eq!(emitted(metric, Some("counter")), 0, "{metric}: {v}");
    }
}

/// `demo --baselines` applies the demo's records the ways tally is measured against, on the same
/// backend. Counting events (`events_baselines`): one UpdateItem per like costs 1 unit a like and
/// is not exactly-once — producer retries count twice (the counterexample, run here) — and one
/// transaction per like with an idempotency item is exact at 4 units a like. Counting likers
/// (the default): the events' patterns count a double tap and an unlike of nothing, and the edge
/// pattern (an edge item put if absent or deleted if present, and the total, in one transaction)
/// re-likes on a retried like landing after its user's unlike — each run here as the
/// counterexample it is — while tally is exact.
fn baselines_side_by_side(t: Target) {
    let v = baselines(&t);
    assert_eq!(v["exact"], true, "{v}");
    let bl = &v["baselines"];
    let records = v["records"].as_u64().unwrap() - v["malformed_injected"].as_u64().unwrap();
    for pattern in [
        "update_per_like",
        "transaction_per_like",
        "edge_transaction_per_like",
    ] {
        let p = &bl[pattern];
        assert_eq!(p["calls"], records, "{pattern}: {v}");
        assert_eq!(p["exact"], false, "{pattern}: {v}");
        assert!(p["posts_wrong"].as_u64().unwrap() > 0, "{pattern}: {v}");
    }
}

fn events_baselines(t: Target) {
    let t = t.counting_events();
    let v = baselines(&t);
    assert_eq!(v["exact"], true, "{v}");
    let bl = &v["baselines"];
    let update = &bl["update_per_like"];
    let tx = &bl["transaction_per_like"];
    let records = v["records"].as_u64().unwrap() - v["malformed_injected"].as_u64().unwrap();
    assert_eq!(update["calls"], records, "{v}");
    assert_eq!(tx["calls"], records, "{v}");
    assert_eq!(update["exact"], false, "retries count twice: {v}");
    assert_eq!(tx["exact"], true, "{v}");
    assert_eq!(tx["refused_as_duplicates"], v["duplicates_injected"], "{v}");
    assert!(bl.get("edge_transaction_per_like").is_none(), "{v}");
}

fn baselines(t: &Target) -> serde_json::Value {
    t.json(&[
        "demo",
        "--events",
        "1500",
        "--posts",
        "200",
        "--shards",
        "2",
        "--seed",
        "5",
        "--duplicate-ratio",
        "0.05",
        "--baselines",
        "--json",
    ])
}

on_backends! {
    events_baselines {
        embedded => events_baselines(Target::embedded()),
    }
}

on_backends! {
    baselines_side_by_side {
        embedded => baselines_side_by_side(Target::embedded()),
        aws => {
            let kinesis =
                std::env::var("TEST_KINESIS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4568".into());
            let dynamodb =
                std::env::var("TEST_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into());
            baselines_side_by_side(Target::aws_at("baselines", &kinesis, &dynamodb));
        },
    }
}

/// A viral post, liked at 5,000 events a second (beyond one Kinesis shard's 1,000 records/s): the
/// producer fans its likes out over several partition keys chosen from the event id, so they
/// spread over the shards while a retry still lands beside its original — and the count is exact.
fn a_viral_post_fans_out_over_the_shards(t: Target, events: &str, rate: &str, shards: usize) {
    let cfg = file_in(&t, "hot.toml");
    std::fs::write(
        &cfg,
        "[producer]\nhot_posts = [\"p1\"]\nhot_post_keys = 8\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let truth = file_in(&t, "truth.json");
    t.run(&[
        "--config",
        cfg,
        "produce",
        "--events",
        events,
        "--posts",
        "1",
        "--duplicate-ratio",
        "0.05",
        "--rate",
        rate,
        "--truth",
        truth.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    assert!(v["duplicates"].as_u64().unwrap() > 0, "{v}");
    t.run(&["--config", cfg, "count", "--until-idle"]);
    assert_eq!(t.count("p1"), v["counts"]["p1"].as_i64().unwrap());
    assert_eq!(t.json(&["total", "--json"])["total"], v["total"]);
    let leases = t.json(&["leases", "--json"]);
    let progressed = leases
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["checkpoint"].is_string())
        .count();
    assert_eq!(
        progressed, shards,
        "one post's likes on every shard: {leases}"
    );
    t.assert_read_as_configured();
}

on_backends! {
    a_viral_post_fans_out_over_the_shards {
        embedded => a_viral_post_fans_out_over_the_shards(Target::embedded(), "20000", "5000", 4),
        aws => a_viral_post_fans_out_over_the_shards(Target::aws("viral", 2), "1500", "1000", 2),
        aws_efo => a_viral_post_fans_out_over_the_shards(Target::aws_efo("viral-efo", 2), "1500", "1000", 2),
    }
}

/// Analytics counts a producer retry once, across restarts, like the counter: replaying a file a
/// second time (every event a retry, within the dedup horizon) leaves trending and latency as
/// they were, although a new analytics process reads it.
fn analytics_counts_a_replayed_file_once(t: Target) {
    let file = crate::common::file_in(&t, "likes.ndjson");
    let exp = crate::common::write_contract_file(&file, 1_200, 30, 23);
    let distinct = (exp.lines - exp.malformed - exp.duplicates) as u64;
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["analytics", "--until-idle"]);
    let top = t.json(&["top", "--k", "5", "--json"]);
    let lat = t.json(&["latency", "--json"]);
    assert_eq!(lat["creation_ms"]["count"], distinct, "{lat}");
    // The same file again, read by a new analytics process.
    t.run(&["replay", file.to_str().unwrap()]);
    let again = t.json(&["analytics", "--until-idle", "--json"]);
    assert_eq!(again["records"], exp.lines as u64, "{again}");
    assert_eq!(
        again["likes"], 0,
        "every retried like is recognised: {again}"
    );
    assert_eq!(
        t.json(&["latency", "--json"])["creation_ms"]["count"],
        distinct
    );
    let after = t.json(&["top", "--k", "5", "--json"]);
    assert_eq!(after["trending"], top["trending"], "trending is unchanged");
    t.assert_read_as_configured();
}

on_backends! {
    analytics_counts_a_replayed_file_once {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            analytics_counts_a_replayed_file_once(t);
        },
        aws => analytics_counts_a_replayed_file_once(Target::aws("anadedup", 2)),
        aws_efo => analytics_counts_a_replayed_file_once(Target::aws_efo("anadedup-efo", 2)),
    }
}

/// A reading command into a closed pipe (`tally dead-letters | head -1`) ends quietly, as Unix
/// tools do (by SIGPIPE), not with a panic; logs into a pipe or file carry no colour codes.
#[test]
fn a_closed_pipe_ends_quietly_and_piped_logs_are_plain() {
    use std::io::Read;
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let file = file_in(&t, "bad.ndjson");
    std::fs::write(&file, "{bad\n".repeat(3_000)).unwrap();
    t.run(&["replay", file.to_str().unwrap()]);
    let mut c = t.cmd(&["count", "--until-idle"]);
    c.env_remove("NO_COLOR").env("RUST_LOG", "info");
    let out = crate::common::output(c);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "ANSI codes in piped logs: {log:?}");
    let mut c = t.cmd(&["dead-letters"]);
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close the pipe.
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(status.code(), Some(101), "{err}");
}

/// `counter.close_when_caught_up`: a window closes as soon as a read reaches the shard's tip, so
/// counts appear within a poll even with a ten-minute window — and stay exact (retries once,
/// malformed records dead-lettered).
fn counts_appear_at_the_tip(t: Target) {
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 1_500, 30, 21);
    let env = [
        ("TALLY_COUNTER__WINDOW_MS", "600000"),
        ("TALLY_COUNTER__CLOSE_WHEN_CAUGHT_UP", "true"),
    ];
    let mut w = t.spawn("tip", &["count", "--worker-id", "tip"], &env);
    t.run(&["replay", file.to_str().unwrap()]);
    t.eventually(
        "every count, long before the window's time",
        std::time::Duration::from_secs(60),
        &[&w],
        || t.json(&["total", "--json"])["total"] == exp.total(),
    );
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        exp.malformed as u64
    );
    // A second copy of the file: all retries, nothing changes.
    t.run(&["replay", file.to_str().unwrap()]);
    t.eventually(
        "the copy to be read",
        std::time::Duration::from_secs(60),
        &[&w],
        || {
            t.json(&["leases", "--json"])
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l["pending"].is_null())
        },
    );
    w.signal("TERM");
    assert!(w.wait(std::time::Duration::from_secs(60)).success());
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    t.assert_read_as_configured();
}

on_backends! {
    counts_appear_at_the_tip {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            counts_appear_at_the_tip(t);
        },
        aws => counts_appear_at_the_tip(Target::aws("tip", 2)),
        aws_efo => counts_appear_at_the_tip(Target::aws_efo("tip-efo", 2)),
    }
}
