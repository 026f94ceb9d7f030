//! What one counts call of a feed page costs a counter worker's open windows counting likers,
//! at 4, 64 and 1,000 held shards whose open windows hold 100,000 records between them. Two
//! pages of 100 posts of 2,000 (Zipf 1.1, as the demo's): the long tail, and the 10 most liked
//! with 90 others. Two tables:
//! - the windows' part alone (`WindowBuilder::deltas_as_written` and `states_as_written`, every
//!   edge of the page resolved against stored states read already) beside, in the same rounds,
//!   the naive pattern: the same answer with the page's edges found by one pass over every edge
//!   each window holds;
//! - the board's answer (`tally_counter::board::Board::pending`, the shards driven on an
//!   embedded store): the first answer, which reads the page's edges; an answer again with
//!   nothing changed; an answer after a like of each of the 10 most liked posts (taken back
//!   after, and the answer checked to be the one before).
//!
//! `cargo bench --bench open_windows` (`-- ROUNDS`, default 100). Prints numbers; asserts that
//! both ways give the same answer and that the board's answers follow the likes, nothing about
//! time.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use common::rounds::{median, rounds};
use rand::{rngs::StdRng, Rng, SeedableRng};
use smol_str::SmolStr;
use tally_consumer::worker::ShardProcessor;
use tally_core::buckets::PostDelta;
use tally_core::dedup::Dedup;
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::ports::{PutEntry, ShardReader, Stream, StreamRecord};
use tally_core::seq::SeqNo;
use tally_core::window::{ClosedWindow, Users, WindowBuilder};
use tally_counter::board::{Also, Board, OpenWindow, ShardOpen};
use tally_embedded::Embedded;

const RECORDS: usize = 100_000;
const POSTS: usize = 2_000;
const USERS: usize = 100_000;
const PAGE: usize = 100;
const VIEWER: &str = "u7";

type Stored = HashMap<(SmolStr, SmolStr), Option<EdgeState>>;

/// The records: (post, user, like?) for `RECORDS` events, posts Zipf 1.1.
fn events() -> Vec<(usize, usize, bool)> {
    let cumulative = common::board::zipf(POSTS, 1.1);
    let mut rng = StdRng::seed_from_u64(7);
    (0..RECORDS)
        .map(|_| {
            let post = common::board::zipf_pick(&cumulative, rng.gen::<f64>());
            (post, rng.gen_range(0..USERS), rng.gen_bool(0.8))
        })
        .collect()
}

/// The `i`-th event's record body.
fn body(i: usize, (post, user, like): (usize, usize, bool)) -> Vec<u8> {
    format!(
        r#"{{"event_id":"e{i:08}","post_id":"p{post}","user_id":"u{user}","action":"{}","created_at":{}}}"#,
        if like { "like" } else { "unlike" },
        1_796_021_058_000 + i as i64,
    )
    .into_bytes()
}

/// Each shard's open window, the records spread over them by post.
fn windows(shards: usize) -> Vec<WindowBuilder> {
    let mut dedup: Vec<Dedup> = (0..shards).map(|_| Dedup::new(600_000)).collect();
    let mut out: Vec<WindowBuilder> = (0..shards)
        .map(|_| WindowBuilder::new(None, 0).likers(i64::MAX / 4))
        .collect();
    for (i, ev) in events().into_iter().enumerate() {
        let record = StreamRecord {
            seq: SeqNo::parse(&(i + 1).to_string()).unwrap(),
            arrival_ms: 1_796_021_058_000 + i as i64,
            partition_key: format!("p{}", ev.0),
            data: body(i, ev),
        };
        let s = ev.0 % shards;
        out[s].push("s", &record, &mut dedup[s]);
    }
    out
}

/// An answer: each window's deltas for the page (by post and minute) and the viewer's states
/// there, window by window.
type Answer = Vec<(Vec<(String, PostDelta)>, Vec<(String, bool)>)>;

/// The answer: each window's deltas for the page and the viewer's states there.
fn by_post(windows: &[WindowBuilder], wanted: &HashSet<&str>, stored: &Stored) -> Answer {
    let look = |e: &EdgeEvent| {
        stored
            .get(&(e.post_id.clone(), e.user_id.clone()))
            .map(Option::as_ref)
    };
    windows
        .iter()
        .map(|w| {
            let deltas = w.deltas_as_written(wanted, look, "w").unwrap();
            let states = w
                .states_as_written(wanted, Users::One(VIEWER), look, "w")
                .unwrap()
                .into_iter()
                .map(|(post, _, liked)| (post, liked))
                .collect();
            (deltas, states)
        })
        .collect()
}

/// The naive pattern: the same answer, each window's edges of the page found by looking at
/// every edge it holds (one pass over the same windows' edges, closed into a plain list: cheaper
/// than the open window's table, so the comparison flatters it).
fn naive(closed: &[ClosedWindow], wanted: &HashSet<&str>, stored: &Stored) -> Answer {
    closed
        .iter()
        .map(|c| {
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
            states.sort();
            (edge::deltas(&transitions).0, states)
        })
        .collect()
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
            let answer = by_post(&windows, page, &stored);
            assert!(
                answer.iter().any(|(d, _)| !d.is_empty()),
                "the page has likes"
            );
            assert_eq!(
                answer,
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
    board_answers(rounds, &pages);
}

/// The same answer through a worker's board (`Board::pending`, with a viewer), its shards'
/// windows open on an embedded store of that many shards, every edge absent there: the first
/// answer (which reads the page's edges), an answer again with nothing changed, and an answer
/// after one new like of each of the page's 10 most liked posts.
fn board_answers(rounds: usize, pages: &[(&str, HashSet<&str>)]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!();
    println!(
        "the board: one counts call of {PAGE} posts with a viewer (`Board::pending`), over open \
         windows of {RECORDS} records counting likers on an embedded store, median of {rounds} rounds"
    );
    println!("| shards | page | first answer (µs) | again, nothing changed (µs) | after a like of each of the 10 most liked (µs) |");
    println!("|---|---|---|---|---|");
    let posts: Vec<Vec<String>> = pages
        .iter()
        .map(|(_, page)| page.iter().map(|p| (*p).to_owned()).collect())
        .collect();
    for shards in [4usize, 64, 1_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Embedded::open(dir.path(), shards).unwrap());
        let (board, mut open) = rt.block_on(counted(&store, shards));
        let also = Also {
            viewer: Some(VIEWER),
            likers: None,
        };
        for ((name, _), page) in pages.iter().zip(&posts) {
            let t = Instant::now();
            let want = rt.block_on(board.pending(page, also));
            let first = t.elapsed().as_secs_f64() * 1e6;
            let (mut again, mut changed) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let t = Instant::now();
                let answer = rt.block_on(board.pending(black_box(page), also));
                again.push(t.elapsed().as_secs_f64() * 1e6);
                assert_eq!(windows_of(&answer), windows_of(&want), "nothing changed");
                rt.block_on(open.like_hot(&store));
                let t = Instant::now();
                let liked = rt.block_on(board.pending(black_box(page), also));
                changed.push(t.elapsed().as_secs_f64() * 1e6);
                if page.iter().any(|p| p == "p0") {
                    assert_ne!(windows_of(&liked), windows_of(&want), "the likes are shown");
                }
                rt.block_on(open.unlike_hot(&store));
                let back = rt.block_on(board.pending(page, also));
                assert_eq!(windows_of(&back), windows_of(&want), "taken back");
            }
            println!(
                "| {shards} | {name} | {first:.0} | {:.1} | {:.1} |",
                median(&mut again),
                median(&mut changed)
            );
        }
    }
}

/// What an answer shows, without where each shard's windows end.
fn windows_of(answer: &[ShardOpen]) -> Vec<(&str, &[OpenWindow])> {
    answer
        .iter()
        .map(|s| (s.shard_id.as_str(), s.windows.as_slice()))
        .collect()
}

/// A worker's shards, their windows open (their records read, none written).
struct Open {
    shards: Vec<(Box<dyn ShardReader>, Box<dyn ShardProcessor>)>,
    /// Likes of the hot posts put so far (each by a user new to them).
    turns: usize,
}

/// Puts the records and folds them into each shard's open window, on a board that resolves.
async fn counted(store: &Arc<Embedded>, shards: usize) -> (Arc<Board>, Open) {
    assert_eq!(store.list_shards().await.unwrap().len(), shards);
    let entries: Vec<PutEntry> = events()
        .into_iter()
        .enumerate()
        .map(|(i, ev)| PutEntry {
            partition_key: format!("p{}", ev.0),
            data: body(i, ev),
        })
        .collect();
    let (board, shards) = common::board::open_on_board(store, &entries).await;
    (board, Open { shards, turns: 0 })
}

impl Open {
    /// A like of each of the 10 most liked posts by a user new to them, folded.
    async fn like_hot(&mut self, store: &Embedded) {
        self.turns += 1;
        self.put_hot(store, self.turns, "like").await;
    }

    /// The same users' likes taken back, folded: the answer is the one before.
    async fn unlike_hot(&mut self, store: &Embedded) {
        self.put_hot(store, self.turns, "unlike").await;
    }

    async fn put_hot(&mut self, store: &Embedded, round: usize, action: &str) {
        let at = 1_796_021_058_000 + (RECORDS + 2 * round) as i64 + i64::from(action == "unlike");
        let entries: Vec<PutEntry> = (0..10)
            .map(|p| PutEntry {
                partition_key: format!("p{p}"),
                data: format!(
                    r#"{{"event_id":"h{round}-{action}-{p}","post_id":"p{p}","user_id":"new{round}","action":"{action}","created_at":{at}}}"#
                )
                .into_bytes(),
            })
            .collect();
        store.put_records(&entries).await.unwrap();
        for (reader, p) in &mut self.shards {
            let batch = reader.next_batch(100).await.unwrap();
            if !batch.records.is_empty() {
                p.process(&batch, 0).await.unwrap();
            }
        }
    }
}
