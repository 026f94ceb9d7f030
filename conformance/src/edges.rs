//! The `CounterStore` port in likers mode: edges written once each, newest first, their
//! transitions found again by the window that made them; the viewer's likes in one batch; a
//! post's likers in pages; the store's count mode claimed once.

use tally_core::buckets::PostDelta;
use tally_core::cost::Purpose;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{self, CountMode, EdgeEvent, Transition};
use tally_core::ports::{
    Consistency, CounterStore, EdgesApplied, RecentCursor, RecentLiker, WindowRef, WindowRest,
};
use tally_core::summary::{held_marker, marker};

use super::{held_lease, seq, HORIZON_MS};

/// A like (`liked`) or an unlike of `post` by `user` at `at_ms`, as a window hands it to its
/// edge writes: not clamped, no lost copies.
pub fn like(post: &str, user: &str, liked: bool, at_ms: i64, id: &str) -> EdgeEvent {
    EdgeEvent {
        post_id: post.into(),
        user_id: user.into(),
        liked,
        at_ms,
        event_id: id.into(),
        clamped: false,
        lost: Vec::new(),
    }
}

fn moved(post: &str, before: Option<i64>, after: Option<i64>) -> Transition {
    Transition {
        post_id: post.into(),
        before,
        after,
        held_for: None,
    }
}

/// The transitions of a call all of whose edges are done, in the order of the edges.
fn made(a: &EdgesApplied) -> Vec<Transition> {
    assert!(a.retry.is_empty() && a.error.is_none(), "{a:?}");
    a.transitions.clone()
}

/// Counter store, likers: each edge takes a window's event only if it is newer (by time, then
/// event id); a window applied again finds its own transitions on the items (a crash between
/// the edge writes and the counts loses nothing), another window's copy finds none; the viewer's
/// likes and a post's likers read what the edges hold.
pub async fn likers_edges_are_written_once(store: &dyn CounterStore, name: &str) {
    let app = format!("{name}-likers");
    let fence = held_lease(store, &app, "shard-0").await;
    let (p1, p2, p3) = (
        format!("{name}-p1"),
        format!("{name}-p2"),
        format!("{name}-p3"),
    );
    let t = 1_796_000_000_000;
    let (end1, end2, end3) = (seq("10"), seq("20"), seq("30"));
    let at = |end| WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end,
        held: false,
    };
    // Window 1: two likes and an unlike of nothing.
    let w1 = vec![
        like(&p1, "u1", true, t, "a"),
        like(&p1, "u2", false, t, "b"),
        like(&p2, "u1", true, t + 5, "c"),
    ];
    let first = store.apply_edges(at(&end1), &w1).await.unwrap();
    let want1 = vec![
        moved(&p1, None, Some(t)),
        moved(&p1, None, None),
        moved(&p2, None, Some(t + 5)),
    ];
    assert_eq!(made(&first), want1);
    assert_eq!(first.applied.written, 3);
    assert!(first.applied.units.get(Purpose::Edges) >= 3);
    // The same window again (its counts were not written: a crash): the same transitions.
    let again = store.apply_edges(at(&end1), &w1).await.unwrap();
    assert_eq!(
        made(&again),
        want1,
        "a window finds its own transitions again"
    );
    assert_eq!((again.applied.written, again.applied.refused), (0, 3));
    // Window 2: a late copy of u1's like, an older unlike of it, a newer unlike of u2's nothing
    // tied in time with the stored one (the event id decides), and u3's like.
    let w2 = vec![
        like(&p1, "u1", false, t - 1, "z"),
        like(&p1, "u2", true, t, "c"),
        like(&p1, "u3", true, t + 60_000, "d"),
        like(&p2, "u1", true, t + 5, "c"),
    ];
    let second = store.apply_edges(at(&end2), &w2).await.unwrap();
    assert_eq!(
        made(&second),
        vec![
            moved(&p1, None, Some(t)),
            moved(&p1, None, Some(t + 60_000))
        ],
        "an older event and a copy change nothing; a tie goes to the greater event id"
    );
    // Window 3: u1 likes p1 again a minute later (moves to that minute), then unlikes p2.
    let w3 = vec![
        like(&p1, "u1", true, t + 60_000, "e"),
        like(&p2, "u1", false, t + 90_000, "f"),
    ];
    let third = store.apply_edges(at(&end3), &w3).await.unwrap();
    assert_eq!(
        made(&third),
        vec![
            moved(&p1, Some(t), Some(t + 60_000)),
            moved(&p2, Some(t + 5), None)
        ]
    );
    // A stale writer of window 2 sending it again finds its transitions on the edges no later
    // window wrote (its count writes are then refused by the summary items' markers), and none
    // on u1's, which window 3 wrote since.
    let stale = store.apply_edges(at(&end2), &w2).await.unwrap();
    assert_eq!(
        made(&stale),
        vec![
            moved(&p1, None, Some(t)),
            moved(&p1, None, Some(t + 60_000))
        ]
    );
    assert_eq!(stale.applied.written, 0);
    // The viewer's likes, in order, a post asked twice included.
    let ids = vec![p1.clone(), p2.clone(), p3.clone(), p1.clone()];
    for c in [Consistency::Strong, Consistency::Eventual] {
        let (liked, units) = store.viewer_likes("u1", &ids, c).await.unwrap();
        assert_eq!(liked, vec![true, false, false, true], "{c:?}");
        assert!(units >= 4, "{units}");
    }
    let (liked, _) = store
        .viewer_likes("u9", &ids, Consistency::Strong)
        .await
        .unwrap();
    assert_eq!(liked, vec![false; 4]);
    // p1's likers (u1, u2, u3) in pages of two; p2 has none left.
    let page = store.likers(&p1, None, 2).await.unwrap();
    assert_eq!(page.users, vec!["u1", "u2"]);
    assert_eq!(page.next.as_deref(), Some("u2"));
    assert!(page.read_units >= 1);
    let rest = store.likers(&p1, page.next.as_deref(), 2).await.unwrap();
    assert_eq!((rest.users, rest.next), (vec!["u3".to_owned()], None));
    assert_eq!(
        store.likers(&p2, None, 10).await.unwrap().users,
        Vec::<String>::new()
    );
    // Edges are not counts: a post's count and the global total read no edge.
    assert_eq!(store.post_count(&p1, None).await.unwrap().total, 0);
}

/// Counter store, likers: a post's likers most recent first, read off the recent index — a like
/// made again moves to the top, an unlike leaves, an unlike of nothing never enters — in pages
/// that go on where the last ended. The index may lag the edges (DynamoDB's is eventually
/// consistent), so the first page is awaited; what it shows is checked against the edges, so it
/// never shows a like they no longer hold.
pub async fn likers_come_most_recent_first(store: &dyn CounterStore, name: &str) {
    let app = format!("{name}-recent");
    let fence = held_lease(store, &app, "shard-0").await;
    let (p, empty) = (format!("{name}-rp"), format!("{name}-rq"));
    let t = 1_796_000_000_000;
    let (end1, end2) = (seq("10"), seq("20"));
    let at = |end| WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end,
        held: false,
    };
    let w1 = vec![
        like(&p, "a", true, t, "a1"),
        like(&p, "b", true, t + 1_000, "b1"),
        like(&p, "c", true, t + 2_000, "c1"),
        like(&p, "d", true, t + 3_000, "d1"),
        like(&p, "e", false, t + 4_000, "e1"),
    ];
    made(&store.apply_edges(at(&end1), &w1).await.unwrap());
    let w2 = vec![
        like(&p, "b", false, t + 5_000, "b2"),
        like(&p, "a", true, t + 6_000, "a2"),
    ];
    made(&store.apply_edges(at(&end2), &w2).await.unwrap());
    let want = vec![
        RecentLiker {
            user: "a".into(),
            at_ms: t + 6_000,
        },
        RecentLiker {
            user: "d".into(),
            at_ms: t + 3_000,
        },
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let first = loop {
        let page = store.recent_likers(&p, None, 2).await.unwrap();
        if page.likers == want || std::time::Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(first.likers, want, "most recent first: {first:?}");
    assert!(first.read_units >= 1);
    let next = first.next.expect("a full page says where the next starts");
    assert_eq!(RecentCursor::parse(&next.to_string()), Some(next.clone()));
    let rest = store.recent_likers(&p, Some(&next), 2).await.unwrap();
    assert_eq!(
        rest.likers,
        vec![RecentLiker {
            user: "c".into(),
            at_ms: t + 2_000
        }]
    );
    assert_eq!(rest.next, None, "the last page");
    let none = store.recent_likers(&empty, None, 5).await.unwrap();
    assert_eq!((none.likers, none.next), (Vec::new(), None));
}

/// Counter store: the count mode is claimed once and then holds (a second claim answers the
/// first); a store that has counted with no mode (a tally from before modes) is an events store.
pub async fn the_count_mode_is_claimed_once(store: &dyn CounterStore, name: &str) {
    assert_eq!(store.count_mode(None).await.unwrap(), None);
    let fence = held_lease(store, &format!("{name}-mode"), "shard-0").await;
    let dedup = DedupRecord {
        max_arrival: 1,
        ids: vec![],
    };
    let end = seq("5");
    let at = WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end: &end,
        held: false,
    };
    let rest = WindowRest {
        dead_letters: &[],
        total_delta: 3,
        dedup: &dedup,
        horizon_ms: HORIZON_MS,
    };
    store.apply_rest(at, rest).await.unwrap();
    assert_eq!(
        store.count_mode(Some(CountMode::Likers)).await.unwrap(),
        Some(CountMode::Events),
        "counted before modes existed: events"
    );
    assert_eq!(
        store.count_mode(None).await.unwrap(),
        Some(CountMode::Events)
    );
}

/// Counter store: a fresh store takes the first claim, and keeps it.
pub async fn a_fresh_store_takes_the_first_claim(store: &dyn CounterStore) {
    assert_eq!(
        store.count_mode(Some(CountMode::Likers)).await.unwrap(),
        Some(CountMode::Likers)
    );
    assert_eq!(
        store.count_mode(Some(CountMode::Events)).await.unwrap(),
        Some(CountMode::Likers),
        "a second claim answers the first"
    );
}

/// Counter store, likers: a clamped event that took no effect — refused by the edge, or lost to
/// a later event inside its window (`EdgeEvent::lost`) — is remembered by the edge (one more
/// write), so a copy of it arriving later, ordered at its `created_at` rather than at the first
/// copy's arrival, changes nothing; a newer event still wins.
pub async fn a_clamped_event_that_lost_is_remembered(store: &dyn CounterStore, name: &str) {
    let app = format!("{name}-clamped");
    let p = format!("{name}-cp");
    let t = 1_796_000_000_000;
    let at = |end| WindowRef {
        app: &app,
        shard_id: "shard-0",
        end,
        held: false,
    };
    let (e1, e2, e3, e4, e5) = (seq("10"), seq("20"), seq("30"), seq("40"), seq("50"));
    let unlike = vec![like(&p, "u1", false, t + 9_000, "b")];
    store.apply_edges(at(&e1), &unlike).await.unwrap();
    // A like clamped to its arrival (t) loses to the unlike; another clamped like lost to it
    // inside its window.
    let mut clamped = like(&p, "u1", true, t, "c");
    clamped.clamped = true;
    clamped.lost = vec!["d".to_owned()];
    let lost = store.apply_edges(at(&e2), &[clamped]).await.unwrap();
    assert_eq!(made(&lost), vec![]);
    assert_eq!(
        lost.applied.written, 1,
        "the edge remembers the clamped events that took no effect"
    );
    // Their copies, ordering at their `created_at` now (after the unlike): nothing.
    for id in ["c", "d"] {
        let copy = like(&p, "u1", true, t + 30_000, id);
        let again = store.apply_edges(at(&e3), &[copy]).await.unwrap();
        assert_eq!(made(&again), vec![], "a copy of the clamped {id}");
        assert_eq!(again.applied.written, 0, "{id}: nothing new to remember");
    }
    let (liked, _) = store
        .viewer_likes("u1", std::slice::from_ref(&p), Consistency::Strong)
        .await
        .unwrap();
    assert_eq!(liked, vec![false]);
    // A newer like wins; the edge still knows the clamped ones.
    let newer = like(&p, "u1", true, t + 40_000, "e");
    let won = store.apply_edges(at(&e4), &[newer]).await.unwrap();
    assert_eq!(made(&won), vec![moved(&p, None, Some(t + 40_000))]);
    let copy = like(&p, "u1", false, t + 50_000, "c");
    let after = store.apply_edges(at(&e5), &[copy]).await.unwrap();
    assert_eq!(made(&after), vec![]);
}

/// Counter store, likers: an edge two shards write keeps each window's write (the item remembers
/// the last `EDGE_HISTORY`), so a window applied again after another shard's window wrote over
/// it still finds its own transition — a crash between its edge and count writes loses nothing
/// whatever the partition key; a copy of an event the edge has held changes nothing even when it
/// orders at another time (a clamp decided at another arrival); a write over another shard's is
/// reported as crossed; a window's edge record reads back whole and goes with its checkpoint;
/// the clock skews the store was counted with are kept in order, once each.
pub async fn an_edge_two_shards_write_keeps_each_window_s_write(
    store: &dyn CounterStore,
    name: &str,
) {
    let app = format!("{name}-crossed");
    let a = held_lease(store, &app, "shard-0").await;
    let p = format!("{name}-xp");
    let t = 1_796_000_000_000;
    let (end_a, end_c, end_c2) = (seq("10"), seq("20"), seq("30"));
    let at = |f: &'static str, end| WindowRef {
        app: &app,
        shard_id: f,
        end,
        held: false,
    };
    // Shard 0's window writes the older like and "dies"; shard 1's writes the newer unlike.
    let older = vec![like(&p, "u1", true, t, "a")];
    let first = store
        .apply_edges(at("shard-0", &end_a), &older)
        .await
        .unwrap();
    assert_eq!(made(&first), vec![moved(&p, None, Some(t))]);
    let unlike = vec![like(&p, "u1", false, t + 1_000, "b")];
    let second = store
        .apply_edges(at("shard-1", &end_c), &unlike)
        .await
        .unwrap();
    // Its removal of shard 0's like is held until shard 0's window has written its counts.
    let held = Transition {
        held_for: Some(edge::window_id("shard-0", &marker(&end_a))),
        ..moved(&p, Some(t), None)
    };
    assert_eq!(made(&second), vec![held.clone()]);
    assert_eq!(second.crossed, 1, "written over another shard's write");
    // Shard 0's window rebuilt: its own transition, not "superseded".
    let again = store
        .apply_edges(at("shard-0", &end_a), &older)
        .await
        .unwrap();
    assert_eq!(
        made(&again),
        vec![moved(&p, None, Some(t))],
        "a window finds its write after another shard's window wrote over it"
    );
    assert_eq!((again.applied.written, again.forgotten), (0, 0));
    // A copy of the replaced like and of the unlike the edge holds now, each ordering later
    // (clamped at its first arrival, not at this one): the edge has held both events, so nothing
    // changes and nothing is written; the unlike stands.
    for (liked, at_ms, id) in [(true, t + 20_000, "a"), (false, t + 30_000, "b")] {
        let copy = vec![like(&p, "u1", liked, at_ms, id)];
        let late = store
            .apply_edges(at("shard-1", &end_c2), &copy)
            .await
            .unwrap();
        assert_eq!(
            made(&late),
            vec![],
            "a copy of {id} changes nothing, whatever its time"
        );
        assert_eq!(late.applied.written, 0, "{id}");
    }
    let (liked, _) = store
        .viewer_likes("u1", std::slice::from_ref(&p), Consistency::Strong)
        .await
        .unwrap();
    assert_eq!(liked, vec![false]);
    // Each shard's window is found again whatever the other wrote since.
    let c_again = store
        .apply_edges(at("shard-1", &end_c), &unlike)
        .await
        .unwrap();
    assert_eq!(
        made(&c_again),
        vec![held],
        "the same removal, held for the same window"
    );

    // The window whose like a removal takes away is named even once that write is the oldest
    // the item remembers (its window kept as `w3`): A@0 like, B@1 unlike, C@0 like, D@1
    // unlike; B rebuilt finds its removal held for A.
    let q = format!("{name}-xq");
    let (ea, eb, ec, ed) = (seq("110"), seq("120"), seq("130"), seq("140"));
    let steps = [
        ("shard-0", &ea, true, "qa"),
        ("shard-1", &eb, false, "qb"),
        ("shard-0", &ec, true, "qc"),
        ("shard-1", &ed, false, "qd"),
    ];
    for (i, (shard, end, liked, id)) in steps.iter().enumerate() {
        let e = like(&q, "u1", *liked, t + i as i64 * 60_000, id);
        store.apply_edges(at(shard, end), &[e]).await.unwrap();
    }
    let b_again = store
        .apply_edges(
            at("shard-1", &eb),
            &[like(&q, "u1", false, t + 60_000, "qb")],
        )
        .await
        .unwrap();
    assert_eq!(
        made(&b_again),
        vec![Transition {
            held_for: Some(edge::window_id("shard-0", &marker(&ea))),
            ..moved(&q, Some(t), None)
        }],
        "the oldest remembered write still names the window whose like it removed"
    );

    // A window's held removals carry its held marker: written once, after its other counts,
    // and a later window of the shard is not refused by them.
    let h = format!("{name}-held");
    let delta = |n: i64| {
        let mut d = PostDelta::default();
        d.add(t, n);
        (h.clone(), d)
    };
    let w1 = at("shard-0", &ea);
    for (w, n) in [(w1, 2), (w1.held(), -1)] {
        let first = store.apply_posts(w, &[delta(n)]).await.unwrap();
        assert_eq!(first.applied.written, 1, "{first:?}");
        let again = store.apply_posts(w, &[delta(n)]).await.unwrap();
        assert_eq!(again.applied.written, 0, "written once: {again:?}");
    }
    let c = store.post_count(&h, None).await.unwrap();
    assert_eq!(c.total, 1);
    assert_eq!(c.marks, vec![("shard-0".to_owned(), held_marker(&ea))]);
    let later = store
        .apply_posts(at("shard-0", &eb), &[delta(1)])
        .await
        .unwrap();
    assert_eq!(later.applied.written, 1, "{later:?}");
    assert_eq!(store.post_count(&h, None).await.unwrap().total, 2);

    // A window's edge record: whole, in order, across chunks; gone with its checkpoint. As large
    // as the largest likers window's (~4 MB: a DynamoDB Query reads it over several pages).
    let pairs: Vec<(String, String)> = (0..tally_core::window::MAX_LIKERS_WINDOW_RECORDS)
        .map(|i| (format!("{name}-post-{}", i % 50), format!("user-{i:06}")))
        .collect();
    let w = at("shard-0", &end_a);
    assert_eq!(store.window_edges(w).await.unwrap(), None);
    store
        .begin_window(&a, None, &end_a.seq, &end_a, HORIZON_MS.into())
        .await
        .unwrap();
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(p, u)| (p.as_str(), u.as_str()))
        .collect();
    let spent = store.record_window_edges(w, &refs).await.unwrap();
    assert!(spent.units.get(Purpose::Edges) > 300, "{spent:?}");
    store.record_window_edges(w, &refs).await.unwrap();
    assert_eq!(store.window_edges(w).await.unwrap(), Some(pairs));
    assert_eq!(
        store.window_edges(at("shard-1", &end_a)).await.unwrap(),
        None
    );

    // The clock skews counted with: each once, in the order first used.
    assert_eq!(store.clock_skews(None).await.unwrap(), Vec::<i64>::new());
    assert_eq!(
        store.clock_skews(Some(300_000)).await.unwrap(),
        vec![300_000]
    );
    assert_eq!(
        store.clock_skews(Some(300_000)).await.unwrap(),
        vec![300_000]
    );
    assert_eq!(
        store.clock_skews(Some(5_000)).await.unwrap(),
        vec![300_000, 5_000]
    );
    assert_eq!(store.clock_skews(None).await.unwrap(), vec![300_000, 5_000]);
}

/// Counter store, likers: an edge written behind the store's back with something tally never
/// writes (adapter-specific: `corrupt(post, user)`) is read as an error naming the post and the
/// user — by the viewer's read, by a likers page and by the window's own write — never as "not
/// liked" or an absent edge (which would count a like again).
pub async fn a_corrupt_edge_is_named<F, Fut>(store: &dyn CounterStore, name: &str, corrupt: F)
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use tally_core::ports::PortError;
    let app = format!("{name}-corrupt-edge");
    let fence = held_lease(store, &app, "shard-0").await;
    let post = format!("{name}-corrupt-p");
    let end = seq("10");
    let w = WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end: &end,
        held: false,
    };
    let e = like(&post, "u1", true, 1_796_000_000_000, "a");
    store.apply_edges(w, &[e]).await.unwrap();
    assert_eq!(store.likers(&post, None, 10).await.unwrap().users, ["u1"]);
    corrupt(post.clone(), "u1".into()).await;
    let named = |e: PortError, what: &str| {
        let text = e.to_string();
        assert!(
            matches!(e, PortError::Corrupt { .. }) && text.contains(&post) && text.contains("u1"),
            "{what}: {text}"
        );
    };
    let pairs = [(post.clone(), "u1".to_owned())];
    named(
        store.edges(&pairs, Consistency::Strong).await.unwrap_err(),
        "edges",
    );
    named(store.likers(&post, None, 10).await.unwrap_err(), "likers");
    let later = WindowRef {
        end: &seq("20"),
        ..w
    };
    let again = store
        .apply_edges(later, &[like(&post, "u1", false, 1_796_000_001_000, "b")])
        .await;
    match again {
        Err(e) => named(e, "apply_edges"),
        Ok(a) => named(
            a.error.expect("a corrupt edge is not written over"),
            "apply_edges",
        ),
    }
}
