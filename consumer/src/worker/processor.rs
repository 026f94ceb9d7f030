//! What an application plugs into the runtime: a processor per held shard.

use async_trait::async_trait;
use tally_core::lease::Lease;
use tally_core::ports::{Fence, ReadBatch, StartPosition};

use super::LeaseKeeper;
use crate::ConsumerError;

/// What one application does with a shard's records.
#[async_trait]
pub trait ShardProcessor: Send {
    /// The lease's keeper, given before `start`: a processor that writes the lease row itself
    /// (the counter's window checkpoint) carries [`LeaseKeeper::renewal`] in that write and tells
    /// it with [`LeaseKeeper::extended`], and the renewal loop renews that much later.
    fn keep_lease(&mut self, _keeper: LeaseKeeper) {}
    /// Loads the shard's stored state after its lease was taken; returns where to read from.
    async fn start(&mut self, lease: &Lease) -> Result<StartPosition, ConsumerError>;
    /// Folds a batch; may apply windows as they fill.
    async fn process(&mut self, batch: &ReadBatch, now_ms: i64) -> Result<(), ConsumerError>;
    /// Gives a time-based window the chance to close.
    async fn tick(&mut self, now_ms: i64) -> Result<(), ConsumerError>;
    /// Applies and checkpoints everything folded so far; `shard_end` marks the shard finished.
    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError>;
    /// Whether the processor still waits for records it knows exist (the rest of a window it
    /// must complete): the shard is then not idle, however empty the reads.
    fn waiting(&self) -> bool {
        false
    }
    /// Whether records read are not applied yet (a window open or pending): a shard is reported
    /// at its tip only once they are.
    fn unapplied(&self) -> bool {
        false
    }
    /// The shard is gone from the stream (its records passed the retention before they were all
    /// processed): put the loss on record and finish the shard, so that its children go on.
    async fn shard_gone(&mut self) -> Result<(), ConsumerError>;
}

/// Makes a processor per shard.
pub trait ProcessorFactory: Send + Sync {
    /// A processor for a shard whose lease was just taken (`fence`: the lease held, which
    /// every write of the processor is fenced by).
    fn create(&self, fence: &Fence) -> Box<dyn ShardProcessor>;
}
