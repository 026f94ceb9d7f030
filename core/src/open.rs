//! The open-windows protocol: what a counter worker answers the read side about the windows it
//! has read and not yet written — a held shard's windows for the posts asked about
//! ([`ShardOpen`], each [`OpenWindow`]) — and the digest by which the two agree on which shards
//! the worker holds. Both sides import it from here (the counter's board answers in it; the read
//! side's `pending` asks in it).

use std::collections::BTreeMap;

/// A window's deltas for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenWindow {
    /// The marker of the checkpoint the window follows (`None`: the shard's first window).
    pub after: Option<String>,
    /// Net change per post asked about that the window holds, by the start of the minute (ms)
    /// the events were created in.
    pub posts: BTreeMap<String, BTreeMap<i64, i64>>,
}

/// A shard's windows, for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardOpen {
    /// The shard.
    pub shard_id: String,
    /// Its closed window being applied, if any, then its open one (for the posts asked about).
    pub windows: Vec<OpenWindow>,
    /// The marker of the last record the windows hold, or of the checkpoint when they hold none:
    /// every record of the shard after the checkpoint and up to it is in them (`None`: nothing
    /// read and nothing applied). What a read side compares answers by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
}

/// The digest of a set of shard ids (the same whatever their order): what tells a worker that
/// the read side lists it as holding exactly the shards it holds (`Listed::Holding` on the counter's board).
/// Each id's MD5 (`crate::hashing::hash_key`, the same in every process and build), folded
/// by exclusive or.
pub fn shards_digest<'a>(shards: impl IntoIterator<Item = &'a str>) -> u64 {
    shards
        .into_iter()
        .fold(0, |d, s| d ^ crate::hashing::hash_key(s) as u64)
}
