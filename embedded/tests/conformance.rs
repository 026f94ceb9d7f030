//! The port conformance suite on the embedded backend.
#![allow(clippy::unwrap_used)]

use tally_embedded::Embedded;

fn store(shards: usize) -> (tempfile::TempDir, Embedded) {
    let dir = tempfile::tempdir().unwrap();
    let e = Embedded::open(dir.path(), shards).unwrap();
    (dir, e)
}

#[tokio::test]
async fn stream() {
    let (_d, e) = store(3);
    tally_conformance::stream_put_and_read(&e).await;
}

#[tokio::test]
async fn leases() {
    let (_d, e) = store(1);
    tally_conformance::leases_are_fenced(&e, "embedded").await;
}

#[tokio::test]
async fn counter() {
    let (_d, e) = store(1);
    tally_conformance::counter_commits_exactly_once(&e, "embedded").await;
}

#[tokio::test]
async fn largest_chunk() {
    let (_d, e) = store(1);
    tally_conformance::the_largest_chunk_fits_one_atomic_write(&e, "embedded").await;
}

#[tokio::test]
async fn analytics() {
    let (_d, e) = store(1);
    tally_conformance::analytics_snapshots_are_fenced(&e, "embedded").await;
}

#[tokio::test]
async fn split_shard_routes_to_children_and_ends_the_parent() {
    use tally_core::ports::{PutEntry, StartPosition, Stream};
    let (_d, e) = store(1);
    let put = |k: &str| PutEntry {
        partition_key: k.into(),
        data: k.as_bytes().to_vec(),
    };
    e.put_records(&[put("a"), put("b")]).await.unwrap();
    let (c1, c2) = e.split_shard("shardId-000000000000").unwrap();
    e.put_records(&[put("c"), put("d"), put("e")])
        .await
        .unwrap();
    let shards = e.list_shards().await.unwrap();
    assert_eq!(shards.len(), 3);
    assert!(shards[0].closed);
    assert_eq!(shards[1].parents, vec!["shardId-000000000000".to_string()]);
    let mut r = e
        .open("shardId-000000000000", StartPosition::TrimHorizon)
        .await
        .unwrap();
    let b = r.next_batch(10).await.unwrap();
    assert_eq!(b.records.len(), 2);
    assert!(b.shard_end);
    assert_eq!(b.child_shards, vec![c1.clone(), c2.clone()]);
    let mut n = 0;
    for c in [c1, c2] {
        n += e
            .open(&c, StartPosition::TrimHorizon)
            .await
            .unwrap()
            .next_batch(10)
            .await
            .unwrap()
            .records
            .len();
    }
    assert_eq!(n, 3);
}

/// Several processes (here: connections) opening a fresh store at once all succeed, and the
/// stream gets its shards once.
#[test]
fn a_fresh_store_opened_at_once_by_many() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let opened: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    s.spawn(|| {
                        Embedded::open(dir.path(), 4)
                            .unwrap()
                            .shard_count()
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(opened, vec![4; 6]);
    }
}

/// Dedup records expire by the shard's arrival clock, never by the wall clock: a backlog whose
/// records arrived long ago keeps every record its horizon needs, however late it is processed
/// or restarted, and a record is dropped once the clock is past its horizon.
#[tokio::test]
async fn dedup_records_expire_by_arrival_not_wall_clock() {
    use tally_core::dedup::DedupRecord;
    use tally_core::ports::WindowShape;
    use tally_core::ports::{ChunkCommit, CounterStore, LastChunk, LeaseStore, ShardInfo};
    use tally_core::SeqNo;
    let (_d, e) = store(1);
    let (app, shard) = ("counter", "shard-x");
    e.ensure_leases(
        app,
        &[ShardInfo {
            shard_id: shard.into(),
            parents: vec![],
            closed: false,
        }],
    )
    .await
    .unwrap();
    let fence = e
        .take_lease(app, shard, 0, "w", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap();
    let shape = WindowShape {
        max_items: 10,
        horizon_ms: 600_000,
    };
    // Arrival times from years ago (a backlog): wall-clock expiry would have dropped them all.
    let day = 86_400_000i64;
    let windows = [
        (1, 1_000_000),
        (2, 1_000_000 + 500_000),
        (3, 1_000_000 + day),
    ];
    let mut start: Option<SeqNo> = None;
    for (i, (end, max_arrival)) in windows.iter().enumerate() {
        let end = SeqNo::parse(&end.to_string()).unwrap();
        let dedup = DedupRecord {
            max_arrival: *max_arrival,
            ids: vec![i as u128],
        };
        e.commit_chunk(ChunkCommit {
            fence: &fence,
            start_after: start.as_ref(),
            end: &end,
            index: 0,
            count: 1,
            shape,
            items: &[],
            last: Some(LastChunk {
                dedup: &dedup,
                total_delta: 0,
                shard_finished: false,
            }),
        })
        .await
        .unwrap();
        if i == 1 {
            // Both records within the horizon of the clock are kept, whatever the wall clock.
            let kept = e.load_dedup(app, &[shard.into()], i64::MIN).await.unwrap();
            assert_eq!(kept.len(), 2);
        }
        start = Some(end);
    }
    // A day later by arrival, the first two are past the horizon: gone from the store.
    let kept = e.load_dedup(app, &[shard.into()], i64::MIN).await.unwrap();
    assert_eq!(
        kept.iter().map(|r| r.ids.clone()).collect::<Vec<_>>(),
        vec![vec![2u128]]
    );
}
