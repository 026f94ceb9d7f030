//! The edges table's index of liked edges by post, most recent like first, and what reading it
//! costs.

use super::state::LIKED_AT_ATTR;
use super::EDGE_PREFIX;

/// The edges table's index of liked edges by post, most recent like first (DynamoDB: a global
/// secondary index, partition key `pk`, sort key [`LIKED_AT_ATTR`], keys only; the embedded
/// store: a partial index of `edges`). Likers most recent first read it.
pub const RECENT_INDEX: &str = "recent";

/// The read units of one eventually consistent Query of [`RECENT_INDEX`] that passed over
/// these entries (post, user, like time): half a unit per started 4 KB, at least one.
pub fn recent_index_units<'a>(passed: impl IntoIterator<Item = (&'a str, &'a str, i64)>) -> u64 {
    let bytes = passed
        .into_iter()
        .map(|(p, u, t)| recent_entry_size(p, u, t))
        .sum();
    crate::cost::read_units(bytes).div_ceil(2)
}

/// DynamoDB's size of a liked edge's entry in [`RECENT_INDEX`] (keys only: the table's keys and
/// the like's time): what reading it is charged.
pub fn recent_entry_size(post: &str, user: &str, at_ms: i64) -> usize {
    2 + post.len()
        + 2
        + EDGE_PREFIX.len()
        + user.len()
        + LIKED_AT_ATTR.len()
        + crate::item::number_size(at_ms)
}
