//! Records aggregated by the Kinesis Producer Library's format, written by AWS's own aggregator
//! (PyPI aws-kinesis-agg, through scripts/kpl-aggregate.sh), not by tally: the counter and
//! analytics count every user record exactly once — across producer retries inside and between
//! aggregates, windows and checkpoints that end inside an aggregate, a crash while applying such
//! a window, and a second run — and a corrupt aggregate is dead-lettered whole without blocking
//! its shard.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;

use crate::common::{file_in, write_contract_file, Target};
use base64::Engine;
use tally_core::ports::{PutEntry, PutOutcome, Stream};

/// The target's stream, opened through the same adapter tally uses.
fn stream(t: &Target, rt: &tokio::runtime::Runtime) -> Arc<dyn Stream> {
    if t.is_aws() {
        let aws = rt
            .block_on(tally_aws::Aws::connect(&t.aws_settings()))
            .unwrap();
        Arc::new(aws.stream)
    } else {
        Arc::new(tally_embedded::Embedded::open(t.dir.path(), 2).unwrap())
    }
}

/// `lines` aggregated by aws-kinesis-agg, `per` user records per Kinesis record.
fn aggregate(lines: &[u8], per: usize) -> Vec<PutEntry> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kpl-aggregate.sh");
    let mut child = std::process::Command::new(script)
        .arg(per.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Written from another thread: the aggregator prints while it reads.
    let mut stdin = child.stdin.take().unwrap();
    let input = lines.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "the aggregator failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (key, b64) = l.split_once('\t').unwrap();
            let data = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            assert_eq!(&data[..4], &tally_core::kpl::MAGIC, "an aggregate");
            PutEntry {
                partition_key: key.to_owned(),
                data,
            }
        })
        .collect()
}

fn put(stream: &dyn Stream, rt: &tokio::runtime::Runtime, entries: &[PutEntry]) {
    for chunk in entries.chunks(100) {
        let out = rt.block_on(stream.put_records(chunk)).unwrap();
        assert!(out.iter().all(|o| matches!(o, PutOutcome::Ok { .. })));
    }
}

fn aggregated_records_count_exactly(t: Target) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, 2_000, 40, 77);
    let lines = std::fs::read(&file).unwrap();
    let mut entries = aggregate(&lines, 25);
    assert!(entries.len() >= 2_000 / 25, "{} aggregates", entries.len());
    assert!(
        entries.len() < 2_000 / 2,
        "most records hold several user records"
    );
    // A producer retry of whole aggregates: every user record in them is a duplicate.
    let retried: Vec<PutEntry> = entries[..5].to_vec();
    entries.extend(retried);
    // A corrupt aggregate (one byte flipped: its MD5 no longer matches), of events that are in
    // no expected count: dead-lettered whole.
    let lost = b"{\"event_id\":\"lost-1\",\"post_id\":\"lost\",\"user_id\":\"u\",\"action\":\"like\",\"created_at\":1}\n";
    let mut corrupt = aggregate(lost, 10).remove(0);
    let mid = corrupt.data.len() / 2;
    corrupt.data[mid] ^= 0x55;
    entries.insert(entries.len() / 2, corrupt);
    let s = stream(&t, &rt);
    put(s.as_ref(), &rt, &entries);

    // Windows of 40 user records over aggregates of 25: a shard's first four windows end inside
    // an aggregate (user record 15 of the second, 5 of the fourth, …), and so do their
    // checkpoints. The counter dies after its fifth batch of writes (a window's edges and its
    // posts are a batch each: both shards' first windows are done by then), in the middle of
    // applying a window that ends inside an aggregate; the next run rebuilds that window to the
    // same user record, then goes on from the next one. No time-closed windows (they would end
    // at whole records): only the size decides here.
    let windows = [
        ("TALLY_COUNTER__WINDOW_RECORDS", "40"),
        ("TALLY_COUNTER__WINDOW_MS", "600000"),
    ];
    let out = crate::common::output({
        let mut c = t.cmd(&["count", "--until-idle"]);
        c.envs(windows)
            .env("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "5");
        c
    });
    assert!(!out.status.success(), "the failpoint ends the first run");
    let leases = t.json(&["leases", "--json"]);
    let rows = leases.as_array().unwrap();
    let inside = |v: &serde_json::Value| v.as_str().is_some_and(|s| s.contains(':'));
    assert!(
        rows.iter().any(|l| inside(&l["pending"]["end"])),
        "the crash left a window pending that ends inside an aggregate: {leases}"
    );
    assert!(
        rows.iter().any(|l| inside(&l["checkpoint"])),
        "a checkpoint inside an aggregate: {leases}"
    );
    let v = t.json_env(&["count", "--until-idle", "--json"], &windows);
    assert!(v["records"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(t.count("lost"), 0);
    // Every malformed user record is dead-lettered at its own place (sequence and sub-sequence
    // number), the corrupt aggregate whole: as many as the aggregates put hold.
    let malformed_users: usize = entries
        .iter()
        .filter_map(|e| match tally_core::kpl::user_records(&e.data) {
            Ok(tally_core::kpl::UserRecords::Aggregated(users)) => Some(users),
            _ => None,
        })
        .flatten()
        .filter(|u| {
            crate::common::MALFORMED_LINES
                .iter()
                .any(|m| m.as_bytes() == u.as_slice())
        })
        .count();
    assert!(
        malformed_users > exp.malformed,
        "retried aggregates hold some too"
    );
    let dl = t.json(&["dead-letters", "--json", "--limit", "1000"]);
    let dead = dl["dead_letters"].as_array().unwrap();
    assert_eq!(dead.len(), malformed_users + 1, "{dl}");
    let reasons: Vec<&str> = dead.iter().map(|d| d["reason"].as_str().unwrap()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("KPL aggregate: MD5")),
        "{reasons:?}"
    );
    for d in dead {
        let in_aggregate = d["reason"]
            .as_str()
            .unwrap()
            .starts_with("KPL user record ");
        assert_eq!(d["sub_sequence_number"].is_u64(), in_aggregate, "{d}");
    }
    // A second run finds nothing new.
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());

    // Analytics sees each distinct event once.
    t.run(&["analytics", "--until-idle"]);
    let lat = t.json(&["latency", "--json"]);
    assert_eq!(
        lat["creation_ms"]["count"],
        (exp.lines - exp.malformed - exp.duplicates) as u64,
        "{lat}"
    );
    t.assert_read_as_configured();
}

on_backends! {
    aggregated_records_count_exactly {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            aggregated_records_count_exactly(t);
        },
        aws => aggregated_records_count_exactly(Target::aws("kpl", 2)),
        aws_efo => aggregated_records_count_exactly(Target::aws_efo("kpl-efo", 2)),
    }
}

/// Windows of 40 user records over aggregates of 25, written a few posts per store call: the
/// counter SIGKILLed at six moments (two workers in turn, leases moving between them), then run
/// to the end — every count exact, each malformed user record dead-lettered once, wherever the
/// kills fell (inside windows that end inside aggregates, between their writes).
fn sigkill_inside_aggregates_keeps_counts_exact(t: Target, events: usize, slower: u64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let file = file_in(&t, "likes.ndjson");
    let exp = write_contract_file(&file, events, 60, 31);
    let entries = aggregate(&std::fs::read(&file).unwrap(), 25);
    put(stream(&t, &rt).as_ref(), &rt, &entries);
    let env = [
        ("TALLY_COUNTER__WINDOW_RECORDS", "40"),
        ("TALLY_COUNTER__WINDOW_MS", "600000"),
        ("TALLY_COUNTER__POSTS_PER_BATCH", "3"),
        ("TALLY_LEASE__DURATION_MS", "1000"),
        ("TALLY_LEASE__RENEW_MS", "200"),
        ("TALLY_LEASE__POLL_MS", "100"),
    ];
    let killed = crate::common::count_killed_at(&t, &[150, 330, 110, 470, 240, 620], slower, &env);
    assert!(
        killed >= 3,
        "the kills must land while the counter runs (killed {killed})"
    );
    t.run_env(&["count", "--until-idle", "--worker-id", "final"], &env);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        exp.malformed as u64
    );
    t.assert_read_as_configured();
}

on_backends! {
    sigkill_inside_aggregates_keeps_counts_exact {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            sigkill_inside_aggregates_keeps_counts_exact(t, 40_000, 1);
        },
        aws => sigkill_inside_aggregates_keeps_counts_exact(Target::aws("kpl-kill", 2), 6_000, 4),
    }
}
