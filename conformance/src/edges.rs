//! The likers ports: edges written as last-writer-wins registers, each change logged once, in
//! the edge's order, and none for a refused write; the viewer's likes in one batch; a post's
//! likers in pages, by user and most recent first; the store's count mode claimed once; a
//! rebuild under way recorded.

use std::collections::BTreeMap;

use tally_core::cost::Purpose;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{CountMode, EdgeChange, EdgeEvent, MetaItem};
use tally_core::meta::Claims;
use tally_core::ports::{
    Consistency, CounterStore, EdgesWritten, RecentCursor, RecentLiker, StartPosition, WindowRef,
    WindowRest,
};

use super::{held_lease, seq, HORIZON_MS};

/// A like (`liked`) or an unlike of `post` by `user` at `at_ms`, as a window hands it to its
/// edge writes.
pub fn like(post: &str, user: &str, liked: bool, at_ms: i64, id: &str) -> EdgeEvent {
    EdgeEvent {
        post_id: post.into(),
        user_id: user.into(),
        liked,
        at_ms,
        event_id: id.into(),
    }
}

/// Writes `edges`, every one done; answers how many changed.
async fn written(store: &dyn CounterStore, edges: &[EdgeEvent]) -> EdgesWritten {
    let w = store.write_edges(edges).await.unwrap();
    assert!(w.retry.is_empty() && w.error.is_none(), "{w:?}");
    w
}

/// Each edge's (post, user) logged changes, in the log's order: the like time before and after
/// of each.
pub type Logged = BTreeMap<(String, String), Vec<(Option<i64>, Option<i64>)>>;

/// Every change the store's log holds of the posts whose ids start with `prefix`, per edge, in
/// the log's order: (before, after) of each. Reads the whole log from its start (the log of a
/// test's store is short).
pub async fn logged_changes(store: &dyn CounterStore, prefix: &str) -> Logged {
    let log = store.change_log().unwrap();
    let mut out = Logged::new();
    for shard in log.list_shards().await.unwrap() {
        let mut r = log
            .open(&shard.shard_id, StartPosition::TrimHorizon)
            .await
            .unwrap();
        loop {
            let b = r.next_batch(1_000).await.unwrap();
            for rec in &b.records {
                let c = EdgeChange::decode(&rec.data).unwrap();
                assert_eq!(rec.partition_key, c.post_id.as_str());
                if c.post_id.starts_with(prefix) {
                    let key = (c.post_id.to_string(), c.user_id.to_string());
                    out.entry(key).or_default().push((c.before, c.after));
                }
            }
            if b.records.is_empty() || b.shard_end {
                break;
            }
        }
    }
    out
}

/// Likers: each edge takes an event only if it is newer (by time, then event id), and the store
/// logs each change once — the like before and after it — and nothing for a copy, an older
/// event or a write made again (a stage that re-reads its records after a crash); the viewer's
/// likes and a post's likers read what the edges hold.
pub async fn edges_are_registers_and_each_change_is_logged_once(
    store: &dyn CounterStore,
    name: &str,
) {
    let (p1, p2, p3) = (
        format!("{name}-p1"),
        format!("{name}-p2"),
        format!("{name}-p3"),
    );
    let t = 1_796_000_000_000;
    // Two likes and an unlike of nothing (stored: an older like must lose to it).
    let w1 = vec![
        like(&p1, "u1", true, t, "a"),
        like(&p1, "u2", false, t, "b"),
        like(&p2, "u1", true, t + 5, "c"),
    ];
    let first = written(store, &w1).await;
    assert_eq!((first.changed, first.applied.written), (3, 3));
    assert!(first.applied.units.get(Purpose::Edges) >= 3);
    // The same again: refused, charged, nothing changes.
    let again = written(store, &w1).await;
    assert_eq!((again.changed, again.applied.refused), (0, 3));
    // An older unlike of u1's like, u2's like tied in time with its stored unlike (the greater
    // event id wins), u3's like, and a copy of p2's like.
    let w2 = vec![
        like(&p1, "u1", false, t - 1, "z"),
        like(&p1, "u2", true, t, "c"),
        like(&p1, "u3", true, t + 60_000, "d"),
        like(&p2, "u1", true, t + 5, "c"),
    ];
    assert_eq!(written(store, &w2).await.changed, 2);
    // u1 likes p1 again a minute later (moves to that minute), then unlikes p2.
    let w3 = vec![
        like(&p1, "u1", true, t + 60_000, "e"),
        like(&p2, "u1", false, t + 90_000, "f"),
    ];
    assert_eq!(written(store, &w3).await.changed, 2);
    let log = logged_changes(store, &format!("{name}-")).await;
    let of = |p: &str, u: &str| log.get(&(p.to_owned(), u.to_owned())).cloned();
    assert_eq!(
        of(&p1, "u1"),
        Some(vec![(None, Some(t)), (Some(t), Some(t + 60_000))])
    );
    assert_eq!(of(&p1, "u2"), Some(vec![(None, None), (None, Some(t))]));
    assert_eq!(of(&p1, "u3"), Some(vec![(None, Some(t + 60_000))]));
    assert_eq!(
        of(&p2, "u1"),
        Some(vec![(None, Some(t + 5)), (Some(t + 5), None)])
    );
    assert_eq!(log.len(), 4, "{log:?}");
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
    // Edges are not counts: a post's count reads no edge.
    assert_eq!(store.post_count(&p1, None).await.unwrap().total, 0);
}

/// Counter store, likers: a post's likers most recent first, read off the recent index — a like
/// made again moves to the top, an unlike leaves, an unlike of nothing never enters — in pages
/// that go on where the last ended. The index may lag the edges (DynamoDB's is eventually
/// consistent), so the first page is awaited; what it shows is checked against the edges, so it
/// never shows a like they no longer hold.
pub async fn likers_come_most_recent_first(store: &dyn CounterStore, name: &str) {
    let (p, empty) = (format!("{name}-rp"), format!("{name}-rq"));
    let t = 1_796_000_000_000;
    let w1 = vec![
        like(&p, "a", true, t, "a1"),
        like(&p, "b", true, t + 1_000, "b1"),
        like(&p, "c", true, t + 2_000, "c1"),
        like(&p, "d", true, t + 3_000, "d1"),
        like(&p, "e", false, t + 4_000, "e1"),
    ];
    written(store, &w1).await;
    let w2 = vec![
        like(&p, "b", false, t + 5_000, "b2"),
        like(&p, "a", true, t + 6_000, "a2"),
    ];
    written(store, &w2).await;
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
/// first); a store that has counted with no mode (an earlier build of tally, from before modes)
/// is refused, read or claimed, saying it was made by an earlier build, and is left without a
/// mode.
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
    };
    let rest = WindowRest {
        dead_letters: &[],
        total_delta: 3,
        dedup: &dedup,
        horizon_ms: HORIZON_MS,
    };
    store.apply_rest(at, rest).await.unwrap();
    for claim in [Some(CountMode::Likers), Some(CountMode::Events), None] {
        let e = store.count_mode(claim).await.unwrap_err().to_string();
        assert!(
            e.contains("made by an earlier build of tally"),
            "{claim:?}: {e}"
        );
    }
    let e = store.stored_mode().await.unwrap_err().to_string();
    assert!(e.contains("made by an earlier build of tally"), "{e}");
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

/// A rebuild under way is recorded, read back, and cleared.
pub async fn a_rebuild_under_way_is_recorded(store: &dyn CounterStore) {
    assert_eq!(store.rebuilding().await.unwrap(), None);
    store.set_rebuilding(Some("source-a")).await.unwrap();
    assert_eq!(
        store.rebuilding().await.unwrap().as_deref(),
        Some("source-a")
    );
    store.set_rebuilding(None).await.unwrap();
    assert_eq!(store.rebuilding().await.unwrap(), None);
}

/// Store meta: a `#meta` item whose value is not what tally writes (adapter-specific:
/// `corrupt(sk, attr)` makes attribute `attr` of item `#meta/<sk>` the number 3) is an error
/// naming the item and the attribute — never a store with no mode, no stream or no rebuild
/// (which a claim would then set over).
pub async fn a_corrupt_meta_row_is_named<F, Fut>(store: &dyn CounterStore, corrupt: F)
where
    F: Fn(&'static str, &'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use tally_core::ports::PortError;
    let mode = Some(CountMode::Likers);
    assert_eq!(store.count_mode(mode).await.unwrap(), mode);
    assert!(store.counted_stream(Some("s1")).await.unwrap().is_some());
    store.set_rebuilding(Some("source-a")).await.unwrap();
    let named = |e: PortError, sk: &str, attr: &str| {
        let text = e.to_string();
        let item = format!("{}/{sk}", tally_core::edge::MODE_PK);
        assert!(
            matches!(e, PortError::Corrupt { .. })
                && text.contains(&item)
                && text.contains(&format!("`{attr}`")),
            "{text}"
        );
    };
    corrupt(MetaItem::Mode.sk(), "mode").await;
    for claim in [None, Some(CountMode::Events)] {
        named(store.count_mode(claim).await.unwrap_err(), "count", "mode");
    }
    corrupt(MetaItem::Stream.sk(), "v").await;
    for claim in [None, Some("s2")] {
        named(
            store.counted_stream(claim).await.unwrap_err(),
            "stream",
            "v",
        );
    }
    corrupt(MetaItem::Rebuilding.sk(), "v").await;
    named(store.rebuilding().await.unwrap_err(), "rebuilding", "v");
}

/// Likers: an edge written behind the store's back with something tally never writes
/// (adapter-specific: `corrupt(post, user)`) is read as an error naming the post and the user —
/// by the viewer's read, by a likers page and by a write of it — never as "not liked" or an
/// absent edge (which would count a like again).
pub async fn a_corrupt_edge_is_named<F, Fut>(store: &dyn CounterStore, name: &str, corrupt: F)
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use tally_core::ports::PortError;
    let post = format!("{name}-corrupt-p");
    written(store, &[like(&post, "u1", true, 1_796_000_000_000, "a")]).await;
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
    let again = store
        .write_edges(&[like(&post, "u1", false, 1_796_000_001_000, "b")])
        .await;
    match again {
        Err(e) => named(e, "write_edges"),
        Ok(a) if a.changed == 0 && a.error.is_some() => {
            named(a.error.expect("checked"), "write_edges")
        }
        Ok(a) => {
            // A store that writes by condition alone (DynamoDB) overwrites what it cannot read:
            // the write is the newer event's, whole, and its change is logged from the old image.
            assert_eq!(a.changed, 1, "{a:?}");
        }
    }
}
