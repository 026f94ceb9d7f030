//! The `AnalyticsStore` port: snapshots fenced by the lease.

use tally_core::dedup::DedupRecord;
use tally_core::ports::{AnalyticsSnapshot, AnalyticsStore, PortError, TrendingEntry};

use super::{held_lease, seq, HORIZON_MS};

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

/// Analytics store: a trending sketch whose `at_ms` is not what tally writes (adapter-specific:
/// `corrupt(app, shard)` writes a string there behind the store's back) is read as an error
/// naming the sketch and the field, never as a sketch taken at the epoch.
pub async fn a_corrupt_trending_sketch_is_named<F, Fut>(
    store: &dyn AnalyticsStore,
    name: &str,
    corrupt: F,
) where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = format!("analytics-corrupt-{name}");
    let shard = format!("shard-{name}");
    let fence = held_lease(store, &app, &shard).await;
    let snap = AnalyticsSnapshot {
        shard_id: shard.clone(),
        end: seq("42"),
        max_arrival: 7,
        taken_at_ms: 1_000,
        trending: vec![TrendingEntry {
            post_id: "p1".into(),
            score: 2.5,
            error: 0.0,
        }],
        trending_at_ms: 900,
        top_liked: Vec::new(),
        latency: vec![1, 2, 3],
        dedup: DedupRecord {
            max_arrival: 7,
            ids: vec![5],
        },
        horizon_ms: HORIZON_MS,
        shard_finished: false,
    };
    store.save_snapshot(&fence, &snap).await.unwrap();
    let read = store.trending_sketches(&app).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].2, 900);
    corrupt(app.clone(), shard.clone()).await;
    let e = store.trending_sketches(&app).await.unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, PortError::Corrupt { .. })
            && text.contains(&app)
            && text.contains(&shard)
            && text.contains("`at_ms`"),
        "{text}"
    );
}
