//! The duplicate filter's life in the store for the counter (see `tally_consumer::dedup`).

use tally_consumer::ConsumerError;
use tally_core::dedup::Dedup;
use tally_core::lease::Lease;
use tally_core::ports::Fence;

use crate::CounterShard;

impl CounterShard {
    /// The duplicate filter as it stood at `row`'s checkpoint (`tally_consumer::dedup::restore`).
    pub(super) async fn restore_dedup(
        &self,
        fence: &Fence,
        row: &Lease,
        horizon_ms: i64,
    ) -> Result<Dedup, ConsumerError> {
        tally_consumer::dedup::restore(self.store.as_ref(), fence, row, horizon_ms).await
    }

    /// Drops this shard's dedup records that the checkpoint's clock has passed by more than the
    /// horizon (`tally_consumer::dedup::expire`).
    pub(super) async fn expire_dedup(&self, horizon_ms: i64) {
        let Ok(fence) = self.fence() else { return };
        tally_consumer::dedup::expire(
            self.store.as_ref(),
            fence,
            &self.dedup,
            horizon_ms,
            &self.ctx.backoff,
        )
        .await
    }
}
