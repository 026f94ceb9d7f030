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
    // The edges' parts are the same files in both stores: a post's edges in the same part.
    let edge_parts = tally_embedded::edge_files(a.dir.path()).unwrap();
    let tables = std::iter::once(("items", tally_embedded::DB_FILE.to_owned())).chain(
        edge_parts.iter().map(|p| {
            (
                "edges",
                p.file_name().unwrap().to_string_lossy().into_owned(),
            )
        }),
    );
    for (table, file) in tables {
        let db = |t: &Target| Connection::open(t.dir.path().join(&file)).unwrap();
        let (ra, rb) = (db(&a), db(&b));
        replicate(table, &ra, &rb, &db(&a));
        replicate(table, &ra, &rb, &db(&b));
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
        let liked = t.query_one(&["query", "p0", "--viewer", "traveller", "--json"]);
        assert_eq!(liked["viewer_liked"], true, "{liked}");
    }
}

/// One action sent to a region: event id, post, user, like (else unlike), created_at.
type Action = (String, String, String, bool, i64);

on_backends! {
    routed_to_their_homes_every_post_is_exact {
        embedded => routed_to_their_homes_every_post_is_exact(Target::embedded(), Target::embedded()),
        aws => routed_to_their_homes_every_post_is_exact(
            Target::aws("region-a", 2),
            Target::aws("region-b", 2)
        ),
    }
}

/// The home design (docs/REGIONS.md), built: two regions, each with its stream and store.
/// Likes of the same posts come to both (users of each region, duplicates, and travellers who
/// like a post in one region and unlike it later in the other); each region's
/// router puts the records of posts homed in the other to its stream — each killed (SIGKILL)
/// mid-way and run again — and each region's counter counts its home's posts only, each killed
/// mid-way and run again.
/// Every post ends exact in its home region against the truth of both regions' events, the other
/// region holds no count of it, each region's `verify` finds its store exact, and each region's
/// read side answers every post exact, reading the posts homed elsewhere from that home's store.
///
/// On AWS: two kinesis-local streams and two table sets on DynamoDB Local, each replicated to a
/// table set of the other region by a replicator that behaves as global tables do (asynchronous,
/// item by item, reordered, last writer wins by its clock; `common::replicator`) while the
/// routers and counters run; region b is lost for a while first (its stream unreachable: a's
/// router holds its checkpoints and loses nothing) and returns. Every post is exact in both
/// regions once replication settles, and each answer stamps how fresh the other home's counts are.
fn routed_to_their_homes_every_post_is_exact(a: Target, b: Target) {
    let aws = a.flag("--table-prefix").is_some();
    // On AWS each region reads the other's posts from its replica here of the other's tables
    // (another table set, as a global table's replica is in another region); embedded, from the
    // other's store.
    let (a_in_b, b_in_a) = match aws {
        true => (Some(a.other_store("in-b")), Some(b.other_store("in-a"))),
        false => (None, None),
    };
    // Where the other region's stream is: on AWS its stream on the local peer (both "regions"
    // in the peer's one region, at `kinesis`), embedded its store.
    let peer = |other: &Target, replica: Option<&Target>, kinesis: Option<&str>| -> String {
        match replica {
            Some(r) => format!(
                "stream = \"{}\"\nkinesis_endpoint_url = \"{}\"\naws_region = \"us-east-1\"\ntable_prefix = \"{}\"\n",
                other.flag("--stream").unwrap(),
                kinesis.map_or_else(|| other.flag("--kinesis-endpoint-url").unwrap(), str::to_owned),
                r.flag("--table-prefix").unwrap(),
            ),
            None => format!("data_dir = \"{}\"\n", other.dir.path().display()),
        }
    };
    let config = |t: &Target, this: &str, that: &str, peer: String, name: &str| {
        let f = file_in(t, name);
        std::fs::write(
            &f,
            format!("[regions]\nthis = \"{this}\"\nhomes = [\"a\", \"b\"]\n[regions.peers.{that}]\n{peer}"),
        )
        .unwrap();
        f.display().to_string()
    };
    let fa = config(&a, "a", "b", peer(&b, b_in_a.as_ref(), None), "tally.toml");
    let fb = config(&b, "b", "a", peer(&a, a_in_b.as_ref(), None), "tally.toml");
    // Region b lost, as region a's router finds it: b's stream at an address nobody answers.
    let nobody = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let fa_lost = config(
        &a,
        "a",
        "b",
        peer(&b, b_in_a.as_ref(), Some(&nobody)),
        "lost.toml",
    );
    let a = a.with_args(&["--config", &fa]);
    let b = b.with_args(&["--config", &fb]);
    for t in [&a, &b] {
        t.run(&["setup", "--shards", "2"]);
    }
    for r in a_in_b.iter().chain(&b_in_a) {
        r.run(&["setup", "--shards", "2"]);
        // A replica holds the replicated tables alone, as Terraform's global tables do.
        #[cfg(feature = "aws-local")]
        drop_unreplicated(r);
    }
    let t0 = crate::common::now_ms() - 600_000;
    // (event id, post, user, like?, created_at) per region; the truth is each user's latest
    // action on each post, by (created_at, event id), across both.
    let mut events: [Vec<Action>; 2] = Default::default();
    for (r, region) in ["a", "b"].iter().enumerate() {
        for p in 0..20 {
            for u in 0..(5 + p % 7) {
                let id = format!("{region}-{p}-{u}");
                events[r].push((
                    id,
                    format!("p{p}"),
                    format!("{region}{u}"),
                    true,
                    t0 + u as i64,
                ));
            }
        }
    }
    for k in 0..10 {
        // Traveller k likes p{k} in one region and unlikes it a minute later in the other; the
        // unlike's region alternates.
        let (like_in, unlike_in) = if k % 2 == 0 { (0, 1) } else { (1, 0) };
        let (post, user) = (format!("p{k}"), format!("t{k}"));
        events[like_in].push((
            format!("tl{k}"),
            post.clone(),
            user.clone(),
            true,
            t0 + 1_000,
        ));
        events[unlike_in].push((format!("tu{k}"), post, user, false, t0 + 61_000));
        // And likes p{k+10} for good in the first.
        events[like_in].push((
            format!("tk{k}"),
            format!("p{}", k + 10),
            format!("t{k}"),
            true,
            t0 + 2_000,
        ));
    }
    let mut latest: BTreeMap<(String, String), (i64, String, bool)> = BTreeMap::new();
    for (id, post, user, like, at) in events.iter().flatten() {
        let e = latest
            .entry((post.clone(), user.clone()))
            .or_insert((*at, id.clone(), *like));
        if (*at, id) > (e.0, &e.1) {
            *e = (*at, id.clone(), *like);
        }
    }
    let mut truth: BTreeMap<String, i64> = (0..20).map(|p| (format!("p{p}"), 0)).collect();
    for ((post, _), (_, _, like)) in &latest {
        *truth.get_mut(post).unwrap() += i64::from(*like);
    }
    for (r, t) in [&a, &b].iter().enumerate() {
        let mut lines: Vec<String> = events[r]
            .iter()
            .map(|(id, post, user, like, at)| {
                line(id, post, user, if *like { "like" } else { "unlike" }, *at)
            })
            .collect();
        // A producer's retries: the first ten again.
        lines.extend(lines[..10].to_vec());
        let f = file_in(t, "likes.ndjson");
        std::fs::write(&f, lines.join("\n") + "\n").unwrap();
        t.run(&["replay", f.to_str().unwrap()]);
    }
    // Global tables, as each region's tables are replicated to the other while everything runs.
    #[cfg(feature = "aws-local")]
    let replicator = a_in_b
        .as_ref()
        .zip(b_in_a.as_ref())
        .map(|(a_in_b, b_in_a)| {
            let mut pairs = Vec::new();
            for table in tally_aws::REPLICATED_TABLES {
                pairs.push((a.table(table), a_in_b.table(table)));
                pairs.push((b.table(table), b_in_a.table(table)));
            }
            crate::common::replicator::Replicator::start(
                pairs,
                std::time::Duration::from_millis(400),
                45,
            )
        });
    if aws {
        // Region b is lost: a's router cannot put to its stream, holds its checkpoints (what it
        // could not put stays in a's stream) and stops at its timeout.
        let lost = a
            .plain(&["--config", &fa])
            .with_args(&["--config", &fa_lost]);
        let out = crate::common::output(lost.cmd(&["route", "--until-idle", "--timeout", "4s"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("could not reach region b's stream"),
            "a router with its home unreachable does not finish: {err}"
        );
    }
    // Region b returns. Each region's router killed (SIGKILL) mid-way, then both to the end of
    // their streams.
    for t in [&a, &b] {
        let mut r = t.spawn("route", &["route"], &[]);
        std::thread::sleep(std::time::Duration::from_millis(150));
        r.signal("KILL");
        r.wait(std::time::Duration::from_secs(30));
    }
    for t in [&a, &b] {
        let v = t.json(&["route", "--until-idle", "--json"]);
        assert!(v["routed"].as_u64().unwrap() > 0, "{v}");
    }
    // Each region's counter killed (SIGKILL) mid-way, then run to the end of its stream.
    for t in [&a, &b] {
        let mut c = t.spawn("count", &["count"], &[]);
        std::thread::sleep(std::time::Duration::from_millis(400));
        c.signal("KILL");
        c.wait(std::time::Duration::from_secs(30));
    }
    for t in [&a, &b] {
        t.run(&["count", "--until-idle"]);
    }
    let homes = tally_core::regions::Homes::of("a", &["a".into(), "b".into()])
        .unwrap()
        .unwrap();
    let homed = |region: &str| -> BTreeMap<String, i64> {
        truth
            .iter()
            .map(|(p, n)| (p.clone(), if homes.home(p) == region { *n } else { 0 }))
            .collect()
    };
    assert!(
        truth.keys().any(|p| homes.home(p) == "a") && truth.keys().any(|p| homes.home(p) == "b"),
        "both regions home posts"
    );
    // Each store as it is: its home's posts exact, none of the other's.
    let (plain_a, plain_b) = (a.plain(&["--config", &fa]), b.plain(&["--config", &fb]));
    assert_eq!(plain_a.mismatches(&homed("a")), vec![], "region a's posts");
    assert_eq!(plain_b.mismatches(&homed("b")), vec![], "region b's posts");
    for t in [&a, &b] {
        let out = crate::common::output(t.cmd(&["verify"]));
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    #[cfg(feature = "aws-local")]
    if let Some(rep) = replicator {
        let done = rep.settle();
        assert!(done.applied > 0, "{done:?}");
        eprintln!("replicated: {done:?}");
    }
    // Every region's read side answers every post, each from its home.
    let total: i64 = truth.values().sum();
    for (t, other) in [(&a, "b"), (&b, "a")] {
        assert_eq!(
            t.mismatches(&truth),
            vec![],
            "every post, read in the other region too"
        );
        let v = t.json(&["query", "p1", "p2", "p3", "--viewer", "t1", "--json"]);
        assert!(
            v["applied_through"]["homes"][other]["arrival_ms"].is_i64(),
            "the other home's freshness: {v}"
        );
        assert_eq!(
            t.json(&["total", "--json"])["total"],
            total,
            "every home's total"
        );
    }
}

/// Deletes the tables of `r` a home does not replicate (`tally_aws::REPLICATED_TABLES`).
#[cfg(feature = "aws-local")]
fn drop_unreplicated(r: &Target) {
    let client = crate::common::dynamodb_client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (suffix, ..) in tally_aws::dynamo::TABLES {
        if !tally_aws::REPLICATED_TABLES.contains(suffix) {
            rt.block_on(client.delete_table().table_name(r.table(suffix)).send())
                .unwrap();
        }
    }
}

/// A region outside the list, a router with nowhere to put, or a read side with nowhere to read
/// a home's posts from, is named before anything runs.
#[test]
fn bad_regions_settings_are_named() {
    let t = Target::embedded();
    let f = file_in(&t, "tally.toml");
    std::fs::write(&f, "[regions]\nthis = \"c\"\nhomes = [\"a\", \"b\"]\n").unwrap();
    let out = t.fail(&["--config", f.to_str().unwrap(), "config"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`regions.this`") && err.contains("\"c\""),
        "{err}"
    );
    std::fs::write(&f, "[regions]\nthis = \"a\"\nhomes = [\"a\", \"b\"]\n").unwrap();
    let out = t.fail(
        &["--config", f.to_str().unwrap(), "route", "--until-idle"],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`regions.peers.b`"), "{err}");
    // The read side with nowhere to read region b's posts from names it too.
    t.run(&["setup"]);
    let out = t.fail(&["--config", f.to_str().unwrap(), "query", "p1"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("region b's posts") && err.contains("regions.peers.b"),
        "{err}"
    );
    let out = t.fail(&["route", "--until-idle"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`regions.this`") && err.contains("REGIONS.md"),
        "{err}"
    );
}

/// A deployment sets its regions by its environment (as ECS tasks do): the list comma-separated.
#[test]
fn the_regions_can_come_from_the_environment() {
    let t = Target::embedded();
    let v = t.json_env(
        &["config", "--json"],
        &[
            ("TALLY_REGIONS__THIS", "eu-west-1"),
            ("TALLY_REGIONS__HOMES", "us-east-1,eu-west-1"),
            ("TALLY_REGIONS__PEERS__US-EAST-1__STREAM", "likes-us"),
        ],
    );
    assert_eq!(
        v["regions"]["homes"],
        serde_json::json!(["us-east-1", "eu-west-1"]),
        "{v}"
    );
    assert_eq!(
        v["regions"]["peers"]["us-east-1"]["stream"], "likes-us",
        "{v}"
    );
}
