//! The counter's writes: its window protocol, the likers' edges, the store's own records, the
//! whole counter store, and the baselines tally is measured against.

use async_trait::async_trait;

use super::{
    DeadLetterReader, Decided, DedupStore, Fence, LeaseStore, PortError, PortResult, Renewal,
    ShardTally, StoreReader, Stream,
};
use crate::buckets::PostDelta;
use crate::cost::{Purpose, Units};
use crate::dead_letter::DeadLetter;
use crate::dedup::DedupRecord;
use crate::edge::{EdgeEvent, MetaItem};
use crate::rows::field::Row;
use crate::seq::{Position, SeqNo};

/// A window's identity in its writes: whose it is, and its end (each item's marker).
#[derive(Clone, Copy, Debug)]
pub struct WindowRef<'a> {
    /// The application writing.
    pub app: &'a str,
    /// The shard the window is of.
    pub shard_id: &'a str,
    /// The window's last record: the marker its writes carry.
    pub end: &'a Position,
}

/// What a window writes besides its posts' items.
#[derive(Clone, Copy, Debug)]
pub struct WindowRest<'a> {
    /// The window's malformed records, each written as a dead letter.
    pub dead_letters: &'a [DeadLetter],
    /// The shard's global-total delta.
    pub total_delta: i64,
    /// The window's first-seen ids (not written when empty).
    pub dedup: &'a DedupRecord,
    /// The dedup horizon, for the record's expiry.
    pub horizon_ms: i64,
}

/// What a window's writes did, and what they cost by DynamoDB's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Writes that took effect.
    pub written: u64,
    /// Writes refused because their effect was already there (charged as failed conditions).
    pub refused: u64,
    /// Items read to plan a write (a live item whose content a roll-over needs).
    pub reads: u64,
    /// Write and read units, by purpose.
    pub units: Units,
}

impl Applied {
    /// One write took effect, costing `units` write units for `purpose`.
    pub fn wrote(&mut self, purpose: Purpose, units: u64) {
        self.written += 1;
        self.units.add(purpose, units);
    }

    /// One write was refused by its condition (its effect was there already): DynamoDB charges
    /// the units it would have written, as failed conditions.
    pub fn was_refused(&mut self, units: u64) {
        self.refused += 1;
        self.units.add(Purpose::FailedConditions, units);
    }

    /// Adds what another part of the window's writes did.
    pub fn merge(&mut self, o: &Applied) {
        self.written += o.written;
        self.refused += o.refused;
        self.reads += o.reads;
        self.units.merge(&o.units);
    }
}

/// What one [`WindowWriter::apply_posts`] call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostsApplied {
    /// The writes of the posts that are done (written, or refused as applied already).
    pub applied: Applied,
    /// Indexes (into the posts passed) of those not done for a retryable reason, in order.
    pub retry: Vec<usize>,
    /// The last of their errors, for the retry's pause and its log.
    pub error: Option<PortError>,
}

/// What one [`EdgeWriter::write_edges`] call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgesWritten {
    /// The writes of the edges that are done (written, or refused).
    pub applied: Applied,
    /// How many of the done edges changed (each logged once); the others were refused: a copy,
    /// or an older event than the stored one.
    pub changed: u64,
    /// Indexes (into the edges passed) of those not done for a retryable reason, in order.
    pub retry: Vec<usize>,
    /// The last of their errors, for the retry's pause and its log.
    pub error: Option<PortError>,
}

/// [`WindowWriter::posts_per_call`] unless a store says otherwise: DynamoDB's (1,000 items, a few
/// dozen requests in flight at a time).
pub const DEFAULT_POSTS_PER_CALL: usize = 1_000;

/// The counter's window protocol: windows applied exactly once (what the counter alone holds).
///
/// A window is applied in four steps: `begin_window` records its end as pending in the lease row
/// (fenced); `apply_posts` and `apply_rest` write its items, each a plain write conditioned on the
/// item's marker (refused: already applied), so they may run any number of times, by anyone;
/// `finish_window` moves the checkpoint to the end (fenced, and only if that window is pending).
/// See [`crate::summary`] for why this is exact without a transaction.
#[async_trait]
pub trait WindowWriter: LeaseStore + DedupStore {
    /// How many posts' items, or a window's edges, one write call takes when
    /// `counter.posts_per_batch` does not say: what a call costs on this store decides it.
    /// Each call is whole or failed, and a window's calls may be cut anywhere: the protocol
    /// above does not depend on it.
    fn posts_per_call(&self) -> usize {
        DEFAULT_POSTS_PER_CALL
    }
    /// Records `end` as the pending window after `start_after` (which must be the checkpoint,
    /// with no window pending), whose first user record is in the record `first`, with the
    /// settings that decide it; `Fenced` if a condition failed.
    async fn begin_window(
        &self,
        fence: &Fence,
        start_after: Option<&Position>,
        first: &SeqNo,
        end: &Position,
        decided: Decided,
    ) -> PortResult<()>;
    /// Writes the posts' deltas to their summary items, each once. A post whose writes failed
    /// for a reason a retry may mend is named in [`PostsApplied::retry`] while the others are
    /// done, so that the caller sends only it again (a store that writes a batch atomically
    /// fails the call instead); a failure no retry mends fails the call.
    async fn apply_posts(
        &self,
        w: WindowRef<'_>,
        posts: &[(String, PostDelta)],
    ) -> PortResult<PostsApplied>;
    /// Writes the window's dead letters, its global-total delta and its dedup record, each once.
    async fn apply_rest(&self, w: WindowRef<'_>, rest: WindowRest<'_>) -> PortResult<Applied>;
    /// Moves the checkpoint to the pending window's end, with the shard's arrival clock, and adds
    /// what the window spent and counted to the shard's; `Fenced` if the lease was lost or that
    /// window is not the pending one. With a `renewal` the same write renews the lease, as
    /// [`LeaseStore::renew_lease`] would, and answers who has asked for it (else `None`; a
    /// corrupt request is `Corrupt` as there, and the checkpoint may have moved before it was
    /// read).
    async fn finish_window(
        &self,
        fence: &Fence,
        end: &Position,
        max_arrival: i64,
        shard_finished: bool,
        spent: &ShardTally,
        renewal: Option<&Renewal>,
    ) -> PortResult<Option<String>>;
}

/// The likers counter's first stage: each edge a last-writer-wins register, and each change it
/// makes logged by the store, once, in the edge's order.
///
/// A write of an edge takes effect only if the edge is absent or its stored event orders before
/// the one written (by `created_at`, then event id: [`crate::edge::apply`] is the reference), so
/// any number of writers, in any order, any number of times, leave each edge at its latest
/// event. The store logs each change it makes — in the same write (DynamoDB Streams on the
/// edges table; SQLite: a change row in the edge write's transaction) — with the like before and
/// after it ([`crate::edge::EdgeChange`]), and a refused write logs nothing. The counter's second
/// stage counts that log ([`EdgeWriter::change_log`]) through the window protocol.
#[async_trait]
pub trait EdgeWriter: Send + Sync {
    /// Writes the edges (in the store's key order: post, then user), each by
    /// [`crate::edge::apply`], and logs each change. An edge whose write failed for a reason a
    /// retry may mend is named in [`EdgesWritten::retry`] while the others are done; a failure
    /// no retry mends fails the call. Written again, an edge changes nothing: a stage that
    /// re-reads its records after a crash writes them again, harmlessly.
    async fn write_edges(&self, edges: &[EdgeEvent]) -> PortResult<EdgesWritten>;
    /// Makes the edges written so far durable, where the store defers it (the embedded store's
    /// edge files sync when asked): called before the first stage's checkpoint moves past them.
    async fn edges_durable(&self) -> PortResult<()> {
        Ok(())
    }
    /// The edge store's change log, as a stream of [`crate::edge::EdgeChange`] records (each
    /// record's data is one change's encoding): what the second stage reads.
    fn change_log(&self) -> PortResult<std::sync::Arc<dyn Stream>>;
}

/// What a store records about itself — its count mode, the one stream it counts, a rebuild into
/// it under way — as `#meta` items beside its counts ([`crate::edge::MODE_PK`]). A store moves
/// the items; what is read and claimed on them is written once, for both stores
/// (`tally_core::meta::Claims`).
#[async_trait]
pub trait StoreMeta: Send + Sync {
    /// The `#meta` item as stored (`None`: not there).
    async fn meta_item(&self, item: MetaItem) -> PortResult<Option<Row>>;
    /// Writes `item` holding `value` in its field ([`MetaItem::field`]), whole; with
    /// `if_absent`, only when there is none (one conditional write). Answers whether it wrote.
    async fn put_meta_item(&self, item: MetaItem, value: &str, if_absent: bool)
        -> PortResult<bool>;
    /// Deletes the rebuild marker ([`MetaItem::Rebuilding`]; none there: nothing to do): the one
    /// `#meta` item ever deleted, so that a mode or a stream, once claimed, stays.
    async fn delete_rebuilding(&self) -> PortResult<()>;
    /// Whether the store holds global totals: it has counted.
    async fn has_counted(&self) -> PortResult<bool>;
    /// The store as messages name it (its file; its counts table).
    fn store_name(&self) -> String;
    /// The other regions the store's tables are replicated to (a DynamoDB global table's
    /// replicas; none for a table of one region, or the embedded store). Never writes.
    async fn replica_regions(&self) -> PortResult<Vec<String>>;
}

/// The counter's store: its window protocol, the edges, the reads, the dead letters and the
/// store's own records — every capability, which only the counter holds. Any type with all five
/// is one.
pub trait CounterStore:
    WindowWriter + EdgeWriter + StoreReader + DeadLetterReader + StoreMeta
{
}

impl<T: WindowWriter + EdgeWriter + StoreReader + DeadLetterReader + StoreMeta + ?Sized>
    CounterStore for T
{
}
