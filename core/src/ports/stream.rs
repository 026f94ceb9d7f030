//! The stream port: shards, readers positioned in them, and puts.

use async_trait::async_trait;

use super::PortResult;
use crate::seq::{Position, SeqNo};

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
    /// How far the reader is behind the shard's tip (iterator age); `None` where the stream does
    /// not say — DynamoDB Streams on an empty read, which it may answer with records further on.
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

impl ReadBatch {
    /// Whether an empty read means the reader is at the shard's tip: no lag reported, or none
    /// left. Kinesis answers empty reads while records are still ahead (a sparse stretch of a
    /// shard), and those are not idleness.
    pub fn is_caught_up(&self) -> bool {
        self.records.is_empty() && self.millis_behind_latest.is_none_or(|m| m <= 0)
    }

    /// Whether the stream says the reader is at the shard's tip: an empty read reporting no lag.
    /// Only this may take records never met for gone; an empty read that does not say is idle,
    /// no more.
    pub fn is_at_tip(&self) -> bool {
        self.records.is_empty() && self.millis_behind_latest.is_some_and(|m| m <= 0)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(batch(0, Some(0)).is_at_tip());
        assert!(!batch(0, None).is_at_tip(), "a stream that does not say");
        assert!(!batch(3, Some(0)).is_at_tip());
        assert!(
            !batch(0, Some(86_400_000)).is_caught_up(),
            "a day behind is not idle"
        );
        assert!(!batch(3, Some(0)).is_caught_up());
    }
}
