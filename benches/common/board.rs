//! A counter worker's board with its shards' windows open: records put on an embedded store and
//! folded into each shard's open window (windows of an hour, so none closes), every shard held
//! by worker `w1` (used by `open_windows` and `provisional`).

use std::sync::Arc;
use std::time::Duration;

use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_core::ports::{LeaseReader, LeaseStore, PutEntry, ShardReader, StartPosition, Stream};
use tally_counter::board::Board;
use tally_counter::{Counter, CounterConfig, CounterContext};
use tally_embedded::Embedded;

/// A held shard: its reader, at the end of what was put, and its processor, its window open.
pub type OpenShard = (Box<dyn ShardReader>, Box<dyn ShardProcessor>);

/// The cumulative weights of `n` posts, Zipf `s`: a post is the first whose weight passes a
/// uniform draw of the last one ([`zipf_pick`]).
pub fn zipf(n: usize, s: f64) -> Vec<f64> {
    let mut sum = 0.0;
    (1..=n)
        .map(|k| {
            sum += 1.0 / (k as f64).powf(s);
            sum
        })
        .collect()
}

/// The post a uniform draw `x` in [0, 1) picks by the cumulative weights `cumulative`.
pub fn zipf_pick(cumulative: &[f64], x: f64) -> usize {
    let x = x * cumulative[cumulative.len() - 1];
    cumulative.partition_point(|c| *c < x)
}

/// Puts `entries` on `store` and folds them into each shard's open window (counting events,
/// whose windows hold deltas as they fold): the board and each held shard.
pub async fn open_on_board(
    store: &Arc<Embedded>,
    entries: &[PutEntry],
) -> (Arc<Board>, Vec<OpenShard>) {
    let ids = store.list_shards().await.unwrap();
    store.ensure_leases("counter", &ids).await.unwrap();
    let board = Arc::new(Board::default());
    let cfg = CounterConfig {
        window_time: Duration::from_secs(3_600),
        window_max_time: Duration::from_secs(3_600),
        count: tally_core::edge::CountMode::Events,
        ..CounterConfig::default()
    };
    let counter = Counter::open(
        store.clone(),
        cfg,
        CounterContext::default(),
        Arc::default(),
    )
    .await
    .unwrap()
    .on_board(board.clone());
    for chunk in entries.chunks(500) {
        store.put_records(chunk).await.unwrap();
    }
    let mut shards = Vec::new();
    for lease in store.list_leases("counter").await.unwrap() {
        let fence = store
            .take_lease("counter", &lease.shard_id, 0, "w1", i64::MAX / 2)
            .await
            .unwrap()
            .unwrap();
        let mut p = counter.create(&fence);
        p.start(&lease).await.unwrap();
        let mut reader = store
            .open(&lease.shard_id, StartPosition::TrimHorizon)
            .await
            .unwrap();
        loop {
            let batch = reader.next_batch(10_000).await.unwrap();
            if batch.records.is_empty() {
                break;
            }
            p.process(&batch, 0).await.unwrap();
        }
        shards.push((reader, p));
    }
    (board, shards)
}
