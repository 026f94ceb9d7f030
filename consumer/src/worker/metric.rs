//! The names of the metrics a worker emits (the CloudWatch alarms in `terraform/` use them;
//! `tests/e2e/terraform.rs` checks).

/// Per worker, dimension `App`: leases held at the report.
pub const LEASES_HELD: &str = "LeasesHeld";
/// Leases taken since the last report (free or expired ones).
pub const LEASES_TAKEN: &str = "LeasesTaken";
/// Leases taken over from a worker above its share since the last report.
pub const LEASES_STOLEN: &str = "LeasesStolen";
/// Leases given up on shutdown since the last report.
pub const LEASES_RELEASED: &str = "LeasesReleased";
/// Leases lost to another worker since the last report (a renewal found it moved).
pub const LEASES_LOST: &str = "LeasesLost";
/// Shards read to their end since the last report.
pub const SHARDS_FINISHED: &str = "ShardsFinished";
/// Per shard, dimensions `App` and `App, ShardId`: records read since the last report.
pub const RECORDS: &str = "Records";
/// Records read per second over the last report's interval.
pub const RECORDS_PER_SECOND: &str = "RecordsPerSecond";
/// How far the shard's reader is behind its tip (ms), as the stream reports it.
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
