//! Where records leave the stream (a retention, `tally trim`): every record lost before an app
//! applied it is on record as a gap, no shard id is ever given twice, and what is still there is
//! counted exactly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;

use crate::common::{file_in, write_likes, Target};

fn replay(t: &Target, name: &str, prefix: &str, n: usize) -> BTreeMap<String, i64> {
    let path = file_in(t, name);
    let counts = write_likes(&path, prefix, n);
    t.run(&["replay", path.to_str().unwrap()]);
    counts
}

/// Splits an embedded shard; its children's ids.
fn split(t: &Target, shard: &str) -> Vec<String> {
    let out = t.run(&["reshard", "--split", shard]);
    out.split_whitespace()
        .filter(|w| w.starts_with("shardId-") && *w != shard)
        .map(|w| w.trim_end_matches([',', '.']).to_owned())
        .collect()
}

fn shard(i: usize) -> String {
    format!("shardId-{i:012}")
}

/// Every dead letter, as `dead-letters --json` lists them.
fn dead_letters(t: &Target) -> Vec<serde_json::Value> {
    t.json(&["dead-letters", "--json", "--limit", "100000"])["dead_letters"]
        .as_array()
        .unwrap()
        .clone()
}

fn gaps(t: &Target) -> Vec<serde_json::Value> {
    dead_letters(t)
        .into_iter()
        .filter(|d| d["reason"].as_str().unwrap().starts_with("gap:"))
        .collect()
}

/// Split, counted, trimmed away and split again: the new children get ids no shard ever had, so
/// they are read (an id given twice inherited a finished lease row, and its likes were never
/// counted).
#[test]
fn a_shard_id_is_never_given_twice_after_trim() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    for s in [0, 1, 2, 3, 7, 8] {
        split(&t, &shard(s));
    }
    t.run(&["count", "--until-idle"]);
    let trimmed = t.run(&["trim", "--older-than", "1ms"]);
    assert!(trimmed.contains("dropped 6 "), "{trimmed}");
    let children = split(&t, &shard(4));
    assert_eq!(children, [shard(13), shard(14)]);
    let expected = replay(&t, "likes.ndjson", "a", 2_000);
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.json(&["total", "--json"])["total"], 2_000);
    assert_eq!(t.mismatches(&expected), vec![]);
}

/// A gap that starts at a checkpoint whose record was malformed keeps its own letter beside that
/// record's: two letters, the lost likes on record (a gap keyed at the checkpoint used to be
/// dropped, or to overwrite the malformed record's letter).
#[test]
fn a_gap_at_a_malformed_record_keeps_both_letters() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "1"]);
    let path = file_in(&t, "first.ndjson");
    let counted = write_likes(&path, "a", 10);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{not json\n")
        .unwrap();
    t.run(&["replay", path.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let lost = replay(&t, "lost.ndjson", "b", 5);
    split(&t, &shard(0));
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let trimmed = t.run(&["trim", "--older-than", "1s", "--yes"]);
    assert!(trimmed.contains("dropped 1 "), "{trimmed}");
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.mismatches(&counted), vec![]);
    let zero: BTreeMap<String, i64> = lost.keys().map(|p| (p.clone(), 0)).collect();
    assert_eq!(t.mismatches(&zero), vec![]);
    let letters = dead_letters(&t);
    assert_eq!(letters.len(), 2, "{letters:?}");
    let malformed = &letters[0];
    assert!(malformed["gap"].is_null(), "{malformed}");
    assert!(malformed["reason"]
        .as_str()
        .unwrap()
        .starts_with("not a JSON object"));
    let gap = &letters[1];
    assert_eq!(gap["gap"]["app"], "counter", "{gap}");
    assert!(gap["gap"]["through"].is_null(), "to the shard's end: {gap}");
    assert_eq!(
        gap["sequence_number"], malformed["sequence_number"],
        "the gap starts right after the malformed record, the checkpoint: {letters:?}"
    );
}

/// A window pending after a crash whose first records were trimmed (its last ones are still
/// there) is given up on record, not applied as if what is left were the whole window.
#[test]
fn a_pending_window_whose_head_was_trimmed_is_a_gap_not_a_short_count() {
    // Counting events: a post's count is its likes, written one post per batch, so the crash
    // lands between two posts' writes (the pipeline is the same counting likers).
    let t = Target::embedded().counting_events();
    t.run(&["setup", "--shards", "1"]);
    let head = file_in(&t, "head.ndjson");
    let mut f = std::fs::File::create(&head).unwrap();
    let now = crate::common::now_ms();
    let line = |f: &mut std::fs::File, id: &str, post: &str| {
        writeln!(
            f,
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"u","action":"like","created_at":{now}}}"#
        )
        .unwrap();
    };
    for i in 0..10 {
        line(&mut f, &format!("ha{i}"), "pA");
        line(&mut f, &format!("hb{i}"), "pB");
    }
    drop(f);
    t.run(&["replay", head.to_str().unwrap()]);
    std::thread::sleep(std::time::Duration::from_secs(6));
    let tail = file_in(&t, "tail.ndjson");
    let mut f = std::fs::File::create(&tail).unwrap();
    for i in 0..5 {
        line(&mut f, &format!("ta{i}"), "pA");
        line(&mut f, &format!("tb{i}"), "pB");
    }
    drop(f);
    t.run(&["replay", tail.to_str().unwrap()]);
    // One window of all 30 records; the process dies after writing pA, with pB still to go.
    let window: &[(&str, &str)] = &[
        ("TALLY_COUNTER__WINDOW_RECORDS", "30"),
        ("TALLY_COUNTER__WINDOW_MS", "60000"),
        ("TALLY_COUNTER__POSTS_PER_BATCH", "1"),
    ];
    let mut crash = window.to_vec();
    crash.push(("TALLY_FAILPOINT_CRASH_AFTER_BATCHES", "1"));
    t.fail(&["count", "--until-idle"], &crash);
    let leases = t.json(&["leases", "--json"]);
    let pending = &leases[0]["pending"];
    assert!(
        pending["end"].is_string() && pending["first"].is_string(),
        "{leases}"
    );
    assert_eq!(t.count("pA"), 15, "pA was written before the crash");
    let trimmed = t.run(&["trim", "--older-than", "4s", "--yes"]);
    assert!(trimmed.starts_with("trimmed 20 "), "{trimmed}");
    t.run_env(&["count", "--until-idle"], window);
    assert_eq!(
        t.count("pB"),
        0,
        "the window's tail is not applied as if it were whole"
    );
    let g = gaps(&t);
    assert_eq!(g.len(), 1, "{g:?}");
    let reason = g[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("first records") && reason.contains("partly counted"),
        "{reason}"
    );
    assert_eq!(g[0]["gap"]["through"], pending["end"], "{g:?}");
    // The shard goes on: later likes are exact.
    let later = replay(&t, "later.ndjson", "c", 100);
    t.run(&["count", "--until-idle"]);
    assert_eq!(t.mismatches(&later), vec![]);
    assert_eq!(gaps(&t).len(), 1);
}

/// `trim` that would drop records an application has not applied asks for `--yes`, naming the
/// applications and how much; dropped anyway, they are on record as a gap of each application
/// (the counter's and analytics'), and what came before and after is exact.
#[test]
fn trimming_unapplied_records_asks_first_and_puts_the_loss_on_record() {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let first = replay(&t, "first.ndjson", "a", 300);
    t.run(&["count", "--until-idle"]);
    t.run(&["analytics", "--until-idle"]);
    let lost = replay(&t, "lost.ndjson", "b", 300);
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let out = t.fail(&["trim", "--older-than", "1s"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--yes") && err.contains("counter: ") && err.contains("analytics: "),
        "{err}"
    );
    let named: u64 = err
        .split("counter: ")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .split(", ")
        .map(|p| p.split(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(named, 300, "{err}");
    assert_eq!(
        t.json(&["total", "--json"])["total"],
        300,
        "nothing was trimmed"
    );
    let trimmed = t.run(&["trim", "--older-than", "1s", "--yes"]);
    assert!(trimmed.starts_with("trimmed 600 "), "{trimmed}");
    let later = replay(&t, "later.ndjson", "c", 300);
    t.run(&["count", "--until-idle"]);
    t.run(&["analytics", "--until-idle"]);
    assert_eq!(t.mismatches(&first), vec![]);
    assert_eq!(t.mismatches(&later), vec![]);
    let zero: BTreeMap<String, i64> = lost.keys().map(|p| (p.clone(), 0)).collect();
    assert_eq!(t.mismatches(&zero), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], 600);
    let g = gaps(&t);
    let apps: Vec<&str> = g
        .iter()
        .map(|d| d["gap"]["app"].as_str().unwrap())
        .collect();
    // One gap per application and shard that had records lost.
    let shards_with_lost = g.iter().filter(|d| d["gap"]["app"] == "counter").count();
    assert!(shards_with_lost >= 1, "{g:?}");
    assert_eq!(
        apps.iter().filter(|a| **a == "analytics").count(),
        shards_with_lost,
        "{g:?}"
    );
    assert_eq!(g.len(), 2 * shards_with_lost, "{g:?}");
    for d in &g {
        assert!(d["gap"]["through"].is_string(), "{d}");
        assert!(d["reason"].as_str().unwrap().contains("never read"), "{d}");
    }
    // Counting again finds nothing new to put on record.
    t.run(&["count", "--until-idle"]);
    assert_eq!(gaps(&t).len(), g.len());
}
