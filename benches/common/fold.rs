//! The core benchmarks' workload and the passes they time, shared by `core` (criterion, each
//! pass alone) and `interleaved` (the passes in turns, for ratios that hold on a noisy machine).

use std::collections::{HashMap, HashSet};

use tally_analytics::fold::Fold;
use tally_core::boundary::Extent;
use tally_core::dedup::Dedup;
use tally_core::event::LikeEvent;
use tally_core::ports::StreamRecord;
use tally_core::window::{ClosedWindow, WindowBuilder};
use tally_core::SeqNo;

/// `n` like events over `posts` posts, each post in turn (a long tail: no post is liked twice
/// within `posts` records).
pub fn records(n: usize, posts: usize) -> Vec<StreamRecord> {
    like_records(n, posts, |i| i % 1000, |i| i as i64)
}

/// `n` like events over `posts` posts, each by a user of its own (every record a new edge, as
/// most records of a window counting likers are), each arriving when it was made:
/// a likers window's fold at its size.
pub fn edge_records(n: usize, posts: usize) -> Vec<StreamRecord> {
    like_records(n, posts, |i| i, created_at)
}

/// When the `i`th record's event was made (ms).
fn created_at(i: usize) -> i64 {
    1_796_000_000_000 + i as i64
}

/// `n` like events, the `i`th of post `(i * 7919) % posts` by user `user(i)`, arriving at
/// `arrival_ms(i)`.
fn like_records(
    n: usize,
    posts: usize,
    user: impl Fn(usize) -> usize,
    arrival_ms: impl Fn(usize) -> i64,
) -> Vec<StreamRecord> {
    (0..n)
        .map(|i| {
            let post = (i * 7919) % posts;
            let data = format!(
                r#"{{"event_id":"e{i:016x}","post_id":"p{post}","user_id":"u{}","action":"like","created_at":{}}}"#,
                user(i),
                created_at(i)
            );
            StreamRecord {
                seq: SeqNo::of_number(1_000_000 + i as u64),
                arrival_ms: arrival_ms(i),
                partition_key: format!("p{post}"),
                data: data.into_bytes(),
            }
        })
        .collect()
}

/// tally's likers fold of `recs` into one window, closed: its edges, in the store's key order.
pub fn likers_window(recs: &[StreamRecord]) -> usize {
    let mut dedup = Dedup::new(600_000);
    let mut w = WindowBuilder::new(None, 0).likers();
    for r in recs {
        w.push("shard-0", r, &mut dedup);
    }
    w.close(&mut dedup).edges.len()
}

/// Baseline: serde_json alone, decoding each record into an owned event.
pub fn bare_decode(recs: &[StreamRecord]) -> usize {
    recs.iter()
        .filter(|r| serde_json::from_slice::<LikeEvent>(&r.data).is_ok())
        .count()
}

/// Baseline: the obvious fold — owned decode, a set of ids, a map of counts.
pub fn naive_fold(recs: &[StreamRecord]) -> usize {
    let mut seen: HashSet<String> = HashSet::new();
    let mut counts: HashMap<String, i64> = HashMap::new();
    for r in recs {
        if let Ok(e) = serde_json::from_slice::<LikeEvent>(&r.data) {
            if seen.insert(e.event_id) {
                *counts.entry(e.post_id).or_default() += e.action.delta();
            }
        }
    }
    counts.len()
}

/// tally's counter fold of `recs` into one window, closed.
pub fn fold_window(recs: &[StreamRecord], dedup: &mut Dedup) -> ClosedWindow {
    let mut w = WindowBuilder::new(None, 0);
    for r in recs {
        w.push("shard-0", r, dedup);
    }
    w.close(dedup)
}

/// A fresh analytics fold as a shard starts one: sketches of 200 posts, 5-minute half-life.
pub fn analytics() -> Fold {
    Fold::new(200, 300_000, i64::MAX, 600_000)
}

/// Analytics: decode + dedup + three latencies + two trending sketches (settled, as a window
/// is before it is stored); the likes counted.
pub fn analytics_fold(recs: &[StreamRecord], f: &mut Fold) -> u64 {
    let now = 1_796_000_010_000;
    let mut window = Extent::default();
    let likes = recs
        .iter()
        .map(|r| f.take(&mut window, r, 0, usize::MAX, now).1)
        .sum();
    f.settle();
    likes
}
