//! Counting likers, the first stage: a window keeps each touched edge's latest event and writes
//! it to the edge, a last-writer-wins register (`tally_core::edge::apply`); the store logs each
//! change it makes, and the second stage counts the log ([`super::changes`]). Nothing is decided
//! here that a second write of the same edges could decide otherwise: a window applied again —
//! after a crash, by a stale owner, or re-read after a lease moved — writes nothing new.

use async_trait::async_trait;
use tally_consumer::ConsumerError;
use tally_core::edge::{CountMode, EdgeEvent};
use tally_core::ports::{Applied, PortResult};
use tally_core::window::{ClosedWindow, WindowBuilder};

use super::Counting;
use crate::writes::{window_err, Resend, ShardWrites};

/// Counting likers: the edges written.
#[derive(Debug)]
pub(crate) struct Edges;

#[async_trait]
impl Counting for Edges {
    fn mode(&self) -> CountMode {
        CountMode::Likers
    }

    fn fold(&self, w: WindowBuilder) -> WindowBuilder {
        w.likers()
    }

    /// Its windows hold edges, no deltas: the second stage's show what the edges changed.
    fn shows_open(&self) -> bool {
        false
    }

    /// Writes the window's edges, batch by batch, sending again only what failed for a passing
    /// reason, and makes them durable before the window's checkpoint can pass their records.
    async fn write(
        &self,
        shard: &ShardWrites,
        w: &ClosedWindow,
        spent: &mut Applied,
    ) -> Result<(), ConsumerError> {
        write_edges(shard, &w.edges, spent)
            .await
            .map_err(|e| window_err(w, &shard.fence.shard_id, e))?;
        shard
            .store
            .edges_durable()
            .await
            .map_err(|e| window_err(w, &shard.fence.shard_id, e))
    }

    fn given_up(&self) -> &'static str {
        "; the edges it had written stay written (and are counted from their change log), its \
         other records are lost"
    }
}

/// Writes edges, batch by batch, sending again only what failed for a passing reason.
async fn write_edges(
    shard: &ShardWrites,
    edges: &[EdgeEvent],
    spent: &mut Applied,
) -> PortResult<()> {
    for batch in edges.chunks(shard.cfg.batch()) {
        let mut sending = Resend::new(&shard.ctx.backoff, "write a window's edges", batch);
        loop {
            let sent = shard.store.write_edges(sending.todo()).await.map(|done| {
                spent.merge(&done.applied);
                shard
                    .metrics
                    .edges_changed
                    .fetch_add(done.changed, std::sync::atomic::Ordering::Relaxed);
                (done.retry, done.error)
            });
            if sending.settle(sent).await? {
                break;
            }
        }
        shard.failpoint("edge writes");
    }
    Ok(())
}
