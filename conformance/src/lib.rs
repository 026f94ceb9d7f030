//! One conformance suite per port: the same checks run against every backend (the embedded one
//! in its crate's tests, the AWS one against the local API peers). A backend is done when it
//! passes them.
//!
//! Each check takes the port and a name unique to the calling test (used for app and shard
//! names), so checks can share tables and run in parallel.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use tally_core::buckets::{PostDelta, DAY_MS, HOUR_MS, MINUTE_MS};
use tally_core::cost::Purpose;
use tally_core::dead_letter::{DeadLetter, DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON};
use tally_core::dedup::DedupRecord;
use tally_core::ports::{
    AnalyticsSnapshot, AnalyticsStore, Applied, CounterStore, Fence, GapCommit, LeaseStore,
    Pending, PortError, PutEntry, PutOutcome, ShardInfo, ShardTally, StartPosition, StoredDedup,
    Stream, StreamRecord, TrendingEntry, WindowRef, WindowRest,
};
use tally_core::window::MAX_WINDOW_RECORDS;
use tally_core::Position;

/// The dedup horizon every window of these checks is recorded with.
const HORIZON_MS: i64 = 600_000;

fn seq(s: &str) -> Position {
    Position::parse(s).unwrap()
}

async fn read_all(stream: &dyn Stream, shard: &str, from: StartPosition) -> Vec<StreamRecord> {
    let mut r = stream.open(shard, from).await.unwrap();
    let mut out = Vec::new();
    let mut empties = 0;
    loop {
        let b = r.next_batch(100).await.unwrap();
        if b.records.is_empty() {
            empties += 1;
            // Kinesis may answer empty while records are still ahead; a few empty reads in a row
            // at the tip mean caught up.
            if b.shard_end || (empties >= 3 && b.millis_behind_latest.unwrap_or(0) == 0) {
                return out;
            }
        } else {
            empties = 0;
            out.extend(b.records);
        }
    }
}

/// Stream: puts are routed by partition key, read back in order, from every start position.
pub async fn stream_put_and_read(stream: &dyn Stream) {
    let shards = stream.list_shards().await.unwrap();
    assert!(
        shards.len() >= 2,
        "the suite needs a stream of at least 2 shards"
    );
    let entries: Vec<PutEntry> = (0..120)
        .map(|i| PutEntry {
            partition_key: format!("post-{}", i % 30),
            data: format!("record {i}").into_bytes(),
        })
        .collect();
    let outcomes = stream.put_records(&entries).await.unwrap();
    assert_eq!(outcomes.len(), entries.len());
    let mut shard_of_key: HashMap<String, String> = HashMap::new();
    for (e, o) in entries.iter().zip(&outcomes) {
        let PutOutcome::Ok { shard_id, .. } = o else {
            panic!("put failed: {o:?}")
        };
        let prev = shard_of_key.insert(e.partition_key.clone(), shard_id.clone());
        assert!(prev.is_none_or(|p| &p == shard_id), "one key, one shard");
    }
    let mut seen = 0;
    for s in &shards {
        let recs = read_all(stream, &s.shard_id, StartPosition::TrimHorizon).await;
        for w in recs.windows(2) {
            assert!(
                w[0].seq < w[1].seq,
                "sequence numbers increase within a shard"
            );
        }
        for r in &recs {
            assert_eq!(shard_of_key[&r.partition_key], s.shard_id);
            assert!(r.arrival_ms > 0);
        }
        // Order within a key is the put order.
        let mut per_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for r in &recs {
            let i: usize = String::from_utf8_lossy(&r.data)
                .trim_start_matches("record ")
                .parse()
                .unwrap();
            per_key.entry(&r.partition_key).or_default().push(i);
        }
        for v in per_key.values() {
            assert!(v.windows(2).all(|w| w[0] < w[1]));
        }
        seen += recs.len();
        if recs.len() >= 2 {
            let mid = &recs[recs.len() / 2];
            let after = read_all(
                stream,
                &s.shard_id,
                StartPosition::AfterSequence(mid.seq.clone()),
            )
            .await;
            assert_eq!(
                after,
                recs[recs.len() / 2 + 1..].to_vec(),
                "AFTER_SEQUENCE_NUMBER resumes right after"
            );
            let at_seq = read_all(
                stream,
                &s.shard_id,
                StartPosition::AtSequence(mid.seq.clone()),
            )
            .await;
            assert_eq!(
                at_seq,
                recs[recs.len() / 2..].to_vec(),
                "AT_SEQUENCE_NUMBER resumes at the record (a checkpoint inside an aggregate)"
            );
            let at = read_all(
                stream,
                &s.shard_id,
                StartPosition::AtTimestamp(recs[0].arrival_ms),
            )
            .await;
            assert_eq!(
                at, recs,
                "AT_TIMESTAMP of the first arrival reads everything"
            );
        }
    }
    assert_eq!(seen, entries.len(), "every record is read exactly once");
    // LATEST sees only what comes after it.
    let s0 = &shards[0].shard_id;
    let mut latest = stream.open(s0, StartPosition::Latest).await.unwrap();
    let b = latest.next_batch(100).await.unwrap();
    assert!(b.records.is_empty());
    let key = shard_of_key
        .iter()
        .find(|(_, s)| *s == s0)
        .map(|(k, _)| k.clone())
        .unwrap();
    stream
        .put_records(&[PutEntry {
            partition_key: key,
            data: b"late".to_vec(),
        }])
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..20 {
        got.extend(latest.next_batch(100).await.unwrap().records);
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, b"late");
}

/// Leases: rows created once, taken by epoch, renewed, stolen, fenced, released, finished.
/// The fleet rows: a heartbeat makes a worker a live member until it expires, a stop takes it
/// out at once, and no listing of the application's leases shows them.
pub async fn fleet_rows_are_apart_from_leases(store: &dyn LeaseStore, name: &str) {
    let app = format!("fleet-{name}");
    store
        .ensure_leases(
            &app,
            &[ShardInfo {
                shard_id: "shard-a".into(),
                parents: vec![],
                closed: false,
            }],
        )
        .await
        .unwrap();
    store.heartbeat(&app, "w1", 5_000).await.unwrap();
    store.heartbeat(&app, "w2", 2_000).await.unwrap();
    assert_eq!(store.fleet(&app, 1_000).await.unwrap(), vec!["w1", "w2"]);
    assert_eq!(
        store.fleet(&app, 2_000).await.unwrap(),
        vec!["w1"],
        "w2's row expired"
    );
    // A heartbeat extends the row.
    store.heartbeat(&app, "w2", 9_000).await.unwrap();
    assert_eq!(store.fleet(&app, 6_000).await.unwrap(), vec!["w2"]);
    store.leave_fleet(&app, "w2").await.unwrap();
    assert!(store.fleet(&app, 0).await.unwrap() == vec!["w1"]);
    let states = store.list_states(&app).await.unwrap();
    assert_eq!(states.len(), 1, "one lease row, no fleet row: {states:?}");
    assert!(store
        .fleet(&format!("other-{name}"), 0)
        .await
        .unwrap()
        .is_empty());
}

pub async fn leases_are_fenced(store: &dyn LeaseStore, name: &str) {
    let app = format!("app-{name}");
    let shards = vec![
        ShardInfo {
            shard_id: "shard-a".into(),
            parents: vec![],
            closed: false,
        },
        ShardInfo {
            shard_id: "shard-b".into(),
            parents: vec!["shard-a".into()],
            closed: false,
        },
    ];
    store.ensure_leases(&app, &shards).await.unwrap();
    store.ensure_leases(&app, &shards).await.unwrap();
    let ls = store.list_leases(&app).await.unwrap();
    assert_eq!(ls.len(), 2);
    assert_eq!(ls[1].parents, vec!["shard-a".to_string()]);
    assert!(ls
        .iter()
        .all(|l| l.owner.is_none() && l.epoch == 0 && l.checkpoint.is_none() && !l.finished));

    let f1 = store
        .take_lease(&app, "shard-a", 0, "w1", i64::MAX / 2)
        .await
        .unwrap()
        .expect("free lease taken");
    assert_eq!(f1.epoch, 1);
    assert!(
        store
            .take_lease(&app, "shard-a", 0, "w2", i64::MAX / 2)
            .await
            .unwrap()
            .is_none(),
        "a stale epoch loses"
    );
    let read = tally_core::ports::ReadProgress {
        at_ms: 1_000,
        behind_ms: 0,
    };
    store
        .renew_lease(&f1, i64::MAX / 2, Some(read), Some("10.0.1.7:9100"))
        .await
        .unwrap();
    let states = store.list_states(&app).await.unwrap();
    assert_eq!(states.len(), 2, "one listing, every row's state");
    assert_eq!(states[0].lease.shard_id, "shard-a");
    assert_eq!(
        states[0].progress,
        Some(read),
        "the renewal's report is kept"
    );
    assert_eq!(states[1].progress, None);
    assert_eq!(states[0].holder_addr.as_deref(), Some("10.0.1.7:9100"));
    assert_eq!(states[1].holder_addr, None);
    // A renewal without a report keeps the last one.
    store
        .renew_lease(&f1, i64::MAX / 2, None, None)
        .await
        .unwrap();
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!(st.progress, Some(read));
    assert_eq!(st.holder_addr.as_deref(), Some("10.0.1.7:9100"));
    let f2 = store
        .take_lease(&app, "shard-a", 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .expect("steal by epoch");
    assert_eq!(
        store
            .shard_state(&app, "shard-a")
            .await
            .unwrap()
            .holder_addr,
        None,
        "a new holder's address is its own to report: the old one's is cleared"
    );
    assert!(
        matches!(
            store.renew_lease(&f1, 1, None, None).await,
            Err(PortError::Fenced { .. })
        ),
        "the old holder is fenced"
    );
    assert!(matches!(
        store.mark_finished(&f1).await,
        Err(PortError::Fenced { .. })
    ));
    store.release_lease(&f1).await.unwrap(); // a no-op for a lease we no longer hold
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!(st.lease.owner.as_deref(), Some("w2"));
    store.release_lease(&f2).await.unwrap();
    let st = store.shard_state(&app, "shard-a").await.unwrap();
    assert_eq!((st.lease.owner.clone(), st.lease.epoch), (None, 2));
    let f3 = store
        .take_lease(&app, "shard-a", 2, "w3", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    store.mark_finished(&f3).await.unwrap();
    assert!(
        store
            .shard_state(&app, "shard-a")
            .await
            .unwrap()
            .lease
            .finished
    );
    // A worker lists the rows (shard-a finished, its row still there), another cleans shard-a
    // up, then the first makes sure the shards it listed have rows, from its stale listing: the
    // cleaned-up row does not come back (it would be read again from the oldest record, with no
    // checkpoint and no duplicate filter, and its children would wait for it for ever).
    let stale_view = store.list_leases(&app).await.unwrap();
    assert!(stale_view
        .iter()
        .any(|l| l.shard_id == "shard-a" && l.finished));
    store.delete_lease(&app, "shard-a").await.unwrap();
    let stale_shards: Vec<ShardInfo> = stale_view
        .iter()
        .map(|l| ShardInfo {
            shard_id: l.shard_id.clone(),
            parents: l.parents.clone(),
            closed: l.shard_id == "shard-a",
        })
        .collect();
    store.ensure_leases(&app, &stale_shards).await.unwrap();
    let ls = store.list_leases(&app).await.unwrap();
    assert_eq!(
        ls.iter().map(|l| l.shard_id.as_str()).collect::<Vec<_>>(),
        ["shard-b"],
        "the cleaned-up row stays gone, and no tombstone is listed as a lease"
    );
    assert!(matches!(
        store.shard_state(&app, "shard-a").await,
        Err(PortError::NotFound { .. })
    ));
    // A shard never seen before still gets its row.
    let new = ShardInfo {
        shard_id: "shard-c".into(),
        parents: vec!["shard-b".into()],
        closed: false,
    };
    store.ensure_leases(&app, &[new]).await.unwrap();
    assert_eq!(store.list_leases(&app).await.unwrap().len(), 2);
}

fn delta(deltas: &[(i64, i64)]) -> PostDelta {
    let mut d = PostDelta::default();
    for &(t, n) in deltas {
        d.add(t, n);
    }
    d
}

/// Creates a fresh shard's lease row and takes it as worker `w1`.
async fn held_lease(
    store: &(impl LeaseStore + ?Sized),
    app: &str,
    shard: &str,
) -> tally_core::ports::Fence {
    let info = ShardInfo {
        shard_id: shard.to_owned(),
        parents: vec![],
        closed: false,
    };
    store.ensure_leases(app, &[info]).await.unwrap();
    store
        .take_lease(app, shard, 0, "w1", i64::MAX / 2)
        .await
        .unwrap()
        .expect("a fresh lease is free")
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
        .begin_window(fence, start_after, &end.seq, end, HORIZON_MS)
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

fn at<'a>(fence: &'a Fence, end: &'a Position) -> WindowRef<'a> {
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
    let malformed = DeadLetter {
        shard_id: shard.clone(),
        seq: first_end.clone(),
        arrival_ms: 1,
        reason: "not a JSON object: got a number".into(),
        data: b"42".to_vec(),
        size: 2,
        gap: None,
    };
    let rest = Rest {
        dead: std::slice::from_ref(&malformed),
        total: 0,
        dedup: &no_ids(1),
    };
    window(store, &fence, None, &first_end, &[], rest, false).await;
    store
        .begin_window(&fence, Some(&first_end), &seq("31").seq, &end, HORIZON_MS)
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
    let app = format!("counter-{name}");
    let shard = format!("shard-{name}");
    let (post_a, post_b) = (format!("a-{name}"), format!("b-{name}"));
    let fence = held_lease(store, &app, &shard).await;

    let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
    let t0 = day + 10 * HOUR_MS + 30 * MINUTE_MS; // 10:30
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
    // The window ends inside an aggregate (its user records 0..=4): the pending end, the
    // markers and the checkpoint keep the sub-sequence number. It starts at the record 5.
    let end = seq("9:4");
    let window_first = seq("5").seq;
    let dedup = DedupRecord {
        max_arrival: 1_000,
        ids: vec![1, 2, 3],
    };
    let rest = || Rest {
        dead: std::slice::from_ref(&dead),
        total: 5,
        dedup: &dedup,
    };

    // No checkpoint moves for a window that is not pending; none is pending after another start.
    assert!(matches!(
        store
            .finish_window(&fence, &end, 1_000, false, &ShardTally::default())
            .await,
        Err(PortError::Fenced { .. })
    ));
    assert!(matches!(
        store
            .begin_window(&fence, Some(&seq("3")), &end.seq, &end, HORIZON_MS)
            .await,
        Err(PortError::Fenced { .. })
    ));
    store
        .begin_window(&fence, None, &window_first, &end, HORIZON_MS)
        .await
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(
        st.pending,
        Some(Pending {
            end: end.clone(),
            first: Some(window_first.clone()),
            horizon_ms: Some(HORIZON_MS)
        }),
        "the pending window keeps its first record and the horizon it was built with"
    );
    assert_eq!(st.lease.checkpoint, None);
    // A second window cannot begin while one is pending.
    assert!(matches!(
        store
            .begin_window(&fence, None, &window_first, &seq("12"), HORIZON_MS)
            .await,
        Err(PortError::Fenced { .. })
    ));
    // The first post's writes, then all of them (a replay): the first ones are refused.
    let first = done(
        store
            .apply_posts(at(&fence, &end), &posts[..1])
            .await
            .unwrap(),
    );
    // Post a: the live item at its latest hour (the next day's 10:00), and its earlier events
    // in archives: two hours and a day.
    assert_eq!((first.written, first.refused), (4, 0), "{first:?}");
    assert_eq!(
        (
            first.units.get(Purpose::Counts),
            first.units.get(Purpose::Buckets)
        ),
        (1, 3)
    );
    let again = done(store.apply_posts(at(&fence, &end), &posts).await.unwrap());
    assert_eq!(again.written, 1, "only post b is new: {again:?}");
    assert!(again.units.get(Purpose::FailedConditions) >= 1);
    // What the window spent and counted, kept in the shard's row with its checkpoint.
    let mut spent = ShardTally {
        counted: 3,
        ..ShardTally::default()
    };
    spent.units.merge(&first.units);
    // A worker whose lease was taken cannot move the checkpoint; the new owner can.
    let stolen = store
        .take_lease(&app, &shard, 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let r = store
        .apply_rest(at(&stolen, &end), rest_of(&rest()))
        .await
        .unwrap();
    assert_eq!(
        r.written, 3,
        "dead letter, global total, dedup record: {r:?}"
    );
    // Sent again, the dedup record is not replaced and the total not added twice.
    let r = store
        .apply_rest(at(&stolen, &end), rest_of(&rest()))
        .await
        .unwrap();
    assert_eq!(r.refused, 2, "{r:?}");
    assert!(matches!(
        store
            .finish_window(&fence, &end, 1_000, false, &ShardTally::default())
            .await,
        Err(PortError::Fenced { .. })
    ));
    store
        .finish_window(&stolen, &end, 1_000, false, &spent)
        .await
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(
        (
            st.lease.checkpoint.clone(),
            st.pending.clone(),
            st.lease.max_arrival
        ),
        (Some(end.clone()), None, 1_000)
    );
    assert_eq!(st.spent, spent, "the row keeps what the window spent");
    // Finished once: the same window cannot be checkpointed again.
    assert!(matches!(
        store
            .finish_window(&stolen, &end, 1_000, false, &spent)
            .await,
        Err(PortError::Fenced { .. })
    ));

    let count = |post: &str, since| {
        let post = post.to_owned();
        async move { store.post_count(&post, since).await.unwrap() }
    };
    assert_eq!(count(&post_a, None).await.total, 6);
    assert_eq!(count(&post_b, None).await.total, -1);
    assert_eq!(count(&format!("nobody-{name}"), None).await.total, 0);
    // Since 10:30 the same day: everything of post a; since 11:00: the 11:30 like and the next day's.
    assert_eq!(count(&post_a, Some(t0)).await.since, Some(6));
    assert_eq!(
        count(&post_a, Some(t0 + 30 * MINUTE_MS)).await.since,
        Some(3)
    );
    assert_eq!(
        count(&post_a, Some(t0 + HOUR_MS + MINUTE_MS)).await.since,
        Some(1)
    );
    assert_eq!(count(&post_a, Some(t0 + 2 * DAY_MS)).await.since, Some(0));
    let c = count(&post_a, Some(t0)).await;
    assert_eq!(c.read_units, 3, "three Queries of small items: {c:?}");
    assert_eq!(count(&post_a, None).await.read_units, 1);
    // Each live item's marker comes with the count: what a provisional count checks a worker's
    // open window against (the window after `end` is not applied to post a yet; the one that
    // ended at `end` is).
    let marks = count(&post_a, None).await.marks;
    assert_eq!(
        marks,
        vec![(shard.clone(), tally_core::summary::marker(&end))]
    );
    let end_mark = tally_core::summary::marker(&end);
    assert!(tally_core::summary::pending_applies(
        &marks,
        &shard,
        Some(&end_mark)
    ));
    assert!(!tally_core::summary::pending_applies(&marks, &shard, None));
    assert_eq!(count(&format!("nobody-{name}"), None).await.marks, vec![]);

    // A second window re-delivering the same dead letter stores it once; the shard finishes.
    let end2 = seq("10");
    let dedup2 = DedupRecord {
        max_arrival: 2_000,
        ids: vec![4],
    };
    let rest2 = Rest {
        dead: std::slice::from_ref(&dead),
        total: 0,
        dedup: &dedup2,
    };
    window(store, &stolen, Some(&end), &end2, &[], rest2, true).await;
    assert!(
        store
            .shard_state(&app, &shard)
            .await
            .unwrap()
            .lease
            .finished
    );
    let dls = store.dead_letters(10_000).await.unwrap();
    assert_eq!(
        dls.iter()
            .filter(|d| d.shard_id == shard)
            .cloned()
            .collect::<Vec<_>>(),
        vec![dead]
    );
    let (app, shard) = (&app, &shard);
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
    assert_eq!(recs(0).await, vec![dedup.clone(), dedup2]);
    assert!(store.global_total().await.unwrap() >= 5);
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
        .begin_window(&w1, None, &x_end.seq, &x_end, HORIZON_MS)
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
        .finish_window(&w2, &x_end, 10, false, &ShardTally::default())
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
            .finish_window(&w1, &x_end, 10, false, &ShardTally::default())
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

/// Analytics store: a snapshot, its dedup record and its checkpoint land together, fenced by the
/// lease.
pub async fn analytics_snapshots_are_fenced(store: &dyn AnalyticsStore, name: &str) {
    let app = format!("analytics-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let snap = AnalyticsSnapshot {
        shard_id: shard.clone(),
        end: seq("42"),
        max_arrival: 7,
        taken_at_ms: 1_000,
        trending: vec![
            TrendingEntry {
                post_id: "p1".into(),
                score: 2.5,
                error: 0.0,
            },
            TrendingEntry {
                post_id: "p2".into(),
                score: 1.0,
                error: 0.5,
            },
        ],
        trending_at_ms: 900,
        top_liked: vec![TrendingEntry {
            post_id: "p1".into(),
            score: 7.0,
            error: 0.0,
        }],
        latency: vec![1, 2, 3],
        dedup: DedupRecord {
            max_arrival: 7,
            ids: vec![5, 6],
        },
        horizon_ms: HORIZON_MS,
        shard_finished: false,
    };
    store.save_snapshot(&fence, &snap).await.unwrap();
    let stored = store
        .load_dedup(&app, std::slice::from_ref(&shard), i64::MIN)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].end.clone(), stored[0].record.clone()),
        (seq("42"), snap.dedup.clone())
    );
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(seq("42")));
    let all = store
        .trending_sketches(&tally_core::ports::all_time(&app))
        .await
        .unwrap();
    assert_eq!(all, vec![(shard.clone(), snap.top_liked.clone(), 900)]);
    let sk = store.trending_sketches(&app).await.unwrap();
    assert_eq!(sk, vec![(shard.clone(), snap.trending.clone(), 900)]);
    assert_eq!(
        store.latency_snapshots(&app, 1_000).await.unwrap(),
        vec![(1_000, vec![1, 2, 3])]
    );
    assert!(store
        .latency_snapshots(&app, 1_001)
        .await
        .unwrap()
        .is_empty());
    let _thief = store
        .take_lease(&app, &shard, 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let stale = AnalyticsSnapshot {
        end: seq("50"),
        dedup: DedupRecord {
            max_arrival: 8,
            ids: vec![9],
        },
        ..snap
    };
    assert!(matches!(
        store.save_snapshot(&fence, &stale).await,
        Err(PortError::Fenced { .. })
    ));
    assert_eq!(
        store
            .load_dedup(&app, std::slice::from_ref(&shard), i64::MIN)
            .await
            .unwrap()
            .len(),
        1,
        "a fenced snapshot stores no dedup record"
    );
    assert_eq!(
        store
            .shard_state(&app, &shard)
            .await
            .unwrap()
            .lease
            .checkpoint,
        Some(seq("42"))
    );
}
