//! Analytics windows end inside a KPL aggregate when they fill up there (a window's first-seen
//! ids are one store item), and a worker that starts at such a checkpoint folds the rest of that
//! aggregate — each user record once. On the embedded store and stream: the same processor runs
//! on both backends, and the AWS stream's AT_SEQUENCE_NUMBER is in the stream conformance suite.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tally_analytics::{
    latency_windows, Analytics, AnalyticsConfig, AnalyticsContext, AnalyticsMetrics,
};
use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_core::kpl::aggregate;
use tally_core::lease::Lease;
use tally_core::ports::{
    LeaseReader, LeaseStore, PutEntry, PutOutcome, ReadBatch, StartPosition, Stream,
};
use tally_core::{Position, SeqNo};
use tally_embedded::Embedded;

fn like(i: usize) -> String {
    format!(
        r#"{{"event_id":"e{i}","post_id":"p","user_id":"u{i}","action":"like","created_at":{}}}"#,
        1_796_000_000_000i64 + i as i64
    )
}

fn entry(data: Vec<u8>) -> PutEntry {
    PutEntry {
        partition_key: "p".into(),
        data,
    }
}

async fn lease(store: &Embedded, shard: &str) -> Lease {
    let all = store.list_leases("analytics").await.unwrap();
    all.into_iter().find(|l| l.shard_id == shard).unwrap()
}

/// A worker `owner` takes the shard's lease (from `epoch`) and starts its processor; returns the
/// processor, the lease's epoch and where the processor asked to read from.
async fn start(
    store: &Embedded,
    factory: &Analytics,
    shard: &str,
    epoch: u64,
    owner: &str,
) -> (Box<dyn ShardProcessor>, u64, StartPosition) {
    let fence = store
        .take_lease("analytics", shard, epoch, owner, i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let mut p = factory.create(&fence);
    let from = p.start(&lease(store, shard).await).await.unwrap();
    (p, fence.epoch, from)
}

#[tokio::test]
async fn a_checkpoint_inside_an_aggregate_resumes_at_the_next_user_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Embedded::open(dir.path(), 1).unwrap());
    let events: Vec<String> = (0..11).map(like).collect();
    let agg = |r: std::ops::Range<usize>| {
        let users: Vec<&[u8]> = events[r].iter().map(|e| e.as_bytes()).collect();
        aggregate("p", &users)
    };
    let put = store
        .put_records(&[
            entry(agg(0..5)),
            entry(agg(5..10)),
            entry(events[10].clone().into_bytes()),
        ])
        .await
        .unwrap();
    let PutOutcome::Ok { shard_id, seq } = &put[0] else {
        panic!("{put:?}")
    };
    let first: SeqNo = seq.clone();
    let shards = store.list_shards().await.unwrap();
    store.ensure_leases("analytics", &shards).await.unwrap();

    let cfg = AnalyticsConfig {
        window_records: 4,
        window_time: Duration::from_secs(3_600),
        ..AnalyticsConfig::default()
    };
    let metrics = Arc::new(AnalyticsMetrics::default());
    let factory = Analytics::new(
        store.clone(),
        cfg,
        AnalyticsContext::default(),
        metrics.clone(),
    );

    // The first worker folds the first aggregate only: one window of its user records 0..=3
    // is stored, record 4 is in the open window when the worker dies.
    let (mut p, epoch, from) = start(&store, &factory, shard_id, 0, "w1").await;
    assert_eq!(from, StartPosition::TrimHorizon);
    let mut reader = store.open(shard_id, from).await.unwrap();
    let batch = reader.next_batch(1).await.unwrap();
    assert_eq!(batch.records.len(), 1);
    p.process(&batch, 1_796_000_001_000).await.unwrap();
    drop(p);
    let checkpoint = lease(&store, shard_id).await.checkpoint;
    assert_eq!(
        checkpoint,
        Some(Position {
            seq: first.clone(),
            sub: Some(3)
        })
    );

    // The next worker starts at that record and goes on from its user record 4.
    let (mut p, _, from) = start(&store, &factory, shard_id, epoch, "w2").await;
    assert_eq!(from, StartPosition::AtSequence(first));
    let mut reader = store.open(shard_id, from).await.unwrap();
    let batch: ReadBatch = reader.next_batch(100).await.unwrap();
    assert_eq!(batch.records.len(), 3, "the aggregate again, then the rest");
    p.process(&batch, 1_796_000_002_000).await.unwrap();
    p.flush(false).await.unwrap();

    let lat = latency_windows(store.as_ref(), "analytics", 0)
        .await
        .unwrap();
    assert_eq!(lat.merged.creation.len(), 11, "each like folded once");
    // Windows of 4 user records: the first aggregate's 0..=3 (the first worker's) | its 4 and
    // the second's 0..=2 | the second's 3, 4 and the plain record, at the flush.
    assert_eq!(lat.windows.len(), 3);
    let top = tally_analytics::top_liked(store.as_ref(), "analytics", 1)
        .await
        .unwrap();
    assert_eq!(top[0].post_id, "p");
    assert_eq!(top[0].score, 11.0);
}
