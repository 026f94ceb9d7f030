//! What settling a counts call's provisional part costs the read side (`serve::pending::Memory`:
//! the workers' answers beside what was remembered), per call of a feed page of 100 posts, at 4,
//! 64 and 1,000 shards — beside, in the same rounds, the naive pattern that looks at every
//! shard's answer for every post (the cost that grows with the shard count, which the read side
//! must not have). Whatever the shard count, 20 shards' answers hold a window naming 5 of the
//! page's posts each (what is pending for a page does not grow with the shards that hold nothing
//! of it); every other shard answers with nothing of the page. The memory is warm. Rounds
//! alternate the two, so a load that comes and goes falls on both alike.
//!
//! `cargo bench --bench provisional` (`-- ROUNDS`, default 200). Prints numbers; asserts nothing
//! about time.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::time::Instant;

use common::rounds::{median, rounds};
use tally::serve::pending::Memory;
use tally_counter::board::{OpenWindow, ShardOpen};

const PAGE: usize = 100;

/// Shards holding something of the page.
const HOLDING: usize = 20;

/// Each shard's answer: the first [`HOLDING`] an open window naming 5 of the page's posts (a
/// different 5 each), the others none.
fn answers(shards: usize) -> HashMap<String, ShardOpen> {
    (0..shards)
        .map(|s| {
            let shard = format!("shardId-{s:012}");
            let posts: BTreeMap<String, BTreeMap<i64, i64>> = (0..5)
                .filter(|_| s < HOLDING)
                .map(|k| (format!("p{}", (s * 5 + k) % PAGE), [(0, 1)].into()))
                .collect();
            let open = ShardOpen {
                shard_id: shard.clone(),
                windows: vec![OpenWindow {
                    after: Some("0011".into()),
                    posts,
                    viewer: Default::default(),
                    likers: Default::default(),
                }],
                through: Some("0019".into()),
            };
            (shard, open)
        })
        .collect()
}

/// The naive pattern: every shard's answer looked at for every post of the page.
fn naive(ids: &[String], live: &HashMap<String, ShardOpen>) -> usize {
    let mut found = 0;
    for post in ids {
        for answer in live.values() {
            for w in &answer.windows {
                if w.posts.contains_key(post) {
                    found += 1;
                }
            }
        }
    }
    found
}

fn main() {
    let rounds = rounds(200);
    let ids: Vec<String> = (0..PAGE).map(|i| format!("p{i}")).collect();
    println!("provisional: one counts call of {PAGE} posts, median of {rounds} rounds");
    println!("| shards | settle (µs) | naive, every shard per post (µs) |");
    println!("|---|---|---|");
    for shards in [4usize, 64, 1_000] {
        let live = answers(shards);
        let mut memory = Memory::default();
        memory.settle(&ids, &live, None);
        let (mut settle, mut each) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            black_box(memory.settle(black_box(&ids), black_box(&live), None));
            settle.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            black_box(naive(black_box(&ids), black_box(&live)));
            each.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (windows, _, _) = memory.settle(&ids, &live, None);
        assert_eq!(
            windows.count(),
            shards.min(HOLDING) * 5,
            "every window of the page's posts"
        );
        println!(
            "| {shards} | {:.1} | {:.1} |",
            median(&mut settle),
            median(&mut each)
        );
    }
}
