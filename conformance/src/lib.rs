//! One conformance suite per port: the same checks run against every backend (the embedded one
//! in its crate's tests, the AWS one against the local API peers). A backend is done when it
//! passes them.
//!
//! Each check takes the port and a name unique to the calling test (used for app and shard
//! names), so checks can share tables and run in parallel.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use tally_core::buckets::{ItemKind, PostDelta, DAY_MS, HOUR_MS, MINUTE_MS};
use tally_core::dedup::DedupRecord;
use tally_core::ports::{
    AnalyticsSnapshot, AnalyticsStore, ChunkCommit, CounterStore, GapCommit, LastChunk, LeaseStore,
    PortError, PutEntry, PutOutcome, ShardInfo, StartPosition, Stream, StreamRecord, TrendingEntry,
    WindowShape,
};
use tally_core::window::{
    DeadLetter, WriteItem, DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON, MAX_WINDOW_RECORDS,
};
use tally_core::SeqNo;

/// The shape every window of these checks is recorded with.
const SHAPE: WindowShape = WindowShape {
    max_items: 3,
    horizon_ms: 600_000,
};

fn seq(s: &str) -> SeqNo {
    SeqNo::parse(s).unwrap()
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
    store.renew_lease(&f1, i64::MAX / 2).await.unwrap();
    let f2 = store
        .take_lease(&app, "shard-a", 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .expect("steal by epoch");
    assert!(
        matches!(
            store.renew_lease(&f1, 1).await,
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
    store.delete_lease(&app, "shard-a").await.unwrap();
    assert_eq!(store.list_leases(&app).await.unwrap().len(), 1);
    assert!(matches!(
        store.shard_state(&app, "shard-a").await,
        Err(PortError::NotFound { .. })
    ));
}

fn summary(post: &str, deltas: &[(i64, i64)]) -> Vec<WriteItem> {
    let mut d = PostDelta::default();
    for &(t, n) in deltas {
        d.add(t, n);
    }
    d.items(post).into_iter().map(WriteItem::Summary).collect()
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

/// Counter store: the largest chunk a window can make fits one atomic write — a full chunk of dead
/// letters of the largest size a record is cut to (data and reason), with the window's last-chunk
/// writes and a dedup record of the largest window. On DynamoDB this is the 400 KB item and 4 MB
/// transaction limit; a chunk over them would stall its shard.
pub async fn the_largest_chunk_fits_one_atomic_write(store: &dyn CounterStore, name: &str) {
    let app = format!("largest-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let n = store.max_items_per_commit();
    let items: Vec<WriteItem> = (0..n)
        .map(|i| {
            WriteItem::DeadLetter(DeadLetter {
                shard_id: shard.clone(),
                seq: seq(&format!("{}", 100 + i)),
                arrival_ms: i as i64,
                // A multi-byte reason at its byte cap, and raw bytes at theirs.
                reason: tally_core::window::truncate_utf8(
                    &"é".repeat(DEAD_LETTER_MAX_REASON),
                    DEAD_LETTER_MAX_REASON,
                ),
                data: vec![0xff; DEAD_LETTER_MAX_BYTES],
                size: 10 << 20,
            })
        })
        .collect();
    let dedup = DedupRecord {
        max_arrival: 1,
        ids: (0..MAX_WINDOW_RECORDS as u128).collect(),
    };
    let end = seq(&format!("{}", 100 + n));
    store
        .commit_chunk(ChunkCommit {
            fence: &fence,
            start_after: None,
            end: &end,
            index: 0,
            count: 1,
            shape: SHAPE,
            items: &items,
            last: Some(LastChunk {
                dedup: &dedup,
                total_delta: 0,
                shard_finished: false,
            }),
        })
        .await
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(end));
    let restored = store
        .load_dedup(&app, std::slice::from_ref(&shard), 0)
        .await
        .unwrap();
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].ids.len(), MAX_WINDOW_RECORDS);
    let dead = store.dead_letters(100_000).await.unwrap();
    let mine: Vec<&DeadLetter> = dead.iter().filter(|d| d.shard_id == shard).collect();
    assert_eq!(mine.len(), n);
    assert!(mine
        .iter()
        .all(|d| d.size == 10 << 20 && d.data.len() == DEAD_LETTER_MAX_BYTES));
}

/// Counter store: dedup records expire by the shard's arrival clock, never by the wall clock —
/// records of a backlog that arrived years ago stay while the clock is within their horizon — and
/// all of a shard's records go with its lease row.
pub async fn dedup_records_expire_by_arrival(store: &dyn CounterStore, name: &str) {
    let app = format!("expiry-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let day = 86_400_000i64;
    // Arrival times of a backlog from long ago: 1, 1.5 and 1 + 24 h (in ms since 1970, + 1e6).
    let windows = [
        ("11", 1_000_000),
        ("22", 1_500_000),
        ("133", 1_000_000 + day),
    ];
    let mut start: Option<SeqNo> = None;
    for (i, (end, max_arrival)) in windows.iter().enumerate() {
        let end = seq(end);
        let dedup = DedupRecord {
            max_arrival: *max_arrival,
            ids: vec![i as u128],
        };
        store
            .commit_chunk(ChunkCommit {
                fence: &fence,
                start_after: start.as_ref(),
                end: &end,
                index: 0,
                count: 1,
                shape: SHAPE,
                items: &[],
                last: Some(LastChunk {
                    dedup: &dedup,
                    total_delta: 0,
                    shard_finished: false,
                }),
            })
            .await
            .unwrap();
        start = Some(end);
    }
    let shards = [shard.clone()];
    let ids = |recs: Vec<DedupRecord>| {
        let mut v: Vec<u128> = recs.into_iter().flat_map(|r| r.ids).collect();
        v.sort();
        v
    };
    assert_eq!(
        ids(store.load_dedup(&app, &shards, i64::MIN).await.unwrap()),
        [0, 1, 2]
    );
    // A restore within the horizon of the second record's clock reads from it on.
    assert_eq!(
        ids(store.load_dedup(&app, &shards, 1_500_000).await.unwrap()),
        [1, 2]
    );
    // The clock a day on: the first two are past a 10-minute horizon and are deleted.
    let before = 1_000_000 + day - SHAPE.horizon_ms;
    store.expire_dedup(&app, &shard, before).await.unwrap();
    store.expire_dedup(&app, &shard, before).await.unwrap(); // idempotent
    assert_eq!(
        ids(store.load_dedup(&app, &shards, i64::MIN).await.unwrap()),
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
/// pending progress is gone, the gap is a dead letter — only for the lease holder and only for
/// the window it names; a gap can also finish a shard.
pub async fn gaps_are_recorded_with_the_checkpoint(store: &dyn CounterStore, name: &str) {
    let app = format!("gaps-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let end = seq("40");
    let items = summary(&format!("g-{name}"), &[(1_796_000_000_000, 2)]);
    let first = ChunkCommit {
        fence: &fence,
        start_after: None,
        end: &end,
        index: 0,
        count: 3,
        shape: SHAPE,
        items: &items,
        last: None,
    };
    store.commit_chunk(first).await.unwrap();
    let gap = DeadLetter {
        shard_id: shard.clone(),
        seq: end.clone(),
        arrival_ms: 1,
        reason: "gap: trimmed".into(),
        data: vec![],
        size: 0,
    };
    let wrong_end = seq("39");
    // Naming another window, or without the lease, is refused.
    let bad = GapCommit {
        fence: &fence,
        start_after: None,
        pending_end: Some(&wrong_end),
        through: Some(&wrong_end),
        finished: false,
        gap: &gap,
    };
    assert!(matches!(
        store.commit_gap(bad).await,
        Err(PortError::Fenced { .. })
    ));
    let stale = tally_core::ports::Fence {
        epoch: fence.epoch - 1,
        ..fence.clone()
    };
    let good = |f| GapCommit {
        fence: f,
        start_after: None,
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
    // A shard gone from the stream: finished on record, checkpoint unchanged.
    let gone = DeadLetter {
        reason: "gap: gone".into(),
        ..gap.clone()
    };
    store
        .commit_gap(GapCommit {
            fence: &fence,
            start_after: Some(&end),
            pending_end: None,
            through: None,
            finished: true,
            gap: &gone,
        })
        .await
        .unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert!(st.lease.finished);
    assert_eq!(st.lease.checkpoint, Some(end.clone()));
    let dead = store.dead_letters(100_000).await.unwrap();
    let mine: Vec<&DeadLetter> = dead.iter().filter(|d| d.shard_id == shard).collect();
    assert_eq!(
        mine.len(),
        1,
        "one gap per (shard, sequence number): {mine:?}"
    );
    assert!(mine[0].reason.starts_with("gap:"));
}

/// Counter store: chunks apply in order with the checkpoint, a stale or out-of-order commit is
/// refused, counts and "since" add up, dead letters are stored once.
pub async fn counter_commits_exactly_once(store: &dyn CounterStore, name: &str) {
    let app = format!("counter-{name}");
    let shard = format!("shard-{name}");
    let (post_a, post_b) = (format!("a-{name}"), format!("b-{name}"));
    let fence = held_lease(store, &app, &shard).await;
    assert!(store.max_items_per_commit() >= 1);

    let day = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;
    let t0 = day + 10 * HOUR_MS + 30 * MINUTE_MS; // 10:30
    let mut items = summary(&post_a, &[(t0, 3), (t0 + HOUR_MS, 2), (t0 + DAY_MS, 1)]);
    items.extend(summary(&post_b, &[(t0, -1)]));
    let dead = DeadLetter {
        shard_id: shard.clone(),
        seq: seq("7"),
        arrival_ms: 5,
        reason: "not a JSON object".into(),
        data: b"{oops".to_vec(),
        size: 5,
    };
    items.push(WriteItem::DeadLetter(dead.clone()));
    let (first, second) = items.split_at(3);
    let end = seq("9");
    let dedup = DedupRecord {
        max_arrival: 1_000,
        ids: vec![1, 2, 3],
    };
    let last = || LastChunk {
        dedup: &dedup,
        total_delta: 5,
        shard_finished: false,
    };
    let chunk = |index, items, last| ChunkCommit {
        fence: &fence,
        start_after: None,
        end: &end,
        index,
        count: 2,
        shape: SHAPE,
        items,
        last,
    };

    // The last chunk cannot come first.
    assert!(matches!(
        store.commit_chunk(chunk(1, second, Some(last()))).await,
        Err(PortError::Fenced { .. })
    ));
    store.commit_chunk(chunk(0, first, None)).await.unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(
        st.pending
            .as_ref()
            .map(|p| (p.end.clone(), p.done, p.count, p.shape)),
        Some((end.clone(), 1, 2, Some(SHAPE))),
        "the pending window keeps what shaped it"
    );
    assert_eq!(st.lease.checkpoint, None);
    // Re-applying chunk 0 is refused: nothing is counted twice.
    assert!(matches!(
        store.commit_chunk(chunk(0, first, None)).await,
        Err(PortError::Fenced { .. })
    ));
    // A worker whose lease was stolen cannot apply the rest.
    let stolen = store
        .take_lease(&app, &shard, 1, "w2", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        store.commit_chunk(chunk(1, second, Some(last()))).await,
        Err(PortError::Fenced { .. })
    ));
    let c2 = ChunkCommit {
        fence: &stolen,
        start_after: None,
        end: &end,
        index: 1,
        count: 2,
        shape: SHAPE,
        items: second,
        last: Some(last()),
    };
    store.commit_chunk(c2).await.unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(
        (
            st.lease.checkpoint.clone(),
            st.pending.clone(),
            st.lease.max_arrival
        ),
        (Some(end.clone()), None, 1_000)
    );

    assert_eq!(store.post_count(&post_a, None).await.unwrap().total, 6);
    assert_eq!(store.post_count(&post_b, None).await.unwrap().total, -1);
    assert_eq!(
        store
            .post_count(&format!("nobody-{name}"), None)
            .await
            .unwrap()
            .total,
        0
    );
    // Since 10:30 the same day: everything of post a; since 11:00: the 11:30 like and the next day's.
    assert_eq!(
        store.post_count(&post_a, Some(t0)).await.unwrap().since,
        Some(6)
    );
    assert_eq!(
        store
            .post_count(&post_a, Some(t0 + 30 * MINUTE_MS))
            .await
            .unwrap()
            .since,
        Some(3)
    );
    assert_eq!(
        store
            .post_count(&post_a, Some(t0 + HOUR_MS + MINUTE_MS))
            .await
            .unwrap()
            .since,
        Some(1)
    );
    assert_eq!(
        store
            .post_count(&post_a, Some(t0 + 2 * DAY_MS))
            .await
            .unwrap()
            .since,
        Some(0)
    );

    // A second window re-delivering the same dead letter stores it once; the total adds up.
    let end2 = seq("10");
    let items2 = vec![WriteItem::DeadLetter(dead.clone())];
    let dedup2 = DedupRecord {
        max_arrival: 2_000,
        ids: vec![4],
    };
    let c3 = ChunkCommit {
        fence: &stolen,
        start_after: Some(&end),
        end: &end2,
        index: 0,
        count: 1,
        shape: SHAPE,
        items: &items2,
        last: Some(LastChunk {
            dedup: &dedup2,
            total_delta: 0,
            shard_finished: true,
        }),
    };
    store.commit_chunk(c3).await.unwrap();
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

    let mut recs = store
        .load_dedup(&app, std::slice::from_ref(&shard), 1_500)
        .await
        .unwrap();
    assert_eq!(recs, vec![dedup2.clone()]);
    recs = store
        .load_dedup(&app, std::slice::from_ref(&shard), 0)
        .await
        .unwrap();
    recs.sort_by_key(|r| r.max_arrival);
    assert_eq!(recs, vec![dedup.clone(), dedup2]);
    assert!(store.global_total().await.unwrap() >= 5);
    let _ = ItemKind::Total;
}

/// Analytics store: a snapshot and its checkpoint land together, fenced by the lease.
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
        latency: vec![1, 2, 3],
        shard_finished: false,
    };
    store.save_snapshot(&fence, &snap).await.unwrap();
    let st = store.shard_state(&app, &shard).await.unwrap();
    assert_eq!(st.lease.checkpoint, Some(seq("42")));
    let sk = store.trending_sketches(&app).await.unwrap();
    assert_eq!(sk, vec![(shard.clone(), snap.trending.clone(), 900)]);
    assert_eq!(
        store.latency_snapshots(&app, 1_000).await.unwrap(),
        vec![vec![1, 2, 3]]
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
        ..snap
    };
    assert!(matches!(
        store.save_snapshot(&fence, &stale).await,
        Err(PortError::Fenced { .. })
    ));
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
