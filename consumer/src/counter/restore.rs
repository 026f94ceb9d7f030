//! The duplicate filter's life in the store for the counter (see `crate::dedup`).

use super::*;

impl CounterShard {
    /// The duplicate filter as it stood at `row`'s checkpoint (`crate::dedup::restore`).
    pub(super) async fn restore_dedup(
        &self,
        fence: &Fence,
        row: &Lease,
        horizon_ms: i64,
    ) -> Result<Dedup, ConsumerError> {
        crate::dedup::restore(self.store.as_ref(), fence, row, horizon_ms).await
    }

    /// Drops this shard's dedup records that the checkpoint's clock has passed by more than the
    /// horizon (`crate::dedup::expire`).
    pub(super) async fn expire_dedup(&self, horizon_ms: i64) {
        let Ok(fence) = self.fence() else { return };
        crate::dedup::expire(
            self.store.as_ref(),
            fence,
            &self.dedup,
            horizon_ms,
            &self.cfg.backoff,
        )
        .await
    }
}
