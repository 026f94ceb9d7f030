//! Counting likers, an open window is shown to the read side resolved against the stored edges
//! it will write over — a like again of a user who likes the post, an unlike of nothing change
//! nothing; an unlike of a stored like takes it away — and what it shows is what its write then
//! does. And the rule that keeps a window open at a low rate. On the embedded store, the
//! counter's shard driven by hand.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tally_consumer::worker::ProcessorFactory;
use tally_core::ports::{CounterStore, LeaseStore, PutEntry, Stream};
use tally_core::summary::marker;
use tally_counter::board::{Board, ShardOpen};
use tally_counter::{Counter, CounterConfig, CounterMetrics};
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

/// The open window's deltas per post, by minute.
fn open_deltas(answer: &[ShardOpen]) -> BTreeMap<String, BTreeMap<i64, i64>> {
    assert_eq!(answer.len(), 1, "{answer:?}");
    let mut out = BTreeMap::new();
    for w in &answer[0].windows {
        out.extend(w.posts.clone());
    }
    out
}

#[tokio::test]
async fn a_likers_open_window_is_shown_as_its_write_will_count_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Embedded::open(dir.path(), 1).unwrap());
    let shard = "shardId-000000000000";
    let fence = common::held_by_w1(&store, shard).await;
    let lease = store.list_leases("counter").await.unwrap().remove(0);
    let mut cfg = CounterConfig::new("counter");
    cfg.window_time = Duration::from_secs(600);
    let resolving = Arc::new(Board::resolving(store.clone()));
    let plain = Arc::new(Board::default());
    let counter = Counter::open(store.clone(), cfg.clone(), Arc::default())
        .await
        .unwrap()
        .on_board(resolving.clone());
    let mut p = counter.create(shard);
    // The same records on a board that cannot resolve: the open window is left out.
    let unresolved = Counter::open(store.clone(), cfg, Arc::new(CounterMetrics::default()))
        .await
        .unwrap()
        .on_board(plain.clone());
    let mut q = unresolved.create(shard);
    q.start(&fence, &lease).await.unwrap();
    p.start(&fence, &lease).await.unwrap();
    let mut reader = store
        .open(shard, tally_core::ports::StartPosition::TrimHorizon)
        .await
        .unwrap();

    // Applied first: u1 and u2 like pA.
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
    assert_eq!(store.post_count("pA", None).await.unwrap().total, 2);

    // Open: u1 likes pA again (still one like, now made in M1: -1 in M0, +1 in M1), u2 takes
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
    let batch = reader.next_batch(100).await.unwrap();
    let last = tally_core::Position::whole(batch.records.last().unwrap().seq.clone());
    p.process(&batch, 0).await.unwrap();
    q.process(&batch, 0).await.unwrap();

    let ids = vec!["pA".to_owned(), "pB".to_owned(), "pC".to_owned()];
    let answer = resolving.pending(&ids, Default::default()).await;
    assert_eq!(answer[0].through, Some(marker(&last)), "{answer:?}");
    let want = BTreeMap::from([
        ("pA".to_owned(), BTreeMap::from([(M0, -2), (M1, 2)])),
        ("pB".to_owned(), BTreeMap::from([(M1, 1)])),
    ]);
    assert_eq!(open_deltas(&answer), want);
    assert!(resolving.read_units() > 0, "the edges were read");
    // Asked again: the edges are not read again.
    let spent = resolving.read_units();
    assert_eq!(
        open_deltas(&resolving.pending(&ids, Default::default()).await),
        want
    );
    assert_eq!(resolving.read_units(), spent);

    let left_out = plain.pending(&ids, Default::default()).await;
    assert_eq!(open_deltas(&left_out), BTreeMap::new(), "{left_out:?}");
    assert_ne!(left_out[0].through, Some(marker(&last)));

    // Written: what was shown is what the store counts now.
    p.flush(false).await.unwrap();
    assert_eq!(store.post_count("pA", None).await.unwrap().total, 2);
    assert_eq!(store.post_count("pB", None).await.unwrap().total, 1);
    let since_m1 = store.post_count("pA", Some(M1)).await.unwrap();
    assert_eq!(since_m1.since, Some(2), "u1's like again and u3's");
    assert_eq!(
        open_deltas(&resolving.pending(&ids, Default::default()).await),
        BTreeMap::new()
    );
}

#[test]
fn a_window_at_a_low_rate_stays_open_only_where_its_likes_are_shown() {
    let mut cfg = CounterConfig::new("counter");
    cfg.window_time = Duration::from_secs(1);
    cfg.window_max_time = Duration::from_secs(10);
    cfg.window_min_records = 20;
    // Not shown: every window closes at window_ms.
    assert!(!cfg.due(1, 999));
    assert!(cfg.due(1, 1_000));
    cfg.shows_open = true;
    assert!(!cfg.due(19, 1_000), "few records: it stays open");
    assert!(!cfg.due(19, 9_999));
    assert!(cfg.due(19, 10_000), "…up to window_max_ms");
    assert!(cfg.due(20, 1_000), "enough records: on time");
    assert!(!cfg.due(500, 999));
    // A window_max_ms at or below window_ms changes nothing.
    cfg.window_max_time = Duration::from_millis(500);
    assert!(cfg.due(1, 1_000));
}
