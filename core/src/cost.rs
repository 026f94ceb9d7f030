//! What the counter's writes cost in DynamoDB write units, by purpose, by DynamoDB's published
//! rules: a write costs one unit per started KB of the item, twice inside `TransactWriteItems`,
//! and a write whose condition fails is charged as if it had succeeded. tally counts by these
//! rules rather than by `ReturnConsumedCapacity`, which DynamoDB Local under-reports for
//! transactions, so the same figures come out of every backend. The rules themselves — a write's
//! units, a strongly consistent read's units, and the sizes of the records tally writes that are
//! not summary items (a window's dedup record, a dead letter) — are here and only here; a summary
//! item's size is `summary::item_size`, since it follows the item's attributes.

use crate::dead_letter::DeadLetter;
use crate::dedup::{DedupRecord, ID_BYTES};

/// What a write unit was spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Posts' live items and the global totals.
    Counts,
    /// Posts' hour and day archive items ("likes since T").
    Buckets,
    /// Likers' edges: one item per (post, user) a window changed or touched.
    Edges,
    /// Dead letters: malformed records and gaps, one item each.
    DeadLetters,
    /// Dedup records, one per window (they expire by TTL, which costs nothing).
    Dedup,
    /// The lease row's progress: a window's pending end, then its checkpoint.
    Checkpoints,
    /// Taking, renewing and releasing leases.
    Leases,
    /// Writes refused by their condition (a lost lease, an answer lost after the write).
    FailedConditions,
}

impl Purpose {
    /// Every purpose, in report order.
    pub const ALL: [Purpose; 8] = [
        Purpose::Counts,
        Purpose::Buckets,
        Purpose::Edges,
        Purpose::DeadLetters,
        Purpose::Dedup,
        Purpose::Checkpoints,
        Purpose::Leases,
        Purpose::FailedConditions,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Counts => "counts",
            Purpose::Buckets => "buckets",
            Purpose::Edges => "edges",
            Purpose::DeadLetters => "dead_letters",
            Purpose::Dedup => "dedup",
            Purpose::Checkpoints => "checkpoints",
            Purpose::Leases => "leases",
            Purpose::FailedConditions => "failed_conditions",
        }
    }

    /// Its metric name (CloudWatch embedded metric format).
    pub fn metric(self) -> &'static str {
        match self {
            Purpose::Counts => "WriteUnitsCounts",
            Purpose::Buckets => "WriteUnitsBuckets",
            Purpose::Edges => "WriteUnitsEdges",
            Purpose::DeadLetters => "WriteUnitsDeadLetters",
            Purpose::Dedup => "WriteUnitsDedup",
            Purpose::Checkpoints => "WriteUnitsCheckpoints",
            Purpose::Leases => "WriteUnitsLeases",
            Purpose::FailedConditions => "WriteUnitsFailedConditions",
        }
    }

    /// Its place in [`Purpose::ALL`] (the declaration order).
    fn index(self) -> usize {
        self as usize
    }
}

/// Write units by purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Units([u64; Purpose::ALL.len()]);

impl Units {
    /// Adds `n` units spent for `p`.
    pub fn add(&mut self, p: Purpose, n: u64) {
        self.0[p.index()] += n;
    }

    /// The units spent for `p`.
    pub fn get(&self, p: Purpose) -> u64 {
        self.0[p.index()]
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Units) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    /// The units spent for every purpose.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Write units of writing an item of `bytes` once: one per started KB, at least one.
pub fn write_units(bytes: usize) -> u64 {
    bytes.div_ceil(1024).max(1) as u64
}

/// Read units of one strongly consistent Query or GetItem that returned `bytes` in all: one per
/// started 4 KB, at least one.
pub fn read_units(bytes: usize) -> u64 {
    bytes.div_ceil(4096).max(1) as u64
}

/// Write units of a window's dedup record (its ids plus its key and attributes).
pub fn dedup_units(rec: &DedupRecord) -> u64 {
    write_units(ID_BYTES * rec.ids.len() + 160)
}

/// Write units of writing a dead letter once: it carries up to 4 KiB of raw bytes.
pub fn dead_letter_units(d: &DeadLetter) -> u64 {
    write_units(d.data.len() + d.reason.len() + d.shard_id.len() + d.key().len() + 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::DEAD_LETTER_MAX_BYTES;
    use crate::seq::Position;

    #[test]
    fn reads_are_started_4kb_and_writes_started_1kb() {
        assert_eq!(
            [read_units(0), read_units(4096), read_units(4100)],
            [1, 1, 2]
        );
        assert_eq!(
            [write_units(0), write_units(1024), write_units(1025)],
            [1, 1, 2]
        );
    }

    #[test]
    fn dedup_records_follow_their_size() {
        let rec = DedupRecord {
            max_arrival: 0,
            ids: vec![0; 5_000],
        };
        assert_eq!(dedup_units(&rec), 59);
    }

    #[test]
    fn dead_letters_follow_their_size() {
        let letter = |n: usize| DeadLetter {
            shard_id: "s".into(),
            seq: Position::parse("1").unwrap(),
            arrival_ms: 0,
            reason: "r".into(),
            data: vec![0; n],
            size: n as u64,
            gap: None,
        };
        assert_eq!(dead_letter_units(&letter(10)), 1);
        assert_eq!(dead_letter_units(&letter(DEAD_LETTER_MAX_BYTES)), 5);
    }

    #[test]
    fn purposes_are_listed_in_declaration_order() {
        assert!(Purpose::ALL.iter().enumerate().all(|(i, p)| p.index() == i));
    }
}
