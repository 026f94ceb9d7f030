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
    /// One page of dead letters in the store's key order (the embedded store's: shard, then
    /// letter key; DynamoDB's: its table's): at most `limit` (at least 1; fewer where the store's
    /// page ends first), after the position `after` a previous page returned as its next (`None`:
    /// the last page). Reads only the page, however many letters there are (an offset would
    /// read all it skips).
    async fn dead_letter_page(
        &self,
        after: Option<&LetterCursor>,
        limit: usize,
    ) -> PortResult<(Vec<DeadLetter>, Option<LetterCursor>)>;
    /// How many dead letters there are.
    async fn dead_letter_count(&self) -> PortResult<u64>;
    /// At most `limit` dead letters, in the pages' order ([`Self::dead_letter_page`]).
    async fn dead_letters(&self, limit: usize) -> PortResult<Vec<DeadLetter>> {
        let (mut out, mut after) = (Vec::new(), None);
        while out.len() < limit {
            let (page, next) = self
                .dead_letter_page(after.as_ref(), limit - out.len())
                .await?;
            out.extend(page);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        Ok(out)
    }
}
