//! What the counter's tests share: a one-shard embedded store whose lease a worker holds.

use tally_core::ports::{Fence, LeaseStore, Stream};
use tally_embedded::Embedded;

/// Leases for the counter on `store`'s shards, and `shard`'s taken by worker `w1`.
pub async fn held_by_w1(store: &Embedded, shard: &str) -> Fence {
    let shards = store.list_shards().await.unwrap();
    store.ensure_leases("counter", &shards).await.unwrap();
    store
        .take_lease("counter", shard, 0, "w1", i64::MAX / 2)
        .await
        .unwrap()
        .unwrap()
}
