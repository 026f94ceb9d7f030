//! What the counter's writes cost in DynamoDB write units, by purpose, by DynamoDB's published
//! rules: a write costs one unit per started KB of the item, twice inside `TransactWriteItems`,
//! and a write whose condition fails is charged as if it had succeeded. tally counts by these
//! rules rather than by `ReturnConsumedCapacity`, which DynamoDB Local under-reports for
//! transactions, so the same figures come out of every backend.

/// What a write unit was spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Posts' live items and the global totals.
    Counts,
    /// Posts' hour and day archive items ("likes since T").
    Buckets,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_are_listed_in_declaration_order() {
        assert!(Purpose::ALL.iter().enumerate().all(|(i, p)| p.index() == i));
    }
}
