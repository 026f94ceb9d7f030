//! Counting events: a post's count is its distinct like events less its unlike events. A window
//! folds per-post deltas (with the duplicate filter) and writes nothing but them.

use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::ConsumerError;
use tally_core::edge::CountMode;
use tally_core::ports::{Applied, CounterStore, Decided, Pending, WindowRef};
use tally_core::window::{ClosedWindow, WindowBuilder};

use super::Counting;
use crate::board::Board;
use crate::claim::ClaimError;
use crate::writes::ShardWrites;

/// Counting events.
#[derive(Debug)]
pub(crate) struct Events;

#[async_trait]
impl Counting for Events {
    fn mode(&self) -> CountMode {
        CountMode::Events
    }

    async fn claimed(&self, _store: &dyn CounterStore) -> Result<(), ClaimError> {
        Ok(())
    }

    fn fold(&self, w: WindowBuilder, _pending: Option<&Pending>) -> WindowBuilder {
        w
    }

    fn decided(&self, horizon_ms: i64, _pending: Option<&Pending>) -> Decided {
        Decided::from(horizon_ms)
    }

    /// The share, up to the dedup record's bound: the window's first-seen ids are one store item
    /// (`tally_core::window::MAX_WINDOW_RECORDS`).
    fn window_records(&self, share: usize) -> usize {
        share.min(tally_core::window::MAX_WINDOW_RECORDS)
    }

    /// An open window's deltas are known as it folds: any board shows them.
    fn shows_open(&self, _board: &Board) -> bool {
        true
    }

    async fn write(
        &self,
        _shard: &ShardWrites,
        w: Arc<ClosedWindow>,
        _at: WindowRef<'_>,
        _replaying: bool,
        _spent: &mut Applied,
    ) -> Result<Arc<ClosedWindow>, ConsumerError> {
        Ok(w)
    }

    /// Its writes may have begun: what it wrote stays, nothing tells which posts it reached.
    async fn give_up(
        &self,
        _shard: &ShardWrites,
        _pending: &Pending,
    ) -> Result<String, ConsumerError> {
        Ok(" (its writes had begun, so its likes may be partly counted)".to_owned())
    }
}
