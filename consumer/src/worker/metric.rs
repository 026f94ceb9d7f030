//! The names of the metrics a worker emits (the CloudWatch alarms in `terraform/` use them;
//! `tests/e2e/terraform.rs` checks).

/// Per worker, dimension `App`.
pub const LEASES_HELD: &str = "LeasesHeld";
pub const LEASES_TAKEN: &str = "LeasesTaken";
pub const LEASES_STOLEN: &str = "LeasesStolen";
pub const LEASES_RELEASED: &str = "LeasesReleased";
pub const LEASES_LOST: &str = "LeasesLost";
pub const SHARDS_FINISHED: &str = "ShardsFinished";
/// Per shard, dimensions `App` and `App, ShardId`.
pub const RECORDS: &str = "Records";
pub const RECORDS_PER_SECOND: &str = "RecordsPerSecond";
pub const ITERATOR_AGE_MS: &str = "IteratorAgeMs";
/// Per application, dimension `App`: records the stream's retention trimmed before they were
/// applied, recorded as a gap (emitted by the counter when it records one).
pub const GAPS: &str = "Gaps";
/// All of them.
pub const ALL: &[&str] = &[
    LEASES_HELD,
    LEASES_TAKEN,
    LEASES_STOLEN,
    LEASES_RELEASED,
    LEASES_LOST,
    SHARDS_FINISHED,
    RECORDS,
    RECORDS_PER_SECOND,
    ITERATOR_AGE_MS,
    GAPS,
];
