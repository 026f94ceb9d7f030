//! The ports: the narrow async traits through which the apps reach a stream and the stores.
//!
//! Two backends implement them: the embedded one (SQLite, one data dir) and the AWS one
//! (Kinesis and DynamoDB through the official SDK); a table a backfill reads (`SourceTable`) is
//! DynamoDB's alone. No SDK or SQL type crosses these traits.

mod analytics;
mod counter;
mod dedup;
mod errors;
mod leases;
mod letters;
mod reads;
mod source;
mod stream;

pub use analytics::{all_time, AnalyticsReader, AnalyticsSnapshot, AnalyticsStore, TrendingEntry};
pub use counter::{
    Applied, CounterStore, EdgeWriter, EdgesWritten, PostsApplied, StoreMeta, WindowRef,
    WindowRest, WindowWriter, DEFAULT_POSTS_PER_CALL,
};
pub use dedup::{DedupStore, StoredDedup};
pub use errors::{PortError, PortResult};
pub use leases::{
    asks_to_text, fleet_app, tombstones_app, Ask, Decided, Fence, GapCommit, LeaseReader,
    LeaseStore, Member, Pending, ReadProgress, Renewal, ShardState, ShardTally,
};
pub use letters::{DeadLetterReader, LetterCursor};
pub use reads::{
    Consistency, CountReader, Counted, EdgeScan, LikersPage, LikersReader, PostCount, Readers,
    RecentCursor, RecentLiker, RecentPage, ScanCursor, StoreReader, MAX_LIKERS_PER_PAGE,
    MAX_POSTS_PER_CALL,
};
pub use source::{Item, SourceTable, Streaming, TableScan};
pub use stream::{
    PutEntry, PutOutcome, ReadBatch, ShardInfo, ShardReader, StartPosition, Stream, StreamRecord,
};
