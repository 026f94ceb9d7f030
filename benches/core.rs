//! The pure core's hot paths, each beside its baselines in the same run (these machines are
//! noisy): folding records into a counter window (decode, validate, dedup, per-post deltas), the
//! same plus planning each post's summary writes, the analytics fold (decode, dedup, latency,
//! trending), bare serde_json decoding of the same records, and a naive fold (decode to owned
//! strings, a HashSet of ids, a HashMap of counts).
#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tally_analytics::fold::Fold;
use tally_core::dedup::Dedup;
use tally_core::event::LikeEvent;
use tally_core::ports::StreamRecord;
use tally_core::summary::{marker, plan, Known, Plan};
use tally_core::window::{ClosedWindow, WindowBuilder};
use tally_core::SeqNo;

fn records(n: usize, posts: usize) -> Vec<StreamRecord> {
    (0..n)
        .map(|i| {
            let post = (i * 7919) % posts;
            let data = format!(
                r#"{{"event_id":"e{i:016x}","post_id":"p{post}","user_id":"u{}","action":"like","created_at":{}}}"#,
                i % 1000,
                1_796_000_000_000i64 + i as i64
            );
            StreamRecord {
                seq: SeqNo::parse(&(1_000_000 + i).to_string()).expect("decimal"),
                arrival_ms: i as i64,
                partition_key: format!("p{post}"),
                data: data.into_bytes(),
            }
        })
        .collect()
}

/// tally's counter fold of `recs` into one window, closed.
fn fold_window(recs: &[StreamRecord], dedup: &mut Dedup) -> ClosedWindow {
    let mut w = WindowBuilder::new(None, 0);
    for r in recs {
        w.push("shard-0", r, dedup);
    }
    w.close(dedup)
}

fn fold(c: &mut Criterion) {
    let recs = records(5_000, 1_000);
    let mut g = c.benchmark_group("window");
    g.throughput(Throughput::Elements(recs.len() as u64));
    // Baseline: serde_json alone, decoding each record into an owned event.
    g.bench_function("bare_serde_decode", |b| {
        b.iter(|| {
            recs.iter()
                .filter(|r| serde_json::from_slice::<LikeEvent>(&r.data).is_ok())
                .count()
        })
    });
    // Baseline: the obvious fold — owned decode, a set of ids, a map of counts.
    g.bench_function("naive_fold", |b| {
        b.iter(|| {
            let mut seen: HashSet<String> = HashSet::new();
            let mut counts: HashMap<String, i64> = HashMap::new();
            for r in &recs {
                if let Ok(e) = serde_json::from_slice::<LikeEvent>(&r.data) {
                    if seen.insert(e.event_id) {
                        *counts.entry(e.post_id).or_default() += e.action.delta();
                    }
                }
            }
            counts.len()
        })
    });
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
            || Fold::new(200, 300_000, i64::MAX, 600_000),
            |mut f| {
                let now = 1_796_000_010_000;
                recs.iter().map(|r| f.push(r, now)).sum::<u64>()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
