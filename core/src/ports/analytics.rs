//! The analytics consumer's store: trending and all-time sketches, latency, per-shard snapshots.

use async_trait::async_trait;

use super::{DedupStore, Fence, LeaseStore, PortError, PortResult};
use crate::dedup::DedupRecord;
use crate::seq::Position;

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
}
