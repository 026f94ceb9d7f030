//! The edges' change log on DynamoDB Local: every change of an edge in the table's stream once,
//! in the edge's order, and none for a refused write (`tally_aws::edge_log`), against the local
//! peers (`scripts/local-aws.sh start`; compiled with `--features aws-local`).
#![allow(clippy::unwrap_used)]
#![cfg(feature = "aws-local")]

use std::collections::BTreeMap;

use tally_core::edge::EdgeEvent;
use tally_core::ports::{EdgeWriter, EdgesWritten};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue as Item, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use tally_aws::dynamo::DynamoStore;
use tally_aws::{Aws, AwsSettings};
use tally_core::clock::now_ms;
use tally_core::edge::EdgeChange;
use tally_core::ports::{StartPosition, Stream, StreamRecord};

/// A table set of the local peers, torn down when dropped.
struct Teardown(AwsSettings);

impl Drop for Teardown {
    fn drop(&mut self) {
        let s = self.0.clone();
        // Best effort, on a runtime of its own: the test's runtime is ending.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().map(|rt| rt.block_on(tally_aws::setup::teardown(&s)))
        })
        .join();
    }
}

/// The settings of a table set of its own on the local peers (as the conformance suite's).
fn settings(name: &str) -> AwsSettings {
    let unique = format!("{name}-{}-{}", std::process::id(), now_ms() % 1_000_000_000);
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ] {
        if std::env::var(k).is_err() {
            // Test credentials for the local peers only; set before any client exists.
            std::env::set_var(k, v);
        }
    }
    let endpoint =
        |var: &str, default: &str| Some(std::env::var(var).unwrap_or_else(|_| default.to_owned()));
    AwsSettings {
        stream_retention_hours: 24,
        recent_likers_index: true,
        stream: format!("log-{unique}"),
        table_prefix: format!("log-{unique}"),
        kinesis_endpoint_url: endpoint("TEST_KINESIS_ENDPOINT", "http://127.0.0.1:4568"),
        dynamodb_endpoint_url: endpoint("TEST_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"),
    }
}

/// A fresh table set, set up, and its teardown.
async fn fresh(name: &str) -> (Aws, Teardown) {
    let s = settings(name);
    let gone = Teardown(s.clone());
    tally_aws::setup::setup(&s, 1).await.unwrap();
    (Aws::connect(&s).await.unwrap(), gone)
}

/// An edge: its post and user.
type Edge = (String, String);

/// A change's likes: before and after.
type Likes = (Option<i64>, Option<i64>);

fn ev(post: &str, user: &str, liked: bool, at_ms: i64, id: &str) -> EdgeEvent {
    EdgeEvent {
        post_id: post.into(),
        user_id: user.into(),
        liked,
        at_ms,
        event_id: id.into(),
    }
}

/// Writes `edges` and checks how many changed and how many were refused.
async fn write(t: &DynamoStore, edges: &[EdgeEvent], changed: u64, refused: u64) {
    let w: EdgesWritten = t.write_edges(edges).await.unwrap();
    assert!(w.retry.is_empty(), "{:?}", w.error);
    assert_eq!(
        (w.changed, w.applied.refused),
        (changed, refused),
        "{edges:?}"
    );
    assert_eq!(w.applied.written, changed);
}

/// Every record of the shard from `from`, read two at a time until a read is empty.
async fn read_all(log: &dyn Stream, shard: &str, from: StartPosition) -> Vec<StreamRecord> {
    let mut r = log.open(shard, from).await.unwrap();
    let mut out = Vec::new();
    loop {
        let b = r.next_batch(2).await.unwrap();
        if b.records.is_empty() {
            assert!(b.is_caught_up(), "an empty read is idle: {b:?}");
            assert!(!b.is_at_tip(), "but never said to be the tip: {b:?}");
            return out;
        }
        assert!(b.millis_behind_latest.is_some_and(|m| m >= 0), "{b:?}");
        out.extend(b.records);
    }
}

#[tokio::test]
async fn every_change_of_an_edge_is_in_the_log_once_in_order_and_a_refusal_is_not() {
    let (aws, _gone) = fresh("edgelog").await;
    let t = &aws.tables;
    let started = now_ms();
    // A like, an unlike of a never-liked edge, a like of another post.
    let first = [
        ev("p1", "a", true, 1_000, "e1"),
        ev("p1", "b", false, 1_500, "e2"),
        ev("p2", "a", true, 3_000, "e3"),
    ];
    write(t, &first, 3, 0).await;
    // The same like again (a copy) and an older unlike: both refused.
    write(t, &[ev("p1", "a", true, 1_000, "e1")], 0, 1).await;
    write(t, &[ev("p1", "a", false, 500, "e0")], 0, 1).await;
    // A newer unlike; then, at its time, a like with a larger id (the tie-break) and an
    // unlike with a smaller one (refused).
    write(t, &[ev("p1", "a", false, 2_000, "e5")], 1, 0).await;
    write(t, &[ev("p1", "a", true, 2_000, "e6")], 1, 0).await;
    write(t, &[ev("p1", "a", false, 2_000, "e4")], 0, 1).await;
    // An edge deleted (by hand: tally never deletes one) is a change too.
    t.client()
        .delete_item()
        .table_name(t.table("edges"))
        .key("pk", Item::S("p1".into()))
        .key("sk", Item::S("E#a".into()))
        .send()
        .await
        .unwrap();
    // An item that is not an edge as tally writes it (its time a string): its change is
    // in the log as no change, and a write of it fails, naming it.
    t.client()
        .put_item()
        .table_name(t.table("edges"))
        .item("pk", Item::S("p3".into()))
        .item("sk", Item::S("E#c".into()))
        .item("l", Item::N("1".into()))
        .item("t", Item::S("x".into()))
        .item("e", Item::S("e7".into()))
        .send()
        .await
        .unwrap();
    let err = t
        .write_edges(&[ev("p3", "c", true, 9_000, "e8")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, tally_core::ports::PortError::Corrupt { item, .. } if item == "p3/E#c"),
        "{err}"
    );

    let log = t.change_log().unwrap();
    let shards = log.list_shards().await.unwrap();
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert!(
        shards[0].parents.is_empty() && !shards[0].closed,
        "{shards:?}"
    );
    let shard = &shards[0].shard_id;
    let records = read_all(log.as_ref(), shard, StartPosition::TrimHorizon).await;

    let mut changes: BTreeMap<Edge, Vec<Likes>> = BTreeMap::new();
    let mut not_changes = Vec::new();
    for r in &records {
        match EdgeChange::decode(&r.data) {
            Ok(c) => {
                assert_eq!(r.partition_key, c.post_id.as_str());
                let edge = (c.post_id.to_string(), c.user_id.to_string());
                changes.entry(edge).or_default().push((c.before, c.after));
            }
            Err(_) => not_changes.push(r),
        }
        // DynamoDB's clock at the write, rounded down: to the second, and on DynamoDB
        // Local to the minute.
        assert!(
            (started - 60_000..=now_ms() + 1_000).contains(&r.arrival_ms),
            "{} against {started}",
            r.arrival_ms
        );
    }
    let edge = |p: &str, u: &str| (p.to_owned(), u.to_owned());
    let expected = BTreeMap::from([
        (
            edge("p1", "a"),
            vec![
                (None, Some(1_000)),
                (Some(1_000), None),
                (None, Some(2_000)),
                (Some(2_000), None),
            ],
        ),
        (edge("p1", "b"), vec![(None, None)]),
        (edge("p2", "a"), vec![(None, Some(3_000))]),
    ]);
    assert_eq!(changes, expected, "refused writes leave nothing in the log");
    assert_eq!(not_changes.len(), 1, "{not_changes:?}");
    let bad = not_changes[0];
    assert_eq!(
        (bad.data[0], bad.partition_key.as_str()),
        (tally_aws::edge_log::NOT_A_CHANGE, "p3")
    );
    let why = String::from_utf8_lossy(&bad.data[1..]);
    assert!(why.contains("`t` is not a number"), "{why}");
    assert!(EdgeChange::decode(&bad.data).is_err());
    assert_eq!(records.len(), 7);
    assert!(
        records.windows(2).all(|w| w[0].seq < w[1].seq),
        "a shard's records in order"
    );

    // A reader resumed after a record reads what follows it, and nothing is put to the log.
    let rest = read_all(
        log.as_ref(),
        shard,
        StartPosition::AfterSequence(records[1].seq.clone()),
    )
    .await;
    assert_eq!(rest, records[2..]);
    let at = read_all(
        log.as_ref(),
        shard,
        StartPosition::AtSequence(records[4].seq.clone()),
    )
    .await;
    assert_eq!(at, records[4..]);
    assert!(log.put_records(&[]).await.is_err());
}

#[tokio::test]
async fn an_edges_table_without_its_stream_is_named_and_setup_turns_it_on() {
    let s = settings("nostream");
    let _gone = Teardown(s.clone());
    let t = DynamoStore::new(&tally_aws::sdk_config().await.unwrap(), &s);
    let edges = t.table("edges");
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    };
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    t.client()
        .create_table()
        .table_name(&edges)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .send()
        .await
        .unwrap();
    let log = t.change_log().unwrap();
    let err = log.list_shards().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the edges table {edges} has no stream: run `tally setup`")
    );
    tally_aws::setup::setup(&s, 1).await.unwrap();
    // The failed look-up was not kept: the same log finds the stream now.
    let shards = log.list_shards().await.unwrap();
    assert_eq!(shards.len(), 1, "{shards:?}");
}
