//! A worker's settings, what it needs from the backends, and its identity.

use std::sync::Arc;
use std::time::Duration;

use tally_core::ports::{LeaseStore, Stream};
use tally_core::retry::Backoff;

use super::ProcessorFactory;
use crate::emf::Emf;

/// The runtime's settings.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Application name: leases and checkpoints are per application.
    pub app: String,
    /// This worker's identity in lease rows.
    pub worker_id: String,
    /// A lease not renewed for this long may be taken by another worker.
    pub lease_duration: Duration,
    /// How often a held lease is renewed.
    pub renew_interval: Duration,
    /// How often the worker looks for leases to take.
    pub lease_poll_interval: Duration,
    /// How often the worker lists the stream's shards.
    pub discovery_interval: Duration,
    /// Pause between reads of a caught-up shard.
    pub idle_poll: Duration,
    /// Most records per read.
    pub batch_limit: usize,
    /// Most leases held at once (0: no limit).
    pub max_leases_per_worker: usize,
    /// How long shutdown waits for shard tasks to flush.
    pub shutdown_timeout: Duration,
    /// Finished shards' lease rows are deleted this long after all their children progressed.
    pub finished_lease_grace: Duration,
    /// …and only once every child's arrival clock is more than this far past the shard's own
    /// (the dedup horizon): until then a descendant's restart needs the row to find the shard's
    /// recent dedup records.
    pub lineage_horizon: Duration,
    /// Backoff for retryable port errors.
    pub backoff: Backoff,
    /// How often lease and shard metrics are logged (and emitted as EMF).
    pub stats_interval: Duration,
    /// Metrics as CloudWatch embedded metric format lines, when on.
    pub emf: Emf,
    /// Where this worker serves its open windows (`host:port`), reported with each renewal so
    /// that the read side can ask it; `None`: it serves none.
    pub advertise: Option<String>,
}

impl WorkerConfig {
    /// Defaults for an application and worker id.
    pub fn new(app: &str, worker_id: &str) -> WorkerConfig {
        WorkerConfig {
            app: app.to_owned(),
            worker_id: worker_id.to_owned(),
            lease_duration: Duration::from_secs(10),
            // 17 writes per lease per minute; a lease lapses only after two renewals in a row fail.
            renew_interval: Duration::from_millis(3_500),
            lease_poll_interval: Duration::from_millis(500),
            discovery_interval: Duration::from_secs(10),
            idle_poll: Duration::from_millis(500),
            batch_limit: 1_000,
            max_leases_per_worker: 0,
            shutdown_timeout: Duration::from_secs(20),
            finished_lease_grace: Duration::from_secs(3_600),
            lineage_horizon: tally_core::dedup::DEFAULT_HORIZON,
            backoff: Backoff::default(),
            stats_interval: Duration::from_secs(30),
            emf: Emf::default(),
            advertise: None,
        }
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
