//! Resharding mid-stream: parents are read to their end before their children, counts stay exact,
//! and a producer retry that lands in a child after the split still counts once.
#![allow(clippy::unwrap_used)]

use crate::common::{file_in, output, write_contract_file, Target};

fn resharding_keeps_counts_exact(t: Target, parent: &str) {
    let before = file_in(&t, "before.ndjson");
    let exp = write_contract_file(&before, 1_200, 30, 21);
    t.run(&["replay", before.to_str().unwrap()]);
    let split = t.run(&["reshard", "--split", parent]);
    assert!(split.contains(parent), "{split}");
    // The same file again after the split: every event is a producer retry, now routed to the
    // children. None may count twice.
    t.run(&["replay", before.to_str().unwrap()]);

    let mut c = t.cmd(&["count", "--until-idle", "--json"]);
    c.env("RUST_LOG", "tally_consumer=info");
    let out = output(c);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    let finished = log
        .lines()
        .position(|l| l.contains("shard finished") && l.contains(parent))
        .expect("the parent is read to its end");
    let leases = t.json(&["leases", "--json"]);
    let children: Vec<String> = leases
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["parents"].as_array().unwrap().iter().any(|p| p == parent))
        .map(|l| l["shard_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children.len(), 2, "{leases}");
    for child in &children {
        let taken = log
            .lines()
            .position(|l| l.contains("lease taken") && l.contains(child.as_str()))
            .expect("the child is processed");
        assert!(
            finished < taken,
            "child {child} started before its parent finished:\n{log}"
        );
    }
    let parent_lease = leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["shard_id"] == parent)
        .unwrap()
        .clone();
    assert_eq!(parent_lease["finished"], true);

    let counted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every valid record read is counted, or a copy met in its original's window (counting
    // likers, no filter remembers ids across windows: a copy changes nothing wherever it lands).
    let valid = counted["records"].as_u64().unwrap() - counted["malformed"].as_u64().unwrap();
    let distinct = (exp.lines - exp.malformed - exp.duplicates) as u64;
    assert!(valid >= distinct, "{counted}");
    crate::common::assert_read_all(&counted, valid as usize, (valid - distinct) as usize);
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    // Malformed lines were put twice, at different sequence numbers: two dead letters each.
    assert_eq!(
        t.json(&["dead-letters", "--json"])["total"],
        2 * exp.malformed as u64
    );

    // Once its children have progressed past the parent's dedup horizon (here 1 s, by arrival
    // time), the finished parent's lease row is cleaned up, and it is not created (and read)
    // again: counts unchanged.
    let short = [
        ("TALLY_LEASE__FINISHED_GRACE_SECS", "0"),
        ("TALLY_COUNTER__DEDUP_HORIZON_SECS", "1"),
    ];
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let later = file_in(&t, "later.ndjson");
    let later_exp = write_contract_file(&later, 300, 30, 22);
    t.run(&["replay", later.to_str().unwrap()]);
    let mut exp = exp;
    for (p, n) in later_exp.counts {
        *exp.counts.entry(p).or_insert(0) += n;
    }
    t.run_env(&["count", "--until-idle"], &short);
    t.run_env(&["count", "--until-idle"], &short);
    t.run(&["count", "--until-idle"]);
    let leases = t.json(&["leases", "--json"]);
    assert!(
        leases
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["shard_id"] != parent),
        "{leases}"
    );
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    t.assert_read_as_configured();
    // verify (which polls) after the clean-up: the parent has no row, and its records are all applied (its
    // children have moved on). Counting them as not applied reported the global total off.
    let out = output(t.cmd(&["verify", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
    assert_eq!(v["global_total"]["checked"], true, "{v:#}");
    assert_eq!(v["global_total"]["recount"], exp.total(), "{v:#}");
    assert_eq!(v["recount"]["beyond_checkpoint"], 0, "{v:#}");
    assert_eq!(
        v["dead_letters"]["found"], v["dead_letters"]["expected"],
        "{v:#}"
    );
}

on_backends! {
    resharding_keeps_counts_exact {
        embedded => resharding_keeps_counts_exact(Target::embedded(), "shardId-000000000000"),
        aws => resharding_keeps_counts_exact(Target::aws("reshard", 2), "shardId-000000000000"),
        aws_efo => resharding_keeps_counts_exact(Target::aws_efo("reshard-efo", 2), "shardId-000000000000"),
    }
}
