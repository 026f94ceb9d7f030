//! The dead letters as a reader pages them.

use async_trait::async_trait;

use super::PortResult;
use crate::dead_letter::DeadLetter;

/// Where a page of dead letters ends: the last letter's shard and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LetterCursor {
    /// The last letter's shard.
    pub shard_id: String,
    /// The last letter's key in that shard (its position).
    pub key: String,
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
