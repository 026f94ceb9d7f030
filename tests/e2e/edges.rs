//! Exact at the edges: the ways a like could still be lost, counted twice or stalled, each with
//! the run that would show it, on both backends where the backend matters.
#![allow(clippy::unwrap_used)]

use std::io::Write;

use crate::common::{file_in, write_contract_file, write_likes, Target};

/// Ten likes around one malformed record of `size` bytes whose `action` is one huge string.
fn write_ten_likes_and_a_huge_bad_record(path: &std::path::Path, size: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    let now = crate::common::now_ms();
    for i in 0..10 {
        if i == 5 {
            let head = r#"{"event_id":"huge","post_id":"p-big","user_id":"u","action":""#;
            let tail = r#"","created_at":1}"#;
            let filler = "x".repeat(size - head.len() - tail.len());
            writeln!(f, "{head}{filler}{tail}").unwrap();
        }
        writeln!(
            f,
            r#"{{"event_id":"ten-{i}","post_id":"p-big","user_id":"u{i}","action":"like","created_at":{now}}}"#
        )
        .unwrap();
    }
}

/// A malformed record far above DynamoDB's 400 KB item limit is dead-lettered within it (reason
/// and payload cut, the original size recorded), and the good likes of its window are counted.
fn an_oversized_bad_record_never_stalls_its_shard(t: Target, size: usize) {
    let file = file_in(&t, "huge.ndjson");
    write_ten_likes_and_a_huge_bad_record(&file, size);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.count("p-big"), 10);
    assert_eq!(t.json(&["total", "--json"])["total"], 10);
    let dl = t.json(&["dead-letters", "--json"]);
    assert_eq!(dl["total"], 1, "{dl}");
    let d = &dl["dead_letters"][0];
    assert_eq!(d["size"], size as u64, "{d}");
    assert_eq!(d["data_truncated"], true, "{d}");
    assert!(d["reason"].as_str().unwrap().len() <= 512, "{d}");
    assert!(d["reason"].as_str().unwrap().contains("`action`"), "{d}");
    assert!(d["sequence_number"].as_str().is_some_and(|s| !s.is_empty()));
    t.assert_read_as_configured();
}

on_backends! {
    an_oversized_bad_record_never_stalls_its_shard {
        embedded => an_oversized_bad_record_never_stalls_its_shard(Target::embedded(), 1_000_000),
        aws => {
            // 450 KB, as reproduced; and Kinesis' default largest record, 1 MiB with its partition key.
            an_oversized_bad_record_never_stalls_its_shard(Target::aws("huge", 1), 450 * 1024);
            an_oversized_bad_record_never_stalls_its_shard(Target::aws("huge1m", 1), 1_000_000);
        },
        aws_efo => {
            // A 1 MB record arrives inside one SubscribeToShard event.
            an_oversized_bad_record_never_stalls_its_shard(Target::aws_efo("huge1m-efo", 1), 1_000_000);
        },
    }
}

/// The embedded stream refuses a record Kinesis would refuse (over 1 MiB with its key), with
/// Kinesis' error, and puts nothing of that batch.
#[test]
fn the_embedded_stream_refuses_what_kinesis_refuses() {
    let t = Target::embedded();
    let file = file_in(&t, "too-big.ndjson");
    write_ten_likes_and_a_huge_bad_record(&file, 2 << 20);
    let out = t.fail(&["replay", file.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Member must have length less than or equal to 1048576"),
        "{err}"
    );
    t.run(&["count", "--until-idle"]);
    assert_eq!(
        t.json(&["total", "--json"])["total"],
        0,
        "nothing of the batch was put"
    );
}

/// Three generations of shards, each split once its predecessors finished: a shard whose records
/// were all applied is never given a lease row again, so never re-read from its oldest record,
/// however many reshards later and however long ago its own row was cleaned up.
fn a_long_finished_parent_is_never_read_again(
    t: Target,
    split: &dyn Fn(&Target, &str) -> Vec<String>,
) {
    // Rows are cleaned up at once, and once the children's arrival clocks are a second past.
    let grace = [
        ("TALLY_LEASE__FINISHED_GRACE_SECS", "0"),
        ("TALLY_COUNTER__DEDUP_HORIZON_SECS", "1"),
    ];
    let count = |t: &Target| {
        let v = t.json_env(&["count", "--until-idle", "--json"], &grace);
        v["records"].as_u64().unwrap()
    };
    let shard_ids = |t: &Target| -> Vec<String> {
        t.json(&["leases", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["shard_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut total = 0;
    let mut counts = std::collections::BTreeMap::new();
    let mut produce = |t: &Target, n: usize, seed: u64| {
        let f = file_in(t, &format!("gen-{seed}.ndjson"));
        let exp = write_contract_file(&f, n, 40, seed);
        t.run(&["replay", f.to_str().unwrap()]);
        // The next generation's records arrive more than the horizon later.
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        total += exp.total();
        for (p, c) in exp.counts {
            *counts.entry(p).or_insert(0) += c;
        }
        exp.lines as u64
    };

    let root = ["shardId-000000000000".to_owned()];
    let lines = produce(&t, 600, 71);
    assert_eq!(count(&t), lines);
    let gen1 = split(&t, &root[0]);
    let lines = produce(&t, 600, 72);
    assert_eq!(
        count(&t),
        lines,
        "the second generation reads only its own records"
    );
    let mut gen2 = Vec::new();
    for c in &gen1 {
        gen2.extend(split(&t, c));
    }
    let lines = produce(&t, 600, 73);
    assert_eq!(
        count(&t),
        lines,
        "the third generation reads only its own records"
    );
    // Once the grandchildren progressed, every ancestor's row is gone — and stays gone.
    assert_eq!(count(&t), 0, "nothing is read again");
    assert_eq!(count(&t), 0, "nothing is read again");
    let ids = shard_ids(&t);
    for gone in root.iter().chain(&gen1) {
        assert!(!ids.contains(gone), "{gone} has a lease row again: {ids:?}");
    }
    assert_eq!(t.json(&["total", "--json"])["total"], total);
    assert_eq!(t.mismatches(&counts), vec![]);
}

fn split_embedded(t: &Target, shard: &str) -> Vec<String> {
    let out = t.run(&["reshard", "--split", shard]);
    // "split <parent> into <a> and <b>"
    out.split_whitespace()
        .filter(|w| w.starts_with("shardId-") && *w != shard)
        .map(|w| w.trim_end_matches([',', '.']).to_owned())
        .collect()
}

on_backends! {
    a_long_finished_parent_is_never_read_again {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "1"]);
            a_long_finished_parent_is_never_read_again(t, &split_embedded);
        },
        aws => a_long_finished_parent_is_never_read_again(Target::aws("generations", 1), &split_embedded),
    }
}

/// Events put again after the stream was resharded twice (every one a producer retry, now routed
/// to a grandchild of the shard the original went to) count once: a shard's duplicate filter
/// holds its ancestors' recent ids, not only its parents'.
fn a_retry_two_reshards_later_counts_once(t: Target) {
    // The duplicate filter is the events mode's (likers need none).
    let t = t.counting_events();
    let file = file_in(&t, "retried.ndjson");
    let exp = write_contract_file(&file, 800, 30, 81);
    t.run(&["replay", file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let root = "shardId-000000000000";
    let mut grandchildren = Vec::new();
    for child in split_embedded(&t, root) {
        grandchildren.extend(split_embedded(&t, &child));
    }
    assert_eq!(grandchildren.len(), 4, "{grandchildren:?}");
    t.run(&["replay", file.to_str().unwrap()]);
    let v = t.json(&["count", "--until-idle", "--json"]);
    assert_eq!(v["counted"], 0, "every event was counted before: {v}");
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    t.assert_read_as_configured();
}

on_backends! {
    a_retry_two_reshards_later_counts_once {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "1"]);
            a_retry_two_reshards_later_counts_once(t);
        },
        aws => a_retry_two_reshards_later_counts_once(Target::aws("retry2", 1)),
        aws_efo => a_retry_two_reshards_later_counts_once(Target::aws_efo("retry2-efo", 1)),
    }
}

/// The ids each shard's duplicate filter was restored with, from the counter's log.
fn restored_ids(log: &str, shard: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("dedup filter restored") && l.contains(&format!("shard_id={shard}")))
        .filter_map(|l| {
            let v = l.split("ids=").nth(1)?;
            v.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// A new child restores only the ids its parent saw within the horizon of the parent's last
/// record, not the parent's whole history (which, for a parent that took 1,000 records a second
/// for a day, would be ~90 M ids).
fn a_child_restores_only_what_the_horizon_needs(t: Target) {
    // The duplicate filter is the events mode's (likers need none).
    let t = t.counting_events();
    let env = [("TALLY_COUNTER__DEDUP_HORIZON_SECS", "1")];
    let old = file_in(&t, "old.ndjson");
    let old_exp = write_contract_file(&old, 500, 20, 91);
    t.run(&["replay", old.to_str().unwrap()]);
    t.run_env(&["count", "--until-idle"], &env);
    // The parent's last records arrive well past the horizon after its first ones.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let recent = file_in(&t, "recent.ndjson");
    let recent_exp = write_contract_file(&recent, 120, 20, 92);
    t.run(&["replay", recent.to_str().unwrap()]);
    t.run_env(&["count", "--until-idle"], &env);
    let children = split_embedded(&t, "shardId-000000000000");
    let mut c = t.cmd(&["count", "--until-idle"]);
    c.env("RUST_LOG", "tally_consumer=info")
        .env("NO_COLOR", "1")
        .env("TALLY_COUNTER__DEDUP_HORIZON_SECS", "1");
    let out = crate::common::output(c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let recent_ids = (recent_exp.lines - recent_exp.malformed - recent_exp.duplicates) as u64;
    for child in &children {
        let ids = restored_ids(&log, child);
        assert_eq!(
            ids,
            vec![recent_ids],
            "{child} restores only the parent's last {recent_ids} ids:\n{log}"
        );
    }
    let mut counts = old_exp.counts.clone();
    for (p, n) in recent_exp.counts {
        *counts.entry(p).or_insert(0) += n;
    }
    assert_eq!(t.mismatches(&counts), vec![]);
}

on_backends! {
    a_child_restores_only_what_the_horizon_needs {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "1"]);
            a_child_restores_only_what_the_horizon_needs(t);
        },
        aws => a_child_restores_only_what_the_horizon_needs(Target::aws("horizon", 1)),
    }
}

/// The counter's dedup records for `shard` in the target's store, read through the port: those a
/// restore at the shard's checkpoint selects (within the horizon of its clock), and all stored.
fn stored_dedup_records(t: &Target, shard: &str, horizon_ms: i64) -> (usize, usize) {
    use tally_core::ports::{DedupStore, LeaseReader};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let shards = [shard.to_owned()];
    rt.block_on(async {
        if t.is_aws() {
            let aws = tally_aws::Aws::connect(&t.aws_settings()).await.unwrap();
            let clock = aws
                .tables
                .shard_state("counter", shard)
                .await
                .unwrap()
                .lease
                .max_arrival;
            let all = aws
                .tables
                .load_dedup("counter", &shards, i64::MIN)
                .await
                .unwrap();
            let live = aws
                .tables
                .load_dedup("counter", &shards, clock - horizon_ms)
                .await
                .unwrap();
            (live.len(), all.len())
        } else {
            let e = tally_embedded::Embedded::open(t.dir.path(), 1).unwrap();
            let clock = e
                .shard_state("counter", shard)
                .await
                .unwrap()
                .lease
                .max_arrival;
            let all = e.load_dedup("counter", &shards, i64::MIN).await.unwrap();
            let live = e
                .load_dedup("counter", &shards, clock - horizon_ms)
                .await
                .unwrap();
            (live.len(), all.len())
        }
    })
}

/// Dedup records leave a restore's reach as the shard's arrival clock passes their horizon (not
/// after a wall-clock time): after a second batch that arrives more than the horizon after the
/// first, a restore selects only the second batch's records. The embedded store deletes the
/// others; on DynamoDB their TTL does (for nothing), so they are still stored.
fn dedup_records_expire_as_the_arrival_clock_moves(t: Target) {
    // The duplicate filter is the events mode's (likers need none).
    let t = t.counting_events();
    let env = [("TALLY_COUNTER__DEDUP_HORIZON_SECS", "1")];
    let mut last_windows = 0;
    for seed in [93, 94] {
        let f = file_in(&t, &format!("batch-{seed}.ndjson"));
        write_contract_file(&f, 200, 10, seed);
        t.run(&["replay", f.to_str().unwrap()]);
        let v = t.json_env(&["count", "--until-idle", "--json"], &env);
        last_windows = v["windows"].as_u64().unwrap() as usize;
        std::thread::sleep(std::time::Duration::from_millis(2_500));
    }
    // One PutRecords batch: the second batch's records arrive within the horizon of each other.
    assert!(last_windows >= 1);
    let (restorable, stored) = stored_dedup_records(&t, "shardId-000000000000", 1_000);
    assert_eq!(
        restorable, last_windows,
        "only the last batch's windows are still within the horizon"
    );
    if t.is_aws() {
        assert!(stored > restorable, "DynamoDB leaves them to their TTL");
    } else {
        assert_eq!(stored, restorable, "the embedded store deletes them");
    }
}

on_backends! {
    dedup_records_expire_as_the_arrival_clock_moves {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "1"]);
            dedup_records_expire_as_the_arrival_clock_moves(t);
        },
        aws => dedup_records_expire_as_the_arrival_clock_moves(Target::aws("expiry", 1)),
    }
}

/// The dead letters that record gaps.
fn gaps(t: &Target) -> Vec<serde_json::Value> {
    t.json(&["dead-letters", "--json", "--limit", "100000"])["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"].as_str().unwrap().starts_with("gap:"))
        .cloned()
        .collect()
}

const SMALL_WINDOWS: &[(&str, &str)] = &[
    ("TALLY_COUNTER__WINDOW_RECORDS", "150"),
    ("TALLY_COUNTER__POSTS_PER_BATCH", "3"),
];

/// The stream's retention trims the rest of a half-applied window before a restarted counter can
/// rebuild it: the window is given up on record (a `gap:` dead letter with its sequence range),
/// and the shard goes on — later likes exact — instead of stalling for ever.
#[test]
fn a_trimmed_pending_window_is_recorded_as_a_gap_and_the_shard_goes_on() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let old = file_in(&t, "old.ndjson");
    write_contract_file(&old, 2_000, 80, 8);
    t.run(&["replay", old.to_str().unwrap()]);
    let mut env = SMALL_WINDOWS.to_vec();
    env.push(("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "2"));
    t.fail(&["count", "--until-idle"], &env);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let new = file_in(&t, "new.ndjson");
    let expected = write_likes(&new, "fresh", 300);
    t.run(&["replay", new.to_str().unwrap()]);
    let trimmed = t.run(&["trim", "--older-than", "1s", "--yes"]);
    assert!(trimmed.starts_with("trimmed 2"), "{trimmed}");
    let mut c = t.cmd(&["count", "--until-idle"]);
    c.envs(SMALL_WINDOWS.iter().copied())
        .env("TALLY_METRICS__EMF", "true");
    let out = crate::common::output(c);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // The gap is a metric the Terraform alarms watch, not only a log line.
    assert!(
        log.lines()
            .any(|l| l.contains(r#""Gaps":1"#) && l.contains("_aws")),
        "{log}"
    );
    assert_eq!(t.mismatches(&expected), vec![]);
    let g = gaps(&t);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0]["shard_id"], "shardId-000000000000");
    let reason = g[0]["reason"].as_str().unwrap();
    // Counting likers, the edges the window wrote before it was given up stay written, and the
    // second stage counts them from their change log like any other: every like stored is
    // counted, no more.
    assert!(
        reason.contains("retention")
            && reason.contains("edges it had written stay written")
            && reason.contains("counted from their change log"),
        "{reason}"
    );
    let mut liked = 0;
    for part in tally_embedded::edge_files(t.dir.path()).unwrap() {
        let c = rusqlite::Connection::open(&part).unwrap();
        liked += c
            .query_row("SELECT COUNT(*) FROM edges WHERE liked = 1", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap();
    }
    let fresh: i64 = expected.values().sum();
    assert!(
        liked > fresh,
        "the old likes written before the trim are stored: {liked}"
    );
    assert_eq!(t.json(&["total", "--json"])["total"], liked);
    // Counting again reads nothing more and records no new gap.
    let v = t.json(&["count", "--until-idle", "--json"]);
    assert_eq!(v["records"], 0, "{v}");
    assert_eq!(gaps(&t).len(), 1);
}

/// A parent shard falls past the stream's retention before it was read to its end: it is
/// finished on record (a `gap:` dead letter) and its children are counted, instead of the
/// children waiting for ever on a parent the stream no longer has.
#[test]
fn a_parent_gone_past_retention_is_recorded_as_a_gap_and_its_children_go_on() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let a1 = file_in(&t, "a1.ndjson");
    let counted = write_likes(&a1, "a1", 200);
    t.run(&["replay", a1.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let a2 = file_in(&t, "a2.ndjson");
    let lost = write_likes(&a2, "a2", 200);
    t.run(&["replay", a2.to_str().unwrap()]);
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let children = split_embedded(&t, "shardId-000000000000");
    let b = file_in(&t, "b.ndjson");
    let later = write_likes(&b, "b", 300);
    t.run(&["replay", b.to_str().unwrap()]);
    let trimmed = t.run(&["trim", "--older-than", "1s", "--yes"]);
    assert!(trimmed.contains("dropped 1 "), "{trimmed}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.mismatches(&counted), vec![]);
    assert_eq!(t.mismatches(&later), vec![]);
    let zero: std::collections::BTreeMap<String, i64> =
        lost.keys().map(|p| (p.clone(), 0)).collect();
    assert_eq!(
        t.mismatches(&zero),
        vec![],
        "a2 was trimmed before it was read"
    );
    let g = gaps(&t);
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0]["shard_id"], "shardId-000000000000");
    assert!(
        g[0]["reason"]
            .as_str()
            .unwrap()
            .contains("gone from the stream"),
        "{g:?}"
    );
    let leases = t.json(&["leases", "--json"]);
    for c in &children {
        assert!(
            leases
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["shard_id"] == c.as_str() && l["checkpoint"].is_string()),
            "{c} was counted: {leases}"
        );
    }
}

/// The rest of a half-applied window was trimmed and nothing came after it: the counter reaches
/// the shard's tip without meeting the window's end, records the gap after a few reads there, and
/// `--until-idle` ends (it does not take a shard that waits for a window's end as idle).
#[test]
fn a_trimmed_pending_window_at_the_tip_is_recorded_as_a_gap() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let old = file_in(&t, "old.ndjson");
    write_contract_file(&old, 1_000, 80, 9);
    t.run(&["replay", old.to_str().unwrap()]);
    let mut env = SMALL_WINDOWS.to_vec();
    env.push(("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "2"));
    t.fail(&["count", "--until-idle"], &env);
    let trimmed = t.run(&["trim", "--older-than", "0s", "--yes"]);
    assert!(trimmed.starts_with("trimmed 10"), "{trimmed}");
    t.run_env(&["count", "--until-idle"], SMALL_WINDOWS);
    let g = gaps(&t);
    assert_eq!(g.len(), 1, "{g:?}");
    let leases = t.json(&["leases", "--json"]);
    assert!(leases[0]["pending"].is_null(), "{leases}");
}

/// `created_at` at the bounds of the contract: the last millisecond of year 9999 is counted and
/// found by "since T"; a millisecond later is dead-lettered with the valid range in its reason
/// (its hour and day keys would have five-digit years, which sort below every other and drop out
/// of "since T").
fn created_at_is_counted_up_to_year_9999_and_dead_lettered_past_it(t: Target) {
    // Counted at its own time, however far ahead: the events mode's rule (likers take a clock
    // far past the arrival as the arrival, tests/e2e/likers.rs).
    let t = t.counting_events();
    let path = file_in(&t, "bounds.ndjson");
    let now = crate::common::now_ms();
    let last = 253_402_300_799_999_i64;
    let mut f = std::fs::File::create(&path).unwrap();
    for (i, at) in [now, last, last + 1, 0].iter().enumerate() {
        writeln!(
            f,
            r#"{{"event_id":"b{i}","post_id":"pbound","user_id":"u","action":"like","created_at":{at}}}"#
        )
        .unwrap();
    }
    drop(f);
    t.run(&["replay", path.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let q = t.query_one(&["query", "pbound", "--since", "1h", "--json"]);
    assert_eq!(q["count"], 3, "{q}");
    assert_eq!(q["count_since"], 2, "now and year 9999: {q}");
    let dead = t.json(&["dead-letters", "--json"]);
    let letters = dead["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{dead}");
    let reason = letters[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("created_at") && reason.contains("9999-12-31T23:59:59.999Z"),
        "{reason}"
    );
    assert_eq!(t.json(&["total", "--json"])["total"], 3);
}

on_backends! {
    created_at_is_counted_up_to_year_9999_and_dead_lettered_past_it {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "1"]);
            created_at_is_counted_up_to_year_9999_and_dead_lettered_past_it(t);
        },
        aws => created_at_is_counted_up_to_year_9999_and_dead_lettered_past_it(Target::aws("bounds", 1)),
    }
}
