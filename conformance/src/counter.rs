//! The `CounterStore` port: a window applied once in its steps, the largest window, dedup records
//! expiring by arrival, gaps on record, a paused stale writer.

use tally_core::buckets::{PostDelta, DAY_MS, HOUR_MS, MINUTE_MS};
use tally_core::cost::Purpose;
use tally_core::dead_letter::{DeadLetter, DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON};
use tally_core::dedup::DedupRecord;
use tally_core::meta::Claims;
use tally_core::ports::{
    Applied, CounterStore, Decided, Fence, GapCommit, Pending, PortError, ShardTally, StoredDedup,
    WindowRef, WindowRest,
};
use tally_core::window::MAX_WINDOW_RECORDS;
use tally_core::Position;

use super::{held_lease, seq, HORIZON_MS};

fn delta(deltas: &[(i64, i64)]) -> PostDelta {
    let mut d = PostDelta::default();
    for &(t, n) in deltas {
        d.add(t, n);
    }
    d
}

/// What one window writes besides its posts.
struct Rest<'a> {
    dead: &'a [DeadLetter],
    total: i64,
    dedup: &'a DedupRecord,
}

/// Applies a whole window as the counter does: pending, posts, the rest, checkpoint.
async fn window(
    store: &dyn CounterStore,
    fence: &Fence,
    start_after: Option<&Position>,
    end: &Position,
    posts: &[(String, PostDelta)],
    rest: Rest<'_>,
    finished: bool,
) -> Applied {
    store
        .begin_window(fence, start_after, &end.seq, end, HORIZON_MS.into())
        .await
        .unwrap();
    let at = at(fence, end);
    let mut out = done(store.apply_posts(at, posts).await.unwrap());
    out.merge(&store.apply_rest(at, rest_of(&rest)).await.unwrap());
    store
        .finish_window(
            fence,
            end,
            rest.dedup.max_arrival,
            finished,
            &ShardTally::default(),
            None,
        )
        .await
        .unwrap();
    out
}

/// What an `apply_posts` call did, all of whose posts must be done (no fault is injected here).
fn done(p: tally_core::ports::PostsApplied) -> Applied {
    assert!(p.retry.is_empty() && p.error.is_none(), "{p:?}");
    p.applied
}

/// The window of `fence`'s shard ending at `end`, as the counter names it to the store.
pub fn at<'a>(fence: &'a Fence, end: &'a Position) -> WindowRef<'a> {
    WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end,
    }
}

fn rest_of<'a>(r: &Rest<'a>) -> WindowRest<'a> {
    WindowRest {
        dead_letters: r.dead,
        total_delta: r.total,
        dedup: r.dedup,
        horizon_ms: HORIZON_MS,
    }
}

fn no_ids(max_arrival: i64) -> DedupRecord {
    DedupRecord {
        max_arrival,
        ids: vec![],
    }
}

/// Counter store: the largest window's writes fit — dead letters of the largest size a record is
/// cut to (data and reason), and a dedup record of the largest window. On DynamoDB this is the
/// 400 KB item limit; a write over it would stall its shard.
pub async fn the_largest_window_fits_the_store(store: &dyn CounterStore, name: &str) {
    let app = format!("largest-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let dead: Vec<DeadLetter> = (0..100)
        .map(|i| DeadLetter {
            shard_id: shard.clone(),
            seq: seq(&format!("{}", 100 + i)),
            arrival_ms: i as i64,
            // A multi-byte reason at its byte cap, and raw bytes at theirs.
            reason: tally_core::dead_letter::truncate_utf8(
                &"é".repeat(DEAD_LETTER_MAX_REASON),
                DEAD_LETTER_MAX_REASON,
            ),
            data: vec![0xff; DEAD_LETTER_MAX_BYTES],
            size: 10 << 20,
            gap: None,
        })
        .collect();
    let dedup = DedupRecord {
        max_arrival: 1,
        ids: (0..MAX_WINDOW_RECORDS as u128).collect(),
    };
    let end = seq("300");
    let rest = Rest {
        dead: &dead,
        total: 0,
        dedup: &dedup,
    };
    window(store, &fence, None, &end, &[], rest, false).await;
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(end));
    let restored = store
        .load_dedup(&app, std::slice::from_ref(&shard), 0)
        .await
        .unwrap();
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].record.ids.len(), MAX_WINDOW_RECORDS);
    let dead = store.dead_letters(100_000).await.unwrap();
    let mine: Vec<&DeadLetter> = dead.iter().filter(|d| d.shard_id == shard).collect();
    assert_eq!(mine.len(), 100);
    assert!(mine
        .iter()
        .all(|d| d.size == 10 << 20 && d.data.len() == DEAD_LETTER_MAX_BYTES));
}

/// Counter store: dedup records are selected by the shard's arrival clock, never by the wall
/// clock — records of a backlog that arrived years ago stay while the clock is within their
/// horizon — each says whose window it is, and all of a shard's records go with its lease row.
pub async fn dedup_records_expire_by_arrival(store: &dyn CounterStore, name: &str) {
    let app = format!("expiry-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let day = 86_400_000i64;
    // Arrival times of a backlog from long ago: 1, 1.5 and 1 + 24 h (in ms since 1970, + 1e6).
    let windows = [
        ("11", 1_000_000),
        ("22:4", 1_500_000),
        ("133", 1_000_000 + day),
    ];
    let mut start: Option<Position> = None;
    for (i, (end, max_arrival)) in windows.iter().enumerate() {
        let end = seq(end);
        let dedup = DedupRecord {
            max_arrival: *max_arrival,
            ids: vec![i as u128],
        };
        let rest = Rest {
            dead: &[],
            total: 0,
            dedup: &dedup,
        };
        window(store, &fence, start.as_ref(), &end, &[], rest, false).await;
        start = Some(end);
    }
    let shards = [shard.clone()];
    let ids = |recs: Vec<StoredDedup>| {
        let mut v: Vec<(u128, String)> = recs
            .into_iter()
            .flat_map(|r| {
                let end = r.end.to_string();
                r.record.ids.into_iter().map(move |i| (i, end.clone()))
            })
            .collect();
        v.sort();
        v.into_iter().map(|(i, _)| i).collect::<Vec<_>>()
    };
    let all = store.load_dedup(&app, &shards, i64::MIN).await.unwrap();
    let mut ends: Vec<Position> = all.iter().map(|r| r.end.clone()).collect();
    ends.sort();
    assert_eq!(ends, vec![seq("11"), seq("22:4"), seq("133")]);
    assert!(all.iter().all(|r| r.shard_id == shard));
    assert_eq!(ids(all), [0, 1, 2]);
    // A restore within the horizon of the second record's clock reads from it on.
    assert_eq!(
        ids(store.load_dedup(&app, &shards, 1_500_000).await.unwrap()),
        [1, 2]
    );
    // The clock a day on: the first two are past a 10-minute horizon. Expiring them is
    // idempotent (a delete, or DynamoDB's TTL), and no restore selects them either way.
    let before = 1_000_000 + day - HORIZON_MS;
    store.expire_dedup(&app, &shard, before).await.unwrap();
    store.expire_dedup(&app, &shard, before).await.unwrap();
    assert_eq!(
        ids(store.load_dedup(&app, &shards, before).await.unwrap()),
        [2]
    );
    // A cleaned-up row takes its shard's records with it.
    store.delete_lease(&app, &shard).await.unwrap();
    assert!(store
        .load_dedup(&app, &shards, i64::MIN)
        .await
        .unwrap()
        .is_empty());
}

/// Counter store: a gap gives a pending window up on record — the checkpoint moves past it, the
/// pending window is gone, the gap is a dead letter — only for the lease holder and only for the
/// window it names; a gap can also finish a shard. Every letter keeps its own place: a gap that
/// starts at a checkpoint whose record was malformed, a second gap after the first, and another
/// application's gap over the same records never replace one another.
pub async fn gaps_are_recorded_with_the_checkpoint(store: &dyn CounterStore, name: &str) {
    let app = format!("gaps-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    // The first window ends at a malformed record: its dead letter sits at the checkpoint.
    let (first_end, end) = (seq("30"), seq("40"));
    let malformed = malformed(&shard, &first_end);
    let rest = Rest {
        dead: std::slice::from_ref(&malformed),
        total: 0,
        dedup: &no_ids(1),
    };
    window(store, &fence, None, &first_end, &[], rest, false).await;
    store
        .begin_window(
            &fence,
            Some(&first_end),
            &seq("31").seq,
            &end,
            HORIZON_MS.into(),
        )
        .await
        .unwrap();
    store
        .apply_posts(
            at(&fence, &end),
            &[(format!("g-{name}"), delta(&[(1_796_000_000_000, 2)]))],
        )
        .await
        .unwrap();
    let gap = DeadLetter::gap(&shard, &app, Some(&first_end), Some(&end), 2, "trimmed");
    let wrong_end = seq("39");
    // Naming another window, or without the lease, is refused.
    let bad = GapCommit {
        fence: &fence,
        start_after: Some(&first_end),
        pending_end: Some(&wrong_end),
        through: Some(&wrong_end),
        finished: false,
        gap: &gap,
    };
    assert!(matches!(
        store.commit_gap(bad).await,
        Err(PortError::Fenced { .. })
    ));
    let stale = Fence {
        epoch: fence.epoch - 1,
        ..fence.clone()
    };
    let good = |f| GapCommit {
        fence: f,
        start_after: Some(&first_end),
        pending_end: Some(&end),
        through: Some(&end),
        finished: false,
        gap: &gap,
    };
    assert!(matches!(
        store.commit_gap(good(&stale)).await,
        Err(PortError::Fenced { .. })
    ));
    store.commit_gap(good(&fence)).await.unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(end.clone()));
    assert_eq!(st.pending, None);
    assert!(!st.lease.finished);
    // Applied once: the same gap again no longer matches the stored progress.
    assert!(matches!(
        store.commit_gap(good(&fence)).await,
        Err(PortError::Fenced { .. })
    ));
    // Records trimmed after a checkpoint with nothing pending: the checkpoint moves past them.
    let lost_through = seq("55");
    let trimmed = DeadLetter::gap(&shard, &app, Some(&end), Some(&lost_through), 3, "trimmed");
    store
        .commit_gap(GapCommit {
            fence: &fence,
            start_after: Some(&end),
            pending_end: None,
            through: Some(&lost_through),
            finished: false,
            gap: &trimmed,
        })
        .await
        .unwrap();
    // A shard gone from the stream: finished on record, checkpoint unchanged.
    let gone = DeadLetter::gap(&shard, &app, Some(&lost_through), None, 4, "gone");
    store
        .commit_gap(GapCommit {
            fence: &fence,
            start_after: Some(&lost_through),
            pending_end: None,
            through: None,
            finished: true,
            gap: &gone,
        })
        .await
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert!(st.lease.finished);
    assert_eq!(st.lease.checkpoint, Some(lost_through.clone()));
    // Another application gives up the same records on the same shard.
    let other = format!("{app}-other");
    let fence2 = held_lease(store, &other, &shard).await;
    let theirs = DeadLetter::gap(&shard, &other, None, Some(&end), 5, "trimmed");
    store
        .commit_gap(GapCommit {
            fence: &fence2,
            start_after: None,
            pending_end: None,
            through: Some(&end),
            finished: false,
            gap: &theirs,
        })
        .await
        .unwrap();
    let dead = store.dead_letters(100_000).await.unwrap();
    let mut mine: Vec<DeadLetter> = dead.into_iter().filter(|d| d.shard_id == shard).collect();
    mine.sort_by_key(|d| d.arrival_ms);
    assert_eq!(mine, vec![malformed, gap, trimmed, gone, theirs]);
}

/// Counter store: a window is pending before its writes and checkpointed after them, both only
/// for the lease holder and in order; its writes apply once however often they are sent; counts,
/// "since", global totals and dead letters add up; each write costs one unit.
pub async fn counter_commits_exactly_once(store: &dyn CounterStore, name: &str) {
    let w = OneWindow::new(store, name).await;
    w.only_a_pending_window_moves_the_checkpoint().await;
    let first = w.each_item_is_written_once().await;
    let stolen = w.the_rest_and_the_checkpoint_follow_the_lease(&first).await;
    w.counts_read_back_with_their_markers().await;
    w.a_second_window_stores_a_repeated_letter_once(&stolen)
        .await;
}

/// One shard's window over two posts — post a with events over two hours and two days, post b
/// an unlike — ending inside a KPL aggregate, with a dead letter, a global-total delta and a
/// dedup record.
struct OneWindow<'a> {
    store: &'a dyn CounterStore,
    name: &'a str,
    app: String,
    shard: String,
    post_a: String,
    post_b: String,
    fence: Fence,
    /// 10:30 on the window's first day.
    t0: i64,
    posts: Vec<(String, PostDelta)>,
    dead: DeadLetter,
    end: Position,
    window_first: tally_core::SeqNo,
    dedup: DedupRecord,
}

impl<'a> OneWindow<'a> {
    async fn new(store: &'a dyn CounterStore, name: &'a str) -> OneWindow<'a> {
        let app = format!("counter-{name}");
        let shard = format!("shard-{name}");
        let (post_a, post_b) = (format!("a-{name}"), format!("b-{name}"));
        let fence = held_lease(store, &app, &shard).await;
        let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
        let t0 = day + 10 * HOUR_MS + 30 * MINUTE_MS;
        let posts = vec![
            (
                post_a.clone(),
                delta(&[(t0, 3), (t0 + HOUR_MS, 2), (t0 + DAY_MS, 1)]),
            ),
            (post_b.clone(), delta(&[(t0, -1)])),
        ];
        let dead = DeadLetter {
            shard_id: shard.clone(),
            // A user record inside a KPL aggregate: its place includes its sub-sequence number.
            seq: seq("7:2"),
            arrival_ms: 5,
            reason: "not a JSON object".into(),
            data: b"{oops".to_vec(),
            size: 5,
            gap: None,
        };
        OneWindow {
            store,
            name,
            app,
            shard,
            post_a,
            post_b,
            fence,
            t0,
            posts,
            dead,
            // The window ends inside an aggregate (its user records 0..=4): the pending end, the
            // markers and the checkpoint keep the sub-sequence number. It starts at the record 5.
            end: seq("9:4"),
            window_first: seq("5").seq,
            dedup: DedupRecord {
                max_arrival: 1_000,
                ids: vec![1, 2, 3],
            },
        }
    }

    fn rest(&self) -> Rest<'_> {
        Rest {
            dead: std::slice::from_ref(&self.dead),
            total: 5,
            dedup: &self.dedup,
        }
    }

    /// No checkpoint moves for a window that is not pending; none is pending after another
    /// start; the pending window keeps its first record and horizon; a second cannot begin.
    async fn only_a_pending_window_moves_the_checkpoint(&self) {
        let (store, fence, end) = (self.store, &self.fence, &self.end);
        assert!(matches!(
            store
                .finish_window(fence, end, 1_000, false, &ShardTally::default(), None)
                .await,
            Err(PortError::Fenced { .. })
        ));
        assert!(matches!(
            store
                .begin_window(fence, Some(&seq("3")), &end.seq, end, HORIZON_MS.into())
                .await,
            Err(PortError::Fenced { .. })
        ));
        store
            .begin_window(
                fence,
                None,
                &self.window_first,
                end,
                Decided {
                    horizon_ms: HORIZON_MS,
                },
            )
            .await
            .unwrap();
        let st = store.shard_state(&self.app, &self.shard).await.unwrap();
        assert_eq!(
            st.pending,
            Some(Pending {
                end: end.clone(),
                first: self.window_first.clone(),
                horizon_ms: HORIZON_MS,
            }),
            "the pending window keeps its first record and the settings it was built with"
        );
        assert_eq!(st.lease.checkpoint, None);
        assert!(matches!(
            store
                .begin_window(
                    fence,
                    None,
                    &self.window_first,
                    &seq("12"),
                    HORIZON_MS.into()
                )
                .await,
            Err(PortError::Fenced { .. })
        ));
    }

    /// The first post's writes, then all of them (a replay): the first ones are refused.
    /// Returns what the first writes spent.
    async fn each_item_is_written_once(&self) -> Applied {
        let at = at(&self.fence, &self.end);
        let first = done(self.store.apply_posts(at, &self.posts[..1]).await.unwrap());
        // Post a: the live item at its latest hour (the next day's 10:00), and its earlier
        // events in archives: two hours and a day.
        assert_eq!((first.written, first.refused), (4, 0), "{first:?}");
        assert_eq!(
            (
                first.units.get(Purpose::Counts),
                first.units.get(Purpose::Buckets)
            ),
            (1, 3)
        );
        let again = done(self.store.apply_posts(at, &self.posts).await.unwrap());
        assert_eq!(again.written, 1, "only post b is new: {again:?}");
        assert!(again.units.get(Purpose::FailedConditions) >= 1);
        first
    }

    /// A worker whose lease was taken cannot move the checkpoint; the new owner writes the
    /// rest once and moves it, keeping what the window spent; finished once, never again.
    /// Returns the new owner's fence.
    async fn the_rest_and_the_checkpoint_follow_the_lease(&self, first: &Applied) -> Fence {
        let (store, end) = (self.store, &self.end);
        let mut spent = ShardTally {
            counted: 3,
            ..ShardTally::default()
        };
        spent.units.merge(&first.units);
        let stolen = store
            .take_lease(&self.app, &self.shard, 1, "w2", i64::MAX / 2)
            .await
            .unwrap()
            .unwrap();
        let r = store
            .apply_rest(at(&stolen, end), rest_of(&self.rest()))
            .await
            .unwrap();
        assert_eq!(
            r.written, 3,
            "dead letter, global total, dedup record: {r:?}"
        );
        // Sent again, the dedup record is not replaced and the total not added twice.
        let r = store
            .apply_rest(at(&stolen, end), rest_of(&self.rest()))
            .await
            .unwrap();
        assert_eq!(r.refused, 2, "{r:?}");
        assert!(matches!(
            store
                .finish_window(&self.fence, end, 1_000, false, &ShardTally::default(), None)
                .await,
            Err(PortError::Fenced { .. })
        ));
        store
            .finish_window(&stolen, end, 1_000, false, &spent, None)
            .await
            .unwrap();
        let st = store.shard_state(&self.app, &self.shard).await.unwrap();
        assert_eq!(
            (
                st.lease.checkpoint.clone(),
                st.pending.clone(),
                st.lease.max_arrival
            ),
            (Some(end.clone()), None, 1_000)
        );
        assert_eq!(st.spent, spent, "the row keeps what the window spent");
        assert!(matches!(
            store
                .finish_window(&stolen, end, 1_000, false, &spent, None)
                .await,
            Err(PortError::Fenced { .. })
        ));
        stolen
    }

    /// Totals, "since" at minute, hour and day bounds, read units, and each live item's marker
    /// (what a provisional count checks a worker's open window against).
    async fn counts_read_back_with_their_markers(&self) {
        let (store, t0) = (self.store, self.t0);
        let count = |post: &str, since| {
            let post = post.to_owned();
            async move { store.post_count(&post, since).await.unwrap() }
        };
        let (post_a, nobody) = (&self.post_a, format!("nobody-{}", self.name));
        assert_eq!(count(post_a, None).await.total, 6);
        assert_eq!(count(&self.post_b, None).await.total, -1);
        assert_eq!(count(&nobody, None).await.total, 0);
        // Since 10:30 the same day: everything of post a; since 11:00: the 11:30 like and the
        // next day's.
        assert_eq!(count(post_a, Some(t0)).await.since, Some(6));
        assert_eq!(
            count(post_a, Some(t0 + 30 * MINUTE_MS)).await.since,
            Some(3)
        );
        assert_eq!(
            count(post_a, Some(t0 + HOUR_MS + MINUTE_MS)).await.since,
            Some(1)
        );
        assert_eq!(count(post_a, Some(t0 + 2 * DAY_MS)).await.since, Some(0));
        let c = count(post_a, Some(t0)).await;
        assert_eq!(c.read_units, 3, "three Queries of small items: {c:?}");
        assert_eq!(count(post_a, None).await.read_units, 1);
        // The window after `end` is not applied to post a yet; the one that ended at `end` is.
        let marks = count(post_a, None).await.marks;
        let end_mark = tally_core::summary::marker(&self.end);
        assert_eq!(marks, vec![(self.shard.clone(), end_mark.clone())]);
        assert!(tally_core::summary::pending_applies(
            &marks,
            &self.shard,
            Some(&end_mark)
        ));
        assert!(!tally_core::summary::pending_applies(
            &marks,
            &self.shard,
            None
        ));
        assert_eq!(count(&nobody, None).await.marks, vec![]);
    }

    /// A second window re-delivering the same dead letter stores it once; the shard finishes;
    /// both windows' dedup records load by their clock.
    async fn a_second_window_stores_a_repeated_letter_once(&self, stolen: &Fence) {
        let store = self.store;
        let end2 = seq("10");
        let dedup2 = DedupRecord {
            max_arrival: 2_000,
            ids: vec![4],
        };
        let rest2 = Rest {
            dead: std::slice::from_ref(&self.dead),
            total: 0,
            dedup: &dedup2,
        };
        window(store, stolen, Some(&self.end), &end2, &[], rest2, true).await;
        let st = store.shard_state(&self.app, &self.shard).await.unwrap();
        assert!(st.lease.finished);
        let dls = store.dead_letters(10_000).await.unwrap();
        assert_eq!(
            dls.iter()
                .filter(|d| d.shard_id == self.shard)
                .cloned()
                .collect::<Vec<_>>(),
            vec![self.dead.clone()]
        );
        let (app, shard) = (&self.app, &self.shard);
        let recs = |min| async move {
            let mut r: Vec<DedupRecord> = store
                .load_dedup(app, std::slice::from_ref(shard), min)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.record)
                .collect();
            r.sort_by_key(|r| r.max_arrival);
            r
        };
        assert_eq!(recs(1_500).await, vec![dedup2.clone()]);
        assert_eq!(recs(0).await, vec![self.dedup.clone(), dedup2]);
        assert!(store.global_total().await.unwrap() >= 5);
    }
}

/// Counter store: a writer paused in the middle of a window while its lease moved on counts
/// nothing twice. Worker 1 records window X pending and writes part of it, then stalls; worker 2
/// takes the lease, rebuilds X, writes all of it (what worker 1 wrote is refused), checkpoints,
/// and goes on with window Y over the same posts (an hour later, rolling their live items); then
/// worker 1 wakes and sends the rest of X and X again: every write is refused and its checkpoint
/// is fenced. The counts are X + Y exactly, on every item.
pub async fn a_paused_stale_writer_counts_nothing_twice(store: &dyn CounterStore, name: &str) {
    let app = format!("stale-{name}");
    let shard = format!("shard-{name}");
    let w1 = held_lease(store, &app, &shard).await;
    let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
    let t = day + 23 * HOUR_MS + 50 * MINUTE_MS; // 23:50, so that Y rolls hour and day
    let posts: Vec<String> = (0..10).map(|i| format!("p{i}-{name}")).collect();
    let x: Vec<(String, PostDelta)> = posts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                p.clone(),
                delta(&[(t + i as i64 * MINUTE_MS, 1 + i as i64)]),
            )
        })
        .collect();
    let x_dedup = DedupRecord {
        max_arrival: 10,
        ids: vec![7, 8],
    };
    let x_end = seq("100");
    store
        .begin_window(&w1, None, &x_end.seq, &x_end, HORIZON_MS.into())
        .await
        .unwrap();
    done(store.apply_posts(at(&w1, &x_end), &x[..5]).await.unwrap());
    // Worker 1 stalls; its lease expires and worker 2 takes it over, finding X pending.
    let w2 = store
        .take_lease(&app, &shard, w1.epoch, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.pending.map(|p| p.end), Some(x_end.clone()));
    let redo = done(store.apply_posts(at(&w2, &x_end), &x).await.unwrap());
    assert!(
        redo.refused >= 5,
        "what worker 1 wrote is refused: {redo:?}"
    );
    let x_total: i64 = x.iter().map(|(_, d)| d.total()).sum();
    let rest = Rest {
        dead: &[],
        total: x_total,
        dedup: &x_dedup,
    };
    store
        .apply_rest(at(&w2, &x_end), rest_of(&rest))
        .await
        .unwrap();
    store
        .finish_window(&w2, &x_end, 10, false, &ShardTally::default(), None)
        .await
        .unwrap();
    // Y: the same posts, 20 minutes later (the next day's first hour).
    let y: Vec<(String, PostDelta)> = posts
        .iter()
        .map(|p| (p.clone(), delta(&[(t + 20 * MINUTE_MS, 10)])))
        .collect();
    let y_end = seq("200");
    let y_dedup = no_ids(20);
    let y_rest = Rest {
        dead: &[],
        total: 10 * posts.len() as i64,
        dedup: &y_dedup,
    };
    window(store, &w2, Some(&x_end), &y_end, &y, y_rest, false).await;
    // Worker 1 wakes: the rest of X, and all of X again.
    let late = done(store.apply_posts(at(&w1, &x_end), &x[5..]).await.unwrap());
    let all = done(store.apply_posts(at(&w1, &x_end), &x).await.unwrap());
    let r = store
        .apply_rest(at(&w1, &x_end), rest_of(&rest))
        .await
        .unwrap();
    assert_eq!(
        (late.written, all.written, r.written),
        (0, 0, 0),
        "a stale writer's writes are all refused: {late:?} {all:?} {r:?}"
    );
    assert!(matches!(
        store
            .finish_window(&w1, &x_end, 10, false, &ShardTally::default(), None)
            .await,
        Err(PortError::Fenced { .. })
    ));
    for (i, p) in posts.iter().enumerate() {
        let c = store.post_count(p, Some(day)).await.unwrap();
        assert_eq!(
            (c.total, c.since),
            (1 + i as i64 + 10, Some(1 + i as i64 + 10)),
            "{p}"
        );
        let next_day = store.post_count(p, Some(day + DAY_MS)).await.unwrap();
        assert_eq!(next_day.since, Some(10), "{p}");
    }
    // The dedup record of X is worker 2's and worker 1's alike, stored once.
    let recs = store
        .load_dedup(&app, std::slice::from_ref(&shard), i64::MIN)
        .await
        .unwrap();
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(
        (recs[0].end.clone(), recs[0].record.clone()),
        (x_end, x_dedup)
    );
}

/// A window's checkpoint that carries a renewal renews the lease in the same write, as
/// `renew_lease` would: the expiry, the reader's progress and the holder's address, and it answers
/// who has asked for the lease; one without a renewal leaves them as they were and answers `None`.
pub async fn a_checkpoint_renews_the_lease(store: &dyn CounterStore, name: &str) {
    let app = format!("renews-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let taken = store.shard_state(&app, &shard).await.unwrap();
    let held = &fence;
    let plain = |end| async move {
        store
            .begin_window(held, None, &seq(end).seq, &seq(end), HORIZON_MS.into())
            .await
            .unwrap();
        store
            .finish_window(held, &seq(end), 1_000, false, &ShardTally::default(), None)
            .await
            .unwrap()
    };
    assert_eq!(plain("10").await, None);
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(
        st.lease.expires_ms, taken.lease.expires_ms,
        "no renewal: the expiry stays"
    );
    assert_eq!((st.progress, st.holder_addr), (None, None));

    assert!(store.ask_handoff(&fence, "w2").await.unwrap());
    let renewal = tally_core::ports::Renewal {
        expires_ms: 5_000_000_000_000,
        progress: Some(tally_core::ports::ReadProgress {
            at_ms: 4_000_000_000_000,
            behind_ms: 0,
        }),
        addr: Some("127.0.0.1:9101".into()),
    };
    store
        .begin_window(
            &fence,
            Some(&seq("10")),
            &seq("20").seq,
            &seq("20"),
            HORIZON_MS.into(),
        )
        .await
        .unwrap();
    let asked = store
        .finish_window(
            &fence,
            &seq("20"),
            1_000,
            false,
            &ShardTally::default(),
            Some(&renewal),
        )
        .await
        .unwrap();
    assert_eq!(
        asked.as_deref(),
        Some("w2"),
        "the request is read in the same write"
    );
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(seq("20")));
    assert_eq!(st.lease.expires_ms, renewal.expires_ms, "renewed");
    assert_eq!(st.progress, renewal.progress);
    assert_eq!(st.holder_addr, renewal.addr);

    // A renewal does not let a fenced-out holder write: a newer take fences it.
    store.release_lease(&fence).await.unwrap();
    let newer = store
        .take_lease(&app, &shard, fence.epoch, "w3", i64::MAX / 2)
        .await
        .unwrap()
        .expect("released, free");
    assert!(matches!(
        store
            .begin_window(
                &fence,
                Some(&seq("20")),
                &seq("30").seq,
                &seq("30"),
                HORIZON_MS.into()
            )
            .await,
        Err(PortError::Fenced { .. })
    ));
    store
        .begin_window(
            &newer,
            Some(&seq("20")),
            &seq("30").seq,
            &seq("30"),
            HORIZON_MS.into(),
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .finish_window(
                &fence,
                &seq("30"),
                1_000,
                false,
                &ShardTally::default(),
                Some(&renewal)
            )
            .await,
        Err(PortError::Fenced { .. })
    ));
    assert_eq!(
        store
            .shard_state(&app, &shard)
            .await
            .unwrap()
            .lease
            .expires_ms,
        i64::MAX / 2,
        "the stale holder's renewal did not land"
    );
}

/// What [`corrupt_summary_and_dedup_are_named`] corrupts behind the store's back, each by the
/// adapter's own means (SQL, `UpdateItem`).
pub enum Corruption {
    /// A post's live item of a shard (`pk` the post, `sk` [`tally_core::summary::live_sk`]):
    /// its total `n` set to a string.
    LiveTotal {
        /// The post.
        post: String,
        /// The live item's sort key.
        sk: String,
    },
    /// The app's global-total item of a shard: its `n` set to a string.
    GlobalTotal {
        /// Its sort key ([`tally_core::summary::global_sk`]).
        sk: String,
    },
    /// The shard's dedup records: their ids set to 3 bytes (not whole 16-byte ids).
    DedupIds {
        /// The app.
        app: String,
        /// The shard.
        shard: String,
    },
}

/// Counter store: a summary item or a dedup record that is not what tally writes is an error
/// naming the item (`PortError::Corrupt`) wherever it is read — a count, the global total, a
/// plan's read of the live item, a dedup restore — never read as 0 or as no ids (a count that
/// drops a shard's `n` would be taken back once mended; a restore without ids lets a retry
/// count twice).
pub async fn corrupt_summary_and_dedup_are_named<F, Fut>(
    store: &dyn CounterStore,
    name: &str,
    corrupt: F,
) where
    F: Fn(Corruption) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = format!("{name}-corrupt-summary");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let post = format!("{name}-corrupt-p");
    // The window's records arrive now: its dedup record expires by TTL a day after the stream's
    // retention, and DynamoDB Local's TTL, like DynamoDB's, deletes an item whose `expires_at`
    // has passed, in the background. A fixed time here (30 November 2026) made the record vanish
    // under the test once the calendar had passed its expiry, when the sweep came first. (The
    // other tests' arrivals of 1970 stay: DynamoDB passes over items expired more than five
    // years ago.)
    let t = tally_core::clock::now_ms();
    let end = seq("10");
    let dedup = DedupRecord {
        max_arrival: t,
        ids: vec![7, 8],
    };
    let rest = Rest {
        dead: &[],
        total: 3,
        dedup: &dedup,
    };
    let posts = [(post.clone(), delta(&[(t, 3)]))];
    window(store, &fence, None, &end, &posts, rest, false).await;
    assert_eq!(store.post_count(&post, None).await.unwrap().total, 3);
    let is_named = |r: Result<(), PortError>, what: &str, item: &str| {
        let e = r.expect_err(what);
        let text = e.to_string();
        assert!(
            matches!(e, PortError::Corrupt { .. }) && text.contains(item),
            "{what}: {text}"
        );
    };

    corrupt(Corruption::LiveTotal {
        post: post.clone(),
        sk: tally_core::summary::live_sk(&shard),
    })
    .await;
    let count = store.post_count(&post, None).await.map(|_| ());
    is_named(count, "a count", &post);
    let since = store.post_count(&post, Some(t - HOUR_MS)).await.map(|_| ());
    is_named(since, "a count since", &post);
    // The next window's write over the live item fails rather than count on it (the embedded
    // store reads it for the plan: `Corrupt`; DynamoDB refuses to add to a string: a validation
    // error of the call).
    let next = seq("20");
    store
        .begin_window(&fence, Some(&end), &next.seq, &next, HORIZON_MS.into())
        .await
        .unwrap();
    let applied = store
        .apply_posts(at(&fence, &next), &[(post.clone(), delta(&[(t, 1)]))])
        .await;
    let failed = match applied {
        Err(_) => true,
        Ok(p) => p.error.is_some() || !p.retry.is_empty(),
    };
    assert!(failed, "a write over a corrupt live item");

    corrupt(Corruption::GlobalTotal {
        sk: tally_core::summary::global_sk(&app, &shard),
    })
    .await;
    let total = store.global_total().await.map(|_| ());
    is_named(total, "the global total", &shard);

    corrupt(Corruption::DedupIds {
        app: app.clone(),
        shard: shard.clone(),
    })
    .await;
    let restored = store
        .load_dedup(&app, std::slice::from_ref(&shard), i64::MIN)
        .await
        .map(|_| ());
    is_named(restored, "a dedup restore", &shard);
}

/// Counter store: the stream a store is counted from is claimed once — the first claim wins,
/// a later claim of another stream answers the first (the counter then refuses, naming both) —
/// and a store of one region has no replicas.
pub async fn a_store_is_counted_from_one_stream(store: &dyn CounterStore) {
    assert_eq!(
        store.counted_stream(None).await.unwrap(),
        None,
        "a fresh store"
    );
    let first = "kinesis:us-east-1:likes";
    assert_eq!(
        store.counted_stream(Some(first)).await.unwrap().as_deref(),
        Some(first)
    );
    assert_eq!(
        store
            .counted_stream(Some("kinesis:eu-west-1:likes"))
            .await
            .unwrap()
            .as_deref(),
        Some(first),
        "the first claim stands"
    );
    assert_eq!(
        store.counted_stream(None).await.unwrap().as_deref(),
        Some(first)
    );
    assert_eq!(store.replica_regions().await.unwrap(), Vec::<String>::new());
}

/// The dead letter of a malformed record (`42`) of `shard` at `at`.
fn malformed(shard: &str, at: &Position) -> DeadLetter {
    DeadLetter {
        shard_id: shard.to_owned(),
        seq: at.clone(),
        arrival_ms: 1,
        reason: "not a JSON object: got a number".into(),
        data: b"42".to_vec(),
        size: 2,
        gap: None,
    }
}

/// Counter store: a dead letter written behind the store's back with a value tally never writes
/// (its `arrival_ms` a string) is an error naming it wherever dead letters are read — never
/// skipped, and never read with a default in its place (an `arrival_ms` of 0 would sort it
/// first and look like a record from 1970).
pub async fn a_corrupt_dead_letter_is_named<F, Fut>(
    store: &dyn CounterStore,
    name: &str,
    corrupt: F,
) where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = format!("corrupt-letter-{name}");
    let shard = format!("shard-letter-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let end = seq("30");
    let letter = malformed(&shard, &end);
    let rest = Rest {
        dead: std::slice::from_ref(&letter),
        total: 0,
        dedup: &no_ids(1),
    };
    window(store, &fence, None, &end, &[], rest, false).await;
    let read = store.dead_letters(1_000).await.unwrap();
    assert!(read.contains(&letter), "{read:?}");
    corrupt(shard.clone(), letter.key()).await;
    let named = |e: PortError, what: &str| {
        let text = e.to_string();
        assert!(
            matches!(e, PortError::Corrupt { .. })
                && text.contains(&shard)
                && text.contains("arrival_ms"),
            "{what}: {text}"
        );
    };
    named(
        store.dead_letters(1_000).await.expect_err("dead_letters"),
        "dead_letters",
    );
    named(
        store
            .dead_letter_page(None, 1_000)
            .await
            .expect_err("dead_letter_page"),
        "dead_letter_page",
    );
}
