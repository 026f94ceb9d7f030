//! Lease and shard metrics: logged, and emitted as CloudWatch embedded metric format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tally_core::clock::now_ms;
use tally_core::ports::ReadBatch;
use tracing::info;

use super::{metric, WorkerContext};
use crate::emf::Unit;

/// What a worker's run reports into, shared so that its `--http` endpoint reads it live: its
/// application's metrics (`M`) and its leases.
#[derive(Debug, Default)]
pub struct Run<M> {
    /// The application's own counters.
    pub metrics: std::sync::Arc<M>,
    /// Its worker's leases.
    pub leases: std::sync::Arc<LeaseMetrics>,
}

impl<M> Clone for Run<M> {
    fn clone(&self) -> Self {
        let (metrics, leases) = (self.metrics.clone(), self.leases.clone());
        Run { metrics, leases }
    }
}

impl<M: serde::Serialize> Run<M> {
    /// As a worker command's `--json` report: the application's metrics, and `leases`.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!(*self.metrics);
        v["leases"] = serde_json::json!(*self.leases);
        v
    }
}

/// Lease metrics of a worker; as JSON, what a worker command's `--json` report gives of them.
#[derive(Debug, Default, serde::Serialize)]
pub struct LeaseMetrics {
    /// Leases taken (free or expired).
    pub taken: AtomicU64,
    /// Leases taken outright from a worker that did not hand them over in time.
    pub stolen: AtomicU64,
    /// Leases given up on shutdown.
    pub released: AtomicU64,
    /// Leases lost to another worker.
    pub lost: AtomicU64,
    /// Shards read to their end.
    pub finished: AtomicU64,
    /// Leases held now.
    #[serde(skip)]
    pub held: AtomicU64,
    /// Lease renewals written.
    pub renewed: AtomicU64,
    /// Takes refused because another worker moved first.
    #[serde(skip)]
    pub take_failed: AtomicU64,
    /// Requests for a lease of a worker above its share (`LeaseStore::ask_handoff`), and leases
    /// this worker handed over on such a request.
    pub asked: AtomicU64,
    /// Leases this worker handed over on request.
    pub handed_over: AtomicU64,
    /// Writes of this worker's fleet row: its heartbeats, and its delete when it leaves.
    pub heartbeats: AtomicU64,
    /// Full listings of the application's leases, and listings of its fleet rows.
    pub listings: AtomicU64,
    /// Listings of the fleet rows.
    pub fleet_listings: AtomicU64,
}

impl LeaseMetrics {
    /// What the lease writes cost in DynamoDB write units: each is a plain conditional write of
    /// a row under 1 KB (one unit), and a refused one is charged too.
    pub fn write_units(&self) -> u64 {
        [
            &self.taken,
            &self.stolen,
            &self.released,
            &self.renewed,
            &self.take_failed,
            &self.heartbeats,
            &self.asked,
            &self.handed_over,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }
}

/// The lease counters as last reported, to report the change since: taken, stolen, released,
/// lost and finished, as [`report_leases`] lists them.
pub(super) type LeaseCounts = [u64; 5];

/// Logs the lease metrics and emits them as EMF: leases held now, and what changed since
/// `last`; returns the counters reported.
pub(super) fn report_leases(
    ctx: &WorkerContext,
    m: &LeaseMetrics,
    last: LeaseCounts,
) -> LeaseCounts {
    let counters = [
        (metric::LEASES_TAKEN, &m.taken),
        (metric::LEASES_STOLEN, &m.stolen),
        (metric::LEASES_RELEASED, &m.released),
        (metric::LEASES_LOST, &m.lost),
        (metric::SHARDS_FINISHED, &m.finished),
    ];
    let now: LeaseCounts = counters.map(|(_, c)| c.load(Ordering::Relaxed));
    let held = m.held.load(Ordering::Relaxed);
    let [taken, stolen, released, lost, finished] = now;
    info!(held, taken, stolen, released, lost, finished, "lease stats");
    let mut values = vec![(metric::LEASES_HELD, Unit::Count, held as f64)];
    for ((name, _), (n, l)) in counters.iter().zip(now.iter().zip(last)) {
        values.push((*name, Unit::Count, n.saturating_sub(l) as f64));
    }
    ctx.emf
        .emit(now_ms(), &[("App", ctx.app.as_str())], &[&["App"]], &values);
    now
}

/// Per-shard throughput and iterator age since the last report.
pub(super) struct ShardStats {
    pub(super) since: Instant,
    records: u64,
    max_age_ms: i64,
}

impl ShardStats {
    pub(super) fn new() -> ShardStats {
        ShardStats {
            since: Instant::now(),
            records: 0,
            max_age_ms: 0,
        }
    }

    pub(super) fn observe(&mut self, batch: &ReadBatch) {
        self.records += batch.records.len() as u64;
        self.max_age_ms = self.max_age_ms.max(batch.millis_behind_latest.unwrap_or(0));
    }

    /// Logs and emits what was read since the last report, then starts over.
    pub(super) fn report(&mut self, ctx: &WorkerContext, shard_id: &str) {
        let secs = self.since.elapsed().as_secs_f64().max(1e-3);
        let rate = (self.records as f64 / secs).round();
        // A shard that read nothing says so only at debug level: an idle fleet of many shards
        // would otherwise log a line per shard per interval.
        if self.records > 0 || self.max_age_ms > 0 {
            info!(
                records = self.records,
                records_per_sec = rate as u64,
                iterator_age_ms = self.max_age_ms,
                "shard stats"
            );
        } else {
            tracing::debug!(records = 0, "shard stats");
        }
        ctx.emf.emit(
            now_ms(),
            &[("App", ctx.app.as_str()), ("ShardId", shard_id)],
            &[&["App"], &["App", "ShardId"]],
            &[
                (metric::RECORDS, Unit::Count, self.records as f64),
                (metric::RECORDS_PER_SECOND, Unit::CountPerSecond, rate),
                (
                    metric::ITERATOR_AGE_MS,
                    Unit::Milliseconds,
                    self.max_age_ms as f64,
                ),
            ],
        );
        *self = ShardStats::new();
    }
}
