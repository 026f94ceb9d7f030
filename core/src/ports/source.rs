//! A table of the application's own, whose items a backfill puts to the stream as change
//! records (`tally_producer::backfill`): DynamoDB's, the one store an application's table is.

use async_trait::async_trait;

use super::PortResult;

/// A table's item as DynamoDB JSON (`{"S": "…"}`, `{"N": "…"}`, …), as a change record carries
/// it.
pub type Item = serde_json::Map<String, serde_json::Value>;

/// Whether the table's changes reach the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Streaming {
    /// A destination to the stream is active: every change from now on reaches it.
    Active,
    /// No active destination to the stream: what the table has (its destinations and their
    /// states, for the message).
    Not(String),
    /// The endpoint does not implement the call (DynamoDB Local).
    Unknown,
}

/// A table a backfill reads.
#[async_trait]
pub trait SourceTable: Send + Sync {
    /// Whether the table streams its changes to the stream named `stream`.
    async fn streams_to(&self, stream: &str) -> PortResult<Streaming>;
    /// The names of the table's key attributes.
    async fn key_attributes(&self) -> PortResult<Vec<String>>;
    /// Every item, a page at a time: a strongly consistent scan, each page the table as it is
    /// when read, with every write acknowledged before.
    fn scan(&self) -> Box<dyn TableScan + '_>;
}

/// A scan of a [`SourceTable`] under way.
#[async_trait]
pub trait TableScan: Send {
    /// The next page of items; `None` after the last.
    async fn next(&mut self) -> PortResult<Option<Vec<Item>>>;
}
