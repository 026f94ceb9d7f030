#![warn(missing_docs)]
//! One conformance suite per port: the same checks run against every backend (the embedded one
//! in its crate's tests, the AWS one against the local API peers). A backend is done when it
//! passes them.
//!
//! Each check takes the port and a name unique to the calling test (used for app and shard
//! names), so checks can share tables and run in parallel.
#![allow(clippy::unwrap_used)]

use tally_core::ports::{LeaseStore, ShardInfo};
use tally_core::Position;

/// The dedup horizon every window of these checks is recorded with: the default one.
pub(crate) const HORIZON_MS: i64 = tally_core::dedup::DEFAULT_HORIZON.as_millis() as i64;

pub(crate) fn seq(s: &str) -> Position {
    Position::parse(s).unwrap()
}

/// Creates a fresh shard's lease row and takes it as worker `w1`.
pub async fn held_lease(
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

mod analytics;
mod counter;
mod edges;
mod leases;
mod stream;

pub use analytics::{a_corrupt_trending_sketch_is_named, analytics_snapshots_are_fenced};
pub use counter::{
    a_checkpoint_renews_the_lease, a_corrupt_dead_letter_is_named,
    a_paused_stale_writer_counts_nothing_twice, a_store_is_counted_from_one_stream,
    at as window_at, corrupt_summary_and_dedup_are_named, counter_commits_exactly_once,
    dedup_records_expire_by_arrival, gaps_are_recorded_with_the_checkpoint,
    the_largest_window_fits_the_store, Corruption,
};
pub use edges::{
    a_corrupt_edge_is_named, a_corrupt_meta_row_is_named, a_fresh_store_takes_the_first_claim,
    a_rebuild_under_way_is_recorded, edges_are_registers_and_each_change_is_logged_once, like,
    likers_come_most_recent_first, logged_changes, the_count_mode_is_claimed_once,
};
pub use leases::{
    a_corrupt_fleet_row_is_named, a_corrupt_handoff_ask_is_named, a_corrupt_lease_row_is_named,
    fleet_rows_are_apart_from_leases, leases_are_fenced, leases_are_handed_over_on_request,
    CorruptLease,
};
pub use stream::stream_put_and_read;

/// The suite as tests, one per contract, for a backend: `fresh(name, shards)` is an `async fn`
/// giving a fresh backend of `shards` shards (`name` for its resources), and `stream(&backend)`
/// and `stores(&backend)` borrow its stream and its stores. Each adapter's test file instantiates
/// it once, so "an adapter is done when it passes the suite" cannot leave a contract out; tests
/// of one backend alone stay beside it in that file.
#[macro_export]
macro_rules! suite {
    (backend: $name:literal, fresh: $fresh:path, stream: $stream:path, stores: $stores:path $(,)?) => {
        #[tokio::test]
        async fn stream() {
            let b = $fresh("stream", 3).await;
            $crate::stream_put_and_read($stream(&b)).await;
        }

        #[tokio::test]
        async fn leases() {
            let b = $fresh("leases", 1).await;
            $crate::leases_are_fenced($stores(&b), $name).await;
            $crate::fleet_rows_are_apart_from_leases($stores(&b), $name).await;
            $crate::leases_are_handed_over_on_request($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn counter() {
            let b = $fresh("counter", 1).await;
            $crate::counter_commits_exactly_once($stores(&b), $name).await;
            $crate::a_checkpoint_renews_the_lease($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn one_stream() {
            let b = $fresh("one-stream", 1).await;
            $crate::a_store_is_counted_from_one_stream($stores(&b)).await;
        }

        #[tokio::test]
        async fn largest_window() {
            let b = $fresh("largest", 1).await;
            $crate::the_largest_window_fits_the_store($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn analytics() {
            let b = $fresh("analytics", 1).await;
            $crate::analytics_snapshots_are_fenced($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn dedup_expiry() {
            let b = $fresh("dedupexp", 1).await;
            $crate::dedup_records_expire_by_arrival($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn gaps() {
            let b = $fresh("gaps", 1).await;
            $crate::gaps_are_recorded_with_the_checkpoint($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn likers_edges() {
            let b = $fresh("edges", 1).await;
            $crate::a_fresh_store_takes_the_first_claim($stores(&b)).await;
            $crate::edges_are_registers_and_each_change_is_logged_once($stores(&b), $name).await;
            $crate::a_rebuild_under_way_is_recorded($stores(&b)).await;
        }

        #[tokio::test]
        async fn recent_likers() {
            let b = $fresh("recent", 1).await;
            $crate::likers_come_most_recent_first($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn count_mode() {
            let b = $fresh("mode", 1).await;
            $crate::the_count_mode_is_claimed_once($stores(&b), $name).await;
        }

        #[tokio::test]
        async fn stale_writer() {
            let b = $fresh("stale", 1).await;
            $crate::a_paused_stale_writer_counts_nothing_twice($stores(&b), $name).await;
        }
    };
}
