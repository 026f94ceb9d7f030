//! What settling a counts call's provisional part costs the read side (`serve::pending::Memory`:
//! the workers' answers beside what was remembered), per call of a feed page of 100 posts, at 4,
//! 64 and 1,000 shards — beside, in the same rounds, the naive pattern that looks at every
//! shard's answer for every post (the cost that grows with the shard count, which the read side
//! must not have). Whatever the shard count, 20 shards' answers hold a window naming 5 of the
//! page's posts each (what is pending for a page does not grow with the shards that hold nothing
//! of it); every other shard answers with nothing of the page. The memory is warm. Rounds
//! alternate the two, so a load that comes and goes falls on both alike.
//!
//! A second table: the whole provisional part of a counts call (`serve::pending::Pending::ask`)
//! over HTTP on 127.0.0.1 to one counter worker's `/api/open` (`WorkerHttp`, its board holding
//! 4, 64 or 1,000 shards whose open windows hold 20,000 likes of 2,000 posts, Zipf 1.1, each
//! post's on its own shard), a page of 100 posts of the long tail with a viewer: asked as the
//! read side asks, with the digest of the shards the listing gives the worker (it lists only
//! the shards holding a post of the page) — beside, in the same rounds, the same call with the
//! listing giving the worker one shard more, so that the digest differs and it lists every
//! shard it holds (what every call cost before).
//!
//! `cargo bench --bench provisional` (`-- ROUNDS`, default 200). Prints numbers; asserts that
//! both calls add the same windows, nothing about time.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rounds::{median, rounds};
use rand::{rngs::StdRng, Rng, SeedableRng};
use tally_core::ports::{LeaseReader, PutEntry};
use tally_counter::board::{Board, OpenWindow, ShardOpen};
use tally_embedded::Embedded;
use tally_serve::freshness::Listing;
use tally_serve::pending::{Memory, Pending};
use tally_serve::worker::WorkerHttp;

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
    settling(rounds);
    calls(rounds);
}

fn settling(rounds: usize) {
    let ids: Vec<String> = (0..PAGE).map(|i| format!("p{i}")).collect();
    println!("provisional: one counts call of {PAGE} posts, median of {rounds} rounds");
    println!("| shards | settle (µs) | naive, every shard per post (µs) |");
    println!("|---|---|---|");
    for shards in [4usize, 64, 1_000] {
        let live = answers(shards);
        let mut memory = Memory::default();
        memory.settle(&ids, &live);
        let (mut settle, mut each) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            black_box(memory.settle(black_box(&ids), black_box(&live)));
            settle.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            black_box(naive(black_box(&ids), black_box(&live)));
            each.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (windows, _) = memory.settle(&ids, &live);
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

/// The whole provisional part of a call, against a worker holding `shards` shards, both ways.
fn calls(rounds: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!();
    println!(
        "provisional: the workers' part of one counts call of {PAGE} posts with a viewer \
         (`Pending::ask` over HTTP to one worker's `/api/open`), median of {rounds} rounds"
    );
    println!(
        "| shards | shards listed | the listing's digest (µs) | shards listed | every shard (µs) |"
    );
    println!("|---|---|---|---|---|");
    for shards in [4usize, 64, 1_000] {
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(Embedded::open(dir.path(), shards).unwrap());
            let board = counted(&store).await;
            let (_http, bound) = WorkerHttp::start(
                Some("127.0.0.1:0".parse().unwrap()),
                store.clone(),
                tally_core::apps::COUNTER,
                || Ok(String::new()),
                Some((board, "w1".to_owned())),
            )
            .await
            .unwrap();
            let addr = bound.unwrap().to_string();
            let mut states = store.list_states(tally_core::apps::COUNTER).await.unwrap();
            for st in &mut states {
                st.holder_addr = Some(addr.clone());
            }
            let mut more = states[0].clone();
            more.lease.shard_id = "shardId-not-held".into();
            let exact = Listing::new(tally_core::apps::COUNTER, states.clone(), 0);
            states.push(more);
            let stale = Listing::new(tally_core::apps::COUNTER, states, 0);
            // The long tail: 100 posts from the 100th most liked on.
            let ids: Vec<String> = (0..PAGE).map(|k| format!("p{}", 100 + k * 19)).collect();
            let pending = Pending::new(Duration::from_secs(5));
            let a = pending.ask(&exact, &ids).await;
            let b = pending.ask(&stale, &ids).await;
            assert!(
                a.windows.count() > 0,
                "the page's posts are in open windows"
            );
            assert_eq!(
                a.windows.count(),
                b.windows.count(),
                "both ways add the same windows"
            );
            assert!(a.unanswered.is_empty());
            assert_eq!(b.unanswered, ["shardId-not-held"]);
            let n_exact = listed(&addr, &ids, &exact).await;
            let n_stale = listed(&addr, &ids, &stale).await;
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let t = Instant::now();
                black_box(pending.ask(&exact, black_box(&ids)).await);
                fast.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                black_box(pending.ask(&stale, black_box(&ids)).await);
                slow.push(t.elapsed().as_secs_f64() * 1e6);
            }
            println!(
                "| {shards} | {n_exact} | {:.0} | {n_stale} | {:.0} |",
                median(&mut fast),
                median(&mut slow)
            );
        });
    }
}

/// How many shards the worker at `addr` lists, asked about `ids` with the digest `listing`
/// gives it.
async fn listed(addr: &str, ids: &[String], listing: &Listing) -> usize {
    let w = &listing.workers().by_worker[0];
    let url = format!(
        "http://{addr}/api/open?ids={}&viewer=u7&held={:x}",
        ids.join(","),
        w.digest_live(&[])
    );
    let body = tally_serve::client::get_text(&url, Duration::from_secs(5))
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["shards"].as_array().unwrap().len()
}

/// An embedded store's 20,000 likes read into a counter worker's open windows (posts Zipf 1.1
/// over 2,000, each post's on its own shard, 20,000 users): the worker's board.
async fn counted(store: &Arc<Embedded>) -> Arc<Board> {
    let cumulative = common::board::zipf(2_000, 1.1);
    let mut rng = StdRng::seed_from_u64(11);
    let entries: Vec<PutEntry> = (0..20_000)
        .map(|i| {
            let post = common::board::zipf_pick(&cumulative, rng.gen::<f64>());
            PutEntry {
                partition_key: format!("p{post}"),
                data: format!(
                    r#"{{"event_id":"e{i}","post_id":"p{post}","user_id":"u{}","action":"like","created_at":{}}}"#,
                    rng.gen_range(0..20_000),
                    1_796_021_058_000i64 + i
                )
                .into_bytes(),
            }
        })
        .collect();
    let (board, shards) = common::board::open_on_board(store, &entries).await;
    // Kept open: their windows stay on the board.
    std::mem::forget(shards);
    board
}
