//! Counting likers, the second stage: windows over the edge store's change log (DynamoDB Streams
//! on the edges table; on SQLite each part's change rows), each change folded into its post's
//! deltas (`tally_core::window`'s `changes`) and applied through the window protocol as events
//! are — exactly once, however often a window is applied. The log holds each change of an edge
//! once, in the edge's order, so a removal is always counted after the like it removes, and
//! there is no duplicate filter.

use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::ConsumerError;
use tally_core::edge::CountMode;
use tally_core::ports::Stream;
use tally_core::window::WindowBuilder;
use tally_core::Position;

use super::Counting;

/// Counting likers from the change log `log`.
pub(crate) struct Changes {
    pub(crate) log: Arc<dyn Stream>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Changes")
    }
}

#[async_trait]
impl Counting for Changes {
    fn mode(&self) -> CountMode {
        CountMode::Likers
    }

    fn fold(&self, w: WindowBuilder) -> WindowBuilder {
        w.changes()
    }

    /// The log may drop what is applied for good (it is read by this application alone).
    async fn applied(&self, shard_id: &str, end: &Position) -> Result<(), ConsumerError> {
        Ok(self.log.release(shard_id, &end.seq).await?)
    }

    fn given_up(&self) -> &'static str {
        " (its count writes had begun, so its changes may be partly counted: rebuild the counts \
         from the edges, RUNBOOK \"Counts rebuilt from the edges\")"
    }
}
