//! What differs between the counter's three ways of counting, chosen once when a counter is
//! built ([`crate::Counter::open`], [`crate::Counter::open_change_log`]): how a window folds,
//! what it writes before its counts, what is done once it is applied, what a given-up window
//! leaves, and whether a board shows its open windows. The rest of the counter asks the
//! [`Counting`] it holds and never which one it is; one module each:
//! - [`events`]: counting events — each event once, into its post's deltas;
//! - [`edges`]: counting likers, the first stage — each edge's latest event written to the edge
//!   (the store logs each change), nothing counted;
//! - [`changes`]: counting likers, the second stage — the edges' change log counted.

use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::ConsumerError;
use tally_core::edge::CountMode;
use tally_core::meta::Claims;
use tally_core::ports::{Applied, CounterStore, Stream};
use tally_core::window::{ClosedWindow, WindowBuilder};
use tally_core::Position;

use crate::claim::ClaimError;
use crate::writes::ShardWrites;
use crate::CounterConfig;

pub(crate) mod changes;
pub(crate) mod edges;
pub(crate) mod events;

/// One way of counting, chosen once per counter.
#[async_trait]
pub(crate) trait Counting: Send + Sync + std::fmt::Debug {
    /// The count mode of the stores it counts.
    fn mode(&self) -> CountMode;
    /// A window being built, set to fold as this counting does.
    fn fold(&self, w: WindowBuilder) -> WindowBuilder;
    /// The most records a window may hold, given the shard's share of its worker's
    /// ([`crate::CounterConfig::window_share`]): the share, where the window keeps no dedup
    /// record and only memory bounds it.
    fn window_records(&self, share: usize) -> usize {
        share
    }
    /// Whether its open windows are worth showing: they hold deltas.
    fn shows_open(&self) -> bool {
        true
    }
    /// What a closed window writes before its counts: nothing, where it writes only them.
    async fn write(
        &self,
        _shard: &ShardWrites,
        _w: &ClosedWindow,
        _spent: &mut Applied,
    ) -> Result<(), ConsumerError> {
        Ok(())
    }
    /// What is done once the window ending at `end` is applied for good (its checkpoint moved).
    async fn applied(&self, _shard_id: &str, _end: &Position) -> Result<(), ConsumerError> {
        Ok(())
    }
    /// What became of a pending window's records when it is given up (its records are gone),
    /// for the gap's record.
    fn given_up(&self) -> &'static str;
}

/// What a counter reads: the stream (counting events, or likers' first stage, by
/// `counter.count`), or a likers store's change log (the second stage).
pub(crate) fn chosen(cfg: &CounterConfig, log: Option<Arc<dyn Stream>>) -> Arc<dyn Counting> {
    match (cfg.count, log) {
        (_, Some(log)) => Arc::new(changes::Changes { log }),
        (CountMode::Events, None) => Arc::new(events::Events),
        (CountMode::Likers, None) => Arc::new(edges::Edges),
    }
}

/// Claims `store` for `counting`'s mode (the first claim wins; a store claimed otherwise is
/// refused), and refuses a store a rebuild is writing into until it is done.
pub(crate) async fn claim(
    store: &dyn CounterStore,
    counting: &dyn Counting,
) -> Result<(), ClaimError> {
    if let Some(from) = store.rebuilding().await? {
        return Err(ClaimError::Rebuilding { from });
    }
    let wanted = counting.mode();
    match store.count_mode(Some(wanted)).await? {
        Some(stored) if stored != wanted => Err(ClaimError::Mismatch { stored, wanted }),
        _ => Ok(()),
    }
}
