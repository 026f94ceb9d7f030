//! The ports: the narrow async traits through which the apps reach a stream and the stores.
//!
//! Two backends implement them: the embedded one (SQLite, one data dir) and the AWS one
//! (Kinesis and DynamoDB through the official SDK). No SDK or SQL type crosses these traits.

use async_trait::async_trait;

use crate::buckets::PostDelta;
use crate::cost::{Purpose, Units};
use crate::dead_letter::DeadLetter;
use crate::dedup::DedupRecord;
use crate::edge::{CountMode, EdgeEvent};
use crate::lease::Lease;
use crate::seq::{Position, SeqNo};

/// Every error a port returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// The write's lease condition failed: another worker owns the shard, or the progress recorded
    /// with the checkpoint is not what the writer expected.
    #[error("lease or checkpoint condition failed for {app}/{shard_id}")]
    Fenced {
        /// The application whose row refused the write.
        app: String,
        /// The shard whose row refused it.
        shard_id: String,
    },
    /// The backend asked us to slow down.
    #[error("throttled: {0}")]
    Throttled(String),
    /// A concurrent write touched the same item (DynamoDB TransactionConflict, SQLite busy).
    #[error("write conflict: {0}")]
    Conflict(String),
    /// The call did not complete in time; it may or may not have taken effect.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A shard iterator expired; the reader re-opens after its last delivered record.
    #[error("shard iterator expired: {0}")]
    IteratorExpired(String),
    /// The stream, a table or a shard does not exist.
    #[error("{what} does not exist{hint}")]
    NotFound {
        /// What is missing, named (`stream likes`, `table tally-counts`).
        what: String,
        /// What to do about it, with its leading punctuation (or empty).
        hint: String,
    },
    /// The endpoint did not answer.
    #[error("could not reach {endpoint}: {detail}")]
    Unavailable {
        /// The endpoint called.
        endpoint: String,
        /// Why it did not answer, as the SDK or the OS said.
        detail: String,
    },
    /// The credentials may not make this call on this resource.
    #[error("permission denied: {call} on {resource}: {detail}")]
    Permission {
        /// The API call refused (`dynamodb:UpdateItem`).
        call: String,
        /// The resource it was called on (a table, a stream).
        resource: String,
        /// The service's own words.
        detail: String,
    },
    /// A stored item is not what tally writes (`tally_core::rows`): which item, and what is wrong
    /// with it — never read as a default.
    #[error("a corrupt stored item {item}: {detail}")]
    Corrupt {
        /// The item, named (`leases counter/shardId-000000000000`).
        item: String,
        /// The field and what is wrong with it.
        detail: String,
    },
    /// The request was rejected as invalid: a bug in tally, said plainly.
    #[error("request rejected as invalid (a bug in tally): {0}")]
    Invalid(String),
    /// Anything else, said as the backend said it.
    #[error("{0}")]
    Other(String),
}

impl PortError {
    /// Whether the same call may succeed if tried again after a pause.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            PortError::Throttled(_)
                | PortError::Conflict(_)
                | PortError::Timeout(_)
                | PortError::Unavailable { .. }
        )
    }
}

/// Shorthand for port results.
pub type PortResult<T> = Result<T, PortError>;

/// A shard as listed by the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard's id (`shardId-000000000000`).
    pub shard_id: String,
    /// Parent and adjacent parent, after a split or merge; read to their end before this shard.
    pub parents: Vec<String>,
    /// Whether the shard is closed (it has an ending sequence number).
    pub closed: bool,
}

impl ReadBatch {
    /// Whether an empty read means the reader is at the shard's tip: no lag reported, or none
    /// left. Kinesis answers empty reads while records are still ahead (a sparse stretch of a
    /// shard), and those are not idleness.
    pub fn is_caught_up(&self) -> bool {
        self.records.is_empty() && self.millis_behind_latest.is_none_or(|m| m <= 0)
    }
}

/// Where a reader starts in a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartPosition {
    /// The oldest record the stream still has.
    TrimHorizon,
    /// Only records put from now on.
    Latest,
    /// Arrival time in milliseconds since the epoch.
    AtTimestamp(i64),
    /// The record after this one (a whole-record checkpoint).
    AfterSequence(SeqNo),
    /// The record itself first: a checkpoint inside a KPL aggregate resumes there.
    AtSequence(SeqNo),
}

impl StartPosition {
    /// Where to resume after a checkpoint (`None`: from the oldest record): after its record, or
    /// at it when the checkpoint covers only part of an aggregate (the reader of the records
    /// skips the user records covered, [`Position::resume_in`]).
    pub fn after(checkpoint: Option<&Position>) -> StartPosition {
        match checkpoint {
            None => StartPosition::TrimHorizon,
            Some(Position { seq, sub: None }) => StartPosition::AfterSequence(seq.clone()),
            Some(Position { seq, sub: Some(_) }) => StartPosition::AtSequence(seq.clone()),
        }
    }
}

/// One record read from a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    /// Its sequence number in the shard.
    pub seq: SeqNo,
    /// When the stream accepted the record (ms since the epoch).
    pub arrival_ms: i64,
    /// The key it was put with (which chose its shard).
    pub partition_key: String,
    /// Its bytes: one event, or a KPL aggregate of several.
    pub data: Vec<u8>,
}

/// One read from a shard.
#[derive(Clone, Debug, Default)]
pub struct ReadBatch {
    /// The records read, in the shard's order.
    pub records: Vec<StreamRecord>,
    /// How far the reader is behind the shard's tip (iterator age).
    pub millis_behind_latest: Option<i64>,
    /// The shard is closed and every record has been delivered.
    pub shard_end: bool,
    /// The shards that continue this one, when it ended by a reshard.
    pub child_shards: Vec<String>,
    /// Records of this shard after the reader's position (its start, or the last record it
    /// delivered) through this sequence number are gone: the stream's retention trimmed them
    /// before they were read. Said once, by the read that first finds it; the batch's records
    /// come after it. Only a stream that can tell says so (the embedded one, whose sequence
    /// numbers have no holes); Kinesis's cannot be told from a sparse shard.
    pub trimmed_through: Option<SeqNo>,
}

/// A record to put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutEntry {
    /// The key that chooses the shard (a post id, or a hot post's fan-out key).
    pub partition_key: String,
    /// The record's bytes (at most 1 MiB with the key).
    pub data: Vec<u8>,
}

/// What happened to one entry of a put batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Put: where, and at what sequence number.
    Ok {
        /// The shard it went to.
        shard_id: String,
        /// Its sequence number there.
        seq: SeqNo,
    },
    /// Not put (resend it): the stream's error code and message.
    Failed {
        /// The error code (`ProvisionedThroughputExceededException`, `InternalFailure`).
        code: String,
        /// The stream's message.
        message: String,
    },
}

/// A stream of records split into shards (Kinesis, or the embedded log).
#[async_trait]
pub trait Stream: Send + Sync {
    /// Every shard, open and closed, with its parents.
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>>;
    /// Opens a reader on one shard.
    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>>;
    /// Puts up to 500 records; one outcome per entry, in order.
    async fn put_records(&self, entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>>;
    /// The shard's records through `through` are applied, for good, by the one application this
    /// stream is read by: a log kept for that application alone may drop them (the edges'
    /// change log on SQLite does). A stream several applications read keeps them (the default).
    async fn release(&self, _shard_id: &str, _through: &SeqNo) -> PortResult<()> {
        Ok(())
    }
}

/// A reader positioned in one shard.
#[async_trait]
pub trait ShardReader: Send {
    /// The next records, at most `limit`; an empty batch means caught up (or shard end).
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch>;

    /// Whether an empty answer already waited for records (records are pushed, as by enhanced
    /// fan-out), so the caller reads again at once instead of pausing between polls.
    fn waits_for_records(&self) -> bool {
        false
    }
}

/// A checkpoint's window in progress: its end is recorded in the lease row before any of its
/// writes, which fixes the window (the records after the checkpoint up to `end`), so whoever
/// applies it builds the same deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The window's last record (or user record of an aggregate): its checkpoint once applied.
    pub end: Position,
    /// The Kinesis record the window's first user record is in: a rebuild that does not meet it
    /// first has lost the window's head to the stream's retention, and gives the window up on
    /// record instead of applying what is left as if it were whole (`None`: recorded by an older
    /// tally that did not store it).
    pub first: Option<SeqNo>,
    /// The dedup horizon its duplicate decisions were made with (ms), so that a rebuild after a
    /// settings change decides the same (`None`: recorded by an older tally that did not store it).
    pub horizon_ms: Option<i64>,
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
    /// asked for the lease since it was taken (`ask_handoff`), read in the same write.
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

/// A fleet row's asks from their stored text; text that is not a list of asks is none (a row
/// written by another version asks for nothing this one can act on).
pub fn asks_from_text(text: Option<&str>) -> Vec<Ask> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// Where an application's fleet rows are kept: under their own application name in the lease
/// table, which no listing of the application's leases reads.
pub fn fleet_app(app: &str) -> String {
    format!("{app}#fleet")
}

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

/// One page of a post's likers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LikersPage {
    /// User ids, in id order.
    pub users: Vec<String>,
    /// Where the next page starts (the last user of this one), if there may be more.
    pub next: Option<String>,
    /// What the page cost in read units (strongly consistent).
    pub read_units: u64,
}

/// The most likers one [`CountReader::likers`] call returns.
pub const MAX_LIKERS_PER_PAGE: usize = 1_000;

/// [`WindowWriter::posts_per_call`] unless a store says otherwise: DynamoDB's (1,000 items, a few
/// dozen requests in flight at a time).
pub const DEFAULT_POSTS_PER_CALL: usize = 1_000;

/// Where a page of likers most recent first ends: the like it passed over last — its time, then
/// its user (likers are ordered by the like's ordering time, then user id, both descending).
/// Written `<at_ms>:<user>` (`Display`, [`RecentCursor::parse`]) for a client to send back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentCursor {
    /// The like's ordering time (ms).
    pub at_ms: i64,
    /// Its user.
    pub user: String,
}

impl RecentCursor {
    /// A cursor as `Display` wrote it; `None` if `s` is not one.
    pub fn parse(s: &str) -> Option<RecentCursor> {
        let (at, user) = s.split_once(':')?;
        // 1 to 18 digits, as `Display` writes a time (no sign: `+5` and `-5` are not one).
        if !(1..=18).contains(&at.len()) || !at.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let at_ms = at.parse().ok()?;
        crate::event::check_id("user_id", user).ok()?;
        Some(RecentCursor {
            at_ms,
            user: user.to_owned(),
        })
    }

    /// Whether a like at `at_ms` by `user` comes after the cursor, most recent first.
    pub fn precedes(&self, at_ms: i64, user: &str) -> bool {
        (at_ms, user) < (self.at_ms, self.user.as_str())
    }
}

impl std::fmt::Display for RecentCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.at_ms, self.user)
    }
}

/// Where the next page of a scan of every stored edge starts: the key the last page ended at,
/// as the store that gave it keys its items (only that store reads it back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanCursor {
    /// The partition (a post).
    pub pk: String,
    /// The sort key within it.
    pub sk: String,
}

/// One page of a scan of every stored edge.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EdgeScan {
    /// The edges: post, user, state.
    pub edges: Vec<(String, String, crate::edge::EdgeState)>,
    /// Where the next page starts (`None`: the scan is done).
    pub next: Option<ScanCursor>,
    /// What the page cost in read units (DynamoDB: every item the Scan passed over).
    pub read_units: u64,
}

/// A user who likes a post, and when (the like's ordering time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentLiker {
    /// The user.
    pub user: String,
    /// The like's ordering time (ms).
    pub at_ms: i64,
}

/// One page of a post's likers, most recent like first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecentPage {
    /// The likers, most recent first.
    pub likers: Vec<RecentLiker>,
    /// Where the next page starts, if there may be more.
    pub next: Option<RecentCursor>,
    /// What the page cost in read units: the index read (eventually consistent) and the edges
    /// read to check it (strongly consistent).
    pub read_units: u64,
}

/// A stored dedup record, with whose window it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDedup {
    /// The shard whose window it is.
    pub shard_id: String,
    /// The window's end: a restore at a checkpoint takes only records at or before it.
    pub end: Position,
    /// The window's first-seen ids and its arrival clock.
    pub record: DedupRecord,
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

/// Where a page of dead letters ends: the last letter's shard and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LetterCursor {
    /// The last letter's shard.
    pub shard_id: String,
    /// The last letter's key in that shard (its position).
    pub key: String,
}

/// How a count is read: strongly consistent (every write acknowledged before it is seen, at one
/// read unit per 4 KB) or eventually consistent (at half the units; a write of the last second
/// may not be seen yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Consistency {
    /// Sees every acknowledged write (one read unit per 4 KB).
    #[default]
    Strong,
    /// Half the units; a write of the last second may not be seen yet.
    Eventual,
}

/// The most posts one [`CountReader::post_counts`] call reads: a feed page's worth.
pub const MAX_POSTS_PER_CALL: usize = 100;

/// A post's count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostCount {
    /// Net likes, all time (likers: the users who like it now).
    pub total: i64,
    /// Likes created at or after the `since` time, at minute granularity.
    pub since: Option<i64>,
    /// What the reads cost in DynamoDB read units (strongly consistent; see `summary::read_units`).
    pub read_units: u64,
    /// The marker of the last window applied to the post's live item, per writing shard: a
    /// window after a checkpoint whose marker is at least this one is not applied to the post
    /// yet (what a provisional count adds; see `summary::pending_applies`).
    pub marks: Vec<(String, String)>,
}

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
    /// [`LeaseStore::renew_lease`] would, and answers who has asked for it (else `None`).
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
    /// How many edges one [`EdgeWriter::write_edges`] call takes when `counter.posts_per_batch`
    /// does not say.
    fn edges_per_call(&self) -> usize {
        DEFAULT_POSTS_PER_CALL
    }
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

/// What the counter's store answers to a reader — counts, "since", the viewer's likes, a post's
/// likers, what the store counts — and nothing that writes: the read side (`tally serve`,
/// `tally query`, `tally verify`) is built from readers alone, so the compiler keeps it read-only.
#[async_trait]
pub trait CountReader: Send + Sync {
    /// One post's count, strongly consistent ([`CountReader::post_counts`] of one).
    async fn post_count(&self, post_id: &str, since_ms: Option<i64>) -> PortResult<PostCount> {
        let mut v = self
            .post_counts(&[post_id.to_owned()], since_ms, Consistency::Strong)
            .await?;
        v.pop()
            .ok_or_else(|| PortError::Other("a count of one post answered none".into()))
    }
    /// Several posts' counts, in order, read side by side (at most [`MAX_POSTS_PER_CALL`]).
    async fn post_counts(
        &self,
        post_ids: &[String],
        since_ms: Option<i64>,
        consistency: Consistency,
    ) -> PortResult<Vec<PostCount>>;
    /// The sum of every post's count.
    async fn global_total(&self) -> PortResult<i64>;
    /// The stored edges of these (post, user) pairs, in order (`None`: never written), read in
    /// batches (DynamoDB: `BatchGetItem`s of 100 keys), and what the reads cost in read units:
    /// the viewer's likes, a likers page among users, `tally verify`'s sampled edges.
    async fn edges(
        &self,
        pairs: &[(String, String)],
        consistency: Consistency,
    ) -> PortResult<(Vec<Option<crate::edge::EdgeState>>, u64)>;
    /// Whether `viewer` likes each post, in order (at most [`MAX_POSTS_PER_CALL`]): its edges,
    /// and what the read cost in read units.
    async fn viewer_likes(
        &self,
        viewer: &str,
        post_ids: &[String],
        consistency: Consistency,
    ) -> PortResult<(Vec<bool>, u64)> {
        let pairs: Vec<(String, String)> = post_ids
            .iter()
            .map(|p| (p.clone(), viewer.to_owned()))
            .collect();
        let (states, units) = self.edges(&pairs, consistency).await?;
        let liked = states.iter().map(|s| s.as_ref().is_some_and(|s| s.liked));
        Ok((liked.collect(), units))
    }
    /// A page of the users who like `post_id`, in id order after `after`, at most `limit`
    /// (capped at [`MAX_LIKERS_PER_PAGE`]).
    async fn likers(
        &self,
        post_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> PortResult<LikersPage>;
    /// A page of the users who like `post_id`, most recent like first, after `after` (a page's
    /// `next`), at most `limit` (capped at [`MAX_LIKERS_PER_PAGE`]), read off the counts table's
    /// [`crate::edge::RECENT_INDEX`]. Where that index is read eventually consistently
    /// (DynamoDB), each liker's edge is then read strongly and kept only if it still holds that
    /// like: a page never shows a like the edges no longer hold (a like newer than the index
    /// may be missing, and is shown once the index has it). No index: `NotFound` naming it and
    /// the setting that creates it.
    async fn recent_likers(
        &self,
        post_id: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage>;
    /// A page of every stored edge, after `after` (a page's `next`), about `limit` items read:
    /// what a rebuild of the counts from the edges reads (DynamoDB: a `Scan` of the counts
    /// table, passing over its summary items too). Every edge comes once over a whole scan.
    async fn scan_edges(&self, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan>;
    /// What the store counts (`None`: no counter has claimed it yet). Never writes.
    async fn stored_mode(&self) -> PortResult<Option<CountMode>>;
}

/// The dead letters, as a reader pages them (they are written with the windows and gaps).
#[async_trait]
pub trait DeadLetterReader: Send + Sync {
    /// The oldest dead letters, at most `limit`, by arrival.
    async fn dead_letters(&self, limit: usize) -> PortResult<Vec<DeadLetter>>;
    /// One page of dead letters in key order (shard, then letter key): at most `limit`, after
    /// the position `after` a previous page returned as its next. Reads only the page, however
    /// many letters there are (an offset would read all it skips).
    async fn dead_letter_page(
        &self,
        after: Option<&LetterCursor>,
        limit: usize,
    ) -> PortResult<(Vec<DeadLetter>, Option<LetterCursor>)>;
    /// How many dead letters there are.
    async fn dead_letter_count(&self) -> PortResult<u64>;
}

/// What a store records about itself once a counter claims it: its count mode, the one stream it
/// counts, and a rebuild into it under way.
#[async_trait]
pub trait StoreMeta: Send + Sync {
    /// What the store counts. With `claim`, a store that says nothing yet is set to it (one
    /// conditional write; a store already counted by a tally from before modes existed — it has
    /// global totals — is set to `events`); answers what it holds after (`None`: unset, when
    /// not claimed).
    async fn count_mode(&self, claim: Option<CountMode>) -> PortResult<Option<CountMode>>;
    /// The source a `tally rebuild` into this store copies from, while one has begun and not
    /// finished ([`crate::edge::REBUILDING_SK`]); `None`: no rebuild under way.
    async fn rebuilding(&self) -> PortResult<Option<String>>;
    /// Records that a rebuild from `source` has begun (`Some`), or that it finished (`None`).
    async fn set_rebuilding(&self, source: Option<&str>) -> PortResult<()>;
    /// The one stream the store is counted from ([`crate::edge::STREAM_SK`]). With `claim`, a
    /// store that names none yet is set to it (one conditional write; the first claim wins);
    /// answers what it holds after (`None`: unset, when not claimed).
    async fn counted_stream(&self, claim: Option<&str>) -> PortResult<Option<String>>;
    /// The other regions the store's tables are replicated to (a DynamoDB global table's
    /// replicas; none for a table of one region, or the embedded store). Never writes.
    async fn replica_regions(&self) -> PortResult<Vec<String>>;
}

/// The counter's store: its window protocol, the edges, the reads, the dead letters and the
/// store's own records — every capability, which only the counter holds. Any type with all five
/// is one.
pub trait CounterStore:
    WindowWriter + EdgeWriter + CountReader + DeadLetterReader + StoreMeta
{
}

impl<T: WindowWriter + EdgeWriter + CountReader + DeadLetterReader + StoreMeta + ?Sized>
    CounterStore for T
{
}

/// The duplicate filters' records, per application and shard: each window's first-seen ids,
/// stored with the window (the counter: before its checkpoint; analytics: with its snapshot).
#[async_trait]
pub trait DedupStore: Send + Sync {
    /// Drops the shard's dedup records with `max_arrival < before`: those its arrival clock has
    /// passed by more than the horizon. Idempotent and free (DynamoDB: the records' TTL does it;
    /// embedded: a delete).
    async fn expire_dedup(&self, app: &str, shard_id: &str, before: i64) -> PortResult<()>;
    /// Dedup records of these shards with `max_arrival >= min_arrival`.
    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<StoredDedup>>;
}

/// A post's decayed like rate, as trending reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct TrendingEntry {
    /// The post.
    pub post_id: String,
    /// Decayed like count at `at_ms`.
    pub score: f64,
    /// Over-estimate bound from the bounded sketch.
    pub error: f64,
}

impl TrendingEntry {
    /// A sketch's entries as both stores keep them: a JSON array of `[post_id, score, error]`.
    pub fn encode_all(entries: &[TrendingEntry]) -> String {
        let rows: Vec<(&str, f64, f64)> = entries
            .iter()
            .map(|e| (e.post_id.as_str(), e.score, e.error))
            .collect();
        serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
    }

    /// The entries [`TrendingEntry::encode_all`] wrote; stored text that is not such an array is
    /// an error naming `item` (the stored item it came from), never an empty sketch.
    pub fn decode_all(text: &str, item: &str) -> PortResult<Vec<TrendingEntry>> {
        let rows: Vec<(String, f64, f64)> = serde_json::from_str(text).map_err(|e| {
            PortError::Other(format!(
                "{item}: its trending entries are not [post_id, score, error] rows ({e}); the item is corrupt: delete it and the shard's next snapshot writes it again"
            ))
        })?;
        Ok(rows
            .into_iter()
            .map(|(post_id, score, error)| TrendingEntry {
                post_id,
                score,
                error,
            })
            .collect())
    }
}

/// One analytics window of one shard: what is stored atomically with its checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyticsSnapshot {
    /// The shard.
    pub shard_id: String,
    /// The window's last record (new checkpoint).
    pub end: Position,
    /// The shard's arrival clock at `end` (ms): the dedup records' clock.
    pub max_arrival: i64,
    /// When the snapshot was taken (ms since the epoch): latency windows are keyed by it.
    pub taken_at_ms: i64,
    /// The shard's whole sketch, so that a restart resumes it.
    pub trending: Vec<TrendingEntry>,
    /// Event time the trending scores are decayed to.
    pub trending_at_ms: i64,
    /// The shard's all-time most liked posts (likes, not decayed), bounded like the trending
    /// sketch; stored beside it under the app [`all_time`]`(app)`.
    pub top_liked: Vec<TrendingEntry>,
    /// The window's latency histograms, serialized (see `latency`).
    pub latency: Vec<u8>,
    /// The window's first-seen event ids (not stored when empty), so that a restart still
    /// recognises producer retries.
    pub dedup: DedupRecord,
    /// The dedup horizon, for the record's expiry.
    pub horizon_ms: i64,
    /// The shard was read to its end: the row is marked finished with the snapshot.
    pub shard_finished: bool,
}

/// The name the all-time most-liked sketches are stored under, beside `app`'s trending ones.
pub fn all_time(app: &str) -> String {
    format!("{app}:all-time")
}

/// The analytics consumer's results as a reader sees them (the dashboard's trending and latency).
#[async_trait]
pub trait AnalyticsReader: Send + Sync {
    /// The latest trending sketch of each shard: `(shard_id, entries, at_ms)`.
    async fn trending_sketches(
        &self,
        app: &str,
    ) -> PortResult<Vec<(String, Vec<TrendingEntry>, i64)>>;
    /// Serialized latency histograms of windows taken at or after `since_ms`, each with its time,
    /// oldest first.
    async fn latency_snapshots(&self, app: &str, since_ms: i64) -> PortResult<Vec<(i64, Vec<u8>)>>;
}

/// The analytics consumer's store.
#[async_trait]
pub trait AnalyticsStore: AnalyticsReader + LeaseStore + DedupStore {
    /// Stores a snapshot and moves the checkpoint to its end, fenced by the lease.
    async fn save_snapshot(&self, fence: &Fence, snapshot: &AnalyticsSnapshot) -> PortResult<()>;
}

/// The read side's ports: counts, dead letters, leases and analytics, each as a reader sees it —
/// what `tally serve` is built from, so that the compiler, not a reviewer, keeps it read-only.
#[derive(Clone)]
pub struct Readers {
    /// Counts, "since", the viewer's likes, likers, the store's mode.
    pub counts: std::sync::Arc<dyn CountReader>,
    /// The dead letters.
    pub letters: std::sync::Arc<dyn DeadLetterReader>,
    /// Leases and checkpoints (freshness, the workers to ask for open windows).
    pub leases: std::sync::Arc<dyn LeaseReader>,
    /// Trending and latency.
    pub analytics: std::sync::Arc<dyn AnalyticsReader>,
    /// Several regions: each other home's lease rows, by region, as replicated here — how fresh
    /// the counts of its posts are (empty: one region).
    pub homes: std::collections::BTreeMap<String, std::sync::Arc<dyn LeaseReader>>,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trending_entries_read_back_and_a_corrupt_item_is_named() {
        let e = vec![TrendingEntry {
            post_id: "p1".into(),
            score: 2.5,
            error: 0.5,
        }];
        let text = TrendingEntry::encode_all(&e);
        assert_eq!(TrendingEntry::decode_all(&text, "x").unwrap(), e);
        let err = TrendingEntry::decode_all("{oops", "row (analytics, s0)").unwrap_err();
        assert!(err.to_string().contains("row (analytics, s0)"), "{err}");
        assert!(TrendingEntry::decode_all("[]", "x").unwrap().is_empty());
    }

    #[test]
    fn an_empty_read_that_reports_lag_is_not_idle() {
        let batch = |records: usize, behind: Option<i64>| ReadBatch {
            records: (0..records)
                .map(|i| StreamRecord {
                    seq: SeqNo::parse(&(i + 1).to_string()).unwrap(),
                    arrival_ms: 0,
                    partition_key: "k".into(),
                    data: vec![],
                })
                .collect(),
            millis_behind_latest: behind,
            ..ReadBatch::default()
        };
        assert!(batch(0, Some(0)).is_caught_up());
        assert!(batch(0, None).is_caught_up());
        assert!(
            !batch(0, Some(86_400_000)).is_caught_up(),
            "a day behind is not idle"
        );
        assert!(!batch(3, Some(0)).is_caught_up());
    }
}
