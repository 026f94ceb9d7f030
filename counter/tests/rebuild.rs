//! A pending window is rebuilt only whole: a stream that cannot say which records it trimmed (as
//! Kinesis cannot: its sequence numbers have holes) hands the restarted counter the window's
//! records from some later record on, and the counter must see that the window's first record
//! is missing and give the window up on record, not apply what is left as if it were all.
//! On the embedded store, with the read built by hand as Kinesis would answer it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use tally_consumer::worker::ProcessorFactory;
use tally_core::buckets::PostDelta;
use tally_core::ports::{
    CountReader, DeadLetterReader, LeaseReader, LeaseStore, PutEntry, PutOutcome, ReadBatch,
    StartPosition, Stream, WindowRef, WindowWriter,
};
use tally_core::{Position, SeqNo};
use tally_counter::{Counter, CounterConfig, CounterContext, CounterMetrics};
use tally_embedded::Embedded;

const CREATED: i64 = 1_796_000_000_000;

fn like(id: &str, post: &str) -> PutEntry {
    PutEntry {
        partition_key: post.into(),
        data: format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"u","action":"like","created_at":{CREATED}}}"#
        )
        .into_bytes(),
    }
}

#[tokio::test]
async fn a_rebuild_that_misses_the_window_s_first_record_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Embedded::open(dir.path(), 1).unwrap());
    let shard = "shardId-000000000000";
    // 10 likes of pA and 10 of pB, interleaved.
    let entries: Vec<PutEntry> = (0..10)
        .flat_map(|i| [like(&format!("a{i}"), "pA"), like(&format!("b{i}"), "pB")])
        .collect();
    let seqs: Vec<SeqNo> = store
        .put_records(&entries)
        .await
        .unwrap()
        .into_iter()
        .map(|o| match o {
            PutOutcome::Ok { seq, .. } => seq,
            PutOutcome::Failed { .. } => panic!("put failed"),
        })
        .collect();
    // A first worker recorded the window of all 20 as pending and wrote pA's items, then died.
    let fence = common::held_by_w1(&store, shard).await;
    let end = Position::whole(seqs[19].clone());
    store
        .begin_window(&fence, None, &seqs[0], &end, 600_000.into())
        .await
        .unwrap();
    let mut pa = PostDelta::default();
    pa.add(CREATED, 10);
    let at = WindowRef {
        app: "counter",
        shard_id: shard,
        end: &end,
    };
    store.apply_posts(at, &[("pA".into(), pa)]).await.unwrap();

    // The next owner reads from the checkpoint; the stream has lost the first four records.
    let cfg = CounterConfig {
        window_records: 20,
        count: tally_core::edge::CountMode::Events,
        ..CounterConfig::default()
    };
    let counter = Counter::open(
        store.clone(),
        cfg,
        CounterContext::default(),
        Arc::new(CounterMetrics::default()),
    )
    .await
    .unwrap();
    let fence = store
        .take_lease("counter", shard, fence.epoch, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let lease = store.list_leases("counter").await.unwrap().remove(0);
    let mut p = counter.create(&fence);
    let from = p.start(&lease).await.unwrap();
    assert_eq!(from, StartPosition::TrimHorizon);
    let mut reader = store.open(shard, from).await.unwrap();
    let mut batch: ReadBatch = reader.next_batch(1_000).await.unwrap();
    batch.records.drain(..4);
    p.process(&batch, 0).await.unwrap();
    p.flush(false).await.unwrap();

    let st = store.shard_state("counter", shard).await.unwrap();
    assert_eq!(st.pending, None);
    assert_eq!(st.lease.checkpoint, Some(end.clone()));
    let count = |post: &'static str| {
        let store = store.clone();
        async move { store.post_count(post, None).await.unwrap().total }
    };
    assert_eq!(count("pA").await, 10, "written before the crash");
    assert_eq!(
        count("pB").await,
        0,
        "what is left of the window is not applied as the window"
    );
    let dead = store.dead_letters(100).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let gap = dead[0].gap.as_ref().expect("a gap");
    assert_eq!(gap.through, Some(end));
    assert!(
        dead[0].reason.contains("first records"),
        "{}",
        dead[0].reason
    );
}
