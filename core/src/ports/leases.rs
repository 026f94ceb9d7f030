//! Leases, checkpoints and the fleet: the rows each consumer application keeps per shard (a
//! window pending, what the shard spent, the holder's progress) and per worker.

use async_trait::async_trait;

use super::{PortResult, ShardInfo};
use crate::cost::Units;
use crate::dead_letter::DeadLetter;
use crate::lease::Lease;
use crate::seq::{Position, SeqNo};

// Named by `Renewal`'s doc only.
#[cfg(doc)]
use super::WindowWriter;

/// A checkpoint's window in progress: its end is recorded in the lease row before any of its
/// writes, which fixes the window (the records after the checkpoint up to `end`), so whoever
/// applies it builds the same deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The window's last record (or user record of an aggregate): its checkpoint once applied.
    pub end: Position,
    /// The Kinesis record the window's first user record is in: a rebuild that does not meet it
    /// first has lost the window's head to the stream's retention, and gives the window up on
    /// record instead of applying what is left as if it were whole.
    pub first: SeqNo,
    /// The dedup horizon its duplicate decisions were made with (ms), so that a rebuild after a
    /// settings change decides the same.
    pub horizon_ms: i64,
}

/// The settings that decide a window's effect, recorded with its pending end ([`Pending`]) so
/// that a rebuild — by any worker, under any settings — decides the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The dedup horizon (ms).
    pub horizon_ms: i64,
}

impl From<i64> for Decided {
    /// A window decided with this dedup horizon.
    fn from(horizon_ms: i64) -> Decided {
        Decided { horizon_ms }
    }
}

/// What a shard's applied windows cost and counted so far, and how far in event time they reach,
/// kept in its lease row (each window adds its own with its checkpoint, in the same write), so
/// that any reader can say what a like costs and how fresh a count is without the workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardTally {
    /// Write units by purpose (the lease takes and renewals excepted: those are the workers').
    pub units: Units,
    /// Events counted (first seen).
    pub counted: u64,
    /// The latest `created_at` of an event counted (ms; 0: none yet).
    pub latest_created_ms: i64,
}

impl ShardTally {
    /// Adds a window's tally (costs and counts add up; the latest creation time is the later).
    pub fn merge(&mut self, o: &ShardTally) {
        self.units.merge(&o.units);
        self.counted += o.counted;
        self.latest_created_ms = self.latest_created_ms.max(o.latest_created_ms);
    }
}

/// How far behind its shard's tip the lease holder's reader was, as its last renewal reported
/// it: lag that means what it says — 0 for a shard read to its tip, however long ago its last
/// record arrived (that is a different figure: the time since the last record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadProgress {
    /// When it was reported (ms since the epoch).
    pub at_ms: i64,
    /// How far behind the tip the reader was then (ms; the stream's iterator age, 0 at the tip).
    pub behind_ms: i64,
}

/// What a write of a held lease's row extends it with, besides its own change: a new expiry, the
/// holder's read progress and where it serves its open windows — what [`LeaseStore::renew_lease`]
/// writes, carried by [`WindowWriter::finish_window`] too, so that a window's checkpoint is also a
/// renewal (the same row, under the same fence, for no extra write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The lease's new expiry (ms since the epoch).
    pub expires_ms: i64,
    /// How far behind its shard's tip the holder reads (`None` keeps what was reported).
    pub progress: Option<ReadProgress>,
    /// Where the holder serves its open windows (`None` keeps what was reported).
    pub addr: Option<String>,
}

/// What a store knows of one shard of one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardState {
    /// The lease row: holder, epoch, checkpoint.
    pub lease: Lease,
    /// The window being applied, if one is (its end recorded, its checkpoint not yet moved).
    pub pending: Option<Pending>,
    /// The counter's cumulative spending on the shard (zero for analytics).
    pub spent: ShardTally,
    /// The holder's reader, as last reported with a renewal (`None`: never reported).
    pub progress: Option<ReadProgress>,
    /// Where the holder serves its open windows (`host:port` of its `--http`), as its renewals
    /// report it; cleared when the lease changes hands (`None`: not reported by this holder).
    pub holder_addr: Option<String>,
}

/// Proof of lease ownership that every fenced write carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The application whose lease it is.
    pub app: String,
    /// The shard.
    pub shard_id: String,
    /// The worker holding it.
    pub owner: String,
    /// Bumped at every take: a stale holder's writes fail on it.
    pub epoch: u64,
}

/// Leases and checkpoints as a reader sees them: nothing here writes (the read side's view).
#[async_trait]
pub trait LeaseReader: Send + Sync {
    /// Every shard's lease, by shard id.
    async fn list_leases(&self, app: &str) -> PortResult<Vec<Lease>> {
        Ok(self
            .list_states(app)
            .await?
            .into_iter()
            .map(|s| s.lease)
            .collect())
    }
    /// Every shard's whole state, in one listing, by shard id (what the read side shows: one
    /// store call per refresh, whatever the shard count).
    async fn list_states(&self, app: &str) -> PortResult<Vec<ShardState>>;
    /// `list_states` as a worker plans from it: it may be a moment old (on DynamoDB an
    /// eventually consistent Query, at half the read units). Safe because a plan only proposes:
    /// every take, ask, handover and clean-up it leads to is a conditional write on the row as
    /// it stands, and a shard task reads its checkpoint strongly (`shard_state`) before it reads.
    async fn list_states_to_plan(&self, app: &str) -> PortResult<Vec<ShardState>> {
        self.list_states(app).await
    }
    /// One shard's row and what it records (a missing row reads as a fresh one).
    async fn shard_state(&self, app: &str, shard_id: &str) -> PortResult<ShardState>;
    /// The members of `app`'s fleet alive at `now_ms` (their heartbeat not expired), by id, with
    /// what each asks for.
    async fn fleet(&self, app: &str, now_ms: i64) -> PortResult<Vec<Member>>;
}

/// Leases and checkpoints, one row per application and shard: what the workers write.
#[async_trait]
pub trait LeaseStore: LeaseReader {
    /// Creates the rows of shards that have none (idempotent).
    async fn ensure_leases(&self, app: &str, shards: &[ShardInfo]) -> PortResult<()>;
    /// Takes a lease if its epoch is still `expected_epoch`; `None` if someone else moved first.
    async fn take_lease(
        &self,
        app: &str,
        shard_id: &str,
        expected_epoch: u64,
        owner: &str,
        expires_ms: i64,
    ) -> PortResult<Option<Fence>>;
    /// Extends a held lease, with how far behind its shard's tip the holder reads and where it
    /// serves its open windows (in the same write: it costs nothing more; `None` keeps what was
    /// reported); `Fenced` if it was lost. Taking a lease clears the address. Answers who has
    /// asked for the lease since it was taken (`ask_handoff`), read in the same write; a request
    /// that is not what tally writes is `Corrupt`, and the renewal may have landed before it
    /// was read (the holder stops either way; the next take clears the request).
    async fn renew_lease(
        &self,
        fence: &Fence,
        expires_ms: i64,
        progress: Option<ReadProgress>,
        addr: Option<&str>,
    ) -> PortResult<Option<String>>;
    /// Asks the holder of a lease — `held` names the row, its holder and its epoch — to hand it
    /// over to `to`: the holder learns of it at its next renewal, flushes and checkpoints, and
    /// calls `hand_over`. Nothing else changes: the holder's writes stay valid. `false` if the
    /// lease has moved (or finished) since it was listed.
    async fn ask_handoff(&self, held: &Fence, to: &str) -> PortResult<bool>;
    /// Gives a held lease to `to` in one fenced write: owner `to`, the epoch bumped (fencing this
    /// holder from then on), expiring at `expires_ms`, the request cleared — so no other worker
    /// can take it between this holder's release and `to`'s take. `Fenced` if it was lost.
    async fn hand_over(&self, fence: &Fence, to: &str, expires_ms: i64) -> PortResult<()>;
    /// Gives a lease up so that another worker can take it at once.
    async fn release_lease(&self, fence: &Fence) -> PortResult<()>;
    /// Removes the row of a finished shard.
    async fn delete_lease(&self, app: &str, shard_id: &str) -> PortResult<()>;
    /// Marks a held shard finished (read to its end, nothing left to apply); `Fenced` if the lease
    /// was lost or a window is still pending.
    async fn mark_finished(&self, fence: &Fence) -> PortResult<()>;
    /// Gives up records the stream no longer has, on record (either application: each has its
    /// own checkpoints, so each its own gaps); `Fenced` if a condition failed.
    async fn commit_gap(&self, gap: GapCommit<'_>) -> PortResult<()>;
    /// Says `worker` is a live member of `app`'s fleet until `expires_ms`, asking for `asks`:
    /// one small row per worker, apart from the lease rows (no listing of leases shows it), so
    /// that workers holding no lease yet count in everyone's fair share, and a holder hears of a
    /// request for its lease at its next fleet listing (every poll) rather than its next renewal.
    async fn heartbeat(
        &self,
        app: &str,
        worker: &str,
        expires_ms: i64,
        asks: &[Ask],
    ) -> PortResult<()>;
    /// Takes `worker` out of `app`'s fleet at once (a clean stop).
    async fn leave_fleet(&self, app: &str, worker: &str) -> PortResult<()>;
}

/// A worker's request for a lease it was short of (`LeaseStore::ask_handoff` records it on the
/// lease row too, fenced): the lease, its holder, and the epoch it was asked at — a holder hands
/// over only the lease it still holds at that epoch.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ask {
    /// The shard whose lease is asked for.
    pub shard_id: String,
    /// The worker that holds it.
    pub holder: String,
    /// The lease's epoch when asked.
    pub epoch: u64,
}

/// A live member of an application's fleet, and the leases it asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The worker's id.
    pub worker: String,
    /// The leases it asks other workers for.
    pub asks: Vec<Ask>,
}

/// The asks of a fleet row, as the stores keep them (JSON; `None` for none).
pub fn asks_to_text(asks: &[Ask]) -> Option<String> {
    (!asks.is_empty()).then(|| serde_json::to_string(asks).unwrap_or_default())
}

/// Where an application's lease tombstones are kept: under their own application name in the
/// lease table, which no listing of the application's leases reads. One per cleaned-up shard,
/// never removed: a deleted row is never created again (ARCHITECTURE.md, "Leases and the fleet").
pub fn tombstones_app(app: &str) -> String {
    format!("{app}#gone")
}

/// Where an application's fleet rows are kept: under their own application name in the lease
/// table, which no listing of the application's leases reads.
pub fn fleet_app(app: &str) -> String {
    format!("{app}#fleet")
}

/// Records that can no longer be applied — the stream's retention trimmed them first — written
/// as a dead letter ([`DeadLetter::gap`], `reason` starting with `gap:`) in one atomic write with
/// the checkpoint row: the shard moves on, and the loss is on record instead of a shard stalled
/// for ever.
#[derive(Clone, Debug)]
pub struct GapCommit<'a> {
    /// The lease the write is fenced by.
    pub fence: &'a Fence,
    /// The stored checkpoint (a condition).
    pub start_after: Option<&'a Position>,
    /// The pending window given up, if any (a condition: its end must be the stored one).
    pub pending_end: Option<&'a Position>,
    /// The new checkpoint: the given-up window's end (`None`: unchanged).
    pub through: Option<&'a Position>,
    /// Whether the shard is finished with it (it is gone from the stream).
    pub finished: bool,
    /// The record of the gap.
    pub gap: &'a DeadLetter,
}
