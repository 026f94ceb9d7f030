//! What one counts call of a feed page costs a counter worker's open windows counting likers
//! (`tally_counter::board`: each held shard's open window asked for the page's deltas and the
//! viewer's states, as `WindowBuilder::deltas_as_written` and `states_as_written` answer them),
//! at 4, 64 and 1,000 held shards whose open windows hold 100,000 records between them — beside,
//! in the same rounds, the naive pattern: the same answer with the page's edges found by one pass
//! over every edge each window holds. Two pages of 100 posts of 2,000 (Zipf 1.1, as the demo's):
//! the long tail, and the 10 most liked with 90 others; their edges' stored states read already
//! (the board keeps them while the window is open). Rounds alternate the two.
//!
//! `cargo bench --bench open_windows` (`-- ROUNDS`, default 100). Prints numbers; asserts that
//! both ways give the same answer, nothing about time.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::time::Instant;

use common::rounds::{median, rounds};
use rand::{rngs::StdRng, Rng, SeedableRng};
use smol_str::SmolStr;
use tally_core::dedup::Dedup;
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::ports::StreamRecord;
use tally_core::seq::SeqNo;
use tally_core::window::{ClosedWindow, WindowBuilder};

const RECORDS: usize = 100_000;
const POSTS: usize = 2_000;
const USERS: usize = 100_000;
const PAGE: usize = 100;
const VIEWER: &str = "u7";

type Stored = HashMap<(SmolStr, SmolStr), Option<EdgeState>>;

/// A post of `POSTS`, Zipf 1.1 (by inverting the cumulative weights).
fn zipf(cumulative: &[f64], rng: &mut StdRng) -> usize {
    let x = rng.gen::<f64>() * cumulative[cumulative.len() - 1];
    cumulative.partition_point(|c| *c < x)
}

/// Each shard's open window, the records spread over them by post.
fn windows(shards: usize) -> Vec<WindowBuilder> {
    let mut cumulative = Vec::with_capacity(POSTS);
    let mut sum = 0.0;
    for k in 1..=POSTS {
        sum += 1.0 / (k as f64).powf(1.1);
        cumulative.push(sum);
    }
    let mut rng = StdRng::seed_from_u64(7);
    let mut dedup: Vec<Dedup> = (0..shards).map(|_| Dedup::new(600_000)).collect();
    let mut out: Vec<WindowBuilder> = (0..shards)
        .map(|_| WindowBuilder::new(None, 0).likers(i64::MAX / 4))
        .collect();
    for i in 0..RECORDS {
        let post = zipf(&cumulative, &mut rng);
        let user = rng.gen_range(0..USERS);
        let like = rng.gen_bool(0.8);
        let data = format!(
            r#"{{"event_id":"e{i:08}","post_id":"p{post}","user_id":"u{user}","action":"{}","created_at":{}}}"#,
            if like { "like" } else { "unlike" },
            1_796_021_058_000 + i as i64,
        );
        let record = StreamRecord {
            seq: SeqNo::parse(&(i + 1).to_string()).unwrap(),
            arrival_ms: 1_796_021_058_000 + i as i64,
            partition_key: format!("p{post}"),
            data: data.into_bytes(),
        };
        let s = post % shards;
        out[s].push("s", &record, &mut dedup[s]);
    }
    out
}

/// The answer: each window's deltas for the page and the viewer's states there.
fn by_post(windows: &[WindowBuilder], wanted: &HashSet<&str>, stored: &Stored) -> usize {
    let look = |e: &EdgeEvent| {
        stored
            .get(&(e.post_id.clone(), e.user_id.clone()))
            .map(Option::as_ref)
    };
    let mut found = 0;
    for w in windows {
        found += w.deltas_as_written(wanted, look, "w").unwrap().len();
        found += w
            .states_as_written(wanted, |u| u == VIEWER, look, "w")
            .unwrap()
            .len();
    }
    found
}

/// The naive pattern: the same answer, each window's edges of the page found by looking at
/// every edge it holds (one pass over the same windows' edges, closed into a plain list: cheaper
/// than the open window's table, so the comparison flatters it).
fn naive(closed: &[ClosedWindow], wanted: &HashSet<&str>, stored: &Stored) -> usize {
    let mut found = 0;
    for c in closed {
        let (mut transitions, mut states) = (Vec::new(), Vec::new());
        for e in c
            .edges
            .iter()
            .filter(|e| wanted.contains(e.post_id.as_str()))
        {
            let old = stored
                .get(&(e.post_id.clone(), e.user_id.clone()))
                .unwrap()
                .as_ref();
            let t = edge::resolve(old, e, "w").transition();
            if e.user_id == VIEWER {
                let liked = t
                    .as_ref()
                    .map_or(old.is_some_and(|o| o.liked), |t| t.after.is_some());
                states.push((e.post_id.to_string(), liked));
            }
            transitions.extend(t);
        }
        found += edge::deltas(&transitions).0.len() + states.len();
    }
    found
}

fn main() {
    let rounds = rounds(100);
    let names: Vec<String> = (0..POSTS).map(|p| format!("p{p}")).collect();
    // Two pages: 100 posts of the long tail, and the 10 most liked posts with 90 of the rest.
    let spread = |from: usize, n: usize| (1..=n).map(move |k| from + k * (POSTS - from) / (n + 1));
    let pages: [(&str, HashSet<&str>); 2] = [
        (
            "long tail",
            spread(100, PAGE).map(|p| names[p].as_str()).collect(),
        ),
        (
            "10 most liked + 90",
            (0..10)
                .chain(spread(10, PAGE - 10))
                .map(|p| names[p].as_str())
                .collect(),
        ),
    ];
    println!(
        "open_windows: one counts call of {PAGE} posts with a viewer, over open windows of \
         {RECORDS} records counting likers, median of {rounds} rounds"
    );
    println!("| shards | page | page's edges | by post (µs) | naive, every edge (µs) |");
    println!("|---|---|---|---|---|");
    for shards in [4usize, 64, 1_000] {
        let windows = windows(shards);
        let closed: Vec<ClosedWindow> = self::windows(shards)
            .into_iter()
            .map(|w| w.close(&mut Dedup::new(600_000)))
            .collect();
        for (name, page) in &pages {
            assert_eq!(page.len(), PAGE);
            // The page's edges' stored states, read already: all absent.
            let stored: Stored = windows
                .iter()
                .flat_map(|w| w.edges_of(page))
                .map(|e| ((e.post_id.clone(), e.user_id.clone()), None))
                .collect();
            assert_eq!(
                by_post(&windows, page, &stored),
                naive(&closed, page, &stored),
                "both ways give the same answer"
            );
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let t = Instant::now();
                black_box(by_post(black_box(&windows), page, &stored));
                fast.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                black_box(naive(black_box(&closed), page, &stored));
                slow.push(t.elapsed().as_secs_f64() * 1e6);
            }
            println!(
                "| {shards} | {name} | {} | {:.1} | {:.1} |",
                stored.len(),
                median(&mut fast),
                median(&mut slow)
            );
        }
    }
}
