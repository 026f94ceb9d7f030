//! `cargo bench --bench listing` (with `eval "$(scripts/local-aws.sh env)"`): what one lease
//! listing and one fleet listing cost in DynamoDB read units, as AWS's own DynamoDB Local reports
//! them (`ReturnConsumedCapacity`), on the lease table the workers use: for 4, 64, 256 and 1,000
//! lease rows, each taken and renewed with a read report and an address (a fleet's rows before it
//! counts anything), and a fleet of 8 and 20 heartbeat rows.
//! Prints numbers; asserts nothing about time.
#![allow(clippy::unwrap_used)]

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use tally_aws::{AwsSettings, DynamoStore};
use tally_core::ports::{LeaseStore, ReadProgress, ShardInfo};

/// Read units of one whole Query of `pk_attr = value`, strongly consistent (`tally leases`, the
/// fleet listing) or not (a worker's listing to plan from), and the items it returned.
async fn query_units(
    store: &DynamoStore,
    table: &str,
    pk_attr: &str,
    value: &str,
    consistent: bool,
) -> (f64, usize) {
    let (mut units, mut items) = (0.0, 0);
    let mut start = None;
    loop {
        let r = store
            .client()
            .query()
            .table_name(store.table(table))
            .key_condition_expression(format!("{pk_attr} = :k"))
            .expression_attribute_values(":k", AttributeValue::S(value.to_owned()))
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        units += r
            .consumed_capacity()
            .and_then(|c| c.capacity_units())
            .unwrap_or(0.0);
        items += r.items().len();
        match r.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => return (units, items),
        }
    }
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: nothing to do then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let endpoint = |k: &str, d: &str| Some(std::env::var(k).unwrap_or_else(|_| d.into()));
    let unique = std::process::id();
    let s = AwsSettings {
        stream: format!("listing-{unique}"),
        table_prefix: format!("listing-{unique}"),
        kinesis_endpoint_url: endpoint("TEST_KINESIS_ENDPOINT", "http://127.0.0.1:4568"),
        dynamodb_endpoint_url: endpoint("TEST_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000"),
        stream_retention_hours: 24,
        recent_likers_index: false,
    };
    tally_aws::setup::setup(&s, 1)
        .await
        .expect("tables on the local peers (scripts/local-aws.sh start)");
    let aws = tally_aws::Aws::connect(&s).await.unwrap();
    let store = &aws.tables;
    println!("lease and fleet listings on DynamoDB Local: read units per listing");
    println!("| lease rows | strongly consistent | eventually consistent (a worker's plan) | items | strongly consistent per row |");
    println!("|---|---|---|---|---|");
    for rows in [4usize, 64, 256, 1_000] {
        let app = format!("counter-{rows}");
        let shards: Vec<ShardInfo> = (0..rows)
            .map(|i| ShardInfo {
                shard_id: format!("shardId-{i:012}"),
                parents: vec![],
                closed: false,
            })
            .collect();
        store.ensure_leases(&app, &shards).await.unwrap();
        for (i, sh) in shards.iter().enumerate() {
            let owner = format!("tally-worker-{:02}-{unique}", i % 20);
            let fence = store
                .take_lease(&app, &sh.shard_id, 0, &owner, i64::MAX / 2)
                .await
                .unwrap()
                .unwrap();
            let read = ReadProgress {
                at_ms: 1_796_000_000_000,
                behind_ms: 1_234,
            };
            store
                .renew_lease(&fence, i64::MAX / 2, Some(read), Some("10.0.12.34:9102"))
                .await
                .unwrap();
        }
        let (units, items) = query_units(store, "leases", "app", &app, true).await;
        let (eventual, _) = query_units(store, "leases", "app", &app, false).await;
        println!(
            "| {rows} | {units:.1} | {eventual:.1} | {items} | {:.3} |",
            units / items.max(1) as f64
        );
    }
    println!();
    println!("| fleet rows | read units per fleet listing |");
    println!("|---|---|");
    for workers in [8usize, 20] {
        let app = format!("fleet-{workers}");
        for w in 0..workers {
            store
                .heartbeat(
                    &app,
                    &format!("tally-worker-{w:02}-{unique}"),
                    i64::MAX / 2,
                    &[],
                )
                .await
                .unwrap();
        }
        let (units, _) = query_units(
            store,
            "leases",
            "app",
            &tally_core::ports::fleet_app(&app),
            true,
        )
        .await;
        println!("| {workers} | {units:.1} |");
    }
    tally_aws::setup::teardown(&s).await.unwrap();
}
