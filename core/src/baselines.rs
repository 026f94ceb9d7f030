//! Benchmark scaffolding, not a port the applications use: the patterns tally is measured
//! against (`tally demo --baselines`, the benches), which each store implements under keys of
//! its own (`embedded/src/stores/baselines.rs`, `aws/src/dynamo/baselines.rs`). Nothing that
//! counts, reads or serves takes it.

use async_trait::async_trait;

use crate::ports::PortResult;

/// The two ways of counting likes that tally is measured against (`tally demo --baselines`), on
/// the same backend: one `UpdateItem` per like (cheap, not exactly-once: a retry counts twice),
/// and one transaction per like with an idempotency item (exact, at 4 write units a like). For
/// benchmarks only; `run` keeps their items apart from everything else.
#[async_trait]
pub trait BaselineWriters: Send + Sync {
    /// Adds `delta` to the post's total with one plain update.
    async fn update_per_like(&self, run: &str, post_id: &str, delta: i64) -> PortResult<()>;
    /// Writes the event's idempotency item (condition: absent) and adds `delta` to the post's
    /// total, atomically; `Ok(false)` when the event was applied before.
    async fn transaction_per_like(
        &self,
        run: &str,
        event_id: &str,
        post_id: &str,
        delta: i64,
    ) -> PortResult<bool>;
    /// The likers pattern a likers count replaces: a like puts the (post, user) edge item if it
    /// is absent and adds 1 to the post's total, an unlike deletes it if present and adds −1, each
    /// one transaction; `Ok(false)` when the condition refused it (liked already, or not liked).
    /// Exact only when a user's actions arrive in order.
    async fn edge_per_like(
        &self,
        run: &str,
        post_id: &str,
        user_id: &str,
        like: bool,
    ) -> PortResult<bool>;
    /// The post's total under `run`.
    async fn baseline_count(&self, run: &str, post_id: &str) -> PortResult<i64>;
}
