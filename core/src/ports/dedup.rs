//! The duplicate filters' stored records, which both consumer applications keep per shard.

use async_trait::async_trait;

use super::PortResult;
use crate::dedup::DedupRecord;
use crate::seq::Position;

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
