//! Alive under faults, on the local AWS API peers behind a fault-injecting proxy (no emulator
//! throttles or loses answers): the SDK's own retries are not rationed, a window's posts that
//! fail are the only ones sent again, and under a realistic mix — answers lost after the write,
//! 500s, throttles, delays, expired iterators, on Kinesis and DynamoDB alike — one
//! `count --until-idle` drains the stream without a restart, every count exact.
#![allow(clippy::unwrap_used)]
#![cfg(feature = "aws-local")]

use crate::common::fault_proxy::{Fault, FaultMix, FaultProxy};
use crate::common::{file_in, write_contract_file, Target};
use tally_core::buckets::PostDelta;
use tally_core::ports::{CountReader, LeaseReader, WindowRef, WindowWriter};
use tally_core::Position;

/// The local peers' endpoints: Kinesis, DynamoDB.
pub(crate) fn endpoints() -> (String, String) {
    (
        std::env::var("TEST_KINESIS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4568".into()),
        std::env::var("TEST_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into()),
    )
}

/// tally's DynamoDB store on the target's tables, through `endpoint`.
async fn store_at(t: &Target, endpoint: &str) -> tally_aws::DynamoStore {
    let settings = tally_aws::AwsSettings {
        kinesis_endpoint_url: None,
        dynamodb_endpoint_url: Some(endpoint.to_owned()),
        ..t.aws_settings()
    };
    let sdk = tally_aws::sdk_config().await.unwrap();
    tally_aws::DynamoStore::new(&sdk, &settings)
}

/// Every call fails twice with a 500 and then succeeds: the SDK's third attempt lands each time.
/// With the SDK's default retry quota (500 tokens shared by the client, 10 lost per call like
/// these) the calls after about the fiftieth would fail at their first 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_s_own_retries_are_not_rationed() {
    let (_, dynamodb) = endpoints();
    let t = Target::aws("quota", 1);
    let proxy = FaultProxy::start(&dynamodb);
    let store = store_at(&t, &proxy.url).await;
    let calls = 80;
    for _ in 0..calls {
        proxy.inject("Query", Fault::ServerError, 2);
        proxy.inject("Query", Fault::Pass, 1);
    }
    for i in 0..calls {
        let r = store.list_leases("counter").await;
        assert!(r.is_ok(), "call {i}: {r:?}");
    }
    assert_eq!(proxy.remaining(), 0);
    assert_eq!(proxy.seen("Query"), 3 * calls);
}

/// One post's writes keep failing (three 500s: the SDK's attempts): the others are done and the
/// call says which one to send again; sent alone, it lands. Each post's item is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_posts_that_failed_are_sent_again() {
    let (_, dynamodb) = endpoints();
    let t = Target::aws("perpost", 1);
    let proxy = FaultProxy::start(&dynamodb);
    let store = store_at(&t, &proxy.url).await;
    let created = 1_796_000_000_000i64;
    let posts: Vec<(String, PostDelta)> = (0..10)
        .map(|i| {
            let mut d = PostDelta::default();
            d.add(created, i + 1);
            (format!("perpost-p{i}"), d)
        })
        .collect();
    let end = Position::parse("100").unwrap();
    let at = WindowRef {
        app: "counter",
        shard_id: "shardId-000000000000",
        end: &end,
    };
    proxy.inject_matching("UpdateItem", "\"perpost-p7\"", Fault::ServerError, 3);
    let first = store.apply_posts(at, &posts).await.unwrap();
    assert_eq!(first.retry, vec![7], "{first:?}");
    assert!(first.error.as_ref().is_some_and(|e| e.is_retryable()));
    assert_eq!((first.applied.written, first.applied.refused), (9, 0));
    let again = store.apply_posts(at, &posts[7..8]).await.unwrap();
    assert!(again.retry.is_empty(), "{again:?}");
    assert_eq!(again.applied.written, 1);
    assert_eq!(proxy.seen("UpdateItem"), 9 + 3 + 1);
    for (i, (post, _)) in posts.iter().enumerate() {
        assert_eq!(
            store.post_count(post, None).await.unwrap().total,
            i as i64 + 1
        );
    }
}

/// A fresh iterator refused as expired too — two expiries in a row, as the fault mix below meets
/// now and then: the reader has taken another iterator, and the worker reads on at it. The
/// stream has one shard, so its two expiries are one read's; the change log's two are queued by
/// call, not by shard (on one shard here, but not promised). One `count --until-idle` drains the stream without a
/// restart, every count exact, and `tally verify` reads both through the same faults.
#[test]
fn an_iterator_that_expires_twice_in_a_row_is_read_on() {
    let (kinesis, dynamodb) = endpoints();
    let stack = Target::aws("expired", 1);
    let file = file_in(&stack, "likes.ndjson");
    let exp = write_contract_file(&file, 300, 20, 29);
    let (kp, dp) = (FaultProxy::start(&kinesis), FaultProxy::start(&dynamodb));
    let t = stack.through(&kp.url, &dp.url);
    t.run(&["replay", file.to_str().unwrap()]);
    // The stream's reader, and the edges' change log's (DynamoDB Streams).
    kp.inject("GetRecords", Fault::Error("ExpiredIteratorException"), 2);
    dp.inject("GetRecords", Fault::Error("ExpiredIteratorException"), 2);
    t.json(&["count", "--until-idle", "--timeout", "2m", "--json"]);
    assert_eq!(kp.remaining() + dp.remaining(), 0, "every expiry was met");
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    // The one-shot reads of the stream and of the change log read on too: verify finds every
    // count exact.
    kp.inject("GetRecords", Fault::Error("ExpiredIteratorException"), 2);
    dp.inject("GetRecords", Fault::Error("ExpiredIteratorException"), 2);
    let v = t.json(&["verify", "--json"]);
    assert_eq!(
        kp.remaining() + dp.remaining(),
        0,
        "every expiry was met: {v}"
    );
}

/// About one request in eight faulted on both services (5 % answers lost after the peer applied
/// them, 3 % 500s, 3 % throttles, 1 % expired iterators, and 2 % delayed 0.2–2 s), default
/// settings: the producer's replay and one counter run drain the stream without a restart, and
/// every count is exact.
#[test]
fn the_counter_drains_a_realistic_fault_mix_without_a_restart() {
    let (kinesis, dynamodb) = endpoints();
    let mix = |seed| FaultMix {
        seed,
        lost_answer: 0.05,
        server_error: 0.03,
        throttle: 0.03,
        delay: 0.02,
        expired_iterator: 0.01,
    };
    let stack = Target::aws("mix", 2);
    let file = file_in(&stack, "likes.ndjson");
    let exp = write_contract_file(&file, 3_000, 150, 23);
    let (kp, dp) = (
        FaultProxy::with_mix(&kinesis, mix(7)),
        FaultProxy::with_mix(&dynamodb, mix(8)),
    );
    let t = stack.through(&kp.url, &dp.url);
    t.run(&["replay", file.to_str().unwrap()]);
    let c = t.json(&["count", "--until-idle", "--timeout", "5m", "--json"]);
    assert!(
        kp.faulted() >= 3 && dp.faulted() > 50,
        "faults met: kinesis {}, dynamodb {}",
        kp.faulted(),
        dp.faulted()
    );
    kp.calm();
    dp.calm();
    // Every valid record was read, some more than once (a read retried after a fault).
    assert!(
        c["duplicates"].as_u64().unwrap() + c["counted"].as_u64().unwrap()
            >= (exp.lines - exp.malformed) as u64,
        "{c}"
    );
    assert_eq!(t.mismatches(&exp.counts), vec![]);
    assert_eq!(t.json(&["total", "--json"])["total"], exp.total());
    let dead = t.json(&["dead-letters", "--json"])["total"]
        .as_u64()
        .unwrap();
    // A PutRecords answer lost after the write makes the producer put the batch again: a
    // malformed line may then be two records, each with its letter.
    assert_eq!(dead, c["malformed"].as_u64().unwrap(), "{c}");
    assert!(dead >= exp.malformed as u64);
}
