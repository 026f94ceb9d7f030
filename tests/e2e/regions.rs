//! Several regions (docs/REGIONS.md): the counterexample the design starts from. Two regions
//! each count their own stream exactly into their own table set; a replicator that behaves as
//! DynamoDB global tables do — item by item, the last write by its own clock wins — then makes
//! the table sets one, and the counts go wrong in both regions: the per-writing-shard items of
//! the two regions share keys (every stream has a `shardId-000000000000`), so each post keeps one
//! region's likes; and an edge takes the replication clock's last write, not the user's last
//! action. The embedded backend stands for each region's tables (the same items and keys as on
//! DynamoDB, READ-CONTRACT.md).

use std::collections::BTreeMap;

use rusqlite::Connection;

use crate::common::{file_in, Target};

/// One line of contract v1.
fn line(id: &str, post: &str, user: &str, action: &str, at: i64) -> String {
    format!(
        r#"{{"event_id":"{id}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{at}}}"#
    )
}

/// Makes `into`'s rows of `table` those of `a` overlaid by those of `b`: what item-level
/// last-writer-wins replication leaves when `b`'s writes reach every region after `a`'s.
fn replicate(table: &str, a: &Connection, b: &Connection, into: &Connection) {
    let cols: Vec<String> = a
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let list = cols.join(", ");
    let marks = vec!["?"; cols.len()].join(", ");
    let rows = |c: &Connection| -> Vec<Vec<rusqlite::types::Value>> {
        let mut st = c.prepare(&format!("SELECT {list} FROM {table}")).unwrap();
        st.query_map([], |r| (0..cols.len()).map(|i| r.get(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let (from_a, from_b) = (rows(a), rows(b));
    into.execute_batch(&format!("DELETE FROM {table}")).unwrap();
    for row in from_a.iter().chain(&from_b) {
        into.execute(
            &format!("INSERT OR REPLACE INTO {table} ({list}) VALUES ({marks})"),
            rusqlite::params_from_iter(row.iter()),
        )
        .unwrap();
    }
}

/// Two regions' likes of the same posts (their users apart, but for one user who likes p0 in
/// region B and, later, unlikes it in region A), each region exact on its own; global-tables
/// replication of their items then loses likes in both: every post shows one region's likers.
#[test]
fn a_naive_per_region_count_under_global_tables_goes_wrong() {
    let (a, b) = (Target::embedded(), Target::embedded());
    let t0 = crate::common::now_ms() - 600_000;
    let mut truth: BTreeMap<String, i64> = BTreeMap::new();
    let mut files = Vec::new();
    for (t, region, users) in [(&a, "a", 30), (&b, "b", 20)] {
        let mut lines = Vec::new();
        for p in 0..5 {
            for u in 0..users {
                let id = format!("{region}-{p}-{u}");
                lines.push(line(
                    &id,
                    &format!("p{p}"),
                    &format!("{region}{u}"),
                    "like",
                    t0 + u,
                ));
                *truth.entry(format!("p{p}")).or_default() += 1;
            }
        }
        // The traveller: likes p0 in B, unlikes it a minute later in A. Not a liker.
        match region {
            "b" => lines.push(line("x1", "p0", "traveller", "like", t0 + 1_000)),
            _ => lines.push(line("x2", "p0", "traveller", "unlike", t0 + 61_000)),
        }
        let f = file_in(t, "likes.ndjson");
        std::fs::write(&f, lines.join("\n") + "\n").unwrap();
        t.run(&["setup", "--shards", "2"]);
        t.run(&["replay", f.to_str().unwrap()]);
        t.run(&["count", "--until-idle"]);
        files.push(f);
    }
    // Each region is exact on its own stream.
    let alone = |users: i64, traveller: i64| -> BTreeMap<String, i64> {
        (0..5)
            .map(|p| (format!("p{p}"), users + if p == 0 { traveller } else { 0 }))
            .collect()
    };
    assert_eq!(a.mismatches(&alone(30, 0)), vec![]);
    assert_eq!(b.mismatches(&alone(20, 1)), vec![]);

    // Replication: B's writes reach every region last.
    let db = |t: &Target| Connection::open(t.dir.path().join("tally.db")).unwrap();
    let (da, db_b) = (db(&a), db(&b));
    for table in ["items", "edges"] {
        let (ra, rb) = (db(&a), db(&b));
        replicate(table, &ra, &rb, &da);
        replicate(table, &ra, &rb, &db_b);
    }
    // The truth of all regions' events: every user's latest action (the traveller unliked).
    for t in [&a, &b] {
        let off = t.mismatches(&truth);
        assert_eq!(
            off.len(),
            5,
            "every post shows one region's likers, not both: {off:?}"
        );
        for (post, want, got) in &off {
            assert_eq!(
                *got,
                if post == "p0" { 21 } else { 20 },
                "{post}: want {want}"
            );
        }
        // The traveller's edge took the replication clock's last write: liked, after unliking.
        let liked = t.json(&["query", "p0", "--viewer", "traveller", "--json"]);
        assert_eq!(liked["viewer_liked"], true, "{liked}");
    }
}
