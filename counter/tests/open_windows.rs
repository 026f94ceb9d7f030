//! The counter's open windows as the read side sees them — counting likers, the second stage's
//! windows over the edges' change log; the rule that keeps a window open at a low rate; a window
//! being written shown until it is counted; an answer that asks only the shards holding its
//! posts. On the embedded store, the counter's shards driven by hand.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_core::ports::{CountReader, EdgeWriter, LeaseReader, PutEntry, ShardReader, Stream};
use tally_core::summary::marker;
use tally_counter::board::{shards_digest, Board, Listed, ShardOpen};
use tally_counter::{Counter, CounterConfig, CounterContext};
use tally_embedded::Embedded;

const M0: i64 = 1_796_000_000_000 / 60_000 * 60_000;
const M1: i64 = M0 + 60_000;

fn action(id: &str, post: &str, user: &str, act: &str, at: i64) -> PutEntry {
    PutEntry {
        partition_key: post.into(),
        data: format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"{user}","action":"{act}","created_at":{at}}}"#
        )
        .into_bytes(),
    }
}

const SHARD: &str = "shardId-000000000000";

/// A one-shard embedded store whose lease `w1` holds: the store (and its directory) and the
/// lease.
async fn one_shard() -> (
    tempfile::TempDir,
    Arc<Embedded>,
    tally_core::ports::Fence,
    tally_core::lease::Lease,
) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Embedded::open(dir.path(), 1).unwrap());
    let fence = common::held_by_w1(&store, SHARD).await;
    let lease = store.list_leases("counter").await.unwrap().remove(0);
    (dir, store, fence, lease)
}

/// A counter on `store` with `cfg`, its open windows shown on `board`.
async fn counter_on(store: &Arc<Embedded>, cfg: CounterConfig, board: &Arc<Board>) -> Counter {
    Counter::open(
        store.clone(),
        cfg,
        CounterContext::default(),
        Arc::default(),
    )
    .await
    .unwrap()
    .on_board(board.clone())
}

/// Counting likers, the first stage's windows write edges and show nothing; the second
/// stage's open window over the edges' change log shows what the changes will count — a like
/// again moving a user to its minute, an unlike of a stored like, an unlike of nothing changing
/// nothing — and once written, the store counts just that.
#[tokio::test]
async fn a_likers_open_window_is_shown_as_its_write_will_count_it() {
    use tally_core::ports::{LeaseStore, StartPosition};
    let (_dir, store, fence, lease) = one_shard().await;
    let cfg = CounterConfig {
        window_time: Duration::from_secs(600),
        ..CounterConfig::default()
    };
    let board = Arc::new(Board::default());
    let edges = counter_on(&store, cfg.clone(), &board).await;
    assert!(
        !edges.shows_open(),
        "the first stage's windows hold edges, no deltas"
    );
    let mut p = edges.create(&fence);
    p.start(&lease).await.unwrap();
    let mut reader = store.open(SHARD, StartPosition::TrimHorizon).await.unwrap();
    // The second stage, on the change log's part that holds pA and pB (each of its own part;
    // the board is asked about both).
    let log = store.change_log().unwrap();
    let changes = Counter::open_change_log(
        store.clone(),
        log.clone(),
        cfg,
        CounterContext::default(),
        Arc::default(),
    )
    .await
    .unwrap()
    .on_board(board.clone());
    let parts = log.list_shards().await.unwrap();
    store
        .ensure_leases(tally_core::apps::CHANGES, &parts)
        .await
        .unwrap();
    let mut counted = Vec::new();
    for part in &parts {
        let f = store
            .take_lease(
                tally_core::apps::CHANGES,
                &part.shard_id,
                0,
                "w1",
                i64::MAX / 2,
            )
            .await
            .unwrap()
            .unwrap();
        let l = store
            .list_leases(tally_core::apps::CHANGES)
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.shard_id == part.shard_id)
            .unwrap();
        let mut c = changes.create(&f);
        let from = c.start(&l).await.unwrap();
        counted.push((c, log.open(&part.shard_id, from).await.unwrap()));
    }
    // A change-log shard's counter and its reader.
    type Counted = (Box<dyn ShardProcessor>, Box<dyn ShardReader>);
    // Reads each part's new changes into its open window.
    async fn read_changes(counted: &mut [Counted]) {
        for (c, r) in counted.iter_mut() {
            let batch = r.next_batch(100).await.unwrap();
            c.process(&batch, 0).await.unwrap();
        }
    }

    // Counted first: u1 and u2 like pA.
    store
        .put_records(&[
            action("e1", "pA", "u1", "like", M0),
            action("e2", "pA", "u2", "like", M0),
        ])
        .await
        .unwrap();
    p.process(&reader.next_batch(100).await.unwrap(), 0)
        .await
        .unwrap();
    p.flush(false).await.unwrap();
    read_changes(&mut counted).await;
    for (c, _) in counted.iter_mut() {
        c.flush(false).await.unwrap();
    }
    assert_eq!(store.post_count("pA", None).await.unwrap().total, 2);

    // Then: u1 likes pA again (still one like, now made in M1: -1 in M0, +1 in M1), u2 takes
    // theirs back (-1 in M0), u3 likes it (+1 in M1), u9 unlikes pB, which they never liked
    // (nothing), u4 likes pB (+1 in M1).
    store
        .put_records(&[
            action("e3", "pA", "u1", "like", M1),
            action("e4", "pA", "u2", "unlike", M1),
            action("e5", "pA", "u3", "like", M1),
            action("e6", "pB", "u9", "unlike", M1),
            action("e7", "pB", "u4", "like", M1),
        ])
        .await
        .unwrap();
    p.process(&reader.next_batch(100).await.unwrap(), 0)
        .await
        .unwrap();
    let ids = vec!["pA".to_owned(), "pB".to_owned(), "pC".to_owned()];
    let shown = |answer: &[ShardOpen]| {
        let mut out: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
        for s in answer {
            for w in &s.windows {
                out.extend(w.posts.clone());
            }
        }
        out
    };
    assert_eq!(
        shown(&board.pending(&ids)),
        BTreeMap::new(),
        "edges not written yet"
    );
    p.flush(false).await.unwrap();
    read_changes(&mut counted).await;
    let want = BTreeMap::from([
        ("pA".to_owned(), BTreeMap::from([(M0, -2), (M1, 2)])),
        ("pB".to_owned(), BTreeMap::from([(M1, 1)])),
    ]);
    assert_eq!(shown(&board.pending(&ids)), want);

    // Written: what was shown is what the store counts now.
    for (c, _) in counted.iter_mut() {
        c.flush(false).await.unwrap();
    }
    assert_eq!(store.post_count("pA", None).await.unwrap().total, 2);
    assert_eq!(store.post_count("pB", None).await.unwrap().total, 1);
    let since_m1 = store.post_count("pA", Some(M1)).await.unwrap();
    assert_eq!(since_m1.since, Some(2), "u1's like again and u3's");
    assert_eq!(shown(&board.pending(&ids)), BTreeMap::new());
}

#[test]
fn a_window_at_a_low_rate_stays_open_only_where_its_likes_are_shown() {
    let mut cfg = CounterConfig {
        window_time: Duration::from_secs(1),
        window_max_time: Duration::from_secs(10),
        window_min_records: 20,
        ..CounterConfig::default()
    };
    // Not shown: every window closes at window_ms.
    assert!(!cfg.due(1, 999, false));
    assert!(cfg.due(1, 1_000, false));
    // Shown:
    assert!(!cfg.due(19, 1_000, true), "few records: it stays open");
    assert!(!cfg.due(19, 9_999, true));
    assert!(cfg.due(19, 10_000, true), "…up to window_max_ms");
    assert!(cfg.due(20, 1_000, true), "enough records: on time");
    assert!(!cfg.due(500, 999, true));
    // A window_max_ms at or below window_ms changes nothing.
    cfg.window_max_time = Duration::from_millis(500);
    assert!(cfg.due(1, 1_000, true));
}

/// Unset, `posts_per_batch` is the store's own when the counter opens — on the embedded store
/// 20,000 edges or posts per SQLite transaction, where DynamoDB takes 1,000 items a call — and a
/// value set is kept as set (the fault harnesses' batches of one and two).
#[tokio::test]
async fn the_counter_writes_in_its_store_s_batches_unless_told() {
    let (_dir, store, _fence, _lease) = one_shard().await;
    let open = |posts_per_batch| {
        let cfg = CounterConfig {
            posts_per_batch,
            ..CounterConfig::default()
        };
        Counter::open(
            store.clone(),
            cfg,
            CounterContext::default(),
            Arc::default(),
        )
    };
    let store_s = open(None).await.unwrap();
    assert_eq!(store_s.config().posts_per_batch, Some(20_000));
    assert_eq!(store_s.config().batch(), 20_000);
    let set = open(Some(7)).await.unwrap();
    assert_eq!(set.config().batch(), 7);
    // What a rebuild into the store takes: the same resolution.
    assert_eq!(CounterConfig::default().batch_on(store.as_ref()), 20_000);
}

/// A closed window whose writes are under way is shown — not left out until they are done — so
/// a like shown while its window was open is never taken back while the window is written: at every answer, the stored count plus the windows
/// the post's markers say it does not hold yet is the count the writes end at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_being_written_is_shown_until_it_is_counted() {
    let (_dir, store, fence, lease) = one_shard().await;
    let shard = SHARD;
    let cfg = CounterConfig {
        window_time: Duration::from_secs(600),
        // One post per store call: the writes take long enough to be asked about.
        posts_per_batch: Some(1),
        count: tally_core::edge::CountMode::Events,
        ..CounterConfig::default()
    };
    let board = Arc::new(Board::default());
    let counter = counter_on(&store, cfg, &board).await;
    let mut p = counter.create(&fence);
    p.start(&lease).await.unwrap();
    let mut reader = store
        .open(shard, tally_core::ports::StartPosition::TrimHorizon)
        .await
        .unwrap();
    let ids: Vec<String> = (0..100).map(|i| format!("pw{i:03}")).collect();
    let likes: Vec<PutEntry> = ids
        .iter()
        .enumerate()
        .map(|(i, post)| action(&format!("w{i}"), post, "u1", "like", M0))
        .collect();
    store.put_records(&likes).await.unwrap();
    p.process(&reader.next_batch(1_000).await.unwrap(), 0)
        .await
        .unwrap();
    // What an answer shows of each post: stored, plus the windows it does not hold yet.
    let shown = |answer: Vec<ShardOpen>, counts: Vec<tally_core::ports::PostCount>| {
        ids.iter()
            .zip(&counts)
            .map(|(post, c)| {
                let pending: i64 = answer[0]
                    .windows
                    .iter()
                    .filter(|w| {
                        tally_core::summary::pending_applies(&c.marks, shard, w.after.as_deref())
                    })
                    .filter_map(|w| w.posts.get(post))
                    .flat_map(|m| m.values())
                    .sum();
                (c.total, c.total + pending)
            })
            .collect::<Vec<(i64, i64)>>()
    };
    let open = board.pending(&ids);
    let counts = store
        .post_counts(&ids, None, Default::default())
        .await
        .unwrap();
    assert!(shown(open, counts).iter().all(|&(s, n)| (s, n) == (0, 1)));

    let writing = tokio::spawn(async move {
        p.flush(false).await.unwrap();
        p
    });
    let (mut asked, mut mid_write) = (0, 0);
    while !writing.is_finished() {
        let answer = board.pending(&ids);
        let counts = store
            .post_counts(&ids, None, Default::default())
            .await
            .unwrap();
        let seen = shown(answer, counts);
        assert!(
            seen.iter().all(|&(_, n)| n == 1),
            "a like taken back while its window is written: {seen:?}"
        );
        asked += 1;
        mid_write += usize::from(seen.iter().any(|&(s, _)| s == 0));
    }
    let _p = writing.await.unwrap();
    assert!(
        mid_write > 0,
        "asked {asked} times, never while the window was written"
    );
    for post in &ids {
        assert_eq!(store.post_count(post, None).await.unwrap().total, 1);
    }
}

/// A worker's answer asks only the shards whose windows hold a post of the page (its index of
/// which shards hold each post), and misses none: over many rounds of likes put on 8 shards
/// (each post's on its own shard), a shard's window now and then written, the index tidied as
/// it grows, each answer shows every page post's likes its open windows hold, and each held
/// shard says how far its windows reach. Asked as the read side asks (`Listed::Holding`, the
/// digest of the shards it lists), the answer lists only the shards whose windows hold a post
/// of the page and the one named, and shows the same likes; with a digest of other shards,
/// every shard.
#[tokio::test]
async fn an_answer_asks_the_shards_holding_its_posts_and_misses_none() {
    const SHARDS: usize = 8;
    const POSTS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Embedded::open(dir.path(), SHARDS).unwrap());
    let cfg = CounterConfig {
        window_time: Duration::from_secs(600),
        count: tally_core::edge::CountMode::Events,
        ..CounterConfig::default()
    };
    let board = Arc::new(Board::default());
    let counter = counter_on(&store, cfg, &board).await;
    let ids = store.list_shards().await.unwrap();
    let mut shards = Vec::new();
    for s in &ids {
        let fence = common::held_by_w1(&store, &s.shard_id).await;
        let lease = store
            .list_leases("counter")
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.shard_id == s.shard_id)
            .unwrap();
        let mut p = counter.create(&fence);
        p.start(&lease).await.unwrap();
        let reader = store
            .open(&s.shard_id, tally_core::ports::StartPosition::TrimHorizon)
            .await
            .unwrap();
        shards.push((s.shard_id.clone(), p, reader));
    }
    // Likes each shard's open window holds, by post; where each shard's windows reach.
    let mut open: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); SHARDS];
    let mut through: Vec<Option<String>> = vec![None; SHARDS];
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut event = 0;
    for round in 0..300 {
        let puts: Vec<PutEntry> = (0..20)
            .map(|_| {
                event += 1;
                let post = format!("h{}", next(POSTS));
                action(
                    &format!("e{event}"),
                    &post,
                    &format!("u{event}"),
                    "like",
                    M0,
                )
            })
            .collect();
        store.put_records(&puts).await.unwrap();
        for (i, (_, p, reader)) in shards.iter_mut().enumerate() {
            let batch = reader.next_batch(1_000).await.unwrap();
            if let Some(last) = batch.records.last() {
                through[i] = Some(marker(&tally_core::Position::whole(last.seq.clone())));
            }
            for r in &batch.records {
                let post = String::from_utf8_lossy(&r.data)
                    .split("\"post_id\":\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .unwrap()
                    .to_owned();
                *open[i].entry(post).or_default() += 1;
            }
            p.process(&batch, 0).await.unwrap();
        }
        if round % 5 == 4 {
            // A shard's window written: it leaves the board (and the shard's answer says nothing
            // of how far it reached until its next window holds a record).
            let i = next(SHARDS as u64) as usize;
            shards[i].1.flush(false).await.unwrap();
            open[i].clear();
            through[i] = None;
        }
        // A page: posts just liked, and others.
        let mut page: Vec<String> = puts[..5].iter().map(|e| e.partition_key.clone()).collect();
        page.extend((0..5).map(|_| format!("h{}", next(POSTS))));
        let answer = board.pending(&page);
        assert_eq!(answer.len(), SHARDS, "every held shard answers");
        for (i, a) in answer.iter().enumerate() {
            assert_eq!(a.shard_id, shards[i].0);
            assert_eq!(a.through, through[i], "how far shard {i}'s windows reach");
        }
        // Asked as the read side asks, with the digest of the shards it lists this worker as
        // holding and a shard it names: only the shards whose windows hold a post of the page,
        // and the one named, are listed.
        let named_at = next(SHARDS as u64) as usize;
        let named: HashSet<String> = [shards[named_at].0.clone()].into();
        let all = shards_digest(shards.iter().map(|(id, ..)| id.as_str()));
        let listed = Listed::Holding {
            held: all,
            named: &named,
        };
        let holding = board.answer(&page, listed);
        assert!(holding.holding_only, "the digest is the worker's");
        for (i, o) in open.iter().enumerate() {
            let holds = page.iter().any(|p| o.contains_key(p));
            let listed = holding.shards.iter().find(|a| a.shard_id == shards[i].0);
            if holds || i == named_at {
                let a = listed.unwrap_or_else(|| panic!("round {round}: shard {i} is listed"));
                assert_eq!(a.through, through[i], "how far shard {i}'s windows reach");
            }
        }
        // With another digest (the read side lists a shard this worker does not hold), every
        // held shard is listed.
        let stale = Listed::Holding {
            held: all ^ shards_digest(["shardId-999"]),
            named: &named,
        };
        let every = board.answer(&page, stale);
        assert!(!every.holding_only);
        assert_eq!(every.shards.len(), SHARDS);
        page.sort();
        page.dedup();
        for post in &page {
            let held: i64 = open.iter().filter_map(|o| o.get(post)).sum();
            for (how, answer) in [("every shard", &answer), ("holding only", &holding.shards)] {
                let shown: i64 = answer
                    .iter()
                    .flat_map(|a| &a.windows)
                    .filter_map(|w| w.posts.get(post))
                    .flat_map(|m| m.values())
                    .sum();
                assert_eq!(
                    shown, held,
                    "round {round}, {how}: {post}'s likes in open windows"
                );
            }
        }
    }
}
