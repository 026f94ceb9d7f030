//! What the counter's writes cost in DynamoDB write units, by purpose, by DynamoDB's published
//! rules: a write costs one unit per started KB of the item, twice inside `TransactWriteItems`,
//! and a write whose condition fails is charged as if it had succeeded. tally counts by these
//! rules rather than by `ReturnConsumedCapacity`, which DynamoDB Local under-reports for
//! transactions, so the same figures come out of every backend.

use crate::buckets::ItemKind;
use crate::dedup::DedupRecord;
use crate::window::{dedup_write_units, write_units, WriteItem};

/// What a write unit was spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Posts' total items and the global total.
    Counts,
    /// Posts' hour and day items ("likes since T").
    Buckets,
    DeadLetters,
    /// Dedup records, written with a window and deleted once past the horizon.
    Dedup,
    /// The lease row's progress, written with every chunk.
    Checkpoints,
    /// Taking, renewing and releasing leases.
    Leases,
    /// Writes refused by their condition (a lost lease, an answer lost after the write).
    FailedConditions,
}

impl Purpose {
    /// Every purpose, in report order.
    pub const ALL: [Purpose; 7] = [
        Purpose::Counts,
        Purpose::Buckets,
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
pub struct Units([u64; 7]);

impl Units {
    pub fn add(&mut self, p: Purpose, n: u64) {
        self.0[p.index()] += n;
    }

    pub fn get(&self, p: Purpose) -> u64 {
        self.0[p.index()]
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Units) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Bytes of a day item at most (24 hour slots and its keys), for read units.
const DAY_ITEM_BYTES: u64 = 400;

/// DynamoDB read units of a post's count, strongly consistent (one unit per started 4 KB read,
/// at least one per request): its total item; and for "since T", the hour item, the day item and
/// one Query over the `later_days` day items after it. Never a scan, whatever the post's age.
pub fn post_count_read_units(since: bool, later_days: usize) -> u64 {
    if !since {
        return 1;
    }
    let query = (later_days as u64 * DAY_ITEM_BYTES).div_ceil(4096).max(1);
    3 + query
}

/// The units of one chunk's `TransactWriteItems`: its items, the lease row that carries the
/// progress, and — on a window's last chunk — the dedup record and the shard's global total.
pub fn chunk_units(items: &[WriteItem], last: Option<&DedupRecord>) -> Units {
    let mut u = Units::default();
    for item in items {
        let purpose = match item {
            WriteItem::Summary(s) if s.kind == ItemKind::Total => Purpose::Counts,
            WriteItem::Summary(_) => Purpose::Buckets,
            WriteItem::DeadLetter(_) => Purpose::DeadLetters,
        };
        u.add(purpose, 2 * write_units(item));
    }
    u.add(Purpose::Checkpoints, 2);
    if let Some(dedup) = last {
        u.add(Purpose::Dedup, 2 * dedup_write_units(dedup));
        u.add(Purpose::Counts, 2);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::PostDelta;

    #[test]
    fn purposes_are_listed_in_declaration_order() {
        assert!(Purpose::ALL.iter().enumerate().all(|(i, p)| p.index() == i));
    }

    #[test]
    fn a_count_reads_a_few_units_whatever_the_history() {
        assert_eq!(post_count_read_units(false, 0), 1);
        assert_eq!(post_count_read_units(true, 0), 4);
        // A year of day items in the Query: 365 × 400 B = 36 started 4 KB units.
        assert_eq!(post_count_read_units(true, 365), 3 + 36);
    }

    #[test]
    fn a_chunk_is_charged_by_purpose_at_twice_the_item_units() {
        let mut d = PostDelta::default();
        d.add(1_796_000_000_000, 1);
        // One post: its total, hour and day items.
        let items: Vec<WriteItem> = d.items("p").into_iter().map(WriteItem::Summary).collect();
        assert_eq!(items.len(), 3);
        let mid = chunk_units(&items, None);
        assert_eq!(mid.get(Purpose::Counts), 2);
        assert_eq!(mid.get(Purpose::Buckets), 4);
        assert_eq!(mid.get(Purpose::Checkpoints), 2);
        assert_eq!(mid.total(), 8);
        // The last chunk adds the global total and a dedup record of 5,000 ids (79 KB).
        let dedup = DedupRecord {
            max_arrival: 0,
            ids: vec![0; 5_000],
        };
        let last = chunk_units(&items, Some(&dedup));
        assert_eq!(last.get(Purpose::Counts), 4);
        assert_eq!(last.get(Purpose::Dedup), 2 * 79);
        assert_eq!(last.total(), 8 + 2 + 158);
    }
}
