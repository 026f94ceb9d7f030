//! A worker's settings, what it needs from the backends, and its identity.

use std::sync::Arc;
use std::time::Duration;

use tally_core::config::{millis, range, Invalid};
use tally_core::ports::{LeaseStore, Stream};
use tally_core::retry::Backoff;

use super::ProcessorFactory;
use crate::emf::Emf;

/// A worker's settings: the `[lease]` section of the settings (its keys in milliseconds or
/// seconds, as their names say) — what a user sets, and nothing the process adds
/// ([`WorkerContext`]).
#[serde_with::serde_as]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// A lease not renewed for this long may be taken by another worker.
    #[serde(rename = "duration_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub lease_duration: Duration,
    /// How often a held lease is renewed.
    #[serde(rename = "renew_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub renew_interval: Duration,
    /// How often the worker looks for leases to take or steal.
    #[serde(rename = "poll_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub lease_poll_interval: Duration,
    /// How long a worker that joins waits after writing its fleet row before it takes leases,
    /// so that workers started within it count each other and split the shards at once (a
    /// later joiner takes its share by asking). Unset: one lease poll. 0: at once — for a
    /// worker that knows it runs alone (workers started together then balance by asking).
    #[serde(rename = "join_ms")]
    #[serde_as(as = "Option<serde_with::DurationMilliSeconds<u64>>")]
    pub join_wait: Option<Duration>,
    /// How often the worker lists the stream's shards.
    #[serde(rename = "discovery_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub discovery_interval: Duration,
    /// Most leases held at once (0: no limit).
    #[serde(rename = "max_per_worker")]
    pub max_leases_per_worker: usize,
    /// How long a graceful shutdown waits for shard tasks to flush.
    #[serde(rename = "shutdown_timeout_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub shutdown_timeout: Duration,
    /// A finished shard's lease row is deleted this long after all its children progressed.
    #[serde(rename = "finished_grace_secs")]
    #[serde_as(as = "serde_with::DurationSeconds<u64>")]
    pub finished_lease_grace: Duration,
    /// Pause between reads of a caught-up shard.
    #[serde(rename = "idle_poll_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub idle_poll: Duration,
    /// Most records per read.
    pub batch_limit: usize,
    /// This worker's identity in lease rows (empty in the settings: the ECS task id, else host
    /// name and pid, [`default_worker_id`]).
    pub worker_id: String,
}

/// What a worker runs with beside its settings — none of it a `[lease]` setting: its
/// application, what it takes from other sections (the lineage's horizon is the counter's dedup
/// horizon; the metrics' interval and sink), how port calls are retried, and where it serves its
/// open windows. Passed to [`crate::worker::run`] beside the [`WorkerConfig`].
#[derive(Clone, Debug)]
pub struct WorkerContext {
    /// Application name: leases and checkpoints are per application.
    pub app: String,
    /// A finished shard's row is deleted only once every child's arrival clock is more than
    /// this far past the shard's own (the dedup horizon): until then a descendant's restart
    /// needs the row to find the shard's recent dedup records.
    pub lineage_horizon: Duration,
    /// Backoff for retryable port errors.
    pub backoff: Backoff,
    /// How often lease and shard metrics are logged (and emitted as EMF): `metrics.interval_ms`.
    pub stats_interval: Duration,
    /// Metrics as CloudWatch embedded metric format lines, when on.
    pub emf: Emf,
    /// Where this worker serves its open windows (`host:port`), reported with each renewal so
    /// that the read side can ask it; `None`: it serves none.
    pub advertise: Option<String>,
}

impl WorkerContext {
    /// The defaults for an application.
    pub fn new(app: &str) -> WorkerContext {
        WorkerContext {
            app: app.to_owned(),
            lineage_horizon: tally_core::dedup::DEFAULT_HORIZON,
            backoff: Backoff::default(),
            stats_interval: Duration::from_secs(30),
            emf: Emf::default(),
            advertise: None,
        }
    }
}

impl Default for WorkerConfig {
    /// The defaults, with an identity chosen at start ([`default_worker_id`]).
    fn default() -> Self {
        WorkerConfig {
            worker_id: String::new(),
            lease_duration: Duration::from_secs(10),
            // 17 writes per lease per minute; a lease lapses only after two renewals in a row fail.
            renew_interval: Duration::from_millis(3_500),
            lease_poll_interval: Duration::from_millis(500),
            join_wait: None,
            discovery_interval: Duration::from_secs(10),
            idle_poll: Duration::from_millis(500),
            batch_limit: 1_000,
            max_leases_per_worker: 0,
            shutdown_timeout: Duration::from_secs(20),
            finished_lease_grace: Duration::from_secs(3_600),
        }
    }
}

impl WorkerConfig {
    /// How long a worker that joins waits before it takes leases (`join_ms`, else one poll).
    pub fn join_wait(&self) -> Duration {
        self.join_wait.unwrap_or(self.lease_poll_interval)
    }

    /// The `[lease]` section's ranges (keys without the section).
    pub fn validate(&self) -> Result<(), Invalid> {
        let duration = millis(self.lease_duration);
        range("duration_ms", duration, 100, 3_600_000)?;
        range("renew_ms", millis(self.renew_interval), 10, duration / 2)?;
        range("poll_ms", millis(self.lease_poll_interval), 10, 600_000)?;
        if let Some(join) = self.join_wait {
            range("join_ms", millis(join), 0, 600_000)?;
        }
        range(
            "discovery_ms",
            millis(self.discovery_interval),
            10,
            3_600_000,
        )?;
        range("idle_poll_ms", millis(self.idle_poll), 1, 60_000)?;
        range("batch_limit", self.batch_limit, 1, 10_000)
    }
}

/// What a worker needs from the backends.
#[derive(Clone)]
pub struct WorkerDeps {
    /// The stream read (polling or enhanced fan-out, as the application is configured).
    pub stream: Arc<dyn Stream>,
    /// Where the leases, checkpoints and fleet rows are.
    pub leases: Arc<dyn LeaseStore>,
    /// Makes the application's processor of each shard taken.
    pub factory: Arc<dyn ProcessorFactory>,
}

/// The default worker identity: the ECS task id when running on ECS, else host name and pid.
pub fn default_worker_id() -> String {
    if let Ok(uri) = std::env::var("ECS_CONTAINER_METADATA_URI_V4") {
        // The URI ends in the task and container ids: .../v4/<task-id>-<container-id>.
        if let Some(last) = uri.trim_end_matches('/').rsplit('/').next() {
            if let Some(task) = last.split('-').next() {
                if !task.is_empty() {
                    return format!("ecs-{task}-{}", std::process::id());
                }
            }
        }
    }
    format!("{}-{}", host_name(), std::process::id())
}

/// This machine's host name (`HOSTNAME`, else `/etc/hostname`, else `localhost`).
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".into())
}
