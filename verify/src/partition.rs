//! How `tally verify` recounts a stream of any size in bounded memory: in passes, each over a
//! range of a 64-bit key space, reading the whole stream and keeping only the records whose key
//! falls in its range.
//!
//! A record's key is its post's hash in the high 32 bits and, counting likers, its user's hash in
//! the low 32 (counting events, zero): everything the recount holds of one edge (its latest
//! action, its events' first arrivals) shares a key, and a post's keys are one contiguous run. A
//! post's count is a sum over its users, so a post split between passes (only a post whose
//! likers alone outgrow the budget is) is compared with the sum of its passes' parts.
//!
//! A pass starts at the end of the last and runs to the end of the key space; when what it holds
//! nears the budget it gives up the upper half of the keys it holds (dropping what it kept of
//! them), which the next pass starts at. So memory stays within the budget (plus the one key
//! that cannot be split, and the bookkeeping of split posts) whatever the stream's size, and a
//! stream that fits is read once.

use xxhash_rust::xxh3::xxh3_64;

/// A record's place in the key space (see the module).
pub fn key(post: &str, user: Option<&str>) -> u64 {
    (h32(post) << 32) | user.map_or(0, h32)
}

/// The first and last key of a post's run.
pub fn post_keys(post: &str) -> (u64, u64) {
    let start = h32(post) << 32;
    (start, start | u64::from(u32::MAX))
}

fn h32(s: &str) -> u64 {
    xxh3_64(s.as_bytes()) >> 32
}

/// The keys a pass holds: from `lo`, up to (not including) `hi`, or to the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub lo: u64,
    pub hi: Option<u64>,
}

impl Part {
    /// The whole key space: a stream that fits in the budget is read once.
    pub const ALL: Part = Part { lo: 0, hi: None };

    pub fn contains(&self, key: u64) -> bool {
        key >= self.lo && self.hi.is_none_or(|hi| key < hi)
    }

    /// Whether part of a post's run comes after this part (a later pass holds the rest).
    pub fn continues(&self, post: &str) -> bool {
        self.hi.is_some_and(|hi| post_keys(post).1 >= hi)
    }

    /// The pass after this one, or `None` when this one reached the end.
    pub fn next(&self) -> Option<Part> {
        self.hi.map(|lo| Part { lo, hi: None })
    }
}

/// Where a part holding `keys` (each key once per item it holds, any order) splits to hold about
/// half of them: the median key, or `None` when every item has the smallest key (nothing can be
/// given up without giving up everything).
pub fn split_point(mut keys: Vec<u64>) -> Option<u64> {
    if keys.is_empty() {
        return None;
    }
    let mid = keys.len() / 2;
    let (_, median, _) = keys.select_nth_unstable(mid);
    let median = *median;
    let min = keys.iter().copied().min()?;
    if median > min {
        return Some(median);
    }
    // At least half of the items share the smallest key: give up everything above it.
    keys.into_iter().filter(|k| *k > min).min().map(|_| min + 1)
}

/// Approximate heap bytes of what the recount holds, by item: the strings it keeps and an
/// allowance for the hash-table slot and its fields (a table is between 7/16 and 7/8 full, so
/// about one and a half slots per item). Calibrated against the heap in use by
/// `cargo bench --bench verify`, which measures the real peak beside the budget.
pub mod size {
    /// A post's entry (its map of users, or its count by minute).
    pub fn post(post: &str) -> usize {
        post.len() + 160
    }
    /// A user's latest action on a post.
    pub fn edge(user: &str, event_id: &str) -> usize {
        user.len() + event_id.len() + 130
    }
    /// An event's first arrival.
    pub fn seen(event_id: &str) -> usize {
        event_id.len() + 110
    }
    /// A minute's entry of a post's count.
    pub const MINUTE: usize = 64;
    /// A copy's open delta.
    pub const LATE: usize = 24;
    /// A record after its shard's checkpoint.
    pub fn beyond(shard: &str, post: &str, user: Option<&str>, event_id: Option<&str>) -> usize {
        shard.len() + post.len() + user.map_or(0, str::len) + event_id.map_or(0, str::len) + 240
    }

    /// What the estimate may reach under a budget: a hash table that grows holds its old slots
    /// and twice as many new ones for a moment, so the held estimate stays within three fifths
    /// of the budget for the peak to stay within it (two thirds was measured 2 % over at 10
    /// million records; BENCHMARKS.md, "verify at any size").
    pub fn held_within(budget: usize) -> usize {
        budget / 5 * 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_s_keys_are_one_run_and_its_users_spread_over_it() {
        let (first, last) = post_keys("p1");
        for u in ["a", "b", "carol", "dave"] {
            let k = key("p1", Some(u));
            assert!(first <= k && k <= last);
        }
        assert_eq!(key("p1", None), first);
        assert_ne!(key("p1", Some("a")), key("p1", Some("b")));
    }

    #[test]
    fn parts_cover_the_key_space_once() {
        let a = Part {
            lo: 0,
            hi: Some(1 << 40),
        };
        let b = a.next().unwrap();
        assert!(a.contains(0) && !a.contains(1 << 40) && b.contains(1 << 40));
        assert!(b.contains(u64::MAX) && b.next().is_none());
    }

    #[test]
    fn the_split_holds_about_half() {
        assert_eq!(split_point(vec![]), None);
        assert_eq!(split_point(vec![5, 5, 5]), None);
        assert_eq!(split_point(vec![1, 2, 3, 4]), Some(3));
        // Most items on the smallest key: only the others are given up.
        assert_eq!(split_point(vec![7, 7, 7, 9]), Some(8));
    }
}
