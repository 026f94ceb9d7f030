//! `tally verify` recounts the stream apart from the counter and compares: it finds a correct
//! store exact (also while the counter runs beside it), and names each drift planted by hand in
//! the tables — a count edited, a record counted twice (its post, its buckets and the global
//! total), a dead letter removed — on the embedded store and on DynamoDB Local. And the replay
//! loop: a stream recorded (retries and malformed records in it) and replayed at speed into a
//! fresh stack counts and verifies exact.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::common::{file_in, write_contract_file, Expected, Target};
use serde_json::Value;

/// A stream with producer retries (the file twice, and verbatim copies inside it) and malformed
/// lines, counted.
fn counted(t: &Target, events: usize) -> Expected {
    let f = file_in(t, "likes.ndjson");
    let e = write_contract_file(&f, events, 25, 3);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    e
}

/// `tally verify --json`, and whether it exited 0; checked to conclude the same when its memory
/// is so small that it reads the stream in many passes over a partition of the posts.
fn verify(t: &Target, extra: &[&str]) -> (Value, bool) {
    let (v, ok) = verify_once(t, extra);
    assert_eq!(v["passes"], 1, "{v:#}");
    let mut small = vec!["--memory", "16KiB"];
    small.extend_from_slice(extra);
    let (w, w_ok) = verify_once(t, &small);
    assert!(w["passes"].as_u64().unwrap() > 3, "{w:#}");
    // Lists compared as sets: the passes find the same drifts in another order.
    let sorted = |v: &Value| {
        let mut d: Vec<String> = v.as_array().unwrap().iter().map(Value::to_string).collect();
        d.sort();
        d
    };
    let drifts = |v: &Value| sorted(&v["drifts"]);
    let edges_off = |v: &Value| sorted(&v["edges"]["off"]);
    assert_eq!(w_ok, ok, "in passes:\n{w:#}\nin one:\n{v:#}");
    assert_eq!(drifts(&w), drifts(&v), "in passes:\n{w:#}\nin one:\n{v:#}");
    assert_eq!(
        edges_off(&w),
        edges_off(&v),
        "in passes:\n{w:#}\nin one:\n{v:#}"
    );
    for k in [
        "posts_checked",
        "posts_off",
        "global_total",
        "dead_letters",
        "recount",
    ] {
        assert_eq!(w[k], v[k], "{k} in passes:\n{w:#}\nin one:\n{v:#}");
    }
    (v, ok)
}

/// One `tally verify --json`.
fn verify_once(t: &Target, extra: &[&str]) -> (Value, bool) {
    let mut args = vec!["verify", "--json"];
    args.extend_from_slice(extra);
    let out = crate::common::output(t.cmd(&args));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out.status.success())
}

fn assert_exact(v: &Value, ok: bool, e: &Expected) {
    assert!(ok, "verify found drift in a correct store: {v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
    assert_eq!(v["posts_checked"], e.counts.len(), "{v:#}");
    // Counting likers, a sample of edges is compared too.
    assert!(v["edges"]["checked"].as_u64().unwrap() > 0, "{v:#}");
    assert_eq!(v["edges"]["off"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["global_total"]["checked"], true, "{v:#}");
    assert_eq!(v["global_total"]["recount"], e.total(), "{v:#}");
    assert_eq!(v["global_total"]["off_by"], 0, "{v:#}");
    assert_eq!(v["dead_letters"]["expected"], 2 * e.malformed, "{v:#}");
    assert_eq!(v["dead_letters"]["found"], 2 * e.malformed, "{v:#}");
    assert_eq!(v["recount"]["malformed"], 2 * e.malformed, "{v:#}");
    // The second replay's copies, and the verbatim copies inside the first.
    assert_eq!(
        v["recount"]["duplicates"],
        e.lines - e.malformed + e.duplicates,
        "{v:#}"
    );
}

/// Edits the tables by hand, as a bug (or an operator) would.
pub(crate) trait Tables {
    /// Adds to attributes of one of the post's live items; returns that item's hour attribute
    /// `hk` (hours since the epoch).
    fn add_to_live(&self, post: &str, add: &[(&str, i64)]) -> i64;
    /// Adds to one shard's global-total item.
    fn add_to_global(&self, n: i64);
    /// Deletes one dead letter; its shard and key.
    fn delete_a_letter(&self) -> (String, String);
    /// Turns the post's first edge (by user) the other way; returns its user, whether it was
    /// liked before, and whether the edge's change log logged the flip (DynamoDB Streams logs
    /// every write of the edges table, so the counter will count it: the post's count will be
    /// off too; the embedded store logs only what its own edge writes log).
    fn flip_an_edge(&self, post: &str) -> Flipped;
    /// Writes what a window's first write leaves when it rolls the post's first live item out of
    /// its hour (a crash, or a reader, before the live write): an archive of that hour holding
    /// the live item's minutes, written by a window the live item does not hold yet. Returns the
    /// live item's hour.
    fn put_a_rolled_archive(&self, post: &str) -> i64;
}

/// The archive a roll of a live item (`sk`, `attrs`) puts, by a window past every marker.
fn rolled_archive(live_sk: &str, attrs: &Value) -> (String, Value) {
    let hour = attrs["hk"].as_i64().unwrap();
    let shard = live_sk.trim_start_matches("L#");
    let sk = format!("{}{shard}", tally_core::summary::hour_prefix(hour));
    let mut a = serde_json::Map::new();
    let mut n = 0;
    for (k, v) in attrs.as_object().unwrap() {
        if k.starts_with('m') && k.len() == 3 {
            a.insert(k.clone(), v.clone());
            n += v.as_i64().unwrap();
        }
    }
    a.insert("n".into(), n.into());
    a.insert("w".into(), format!("099{}", "9".repeat(99)).into());
    (sk, Value::Object(a))
}

pub(crate) struct Sqlite(std::path::PathBuf);

impl Sqlite {
    /// The post's first item whose sort key starts with `prefix`: its key and attributes.
    fn first(&self, post: &str, prefix: &str) -> (String, Value) {
        let db = rusqlite::Connection::open(&self.0).unwrap();
        let (sk, attrs): (String, String) = db
            .query_row(
                "SELECT sk, attrs FROM items WHERE pk = ?1 AND sk LIKE ?2 ORDER BY sk LIMIT 1",
                [post, &format!("{prefix}%")],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        (sk, serde_json::from_str(&attrs).unwrap())
    }

    /// Writes an item's attributes (insert or replace).
    fn put(&self, post: &str, sk: &str, attrs: &Value) {
        rusqlite::Connection::open(&self.0)
            .unwrap()
            .execute(
                "INSERT OR REPLACE INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3)",
                rusqlite::params![post, sk, attrs.to_string()],
            )
            .unwrap();
    }
}

impl Tables for Sqlite {
    fn add_to_live(&self, post: &str, add: &[(&str, i64)]) -> i64 {
        let (sk, mut v) = self.first(post, "L#");
        for (k, n) in add {
            let was = v[*k].as_i64().unwrap_or(0);
            v[*k] = (was + n).into();
        }
        self.put(post, &sk, &v);
        v["hk"].as_i64().unwrap()
    }

    fn flip_an_edge(&self, post: &str) -> Flipped {
        // The embedded store keeps edges typed (`edges`, in their own file): the same damage as
        // `l` + 1 on DynamoDB.
        let dir = self.0.parent().unwrap();
        let db =
            rusqlite::Connection::open(tally_embedded::edge_file_of(dir, post).unwrap()).unwrap();
        let (user, liked): (String, bool) = db
            .query_row(
                "SELECT user, liked FROM edges WHERE post = ?1 ORDER BY user LIMIT 1",
                [post],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        db.execute(
            "UPDATE edges SET liked = 1 - liked WHERE post = ?1 AND user = ?2",
            [post, &user],
        )
        .unwrap();
        Flipped {
            user,
            was_liked: liked,
            logged: false,
        }
    }

    fn put_a_rolled_archive(&self, post: &str) -> i64 {
        let (sk, live) = self.first(post, "L#");
        let (archive, a) = rolled_archive(&sk, &live);
        self.put(post, &archive, &a);
        live["hk"].as_i64().unwrap()
    }

    fn add_to_global(&self, n: i64) {
        let db = rusqlite::Connection::open(&self.0).unwrap();
        let (sk, attrs): (String, String) = db
            .query_row(
                "SELECT sk, attrs FROM items WHERE pk = '#global' ORDER BY sk LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let mut v: Value = serde_json::from_str(&attrs).unwrap();
        v["n"] = (v["n"].as_i64().unwrap() + n).into();
        db.execute(
            "UPDATE items SET attrs = ?2 WHERE pk = '#global' AND sk = ?1",
            rusqlite::params![sk, v.to_string()],
        )
        .unwrap();
    }

    fn delete_a_letter(&self) -> (String, String) {
        let db = rusqlite::Connection::open(&self.0).unwrap();
        let k: (String, String) = db
            .query_row(
                "SELECT shard_id, seq FROM dead_letters ORDER BY shard_id DESC, seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        db.execute(
            "DELETE FROM dead_letters WHERE shard_id = ?1 AND seq = ?2",
            rusqlite::params![k.0, k.1],
        )
        .unwrap();
        k
    }
}

#[cfg(feature = "aws-local")]
pub(crate) struct Dynamo {
    counts: String,
    edges: String,
    letters: String,
    client: aws_sdk_dynamodb::Client,
    rt: tokio::runtime::Runtime,
}

#[cfg(feature = "aws-local")]
impl Dynamo {
    fn of(t: &Target) -> Dynamo {
        Dynamo {
            counts: t.table("counts"),
            edges: t.table("edges"),
            letters: t.table("dead-letters"),
            client: crate::common::dynamodb_client(),
            rt: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    /// The first item of a partition whose sort key starts with `prefix`: its key and hour.
    fn first(&self, table: &str, pk: &str, prefix: &str) -> (String, i64) {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        let mut q = self
            .client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", A::S(pk.into()))
            .limit(1);
        if !prefix.is_empty() {
            q = q
                .key_condition_expression("pk = :p AND begins_with(sk, :s)")
                .expression_attribute_values(":s", A::S(prefix.into()));
        }
        let out = self.rt.block_on(q.send()).unwrap();
        let it = &out.items()[0];
        let hk = it
            .get("hk")
            .and_then(|v| v.as_n().ok())
            .map_or(0, |n| n.parse().unwrap());
        (it["sk"].as_s().unwrap().clone(), hk)
    }

    fn add(&self, table: &str, pk: &str, sk: &str, add: &[(&str, i64)]) {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        if add.is_empty() {
            return;
        }
        let expr: Vec<String> = (0..add.len()).map(|i| format!("#a{i} :v{i}")).collect();
        let mut u = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", A::S(pk.into()))
            .key("sk", A::S(sk.into()))
            .update_expression(format!("ADD {}", expr.join(", ")));
        for (i, (k, n)) in add.iter().enumerate() {
            u = u
                .expression_attribute_names(format!("#a{i}"), *k)
                .expression_attribute_values(format!(":v{i}"), A::N(n.to_string()));
        }
        self.rt.block_on(u.send()).unwrap();
    }
}

#[cfg(feature = "aws-local")]
impl Tables for Dynamo {
    fn add_to_live(&self, post: &str, add: &[(&str, i64)]) -> i64 {
        let (sk, hk) = self.first(&self.counts, post, "L#");
        self.add(&self.counts, post, &sk, add);
        hk
    }

    fn flip_an_edge(&self, post: &str) -> Flipped {
        use aws_sdk_dynamodb::types::{AttributeValue as A, ReturnValue};
        let (sk, _) = self.first(&self.edges, post, "E#");
        let flip = self
            .client
            .update_item()
            .table_name(&self.edges)
            .key("pk", A::S(post.into()))
            .key("sk", A::S(sk.clone()))
            .update_expression("SET l = :one - l")
            .expression_attribute_values(":one", A::N("1".into()))
            .return_values(ReturnValue::UpdatedOld);
        let old = self.rt.block_on(flip.send()).unwrap();
        let was = old.attributes().and_then(|a| a.get("l")).cloned();
        Flipped {
            user: sk.trim_start_matches("E#").to_owned(),
            was_liked: was == Some(A::N("1".into())),
            logged: true,
        }
    }

    fn put_a_rolled_archive(&self, post: &str) -> i64 {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        let out = self
            .rt
            .block_on(
                self.client
                    .query()
                    .table_name(&self.counts)
                    .key_condition_expression("pk = :p AND begins_with(sk, :s)")
                    .expression_attribute_values(":p", A::S(post.into()))
                    .expression_attribute_values(":s", A::S("L#".into()))
                    .limit(1)
                    .send(),
            )
            .unwrap();
        let it = &out.items()[0];
        let mut live = serde_json::Map::new();
        for (k, v) in it {
            if let Ok(n) = v.as_n() {
                live.insert(k.clone(), n.parse::<i64>().unwrap().into());
            }
        }
        let live = Value::Object(live);
        let (archive, a) = rolled_archive(it["sk"].as_s().unwrap(), &live);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.counts)
            .item("pk", A::S(post.into()))
            .item("sk", A::S(archive));
        for (k, v) in a.as_object().unwrap() {
            put = put.item(
                k,
                match v {
                    Value::String(s) => A::S(s.clone()),
                    n => A::N(n.to_string()),
                },
            );
        }
        self.rt.block_on(put.send()).unwrap();
        live["hk"].as_i64().unwrap()
    }

    fn add_to_global(&self, n: i64) {
        let (sk, _) = self.first(&self.counts, "#global", "");
        self.add(&self.counts, "#global", &sk, &[("n", n)]);
    }

    fn delete_a_letter(&self) -> (String, String) {
        use aws_sdk_dynamodb::types::AttributeValue as A;
        let out = self
            .rt
            .block_on(self.client.scan().table_name(&self.letters).limit(1).send())
            .unwrap();
        let it = &out.items()[0];
        let (shard, seq) = (
            it["shard_id"].as_s().unwrap().clone(),
            it["seq"].as_s().unwrap().clone(),
        );
        self.rt
            .block_on(
                self.client
                    .delete_item()
                    .table_name(&self.letters)
                    .key("shard_id", A::S(shard.clone()))
                    .key("seq", A::S(seq.clone()))
                    .send(),
            )
            .unwrap();
        (shard, seq)
    }
}

/// A correct store verifies exact; then three drifts are planted and each is named.
fn finds_exact_then_every_planted_drift(t: &Target, tables: &dyn Tables) {
    let e = counted(t, 600);
    let (v, ok) = verify(t, &[]);
    assert_exact(&v, ok, &e);
    let text = t.run(&["verify"]);
    assert!(text.contains("0 off"), "{text}");

    // A count edited by hand: post-0's total +5 (its buckets untouched).
    tables.add_to_live("post-0", &[("n", 5)]);
    // A record counted twice: post-1's total, the minute and hour it would be in, and the
    // global total, each +1.
    let probe = tables.add_to_live("post-1", &[]);
    let hour = format!("h{:02}", probe.rem_euclid(24));
    tables.add_to_live("post-1", &[("n", 1), ("m00", 1), (hour.as_str(), 1)]);
    tables.add_to_global(1);
    // A dead letter removed.
    let (shard, key) = tables.delete_a_letter();
    // An edge turned the other way (its post's count untouched; where the flip is logged, what
    // the counter will count of it makes the post off too).
    let Flipped {
        user,
        was_liked,
        logged,
    } = tables.flip_an_edge("post-2");

    let (v, ok) = verify(t, &[]);
    assert!(!ok, "verify exited 0 on a wrong store: {v:#}");
    assert_eq!(v["posts_off"], 2 + u64::from(logged), "{v:#}");
    let edges_off = v["edges"]["off"].as_array().unwrap();
    assert_eq!(edges_off.len(), 1, "{v:#}");
    assert_eq!(
        (
            edges_off[0]["post_id"].as_str(),
            edges_off[0]["user_id"].as_str()
        ),
        (Some("post-2"), Some(user.as_str())),
        "{v:#}"
    );
    let drifts = v["drifts"].as_array().unwrap();
    let of =
        |post: &str| -> Vec<&Value> { drifts.iter().filter(|d| d["post_id"] == post).collect() };
    let p0 = of("post-0");
    assert_eq!(p0.len(), 1, "only post-0's total is off: {v:#}");
    assert_eq!(p0[0]["since_ms"], Value::Null);
    assert_eq!(p0[0]["off_by"], 5);
    let p1 = of("post-1");
    assert!(
        p1.iter()
            .any(|d| d["since_ms"].is_null() && d["off_by"] == 1),
        "post-1's total: {v:#}"
    );
    // What the logged flip will add to post-2 (and to the global total) once counted: a like
    // turned to an unlike takes one away, an unlike turned to a like adds one.
    let flipped = match (logged, was_liked) {
        (false, _) => 0,
        (true, true) => -1,
        (true, false) => 1,
    };
    if logged {
        let total = of("post-2")
            .into_iter()
            .find(|d| d["since_ms"].is_null())
            .and_then(|d| d["off_by"].as_i64());
        assert_eq!(
            total,
            Some(flipped),
            "post-2's total, once its logged flip is counted: {v:#}"
        );
    }
    // Since the start of the live item's hour (a default time when it is today's last hour, and
    // asked for here), the extra like shows.
    let at = (probe * 3_600_000).to_string();
    let (w, _) = verify(t, &["--since", &at]);
    let since_off: Vec<&Value> = w["drifts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["post_id"] == "post-1" && !d["since_ms"].is_null())
        .collect();
    assert!(
        since_off.iter().any(|d| d["off_by"] == 1),
        "post-1 since its hour: {w:#}"
    );
    assert_eq!(v["global_total"]["off_by"], 1 + flipped, "{v:#}");
    assert_eq!(v["dead_letters"]["found"], 2 * e.malformed - 1, "{v:#}");
    let missing = v["dead_letters"]["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{v:#}");
    assert_eq!(missing[0]["shard_id"], shard.as_str());
    assert_eq!(missing[0]["position"], key.as_str());
    assert!(v["dead_letters"]["unexpected"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// An edge turned the other way by hand: its user, what it was, and whether its change was
/// logged (and so will be counted).
pub(crate) struct Flipped {
    user: String,
    was_liked: bool,
    logged: bool,
}

/// A two-shard embedded stack and its tables, to edit by hand.
pub(crate) fn on_sqlite() -> (Target, Sqlite) {
    let t = Target::embedded();
    t.run(&["setup", "--shards", "2"]);
    let db = Sqlite(t.dir.path().join("tally.db"));
    (t, db)
}

/// A two-shard stack on the local peers and its tables, to edit by hand.
#[cfg(feature = "aws-local")]
pub(crate) fn on_dynamo(name: &str) -> (Target, Dynamo) {
    let t = Target::aws(name, 2);
    let tables = Dynamo::of(&t);
    (t, tables)
}

on_backends! {
    verify_finds_a_correct_store_exact_and_names_planted_drifts {
        embedded => {
            let (t, db) = on_sqlite();
            finds_exact_then_every_planted_drift(&t, &db);
        },
        aws => {
            let (t, tables) = on_dynamo("verify");
            finds_exact_then_every_planted_drift(&t, &tables);
        },
    }
}

/// A roll's first write lands and its live write does not (yet): a reader between them, or
/// after a crash between them, reads "since" as before the window (the archive and the live item
/// both held the hour's minutes, and "since" added both), and verify finds the store exact.
fn a_roll_half_written_is_read_as_before_it(t: &Target, tables: &dyn Tables) {
    let e = counted(t, 300);
    let since = |hour: i64| -> (i64, i64) {
        let at = (hour * 3_600_000).to_string();
        let v = t.query_one(&["query", "post-0", "--since", &at, "--json"]);
        (
            v["count"].as_i64().unwrap(),
            v["count_since"].as_i64().unwrap(),
        )
    };
    let hour = tables.add_to_live("post-0", &[]);
    let was = since(hour);
    assert_eq!(was.0, e.counts["post-0"]);
    assert!(was.1 > 0, "post-0 has likes in its live hour");
    tables.put_a_rolled_archive("post-0");
    assert_eq!(since(hour), was, "since its live item's hour");
    let (v, ok) = verify(t, &["--since", &(hour * 3_600_000).to_string()]);
    assert!(ok, "a half-written roll read as drift: {v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
}

on_backends! {
    a_roll_half_written_is_read_as_before_it {
        embedded => {
            let (t, db) = on_sqlite();
            a_roll_half_written_is_read_as_before_it(&t, &db);
        },
        aws => {
            let (t, tables) = on_dynamo("verify-roll");
            a_roll_half_written_is_read_as_before_it(&t, &tables);
        },
    }
}

/// Verify beside a running counter while records keep arriving: nothing reported off (what it
/// could not compare yet is said, not counted as drift); exact once the counter is idle.
fn beside_a_running_counter(t: &Target) {
    let files: Vec<(std::path::PathBuf, Expected)> = (0..4u64)
        .map(|i| {
            let f = file_in(t, &format!("part-{i}.ndjson"));
            let e = write_contract_file(&f, 300, 25, 10 + i);
            (f, e)
        })
        .collect();
    let mut counter = t.spawn(
        "counter",
        &["count", "--worker-id", "w"],
        &[("TALLY_COUNTER__WINDOW_RECORDS", "50")],
    );
    t.eventually(
        "the counter to hold every shard",
        Duration::from_secs(60),
        &[&counter],
        || {
            let leases = t.json(&["leases", "--json"]);
            let leases = leases.as_array().unwrap();
            !leases.is_empty() && leases.iter().all(|l| l["owner"] == "w")
        },
    );
    // Many "since" values (the events were created over the last 25 minutes): each is a read of
    // its own, and windows land between them (compared by the first read's markers, 1 run in 10
    // reported drift); the global total is read while windows land too.
    let since: Vec<String> = (1..=26).map(|m| format!("{m}m")).collect();
    let mut args: Vec<&str> = Vec::new();
    for s in &since {
        args.extend(["--since", s.as_str()]);
    }
    let mut runs = 0;
    for (i, (f, _)) in files.iter().enumerate() {
        // Paced, so that the counter applies windows while verify reads.
        let mut producer = t.spawn(
            &format!("replay-{i}"),
            &["replay", f.to_str().unwrap(), "--rate", "400"],
            &[],
        );
        loop {
            let done = producer.child.try_wait().unwrap().is_some();
            // Every other run in passes over a partition of the posts.
            let mut args = args.clone();
            if runs % 2 == 1 {
                args.extend(["--memory", "16KiB"]);
            }
            let (v, ok) = verify_once(t, &args);
            runs += 1;
            assert!(ok, "verify beside a running counter found drift: {v:#}");
            assert_eq!(v["posts_off"], 0, "{v:#}");
            if done {
                break;
            }
        }
        assert!(producer.wait(Duration::from_secs(60)).success());
    }
    assert!(runs >= 8, "verify ran {runs} times beside the producer");
    t.eventually(
        "the counter to catch up",
        Duration::from_secs(60),
        &[&counter],
        || {
            let v = verify_once(t, &[]).0;
            v["recount"]["beyond_checkpoint"] == 0
                && v["not_checked"].as_array().unwrap().is_empty()
                && v["global_total"]["checked"] == true
        },
    );
    counter.signal("TERM");
    counter.wait(Duration::from_secs(60));
    let mut total = 0;
    for (_, e) in &files {
        total += e.total();
    }
    let (v, ok) = verify(t, &[]);
    assert!(ok, "{v:#}");
    assert_eq!(
        v["global_total"]["recount"],
        total,
        "{v:#}\n{}",
        counter.log_text()
    );
}

on_backends! {
    verify_runs_beside_the_counter {
        embedded => {
            let t = Target::embedded();
            t.run(&["setup", "--shards", "2"]);
            beside_a_running_counter(&t);
        },
        aws => beside_a_running_counter(&Target::aws("verify-live", 2)),
    }
}

/// Counting likers, a count's markers are the change log's, not the stream's: a like put after
/// verify read its shard, and counted before verify reads the counts, is in a count verify did
/// not recount. Verify reads on to what the counter can have applied and leaves that post for its
/// next run; it does not report it off (it did, 2 runs in some hundred beside a busy counter).
fn a_like_counted_after_its_shard_was_read(t: &Target, tables: &dyn Tables) {
    let e = counted(t, 200);
    let mut posts = e.counts.keys();
    let (post, planted) = (posts.next().unwrap().clone(), posts.next().unwrap().clone());
    // A like of each, put while verify pauses; the second also planted 5 more by hand: one
    // unread like excuses one, not 6.
    let late = file_in(t, "late.ndjson");
    let now = tally_core::clock::now_ms();
    let line = |i: usize, p: &str| {
        format!(
            r#"{{"event_id":"late-{i}","post_id":"{p}","user_id":"late-user","action":"like","created_at":{now}}}"#
        )
    };
    std::fs::write(&late, line(1, &post) + "\n" + &line(2, &planted) + "\n").unwrap();
    let go = t.dir.path().join("verify-go");
    let log = t.dir.path().join("verify-paused.log");
    let paused = t
        .cmd(&["verify", "--json"])
        .env(tally::settings::VERIFY_PAUSE_VAR, &go)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("failpoint: verify paused")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "verify never paused"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.run(&["replay", late.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    tables.add_to_live(&planted, &[("n", 5)]);
    std::fs::write(&go, "").unwrap();
    let out = paused.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!out.status.success(), "{v:#}");
    assert_eq!(v["posts_off"], 1, "only the planted post is off: {v:#}");
    assert_eq!(v["drifts"][0]["post_id"], planted.as_str(), "{v:#}");
    assert_eq!(v["drifts"][0]["off_by"], 6, "{v:#}");
    assert!(
        v["not_checked"]
            .to_string()
            .contains("the counter applied after their shard was read"),
        "{v:#}"
    );
    // Read on the next run, the planted likes taken out: exact, each like counted once.
    tables.add_to_live(&planted, &[("n", -5)]);
    let mut expected = e.counts.clone();
    *expected.get_mut(&post).unwrap() += 1;
    *expected.get_mut(&planted).unwrap() += 1;
    assert_eq!(t.mismatches(&expected), vec![]);
    let (v, ok) = verify(t, &[]);
    assert!(ok, "{v:#}");
    assert_eq!(v["posts_checked"], e.counts.len(), "{v:#}");
}

on_backends! {
    verify_leaves_a_like_it_did_not_read_for_its_next_run {
        embedded => {
            let (t, db) = on_sqlite();
            a_like_counted_after_its_shard_was_read(&t, &db);
        },
        aws => {
            let (t, tables) = on_dynamo("verify-late");
            a_like_counted_after_its_shard_was_read(&t, &tables);
        },
    }
}

/// Counting likers, a like put and not applied yet (the counter stopped behind the stream) is
/// not in the edges: a post planted one more than the edges hold is off, whether verify reads
/// the stream or a recording that ends before the like (the like is no excuse either way).
fn a_like_not_applied_is_no_excuse_for_drift(t: &Target, tables: &dyn Tables) {
    let e = counted(t, 200);
    let rec = file_in(t, "recorded.ndjson");
    t.run(&["record", rec.to_str().unwrap()]);
    let late = file_in(t, "late.ndjson");
    let now = tally_core::clock::now_ms();
    std::fs::write(
        &late,
        format!(
            r#"{{"event_id":"late-1","post_id":"post-0","user_id":"late-user","action":"like","created_at":{now}}}"#
        ),
    )
    .unwrap();
    t.run(&["replay", late.to_str().unwrap()]);
    tables.add_to_live("post-0", &[("n", 1)]);
    for from in [&[][..], &["--from", rec.to_str().unwrap()][..]] {
        let (v, ok) = verify(t, from);
        assert!(!ok, "verify {from:?} exited 0 on a wrong store: {v:#}");
        assert_eq!(v["posts_off"], 1, "{v:#}");
        assert_eq!(v["drifts"][0]["post_id"], "post-0", "{v:#}");
        assert_eq!(v["drifts"][0]["off_by"], 1, "{v:#}");
    }
    assert_eq!(e.counts["post-0"] + 1, t.count("post-0"));
}

on_backends! {
    verify_finds_drift_beside_a_like_not_applied_yet {
        embedded => {
            let (t, db) = on_sqlite();
            a_like_not_applied_is_no_excuse_for_drift(&t, &db);
        },
        aws => {
            let (t, tables) = on_dynamo("verify-behind");
            a_like_not_applied_is_no_excuse_for_drift(&t, &tables);
        },
    }
}

/// A recording checked after the counter has applied more than it holds: every like in it undone
/// since, counted. Verify against it compares what it can and says what it cannot — the posts
/// and edges the later records changed, the total — and reports nothing off.
fn a_recording_behind_the_counter(t: &Target) {
    let f = file_in(t, "likes.ndjson");
    write_contract_file(&f, 200, 25, 7);
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let rec = file_in(t, "recorded.ndjson");
    t.run(&["record", rec.to_str().unwrap()]);
    let now = tally_core::clock::now_ms();
    let undo: Vec<String> = std::fs::read_to_string(&f)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["action"] == "like")
        .enumerate()
        .map(|(i, v)| {
            format!(
                r#"{{"event_id":"undo-{i}","post_id":{},"user_id":{},"action":"unlike","created_at":{now}}}"#,
                v["post_id"], v["user_id"]
            )
        })
        .collect();
    let undo_file = file_in(t, "undo.ndjson");
    std::fs::write(&undo_file, undo.join("\n") + "\n").unwrap();
    t.run(&["replay", undo_file.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let (v, ok) = verify(t, &["--from", rec.to_str().unwrap()]);
    assert!(ok, "a recording behind the counter was called drift: {v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
    assert_eq!(v["edges"]["off"], serde_json::json!([]), "{v:#}");
    let said = v["not_checked"].to_string();
    assert!(
        said.contains("the edges: shards' checkpoints are past"),
        "{v:#}"
    );
    assert!(said.contains("past the recording's end"), "{v:#}");
}

on_backends! {
    verify_against_a_recording_the_counter_has_passed {
        embedded => {
            let (t, _) = on_sqlite();
            a_recording_behind_the_counter(&t);
        },
        aws => a_recording_behind_the_counter(&Target::aws("verify-passed", 2)),
    }
}

/// Verify recounts what the stream still holds: records the counter applied that the retention
/// trimmed since are beyond its check — it names the trim, and the posts that held them are off
/// (GUIDE says so). A recording kept from the start checks the same stack exact.
#[test]
fn records_trimmed_after_they_were_counted_are_beyond_verify_but_not_a_recording() {
    let (t, _) = on_sqlite();
    let first = counted(&t, 200);
    std::thread::sleep(Duration::from_millis(500));
    // What arrived before this instant is trimmed below, however long the rest takes.
    let cut = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    // Later likes of the same posts, by other users.
    let f = file_in(&t, "later.ndjson");
    let later: Vec<String> = (0..first.counts.len())
        .map(|i| {
            let now = tally_core::clock::now_ms();
            format!(
                r#"{{"event_id":"later-{i}","post_id":"post-{i}","user_id":"later-user","action":"like","created_at":{now}}}"#
            )
        })
        .collect();
    std::fs::write(&f, later.join("\n") + "\n").unwrap();
    t.run(&["replay", f.to_str().unwrap()]);
    t.run(&["count", "--until-idle"]);
    let rec = file_in(&t, "kept.ndjson");
    t.run(&["record", rec.to_str().unwrap()]);
    let older_than = format!("{}ms", cut.elapsed().as_millis());
    t.run(&["trim", "--older-than", &older_than, "--yes"]);
    let (v, ok) = verify_once(&t, &[]);
    assert!(!ok, "{v:#}");
    // Every post that had likes in the trimmed records.
    let held = first.counts.values().filter(|n| **n != 0).count();
    assert_eq!(v["posts_off"], held, "{v:#}");
    assert!(
        v["not_checked"]
            .to_string()
            .contains("past the stream's retention"),
        "{v:#}"
    );
    let (v, ok) = verify(&t, &["--from", rec.to_str().unwrap()]);
    assert!(ok, "{v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
    assert_eq!(v["posts_checked"], first.counts.len(), "{v:#}");
}

/// A recording keeps each record's shard, sequence number, key and arrival time; replayed at a
/// speed it keeps the recorded gaps (divided by the speed), each key's order and each key.
#[test]
fn a_recording_keeps_the_stream_s_shape_and_replays_at_its_pace() {
    let src = Target::embedded();
    src.run(&["setup", "--shards", "3"]);
    let f = file_in(&src, "likes.ndjson");
    let e = write_contract_file(&f, 300, 25, 5);
    // Paced, so that arrival times spread over about 1.5 s.
    src.run(&["replay", f.to_str().unwrap(), "--rate", "200"]);
    let rec = file_in(&src, "recorded.ndjson");
    src.run(&["record", rec.to_str().unwrap()]);
    let lines = recorded(&rec);
    assert_eq!(lines.len(), e.lines, "one line per record");
    let span = |ls: &[Value]| {
        let a: Vec<i64> = ls
            .iter()
            .map(|l| l["arrival_ms"].as_i64().unwrap())
            .collect();
        a.iter().max().unwrap() - a.iter().min().unwrap()
    };
    let recorded_span = span(&lines);
    assert!(recorded_span >= 1_000, "paced over {recorded_span} ms");

    let dst = Target::embedded();
    dst.run(&["setup", "--shards", "3"]);
    dst.run(&["replay", rec.to_str().unwrap(), "--speed", "2"]);
    let again = file_in(&dst, "again.ndjson");
    dst.run(&["record", again.to_str().unwrap()]);
    let replayed = recorded(&again);
    // Each key's records in the recorded order, with the recorded data.
    assert_eq!(by_key(&replayed), by_key(&lines));
    // The gaps, halved: never faster than the recording allows (a lower bound; how much slower
    // a busy machine makes it is not a test's business).
    let replayed_span = span(&replayed);
    assert!(
        replayed_span >= recorded_span / 2 - 50,
        "replayed in {replayed_span} ms, recorded over {recorded_span} ms at speed 2"
    );
    // A plain file has no arrival times to keep.
    let out = dst.fail(&["replay", f.to_str().unwrap(), "--speed", "2"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--speed needs a recording"));
}

fn recorded(f: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(f).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["tally_recording"], 1, "{header}");
    lines
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            for k in ["shard", "seq", "key", "arrival_ms", "data"] {
                assert!(!v[k].is_null(), "{k} in {l}");
            }
            v
        })
        .collect()
}

fn by_key(lines: &[Value]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut m: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for l in lines {
        m.entry(l["key"].as_str().unwrap().to_owned())
            .or_default()
            .push(l["data"].as_str().unwrap().to_owned());
    }
    m
}

/// The runbook's loop: record a live stream (retries and malformed records in it), verify the
/// source against the recording, replay it at speed into a fresh stack, count, verify — exact.
fn replay_into_a_fresh_stack(dst: &Target) {
    let src = Target::embedded();
    src.run(&["setup", "--shards", "2"]);
    let e = counted(&src, 400);
    let rec = file_in(&src, "recorded.ndjson.gz");
    src.run(&["record", rec.to_str().unwrap()]);
    let (v, ok) = verify(&src, &["--from", rec.to_str().unwrap()]);
    assert_exact(&v, ok, &e);

    dst.run(&["replay", rec.to_str().unwrap(), "--speed", "50"]);
    dst.run(&["count", "--until-idle"]);
    assert_eq!(dst.mismatches(&e.counts), vec![]);
    let (v, ok) = verify(dst, &[]);
    assert_exact(&v, ok, &e);
    // The recording beside the stack it was replayed into: refused with the reason, not
    // reported as drift (its sequence numbers are the old stream's).
    let out = dst.fail(&["verify", "--from", rec.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is not a recording of the stream the counter read")
            && err.contains("without --from"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

on_backends! {
    a_recorded_stream_replayed_into_a_fresh_stack_verifies_exact {
        embedded => {
            let dst = Target::embedded();
            dst.run(&["setup", "--shards", "3"]);
            replay_into_a_fresh_stack(&dst);
        },
        aws => replay_into_a_fresh_stack(&Target::aws("verify-fresh", 2)),
    }
}
