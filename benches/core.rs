//! The pure core's hot paths, each beside its baselines in the same run (these machines are
//! noisy): folding records into a counter window (decode, validate, dedup, per-post deltas), the
//! same plus planning each post's summary writes, the analytics fold (decode, dedup, latency,
//! trending), bare serde_json decoding of the same records, and a naive fold (decode to owned
//! strings, a HashSet of ids, a HashMap of counts); and a likers window at its size, folded and
//! closed, beside the bare decode of its records. `benches/interleaved.rs` times the same passes
//! in turns, for ratios to the baseline that a busy machine does not skew.
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    analytics, analytics_fold, bare_decode, edge_records, fold_window, likers_window, naive_fold,
    records,
};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tally_core::dedup::Dedup;
use tally_core::summary::{marker, plan, Known, Plan};

fn fold(c: &mut Criterion) {
    let recs = records(5_000, 1_000);
    let mut g = c.benchmark_group("window");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("bare_serde_decode", |b| b.iter(|| bare_decode(&recs)));
    g.bench_function("naive_fold", |b| b.iter(|| naive_fold(&recs)));
    // tally's fold: decode + validate + dedup + per-post deltas by minute, and the close.
    g.bench_function("fold_5000_records_1000_posts", |b| {
        b.iter_batched(
            || Dedup::new(600_000),
            |mut dedup| fold_window(&recs, &mut dedup).posts.len(),
            BatchSize::SmallInput,
        )
    });
    // The same, then planning each post's summary writes.
    g.bench_function("fold_and_plan_5000_records_1000_posts", |b| {
        b.iter_batched(
            || Dedup::new(600_000),
            |mut dedup| {
                let closed = fold_window(&recs, &mut dedup);
                let end = marker(closed.end.as_ref().unwrap());
                closed
                    .posts
                    .iter()
                    .filter(|(_, d)| {
                        matches!(plan("shard-0", d, &end, &Known::Unknown), Plan::Writes(_))
                    })
                    .count()
            },
            BatchSize::SmallInput,
        )
    });
    // Analytics: decode + dedup + three latencies + two trending sketches (200 posts each).
    g.bench_function("analytics_fold_5000_records_1000_posts", |b| {
        b.iter_batched(
            analytics,
            |mut f| analytics_fold(&recs, &mut f),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// A likers window at its size (100,000 records, each a new edge), folded and closed in the
/// store's key order, beside the bare decode of the same records.
fn likers(c: &mut Criterion) {
    let recs = edge_records(tally_core::window::MAX_LIKERS_WINDOW_RECORDS, 1_000);
    let mut g = c.benchmark_group("likers_window");
    g.sample_size(10);
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("bare_serde_decode", |b| b.iter(|| bare_decode(&recs)));
    g.bench_function("fold_and_close_100000_edges", |b| {
        b.iter(|| likers_window(&recs))
    });
    g.finish();
}

criterion_group!(benches, fold, likers);
criterion_main!(benches);
