//! What differs between counting likers and counting events, chosen once when a counter is
//! built ([`crate::Counter::open`], from `counter.count`): how a window being built folds, the
//! settings recorded with it, what it writes before its counts, what a given-up window still
//! counts, what the store is claimed with, and whether a board shows its open windows. The rest
//! of the counter asks the [`Counting`] it holds and never which mode it is in; one module per
//! mode ([`events`], [`likers`]).

use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::ConsumerError;
use tally_core::edge::CountMode;
use tally_core::ports::{Applied, CounterStore, Decided, Pending, WindowRef};
use tally_core::window::{ClosedWindow, WindowBuilder};

use crate::board::Board;
use crate::claim::ClaimError;
use crate::writes::ShardWrites;
use crate::CounterConfig;

pub(crate) mod events;
pub(crate) mod likers;

/// One way of counting, chosen once per counter.
#[async_trait]
pub(crate) trait Counting: Send + Sync + std::fmt::Debug {
    /// Its name in settings and in the store.
    fn mode(&self) -> CountMode;
    /// What the store is claimed with beyond its mode (likers: the clock skew), once it holds
    /// this mode.
    async fn claimed(&self, store: &dyn CounterStore) -> Result<(), ClaimError>;
    /// A window being built, set to fold as this counting does (`pending`: it is the rebuild of
    /// that pending window, whose recorded settings it keeps).
    fn fold(&self, w: WindowBuilder, pending: Option<&Pending>) -> WindowBuilder;
    /// The settings that decide a window's effect, recorded with its pending end.
    fn decided(&self, horizon_ms: i64, pending: Option<&Pending>) -> Decided;
    /// The most records a window may hold, given the shard's share of its worker's
    /// ([`crate::CounterConfig::window_share`]).
    fn window_records(&self, share: usize) -> usize;
    /// Whether a worker showing its windows on `board` shows the open ones.
    fn shows_open(&self, board: &Board) -> bool;
    /// What a closed window writes before its counts; the window with the counts to write.
    async fn write(
        &self,
        shard: &ShardWrites,
        w: Arc<ClosedWindow>,
        at: WindowRef<'_>,
        replaying: bool,
        spent: &mut Applied,
    ) -> Result<Arc<ClosedWindow>, ConsumerError>;
    /// A pending window given up (its records are gone): counts what it had decided that can
    /// still be known, and says, for the gap's record, what became of its records.
    async fn give_up(
        &self,
        shard: &ShardWrites,
        pending: &Pending,
    ) -> Result<String, ConsumerError>;
}

/// The counting `cfg.count` names.
pub(crate) fn chosen(cfg: &CounterConfig) -> Arc<dyn Counting> {
    match cfg.count {
        CountMode::Events => Arc::new(events::Events),
        CountMode::Likers => Arc::new(likers::Likers {
            skew_ms: tally_core::config::millis(cfg.max_clock_skew) as i64,
        }),
    }
}

/// Claims `store` for `counting`'s mode (the first claim wins; a store claimed otherwise is
/// refused), then what that counting records with it (likers: the clock skew, which `tally
/// verify` recounts with).
pub(crate) async fn claim(
    store: &dyn CounterStore,
    counting: &dyn Counting,
) -> Result<(), ClaimError> {
    let wanted = counting.mode();
    match store.count_mode(Some(wanted)).await? {
        Some(stored) if stored != wanted => Err(ClaimError::Mismatch { stored, wanted }),
        _ => counting.claimed(store).await,
    }
}
