//! The port conformance suite on the AWS adapters, against the local API peers
//! (`scripts/local-aws.sh start`; compiled with `--features aws-local`).
#![allow(clippy::unwrap_used)]
#![cfg(feature = "aws-local")]

use tally_aws::{Aws, AwsSettings};

/// A fresh stream and tables, deleted again when dropped (the local peers cap shards in total).
struct Fresh {
    aws: Aws,
    settings: AwsSettings,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let s = self.settings.clone();
        // Best effort, on a runtime of its own: the test's runtime is ending.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().map(|rt| rt.block_on(tally_aws::setup::teardown(&s)))
        })
        .join();
    }
}

async fn fresh(name: &str, shards: usize) -> Fresh {
    let unique = format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 1_000_000_000
    );
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
    let s = AwsSettings {
        stream_retention_hours: 24,
        recent_likers_index: true,
        stream: format!("conf-{unique}"),
        table_prefix: format!("conf-{unique}"),
        kinesis_endpoint_url: Some(
            std::env::var("TEST_KINESIS_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:4568".into()),
        ),
        dynamodb_endpoint_url: Some(
            std::env::var("TEST_DYNAMODB_ENDPOINT")
                .unwrap_or_else(|_| "http://127.0.0.1:8000".into()),
        ),
    };
    tally_aws::setup::setup(&s, shards).await.unwrap();
    Fresh {
        aws: Aws::connect(&s).await.unwrap(),
        settings: s,
    }
}

fn stream_of(f: &Fresh) -> &tally_aws::KinesisStream {
    &f.aws.stream
}

fn tables_of(f: &Fresh) -> &tally_aws::DynamoStore {
    &f.aws.tables
}

/// Sets attribute `attr` of the item `key` (its two key attributes) of `table` to `v`, behind
/// the store's back: how a corruption test writes what tally never writes. The item must be there.
async fn set_attr(
    client: &aws_sdk_dynamodb::Client,
    table: String,
    [(k1, v1), (k2, v2)]: [(&str, String); 2],
    attr: &str,
    v: aws_sdk_dynamodb::types::AttributeValue,
) {
    use aws_sdk_dynamodb::types::AttributeValue::S;
    client
        .update_item()
        .table_name(table)
        .key(k1, S(v1))
        .key(k2, S(v2))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", attr)
        .expression_attribute_values(":v", v)
        .condition_expression(format!("attribute_exists({k1})"))
        .send()
        .await
        .unwrap();
}

tally_conformance::suite! {
    backend: "aws",
    fresh: fresh,
    stream: stream_of,
    stores: tables_of,
}

/// The same contract read by enhanced fan-out: a consumer registered on the stream, each shard
/// read by SubscribeToShard from every start position.
#[tokio::test]
async fn stream_by_fan_out() {
    let f = fresh("fanout", 2).await;
    let fan_out = tally_aws::fan_out::FanOut::register(
        &f.aws.stream,
        "conformance",
        std::time::Duration::from_millis(500),
    )
    .await
    .unwrap();
    assert!(fan_out.consumer_arn().contains("/consumer/conformance"));
    tally_conformance::stream_put_and_read(&fan_out).await;
}

/// DynamoDB only: a dedup record carries a TTL of its clock + the horizon + the stream's
/// retention + a day — the latest time a restore can need it — so that it is removed for nothing,
/// never by a delete charged at its size; and within that time no restore selects it anyway once
/// the clock has passed its horizon (the conformance suite checks the selection).
#[tokio::test]
async fn dedup_records_carry_their_ttl() {
    use tally_core::dedup::DedupRecord;
    use tally_core::ports::{LeaseStore, ShardInfo, WindowRef, WindowRest, WindowWriter};
    let f = fresh("dedupttl", 1).await;
    let t = &f.aws.tables;
    let shard = ShardInfo {
        shard_id: "s".into(),
        parents: vec![],
        closed: false,
    };
    t.ensure_leases("counter", &[shard]).await.unwrap();
    let fence = t
        .take_lease("counter", "s", 0, "w", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let end = tally_core::Position::parse("42").unwrap();
    // Arriving now: a record whose expiry has passed may be deleted by DynamoDB Local's TTL
    // sweep before the scan below reads it (a fixed time of 2023 had expired in 2023).
    let max_arrival = tally_core::clock::now_ms();
    t.begin_window(&fence, None, &end.seq, &end, 600_000.into())
        .await
        .unwrap();
    let dedup = DedupRecord {
        max_arrival,
        ids: vec![1, 2],
    };
    let at = WindowRef {
        app: "counter",
        shard_id: "s",
        end: &end,
    };
    let rest = WindowRest {
        dead_letters: &[],
        total_delta: 0,
        dedup: &dedup,
        horizon_ms: 600_000,
    };
    t.apply_rest(at, rest).await.unwrap();
    let items = t
        .client()
        .scan()
        .table_name(t.table("dedup"))
        .send()
        .await
        .unwrap();
    let expires: Vec<i64> = items
        .items()
        .iter()
        .filter_map(|i| i.get("expires_at")?.as_n().ok()?.parse().ok())
        .collect();
    let want =
        (max_arrival + 600_000) / 1000 + 24 * 3600 + tally_aws::dynamo::DEDUP_TTL_MARGIN_SECS;
    assert_eq!(expires, vec![want]);
}

/// DynamoDB only: a writer plans from the hour it remembers of a live item; when another process
/// has moved the item on since (a lease that moved and came back), the write is refused, the item
/// comes back with the refusal (`ReturnValuesOnConditionCheckFailure`), and the post is planned
/// again — counted once, in the right buckets.
#[tokio::test]
async fn a_stale_memory_of_a_live_item_is_mended_by_its_refusal() {
    use tally_core::buckets::{PostDelta, DAY_MS, HOUR_MS, MINUTE_MS};
    use tally_core::ports::{CountReader, WindowRef, WindowWriter};
    let f = fresh("hours", 1).await;
    let other = Aws::connect(&f.settings).await.unwrap();
    let (a, b) = (&f.aws.tables, &other.tables);
    let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
    let h10 = day + 10 * HOUR_MS;
    let window = |t: i64, n: i64| {
        let mut d = PostDelta::default();
        d.add(t, n);
        vec![("p".to_owned(), d)]
    };
    fn at(end: &tally_core::Position) -> WindowRef<'_> {
        WindowRef {
            app: "counter",
            shard_id: "s",
            end,
        }
    }
    let [e10, e20, e30] = ["10", "20", "30"].map(|e| tally_core::Position::parse(e).unwrap());
    // Process a writes 10:05 (and remembers hour 10); process b, knowing nothing, writes 11:05
    // (its optimistic write is refused, it reads the item from the refusal and rolls hour 10 out).
    a.apply_posts(at(&e10), &window(h10 + 5 * MINUTE_MS, 1))
        .await
        .unwrap();
    let rolled = b
        .apply_posts(at(&e20), &window(h10 + HOUR_MS + 5 * MINUTE_MS, 2))
        .await
        .unwrap()
        .applied;
    assert_eq!((rolled.written, rolled.refused), (2, 1), "{rolled:?}");
    // Process a, still remembering hour 10, writes a 10:30 like: refused, planned again as late.
    let late = a
        .apply_posts(at(&e30), &window(h10 + 30 * MINUTE_MS, 4))
        .await
        .unwrap()
        .applied;
    assert_eq!((late.written, late.refused), (2, 1), "{late:?}");
    let c = a.post_count("p", Some(h10 + 30 * MINUTE_MS)).await.unwrap();
    assert_eq!((c.total, c.since), (7, Some(6)));
    let c = b.post_count("p", Some(h10 + HOUR_MS)).await.unwrap();
    assert_eq!(c.since, Some(2));
}

/// A lease item written behind the store's back with a string where tally keeps a list, a
/// number or a position: read as an error naming the item and the attribute, never a default.
#[tokio::test]
async fn a_corrupt_lease_row_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("leases"));
    tally_conformance::a_corrupt_lease_row_is_named(tables, "aws", |c| {
        let (client, table) = (client.clone(), table.clone());
        let key = [("app", c.app.to_owned()), ("shard_id", c.shard.to_owned())];
        let v = AttributeValue::S("not-what-tally-writes".into());
        async move { set_attr(&client, table, key, c.field, v).await }
    })
    .await;
}

/// A lease item's request written behind the store's back as a number: the holder's renewal
/// names the item and `wanted_by`, never reads it as no request.
#[tokio::test]
async fn a_corrupt_handoff_ask_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-ask", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("leases"));
    tally_conformance::a_corrupt_handoff_ask_is_named(tables, "aws", |app, shard| {
        let (client, table) = (client.clone(), table.clone());
        let (key, v) = (
            [("app", app), ("shard_id", shard)],
            AttributeValue::N("7".into()),
        );
        async move { set_attr(&client, table, key, "wanted_by", v).await }
    })
    .await;
}

/// An edge item written behind the store's back with a string where tally keeps its time: read
/// as an error naming the post and the user, never as an absent or unliked edge.
#[tokio::test]
async fn a_corrupt_edge_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-edge", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("edges"));
    tally_conformance::a_corrupt_edge_is_named(tables, "aws", |post, user| {
        let (client, table) = (client.clone(), table.clone());
        let key = [("pk", post), ("sk", tally_core::edge::edge_sk(&user))];
        async move { set_attr(&client, table, key, "t", AttributeValue::S("soon".into())).await }
    })
    .await;
}

/// A summary item or a dedup record written behind the store's back with values tally never
/// writes: each read is an error naming the item, never a 0 or an empty record.
#[tokio::test]
async fn corrupt_summary_and_dedup_are_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use tally_conformance::Corruption;
    let f = fresh("corrupt-summary", 1).await;
    let tables = tables_of(&f);
    let client = tables.client().clone();
    let (counts, dedup) = (tables.table("counts"), tables.table("dedup"));
    tally_conformance::corrupt_summary_and_dedup_are_named(tables, "aws", |c| {
        let (client, counts, dedup) = (client.clone(), counts.clone(), dedup.clone());
        async move {
            let set =
                |table: String, pk: String, sk: String, attr: &'static str, v: AttributeValue| {
                    set_attr(&client, table, [("pk", pk), ("sk", sk)], attr, v)
                };
            let three = || AttributeValue::S("three".into());
            match c {
                Corruption::LiveTotal { post, sk } => {
                    set(counts, post, sk, "n", three()).await;
                }
                Corruption::GlobalTotal { sk } => {
                    let pk = tally_core::summary::GLOBAL_PK.to_owned();
                    set(counts, pk, sk, "n", three()).await;
                }
                Corruption::DedupIds { app, shard } => {
                    let pk = format!("{app}#{shard}");
                    let found = client
                        .query()
                        .table_name(&dedup)
                        .key_condition_expression("pk = :p")
                        .expression_attribute_values(":p", AttributeValue::S(pk.clone()))
                        .send()
                        .await
                        .unwrap();
                    let items = found.items();
                    assert_eq!(items.len(), 1);
                    let sk = items[0]["sk"].as_s().unwrap().clone();
                    let ids = AttributeValue::B(vec![1, 2, 3].into());
                    set(dedup.clone(), pk, sk, "ids", ids).await;
                }
            }
        }
    })
    .await;
}

/// A trending item written behind the store's back with a string where tally keeps its time:
/// read as an error naming the item and the attribute, never as a sketch taken at the epoch.
#[tokio::test]
async fn a_corrupt_trending_sketch_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-trending", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("analytics"));
    tally_conformance::a_corrupt_trending_sketch_is_named(tables, "aws", |app, shard| {
        let (client, table) = (client.clone(), table.clone());
        let key = [("pk", format!("{app}#trending")), ("sk", shard)];
        async move {
            set_attr(
                &client,
                table,
                key,
                "at_ms",
                AttributeValue::S("soon".into()),
            )
            .await
        }
    })
    .await;
}

/// A dead letter written behind the store's back with a string where tally keeps its arrival:
/// read as an error naming it, never skipped or read as arriving in 1970.
#[tokio::test]
async fn a_corrupt_dead_letter_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-letter", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("dead-letters"));
    tally_conformance::a_corrupt_dead_letter_is_named(tables, "aws", |shard, key| {
        let (client, table) = (client.clone(), table.clone());
        let (key, v) = (
            [("shard_id", shard), ("seq", key)],
            AttributeValue::S("soon".into()),
        );
        async move { set_attr(&client, table, key, "arrival_ms", v).await }
    })
    .await;
}

/// A fleet row whose asks are not a list of asks: the fleet's listing is an error naming it.
#[tokio::test]
async fn a_corrupt_fleet_row_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-fleet", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("leases"));
    tally_conformance::a_corrupt_fleet_row_is_named(tables, "aws", |app, worker| {
        let (client, table) = (client.clone(), table.clone());
        let key = [("app", app), ("shard_id", worker)];
        let v = AttributeValue::S("[{\"shard_id\":".into());
        async move { set_attr(&client, table, key, "asks", v).await }
    })
    .await;
}

/// A `#meta` item whose value is not text: the store's mode, stream or rebuild is an error
/// naming the item and the attribute.
#[tokio::test]
async fn a_corrupt_meta_row_is_named() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let f = fresh("corrupt-meta", 1).await;
    let tables = tables_of(&f);
    let (client, table) = (tables.client().clone(), tables.table("counts"));
    tally_conformance::a_corrupt_meta_row_is_named(tables, |sk, attr| {
        let (client, table) = (client.clone(), table.clone());
        let key = [
            ("pk", tally_core::edge::MODE_PK.to_owned()),
            ("sk", sk.to_owned()),
        ];
        async move { set_attr(&client, table, key, attr, AttributeValue::N("3".into())).await }
    })
    .await;
}
