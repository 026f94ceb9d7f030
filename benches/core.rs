//! The pure core's hot path: folding records into a window (decode, dedup, per-post deltas) and
//! planning its summary writes.
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tally_core::dedup::Dedup;
use tally_core::ports::StreamRecord;
use tally_core::summary::{marker, plan, Known, Plan};
use tally_core::window::WindowBuilder;
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
            StreamRecord { seq: SeqNo::parse(&(1_000_000 + i).to_string()).expect("decimal"), arrival_ms: i as i64, partition_key: format!("p{post}"), data: data.into_bytes() }
        })
        .collect()
}

fn fold(c: &mut Criterion) {
    let recs = records(5_000, 1_000);
    let mut g = c.benchmark_group("window");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("fold_5000_records_1000_posts", |b| {
        b.iter_batched(
            || Dedup::new(600_000),
            |mut dedup| {
                let mut w = WindowBuilder::new(None, 0);
                for r in &recs {
                    w.push("shard-0", r, &mut dedup);
                }
                let closed = w.close(&mut dedup);
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
    g.finish();
}

criterion_group!(benches, fold);
criterion_main!(benches);
