//! A DynamoDB table's change stream as the input (`input.format = "dynamodb"`): records written
//! here as Kinesis Data Streams for DynamoDB writes them (DynamoDB Local does not emit to
//! Kinesis), duplicated and reordered as AWS says they may come, counted to the table's final
//! state — on both backends, with verify exact — and a backfill from a Scan overlapping the
//! stream.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{json, Value};

use crate::common::{file_in, now_ms, Target};

/// The settings of a single-table design whose withdrawn likes keep a `deleted_at`.
fn reading_changes(mut t: Target) -> Target {
    for (k, v) in [
        ("TALLY_INPUT__FORMAT", "dynamodb"),
        ("TALLY_INPUT__WITHDRAWN_ATTRIBUTE", "deleted_at"),
    ] {
        t.env.push((k.into(), v.into()));
    }
    t
}

/// One change record, as DynamoDB writes it to Kinesis.
fn change(event_id: &str, name: &str, pk: &str, sk: &str, extra: Value, at_ms: i64) -> String {
    let keys = json!({"PK": {"S": pk}, "SK": {"S": sk}});
    let mut image = keys.clone();
    image["liked_at"] = json!({"N": at_ms.to_string()});
    if let (Some(i), Some(e)) = (image.as_object_mut(), extra.as_object()) {
        i.extend(e.clone());
    }
    let images = if name == "REMOVE" {
        "OldImage"
    } else {
        "NewImage"
    };
    json!({
        "awsRegion": "us-east-1", "eventID": event_id, "eventName": name,
        "userIdentity": null, "recordFormat": "application/json", "tableName": "app",
        "dynamodb": {"ApproximateCreationDateTime": at_ms, "Keys": keys, images: image, "SizeBytes": 80},
        "eventSource": "aws:dynamodb",
    })
    .to_string()
}

fn write_lines(path: &std::path::Path, lines: &[String]) {
    let mut f = std::fs::File::create(path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// Every case of the mapping on one post, delivered out of order and with copies; the table
/// ends with u1 and u4 liking `pc` (u2 removed, u3 withdrawn, u4 withdrawn then restored).
fn the_cases(t0: i64) -> (Vec<String>, i64, usize) {
    let like = |id: &str, name: &str, user: &str, extra: Value, dt: i64| {
        change(id, name, "POST#pc", &format!("LIKE#{user}"), extra, t0 + dt)
    };
    let u1 = like("a01", "INSERT", "u1", json!({}), 0);
    let u2_in = like("a02", "INSERT", "u2", json!({}), 1);
    let u2_out = like("a03", "REMOVE", "u2", json!({}), 2);
    let u3_in = like("a04", "INSERT", "u3", json!({}), 3);
    let u3_soft = like("a05", "MODIFY", "u3", json!({"deleted_at": {"N": "1"}}), 4);
    let u4_in = like("a06", "INSERT", "u4", json!({}), 5);
    let u4_soft = like("a07", "MODIFY", "u4", json!({"deleted_at": {"N": "1"}}), 6);
    let u4_back = like(
        "a08",
        "MODIFY",
        "u4",
        json!({"deleted_at": {"NULL": true}}),
        7,
    );
    let meta = change(
        "a09",
        "INSERT",
        "POST#pc",
        "METADATA",
        json!({"title": {"S": "hi"}}),
        t0,
    );
    let comment = change("a10", "MODIFY", "POST#pc", "COMMENT#c1", json!({}), t0 + 1);
    let bad_user = change(
        "a11",
        "INSERT",
        "POST#pc",
        "LIKE#not a user",
        json!({}),
        t0 + 2,
    );
    let bad_post = change("a12", "INSERT", "USER#pc", "LIKE#u9", json!({}), t0 + 2);
    let lines = vec![
        // Later changes before earlier ones, and copies, as the stream may deliver them.
        u2_out.clone(),
        u1.clone(),
        u4_back,
        meta,
        u3_soft,
        u2_in,
        u1,
        bad_user,
        u4_soft,
        u3_in,
        comment,
        u4_in,
        u2_out,
        bad_post,
    ];
    (lines, 2, 2)
}

/// `tally verify --json`, which must find the store exact (exit 0, nothing off).
fn verified(t: &Target) -> Value {
    let out = crate::common::output(t.cmd(&["verify", "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "verify found drift: {v:#}");
    assert_eq!(v["posts_off"], 0, "{v:#}");
    assert_eq!(v["global_total"]["off_by"], 0, "{v:#}");
    assert_eq!(v["edges"]["off"], json!([]), "{v:#}");
    v
}

fn counts_a_table_s_final_state(t: Target) {
    let t = reading_changes(t);
    let t0 = now_ms() - 120_000;
    let (cases, pc_likers, bad) = the_cases(t0);
    let file = file_in(&t, "cases.ndjson");
    write_lines(&file, &cases);
    t.run(&["replay", file.to_str().unwrap()]);
    // A generated table's stream on top: many posts and users, copies, late records, other items.
    let truth = file_in(&t, "truth.json");
    let produced = t.json(&[
        "produce",
        "--format",
        "dynamodb",
        "--events",
        "4000",
        "--posts",
        "30",
        "--users",
        "200",
        "--unlike-ratio",
        "0.3",
        "--duplicate-ratio",
        "0.05",
        "--malformed-ratio",
        "0.01",
        "--truth",
        truth.to_str().unwrap(),
        "--json",
    ]);
    let c = t.json(&["count", "--until-idle", "--json"]);
    assert!(
        c["skipped"].as_u64().unwrap() >= 2,
        "the other items are skipped: {c}"
    );

    assert_eq!(t.count("pc"), pc_likers);
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    let mut expected: BTreeMap<String, i64> =
        serde_json::from_value(truth["counts"].clone()).unwrap();
    expected.insert("pc".into(), pc_likers);
    assert_eq!(t.mismatches(&expected), vec![]);
    let total = truth["total"].as_i64().unwrap() + pc_likers;
    assert_eq!(t.json(&["total", "--json"])["total"], total);

    let malformed = produced["malformed"].as_u64().unwrap() + bad as u64;
    let dl = t.json(&["dead-letters", "--json"]);
    assert_eq!(dl["total"], malformed, "{dl}");
    let reasons: Vec<&str> = dl["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("attribute `SK` (user_id)")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(r#"beginning with "POST#""#)),
        "{reasons:?}"
    );

    let v = verified(&t);
    assert_eq!(v["global_total"]["recount"], total, "{v:#}");
    assert_eq!(v["dead_letters"]["found"], malformed, "{v:#}");
    assert!(v["recount"]["skipped"].as_u64().unwrap() >= 2, "{v:#}");
    // "Since T" by the records' times: pc's two likers were created two minutes ago.
    let q = t.query_one(&["query", "pc", "--since", "1h", "--json"]);
    assert_eq!(
        (q["count"].as_i64(), q["count_since"].as_i64()),
        (Some(2), Some(2)),
        "{q}"
    );
    let q = t.query_one(&["query", "pc", "--since", "10s", "--json"]);
    assert_eq!(q["count_since"], 0, "{q}");

    // Trending and latency read the same likes.
    t.run(&["analytics", "--until-idle"]);
    let top = t.json(&["top", "--json"]);
    assert!(top.to_string().contains("\"p1\""), "{top}");
    let lat = t.json(&["latency", "--json"]);
    assert!(lat.to_string().contains("p99"), "{lat}");

    // Recorded, the stream verifies against its file, and replayed into a fresh store it counts
    // the same.
    let rec = file_in(&t, "recorded.ndjson");
    t.run(&["record", rec.to_str().unwrap()]);
    let out = crate::common::output(t.cmd(&["verify", "--from", rec.to_str().unwrap(), "--json"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let fresh = reading_changes(Target::embedded());
    fresh.run(&["replay", rec.to_str().unwrap()]);
    fresh.run(&["count", "--until-idle"]);
    assert_eq!(fresh.mismatches(&expected), vec![]);
    verified(&fresh);
}

on_backends! {
    a_table_s_change_stream_counts_its_final_state {
        embedded => counts_a_table_s_final_state(Target::embedded()),
        aws => counts_a_table_s_final_state(Target::aws("ddbchanges", 2)),
    }
}

/// Counting a table's changes as events would count a re-like and every copy again: refused.
#[test]
fn a_change_stream_is_counted_as_likers_only() {
    let t = reading_changes(Target::embedded()).counting_events();
    let out = t.fail(&["total"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`input.format = \"dynamodb\"` needs `counter.count = \"likers\"`"),
        "{err}"
    );
}

#[cfg(feature = "aws-local")]
mod backfill {
    use super::*;
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
        ScalarAttributeType,
    };

    /// The application's own single-table design in DynamoDB Local.
    struct AppTable {
        client: aws_sdk_dynamodb::Client,
        name: String,
        rt: tokio::runtime::Runtime,
    }

    impl AppTable {
        fn create(name: &str) -> AppTable {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let client = crate::common::dynamodb_client();
            let key = |n: &str, k: KeyType| {
                KeySchemaElement::builder()
                    .attribute_name(n)
                    .key_type(k)
                    .build()
                    .unwrap()
            };
            let attr = |n: &str| {
                AttributeDefinition::builder()
                    .attribute_name(n)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap()
            };
            rt.block_on(
                client
                    .create_table()
                    .table_name(name)
                    .key_schema(key("PK", KeyType::Hash))
                    .key_schema(key("SK", KeyType::Range))
                    .attribute_definitions(attr("PK"))
                    .attribute_definitions(attr("SK"))
                    .billing_mode(BillingMode::PayPerRequest)
                    .send(),
            )
            .unwrap();
            AppTable {
                client,
                name: name.to_owned(),
                rt,
            }
        }

        fn put(&self, pk: &str, sk: &str, deleted: bool) {
            let mut req = self
                .client
                .put_item()
                .table_name(&self.name)
                .item("PK", AttributeValue::S(pk.into()))
                .item("SK", AttributeValue::S(sk.into()));
            if deleted {
                req = req.item("deleted_at", AttributeValue::N("1".into()));
            }
            self.rt.block_on(req.send()).unwrap();
        }

        fn delete(&self, pk: &str, sk: &str) {
            let req = self
                .client
                .delete_item()
                .table_name(&self.name)
                .key("PK", AttributeValue::S(pk.into()))
                .key("SK", AttributeValue::S(sk.into()));
            self.rt.block_on(req.send()).unwrap();
        }

        /// What the table says each post's count is: its like items not withdrawn.
        fn likers(&self) -> BTreeMap<String, i64> {
            let out = self
                .rt
                .block_on(self.client.scan().table_name(&self.name).send())
                .unwrap();
            let mut counts = BTreeMap::new();
            for item in out.items() {
                let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap();
                let (pk, sk) = (s("PK"), s("SK"));
                if sk.starts_with("LIKE#") && !item.contains_key("deleted_at") {
                    *counts
                        .entry(pk.trim_start_matches("POST#").to_owned())
                        .or_insert(0) += 1;
                }
            }
            counts
        }
    }

    impl Drop for AppTable {
        fn drop(&mut self) {
            let _ = self
                .rt
                .block_on(self.client.delete_table().table_name(&self.name).send());
        }
    }

    /// Items from before the stream, changes streamed before the scan and after it, copies: the
    /// counts are the table's final state.
    fn backfill_overlapping_the_stream(t: Target, table: &str) {
        let dynamodb = std::env::var("TEST_DYNAMODB_ENDPOINT")
            .unwrap_or_else(|_| "http://127.0.0.1:8000".into());
        let mut t = reading_changes(t);
        if !t.is_aws() {
            t.env.push(("TALLY_DYNAMODB_ENDPOINT_URL".into(), dynamodb));
            for (k, v) in [
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_REGION", "us-east-1"),
            ] {
                t.env.push((k.into(), v.into()));
            }
        }
        let app = AppTable::create(table);
        // Before the stream: ten likes of pb, one withdrawn, and the post's metadata.
        for u in 1..=10 {
            app.put("POST#pb", &format!("LIKE#u{u}"), u == 3);
        }
        app.put("POST#pb", "METADATA", false);
        // The stream is enabled; changes before the scan: u11 likes (also in the scan), u10
        // unlikes (gone before it), each delivered twice.
        let before = now_ms() - 30_000;
        app.put("POST#pb", "LIKE#u11", false);
        app.delete("POST#pb", "LIKE#u10");
        let early = [
            change("b1", "INSERT", "POST#pb", "LIKE#u11", json!({}), before),
            change("b2", "REMOVE", "POST#pb", "LIKE#u10", json!({}), before + 1),
        ];
        let file = file_in(&t, "early.ndjson");
        write_lines(&file, &[early.to_vec(), early.to_vec()].concat());
        t.run(&["replay", file.to_str().unwrap()]);

        // Refused until the stream is said to be on.
        let out = t.fail(&["backfill", "--table", table], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--assume-streaming"), "{err}");
        let b = t.json(&["backfill", "--table", table, "--assume-streaming", "--json"]);
        assert_eq!(
            (
                b["items"].as_u64(),
                b["likes"].as_u64(),
                b["skipped"].as_u64()
            ),
            (Some(11), Some(10), Some(1)),
            "{b}"
        );

        // After the scan: u1 unlikes, u2 withdraws, u3 comes back, u12 likes; the records may
        // come before the backfill's are counted, and twice.
        let after = now_ms() + 1_000;
        app.delete("POST#pb", "LIKE#u1");
        app.put("POST#pb", "LIKE#u2", true);
        app.put("POST#pb", "LIKE#u3", false);
        app.put("POST#pb", "LIKE#u12", false);
        let late = [
            change("c1", "REMOVE", "POST#pb", "LIKE#u1", json!({}), after),
            change(
                "c2",
                "MODIFY",
                "POST#pb",
                "LIKE#u2",
                json!({"deleted_at": {"N": "1"}}),
                after + 1,
            ),
            change(
                "c3",
                "MODIFY",
                "POST#pb",
                "LIKE#u3",
                json!({"deleted_at": {"NULL": true}}),
                after + 2,
            ),
            change("c4", "INSERT", "POST#pb", "LIKE#u12", json!({}), after + 3),
        ];
        let file = file_in(&t, "late.ndjson");
        write_lines(&file, &[late.to_vec(), late.to_vec()].concat());
        t.run(&["replay", file.to_str().unwrap()]);
        t.run(&["count", "--until-idle"]);

        let table_says = app.likers();
        assert_eq!(table_says.get("pb"), Some(&9), "u4-u9, u3, u11, u12");
        assert_eq!(t.mismatches(&table_says), vec![]);
        assert_eq!(t.json(&["total", "--json"])["total"], 9);
        verified(&t);

        // A second backfill changes nothing: the items as they are now, again.
        t.run(&["backfill", "--table", table, "--assume-streaming"]);
        t.run(&["count", "--until-idle"]);
        assert_eq!(t.mismatches(&table_says), vec![]);
        verified(&t);
    }

    on_backends! {
        a_backfill_overlapping_the_stream_is_exact {
            aws => backfill_overlapping_the_stream(Target::aws("ddbbackfill", 2), &format!("app-aws-{}", std::process::id())),
        }
    }

    #[test]
    fn a_backfill_overlapping_the_stream_is_exact_embedded() {
        backfill_overlapping_the_stream(
            Target::embedded(),
            &format!("app-emb-{}", std::process::id()),
        );
    }
}
