//! A pending window is rebuilt only whole: a stream that cannot say which records it trimmed (as
//! Kinesis cannot: its sequence numbers have holes) hands the restarted counter the window's
//! records from some later record on, and the counter must see that the window's first record
//! is missing and give the window up on record, not apply what is left as if it were all; and
//! a stream that does not say where its tip is (DynamoDB Streams) must not have the window given
//! up for its empty reads. On the embedded store, with the reads built by hand as those streams
//! would answer them.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_core::buckets::PostDelta;
use tally_core::ports::{
    CountReader, DeadLetterReader, LeaseReader, LeaseStore, PutEntry, PutOutcome, ReadBatch,
    StartPosition, Stream, WindowRef, WindowWriter,
};
use tally_core::{Position, SeqNo};
use tally_counter::{Counter, CounterConfig, CounterContext, CounterMetrics};
use tally_embedded::Embedded;

const CREATED: i64 = 1_796_000_000_000;
const SHARD: &str = "shardId-000000000000";

fn like(id: &str, post: &str) -> PutEntry {
    PutEntry {
        partition_key: post.into(),
        data: format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"u","action":"like","created_at":{CREATED}}}"#
        )
        .into_bytes(),
    }
}

/// 10 likes of pA and 10 of pB, interleaved, on one shard; a first worker recorded the window
/// of all 20 as pending, wrote pA's items (when `pa_written`), then died. Answers the store, the
/// window's end, and the counter's shard processor for the next owner, started.
async fn pending_window_of_20(
    dir: &std::path::Path,
    pa_written: bool,
) -> (Arc<Embedded>, Position, Box<dyn ShardProcessor>) {
    let store = Arc::new(Embedded::open(dir, 1).unwrap());
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
    let fence = common::held_by_w1(&store, SHARD).await;
    let end = Position::whole(seqs[19].clone());
    store
        .begin_window(&fence, None, &seqs[0], &end, 600_000.into())
        .await
        .unwrap();
    if pa_written {
        let mut pa = PostDelta::default();
        pa.add(CREATED, 10);
        let at = WindowRef {
            app: "counter",
            shard_id: SHARD,
            end: &end,
        };
        store.apply_posts(at, &[("pA".into(), pa)]).await.unwrap();
    }
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
        .take_lease("counter", SHARD, fence.epoch, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let lease = store.list_leases("counter").await.unwrap().remove(0);
    let mut p = counter.create(&fence);
    let from = p.start(&lease).await.unwrap();
    assert_eq!(from, StartPosition::TrimHorizon);
    (store, end, p)
}

async fn count(store: &Embedded, post: &str) -> i64 {
    store.post_count(post, None).await.unwrap().total
}

#[tokio::test]
async fn a_rebuild_that_misses_the_window_s_first_record_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (store, end, mut p) = pending_window_of_20(dir.path(), true).await;
    // The next owner reads from the checkpoint; the stream has lost the first four records.
    let mut reader = store.open(SHARD, StartPosition::TrimHorizon).await.unwrap();
    let mut batch: ReadBatch = reader.next_batch(1_000).await.unwrap();
    batch.records.drain(..4);
    p.process(&batch, 0).await.unwrap();
    p.flush(false).await.unwrap();

    let st = store.shard_state("counter", SHARD).await.unwrap();
    assert_eq!(st.pending, None);
    assert_eq!(st.lease.checkpoint, Some(end.clone()));
    assert_eq!(count(&store, "pA").await, 10, "written before the crash");
    assert_eq!(
        count(&store, "pB").await,
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

/// DynamoDB Streams may answer a read empty with records further on in the shard, and does not
/// say how far behind it is then: however many such answers come first, the pending window is
/// rebuilt whole when its records do. Empty reads that say they are at the tip (as Kinesis's and
/// the embedded stream's do) give it up as trimmed, on record.
#[tokio::test]
async fn only_a_stream_that_says_it_is_at_its_tip_gives_a_pending_window_up() {
    let empty = |behind: Option<i64>| ReadBatch {
        millis_behind_latest: behind,
        ..ReadBatch::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (store, end, mut p) = pending_window_of_20(dir.path(), false).await;
    for _ in 0..10 {
        p.process(&empty(None), 0).await.unwrap();
    }
    let mut reader = store.open(SHARD, StartPosition::TrimHorizon).await.unwrap();
    p.process(&reader.next_batch(1_000).await.unwrap(), 0)
        .await
        .unwrap();
    p.flush(false).await.unwrap();
    let st = store.shard_state("counter", SHARD).await.unwrap();
    assert_eq!((st.pending, st.lease.checkpoint), (None, Some(end)));
    assert_eq!(
        (count(&store, "pA").await, count(&store, "pB").await),
        (10, 10)
    );
    assert_eq!(store.dead_letters(100).await.unwrap(), vec![]);

    let dir = tempfile::tempdir().unwrap();
    let (store, end, mut p) = pending_window_of_20(dir.path(), false).await;
    for _ in 0..3 {
        p.process(&empty(Some(0)), 0).await.unwrap();
    }
    let st = store.shard_state("counter", SHARD).await.unwrap();
    assert_eq!((st.pending, st.lease.checkpoint), (None, Some(end.clone())));
    assert_eq!(
        (count(&store, "pA").await, count(&store, "pB").await),
        (0, 0)
    );
    let dead = store.dead_letters(100).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].gap.as_ref().expect("a gap").through, Some(end));
}
