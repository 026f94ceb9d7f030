//! The consumer runtime: discovers shards, takes and renews leases, runs one task per held shard,
//! and shuts down gracefully.
//!
//! A worker loops: every `discovery_interval` it lists the shards and makes sure each has a lease
//! row; every `lease_poll_interval` (or at once when one of its shards ends) it lists the leases,
//! asks [`tally_core::lease::plan`] what to take or steal, and takes each with a conditional
//! write that bumps the lease's epoch. Each shard task renews its lease, reads batches and hands
//! them to its [`ShardProcessor`]; every write the processor makes is fenced by that epoch, so a
//! worker that lost a lease cannot apply anything. On shutdown the tasks flush, checkpoint and
//! release their leases, so that other workers take them at once rather than after expiry.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tally_core::lease::{plan, Lease, LeaseAction, LeasePolicy};
use tally_core::ports::{Fence, LeaseStore, PortError, ReadBatch, StartPosition, Stream};
use tally_core::retry::Backoff;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn, Instrument};

use crate::emf::{Emf, Unit};
use crate::retry::{with_backoff, Retry};
use crate::ConsumerError;

/// Wall-clock milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

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
}

impl WorkerConfig {
    /// Defaults for an application and worker id.
    pub fn new(app: &str, worker_id: &str) -> WorkerConfig {
        WorkerConfig {
            app: app.to_owned(),
            worker_id: worker_id.to_owned(),
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(2),
            lease_poll_interval: Duration::from_millis(500),
            discovery_interval: Duration::from_secs(10),
            idle_poll: Duration::from_millis(500),
            batch_limit: 1_000,
            max_leases_per_worker: 0,
            shutdown_timeout: Duration::from_secs(20),
            finished_lease_grace: Duration::from_secs(3_600),
            lineage_horizon: Duration::from_secs(600),
            backoff: Backoff::default(),
            stats_interval: Duration::from_secs(30),
            emf: Emf::default(),
        }
    }
}

/// What one application does with a shard's records.
#[async_trait]
pub trait ShardProcessor: Send {
    /// Loads the shard's stored state after its lease was taken; returns where to read from.
    async fn start(&mut self, fence: &Fence, lease: &Lease)
        -> Result<StartPosition, ConsumerError>;
    /// Folds a batch; may apply windows as they fill.
    async fn process(&mut self, batch: &ReadBatch, now_ms: i64) -> Result<(), ConsumerError>;
    /// Gives a time-based window the chance to close.
    async fn tick(&mut self, now_ms: i64) -> Result<(), ConsumerError>;
    /// Applies and checkpoints everything folded so far; `shard_end` marks the shard finished.
    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError>;
    /// The shard is gone from the stream (its records passed the retention before they were all
    /// processed): put the loss on record and finish the shard, so that its children go on.
    async fn shard_gone(&mut self) -> Result<(), ConsumerError>;
}

/// Makes a processor per shard.
pub trait ProcessorFactory: Send + Sync {
    fn create(&self, shard_id: &str) -> Box<dyn ShardProcessor>;
}

/// What a worker needs from the backends.
#[derive(Clone)]
pub struct WorkerDeps {
    pub stream: Arc<dyn Stream>,
    pub leases: Arc<dyn LeaseStore>,
    pub factory: Arc<dyn ProcessorFactory>,
}

/// Lease metrics of a worker.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    pub taken: AtomicU64,
    pub stolen: AtomicU64,
    pub released: AtomicU64,
    pub lost: AtomicU64,
    pub finished: AtomicU64,
    pub held: AtomicU64,
}

/// Arms `--until-idle`: once armed, the worker exits when every shard is caught up and flushed.
#[derive(Debug, Default)]
pub struct IdleExit {
    armed_at: Mutex<Option<Instant>>,
}

impl IdleExit {
    /// Arms the exit now: shards count as idle only after an empty read that started later.
    pub fn arm(&self) {
        if let Ok(mut a) = self.armed_at.lock() {
            a.get_or_insert_with(Instant::now);
        }
    }

    fn armed_at(&self) -> Option<Instant> {
        self.armed_at.lock().ok().and_then(|a| *a)
    }
}

/// How a shard task ended.
#[derive(Debug)]
enum ShardEnd {
    /// Read to its end and marked finished.
    Finished,
    /// Stopped on request, flushed and released.
    Stopped,
    /// Its lease was lost to another worker.
    Lost,
    Failed(ConsumerError),
}

struct Running {
    handle: JoinHandle<ShardEnd>,
    /// The lease the task holds, released by the worker after a graceful stop.
    fence: Fence,
    stop: watch::Sender<bool>,
    /// When the shard's last empty read started, if it is caught up and flushed.
    idle_at: Arc<Mutex<Option<Instant>>>,
}

/// Runs a worker until `shutdown` resolves, or until idle when `idle_exit` is armed.
pub async fn run(
    deps: WorkerDeps,
    cfg: WorkerConfig,
    idle_exit: Arc<IdleExit>,
    metrics: Arc<LeaseMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConsumerError> {
    let span = tracing::info_span!("worker", app = %cfg.app, worker = %cfg.worker_id);
    run_inner(deps, cfg, idle_exit, metrics, shutdown)
        .instrument(span)
        .await
}

async fn run_inner(
    deps: WorkerDeps,
    cfg: WorkerConfig,
    idle_exit: Arc<IdleExit>,
    metrics: Arc<LeaseMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConsumerError> {
    tokio::pin!(shutdown);
    let wake = Arc::new(Notify::new());
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut last_discovery: Option<Instant> = None;
    // Only a failure of the very first discovery (a missing stream, say) ends the worker.
    let mut discovered_once = false;
    let mut finished_since: HashMap<String, Instant> = HashMap::new();
    let mut last_stats = Instant::now();
    let mut reported = LeaseCounts::default();
    let policy = LeasePolicy {
        max_leases_per_worker: cfg.max_leases_per_worker,
    };
    let result = 'main: loop {
        // Reap ended shard tasks.
        let ended: Vec<String> = running
            .iter()
            .filter(|(_, r)| r.handle.is_finished())
            .map(|(s, _)| s.clone())
            .collect();
        for shard in ended {
            let Some(r) = running.remove(&shard) else {
                continue;
            };
            match r.handle.await {
                Ok(ShardEnd::Finished) => {
                    metrics.finished.fetch_add(1, Ordering::Relaxed);
                    info!(shard_id = %shard, "shard finished");
                    // Its children may be new: list the shards now rather than at the next
                    // discovery, so that they start within a poll.
                    last_discovery = None;
                }
                Ok(ShardEnd::Stopped) => {}
                Ok(ShardEnd::Lost) => {
                    metrics.lost.fetch_add(1, Ordering::Relaxed);
                    warn!(shard_id = %shard, "lease lost; shard stopped");
                }
                Ok(ShardEnd::Failed(e)) if e.is_retryable() => {
                    // Retries exhausted on a passing fault: the lease was given back, and this
                    // or another worker takes the shard again at its next poll.
                    warn!(shard_id = %shard, error = %e, "shard task failed; the shard will be retried");
                }
                Ok(ShardEnd::Failed(e)) => {
                    // Never a silent stall: a fault that a retry cannot mend stops the worker,
                    // naming the shard (and, for a window, its records).
                    tracing::error!(shard_id = %shard, error = %e, "shard task failed for good; stopping the worker");
                    break 'main Err(e);
                }
                Err(e) => warn!(shard_id = %shard, error = %e, "shard task panicked"),
            }
        }
        metrics.held.store(running.len() as u64, Ordering::Relaxed);
        if last_stats.elapsed() >= cfg.stats_interval {
            reported = report_leases(&cfg, &metrics, reported);
            last_stats = Instant::now();
        }

        // Discover shards.
        if last_discovery.is_none_or(|t| t.elapsed() >= cfg.discovery_interval) {
            let first = !discovered_once;
            let discovered = async {
                let shards =
                    with_backoff(&cfg.backoff, "ListShards", || deps.stream.list_shards()).await?;
                let rows = with_backoff(&cfg.backoff, "list leases", || {
                    deps.leases.list_leases(&cfg.app)
                })
                .await?;
                let shards = shards_needing_rows(shards, &rows);
                with_backoff(&cfg.backoff, "create lease rows", || {
                    deps.leases.ensure_leases(&cfg.app, &shards)
                })
                .await
            }
            .await;
            match discovered {
                Ok(()) => {
                    last_discovery = Some(Instant::now());
                    discovered_once = true;
                }
                Err(e) if first => break Err(e.into()),
                Err(e) => warn!(error = %e, "shard discovery failed"),
            }
        }

        // Take leases.
        let leases = match with_backoff(&cfg.backoff, "list leases", || {
            deps.leases.list_leases(&cfg.app)
        })
        .await
        {
            Ok(l) => l,
            Err(e) => break Err(e.into()),
        };
        let now = now_ms();
        // A lease in our name that no task of ours runs (a restart under the same worker id)
        // is ours to take again at once.
        let view: Vec<Lease> = leases
            .iter()
            .cloned()
            .map(|mut l| {
                if l.owner.as_deref() == Some(cfg.worker_id.as_str())
                    && !running.contains_key(&l.shard_id)
                {
                    l.owner = None;
                }
                // A shard of ours counts as finished once its task has ended and been reaped.
                if running.contains_key(&l.shard_id) {
                    l.finished = false;
                }
                l
            })
            .collect();
        for action in plan(&view, &cfg.worker_id, now, &policy) {
            let (shard_id, epoch, stolen) = match action {
                LeaseAction::Take { shard_id, epoch } => (shard_id, epoch, false),
                LeaseAction::Steal {
                    shard_id, epoch, ..
                } => (shard_id, epoch, true),
            };
            if running.contains_key(&shard_id) {
                continue;
            }
            let expires = now + cfg.lease_duration.as_millis() as i64;
            match deps
                .leases
                .take_lease(&cfg.app, &shard_id, epoch, &cfg.worker_id, expires)
                .await
            {
                Ok(Some(fence)) => {
                    let counter = if stolen {
                        &metrics.stolen
                    } else {
                        &metrics.taken
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    info!(shard_id = %shard_id, epoch = fence.epoch, stolen, "lease taken");
                    let lease = leases.iter().find(|l| l.shard_id == shard_id).cloned();
                    if let Some(lease) = lease {
                        running.insert(
                            shard_id.clone(),
                            spawn_shard(&deps, &cfg, fence, lease, &wake, &idle_exit),
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => warn!(shard_id = %shard_id, error = %e, "taking lease failed"),
            }
        }

        // Clean up a finished shard's row once every child has made progress (a checkpoint of
        // its own) and moved its arrival clock past the shard's dedup horizon, after a grace
        // period; discovery will not create it again.
        let horizon_ms = cfg.lineage_horizon.as_millis() as i64;
        for l in leases.iter().filter(|l| l.finished) {
            let children: Vec<&Lease> = leases
                .iter()
                .filter(|c| c.parents.contains(&l.shard_id))
                .collect();
            if !children.is_empty()
                && children.iter().all(|c| {
                    (c.finished || c.checkpoint.is_some())
                        && c.max_arrival > l.max_arrival.saturating_add(horizon_ms)
                })
            {
                let since = *finished_since
                    .entry(l.shard_id.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() >= cfg.finished_lease_grace {
                    if let Err(e) = deps.leases.delete_lease(&cfg.app, &l.shard_id).await {
                        warn!(shard_id = %l.shard_id, error = %e, "deleting finished lease failed");
                    }
                    finished_since.remove(&l.shard_id);
                }
            }
        }

        // Until idle: every shard finished, or ours, caught up and flushed. A shard another
        // worker holds is not known to be caught up: wait until it is released or expires.
        if let Some(armed) = idle_exit.armed_at() {
            let all_idle = leases.iter().all(|l| {
                l.finished
                    || running.get(&l.shard_id).is_some_and(|r| {
                        r.idle_at
                            .lock()
                            .ok()
                            .and_then(|t| *t)
                            .is_some_and(|t| t > armed)
                    })
            });
            if all_idle {
                info!("every shard is caught up and flushed");
                break Ok(());
            }
        }

        tokio::select! {
            _ = &mut shutdown => { info!("shutting down"); break Ok(()); }
            _ = tokio::time::sleep(cfg.lease_poll_interval) => {}
            _ = wake.notified() => {}
        }
    };

    // Graceful stop: flush, checkpoint and release every held lease.
    for r in running.values() {
        let _ = r.stop.send(true);
    }
    let deadline = tokio::time::Instant::now() + cfg.shutdown_timeout;
    let mut first_error = None;
    let mut to_release = Vec::new();
    for (shard, r) in running.drain() {
        match tokio::time::timeout_at(deadline, r.handle).await {
            Ok(Ok(ShardEnd::Stopped)) => to_release.push(r.fence),
            Ok(Ok(ShardEnd::Failed(e))) => {
                warn!(shard_id = %shard, error = %e, "shard failed while stopping");
                first_error.get_or_insert(e);
            }
            Ok(_) => {}
            Err(_) => warn!(shard_id = %shard, "shard did not stop in time; its lease will expire"),
        }
    }
    for fence in &to_release {
        match deps.leases.release_lease(fence).await {
            Ok(()) => {
                metrics.released.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                warn!(shard_id = %fence.shard_id, error = %e, "releasing lease failed; it will expire")
            }
        }
    }
    metrics.held.store(0, Ordering::Relaxed);
    report_leases(&cfg, &metrics, reported);
    match (result, first_error) {
        (Err(e), _) => Err(e),
        (Ok(()), Some(e)) if idle_exit.armed_at().is_some() => Err(e),
        _ => Ok(()),
    }
}

fn spawn_shard(
    deps: &WorkerDeps,
    cfg: &WorkerConfig,
    fence: Fence,
    lease: Lease,
    wake: &Arc<Notify>,
    idle_exit: &Arc<IdleExit>,
) -> Running {
    let (stop_tx, stop_rx) = watch::channel(false);
    let idle_at = Arc::new(Mutex::new(None));
    let processor = deps.factory.create(&fence.shard_id);
    let span = tracing::info_span!("shard", app = %cfg.app, shard_id = %fence.shard_id);
    let task = ShardTask {
        deps: deps.clone(),
        cfg: cfg.clone(),
        fence: fence.clone(),
        lease,
        stop: stop_rx,
        idle_at: idle_at.clone(),
        idle_exit: idle_exit.clone(),
        stats: ShardStats::new(),
    };
    let wake = wake.clone();
    let handle = tokio::spawn(
        async move {
            let end = task.run(processor).await;
            wake.notify_one();
            end
        }
        .instrument(span),
    );
    Running {
        handle,
        fence,
        stop: stop_tx,
        idle_at,
    }
}

struct ShardTask {
    deps: WorkerDeps,
    cfg: WorkerConfig,
    fence: Fence,
    lease: Lease,
    stop: watch::Receiver<bool>,
    idle_at: Arc<Mutex<Option<Instant>>>,
    idle_exit: Arc<IdleExit>,
    stats: ShardStats,
}

impl ShardTask {
    async fn run(mut self, mut processor: Box<dyn ShardProcessor>) -> ShardEnd {
        let outcome = self.drive(processor.as_mut()).await;
        // What was read since the last report, however the task ends.
        self.stats.report(&self.cfg, &self.fence.shard_id);
        match outcome {
            // The worker releases stopped shards' leases together once all have flushed, so that
            // other workers see this one gone and take them all in one round.
            Ok(ShardEnd::Stopped) => ShardEnd::Stopped,
            Ok(ShardEnd::Finished) => {
                // A finished shard needs no owner.
                if let Err(e) = self.deps.leases.release_lease(&self.fence).await {
                    warn!(error = %e, "releasing a finished shard's lease failed; it will expire");
                }
                ShardEnd::Finished
            }
            Ok(end) => end,
            Err(e) if e.is_fenced() => ShardEnd::Lost,
            Err(e) => {
                // Give the shard back so that a healthy worker (or this one, later) retries it.
                let _ = self.deps.leases.release_lease(&self.fence).await;
                ShardEnd::Failed(e)
            }
        }
    }

    async fn drive(
        &mut self,
        processor: &mut dyn ShardProcessor,
    ) -> Result<ShardEnd, ConsumerError> {
        // Renewal runs beside the processing, so a slow commit never lets the lease lapse.
        let (lost_tx, lost) = watch::channel(false);
        let renewer = AbortOnDrop(tokio::spawn(renew_loop(
            self.deps.leases.clone(),
            self.fence.clone(),
            self.cfg.clone(),
            lost_tx,
        )));
        let from = processor.start(&self.fence, &self.lease).await?;
        let shard_id = self.fence.shard_id.clone();
        let stream = self.deps.stream.clone();
        let opened = with_backoff(&self.cfg.backoff, "open shard", || {
            stream.open(&shard_id, from.clone())
        })
        .await;
        let mut reader = match opened {
            Ok(r) => r,
            Err(PortError::NotFound { .. }) if self.gone_from_stream().await? => {
                warn!("the shard is gone from the stream (past its retention); recording the gap");
                processor.shard_gone().await?;
                return Ok(ShardEnd::Finished);
            }
            Err(e) => return Err(e.into()),
        };
        loop {
            if *lost.borrow() {
                return Err(PortError::Fenced {
                    app: self.fence.app.clone(),
                    shard_id: self.fence.shard_id.clone(),
                }
                .into());
            }
            if *self.stop.borrow() {
                processor.flush(false).await?;
                drop(renewer);
                return Ok(ShardEnd::Stopped);
            }
            let read_started = Instant::now();
            let batch = self.read(reader.as_mut()).await?;
            processor.process(&batch, now_ms()).await?;
            self.stats.observe(&batch);
            if self.stats.since.elapsed() >= self.cfg.stats_interval {
                self.stats.report(&self.cfg, &self.fence.shard_id);
            }
            if batch.shard_end {
                info!(children = ?batch.child_shards, "shard read to its end");
                processor.flush(true).await?;
                return Ok(ShardEnd::Finished);
            }
            if batch.records.is_empty() && !batch.is_caught_up() {
                // Kinesis answers empty reads while records are still ahead (a sparse stretch of
                // a shard): read on without the idle pause (at Kinesis' 5 reads per second per
                // shard), and never count the shard as idle.
                processor.tick(now_ms()).await?;
                tokio::time::sleep(Duration::from_millis(200).min(self.cfg.idle_poll)).await;
            } else if batch.records.is_empty() {
                if self.idle_exit.armed_at().is_some() {
                    processor.flush(false).await?;
                    if let Ok(mut t) = self.idle_at.lock() {
                        *t = Some(read_started);
                    }
                } else {
                    processor.tick(now_ms()).await?;
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.cfg.idle_poll) => {}
                    _ = self.stop.changed() => {}
                }
            } else {
                if let Ok(mut t) = self.idle_at.lock() {
                    *t = None;
                }
                processor.tick(now_ms()).await?;
            }
        }
    }

    /// Whether the stream answers but no longer lists this shard (a closed shard past retention),
    /// as opposed to a stream that is missing or unreachable.
    async fn gone_from_stream(&self) -> Result<bool, ConsumerError> {
        let stream = self.deps.stream.clone();
        let shards = with_backoff(&self.cfg.backoff, "ListShards", || stream.list_shards()).await?;
        Ok(!shards.iter().any(|s| s.shard_id == self.fence.shard_id))
    }

    /// One read, retried with backoff on throttling and other retryable errors.
    async fn read(
        &self,
        reader: &mut dyn tally_core::ports::ShardReader,
    ) -> Result<ReadBatch, ConsumerError> {
        // A reader is borrowed mutably per call, so the loop is here; the policy is `Retry`'s.
        let mut retry = Retry::new(&self.cfg.backoff, "GetRecords");
        loop {
            match reader.next_batch(self.cfg.batch_limit).await {
                Ok(b) => return Ok(b),
                Err(e) => retry.pause(e).await?,
            }
        }
    }
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
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        });
    format!(
        "{}-{}",
        host.unwrap_or_else(|| "localhost".into()),
        std::process::id()
    )
}

/// The shards that need a lease row: all, except a closed shard without one that was already
/// processed — its row was cleaned up after it finished, and it must never be read again.
///
/// A shard's row is only deleted once every child has progress of its own (a checkpoint), and
/// progress is only made after all parents finished. So a closed shard without a row was
/// processed exactly when some descendant, however many reshards later, has a row with progress:
/// by induction down the generations, the rows of a finished lineage end in such a row (open
/// shards' rows are never deleted). A fresh application has no row with progress anywhere, so
/// every shard gets its row.
fn shards_needing_rows(
    shards: Vec<tally_core::ports::ShardInfo>,
    rows: &[Lease],
) -> Vec<tally_core::ports::ShardInfo> {
    let row = |id: &str| rows.iter().find(|l| l.shard_id == id);
    let progressed = |id: &str| row(id).is_some_and(|l| l.finished || l.checkpoint.is_some());
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in &shards {
        for p in &s.parents {
            children
                .entry(p.as_str())
                .or_default()
                .push(s.shard_id.as_str());
        }
    }
    let processed = |id: &str| {
        let mut todo: Vec<&str> = children.get(id).cloned().unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        while let Some(c) = todo.pop() {
            if !seen.insert(c) {
                continue;
            }
            if progressed(c) {
                return true;
            }
            todo.extend(children.get(c).into_iter().flatten().copied());
        }
        false
    };
    let cleaned: Vec<String> = shards
        .iter()
        .filter(|s| s.closed && row(&s.shard_id).is_none() && processed(&s.shard_id))
        .map(|s| s.shard_id.clone())
        .collect();
    shards
        .into_iter()
        .filter(|s| !cleaned.contains(&s.shard_id))
        .collect()
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews a lease every `renew_interval` until it is lost (then raises `lost`) or aborted.
async fn renew_loop(
    leases: Arc<dyn LeaseStore>,
    fence: Fence,
    cfg: WorkerConfig,
    lost: watch::Sender<bool>,
) {
    loop {
        tokio::time::sleep(cfg.renew_interval).await;
        let expires = now_ms() + cfg.lease_duration.as_millis() as i64;
        match leases.renew_lease(&fence, expires).await {
            Ok(()) => {}
            Err(PortError::Fenced { .. }) => {
                let _ = lost.send(true);
                return;
            }
            // The next tick tries again; renewal runs at most half the lease duration apart.
            Err(e) => warn!(error = %e, "renewing lease failed"),
        }
    }
}

/// The names of the metrics a worker emits (the CloudWatch alarms in `terraform/` use them).
pub mod metric {
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
}

/// The lease counters as last reported, to report the change since.
#[derive(Clone, Copy, Debug, Default)]
struct LeaseCounts {
    taken: u64,
    stolen: u64,
    released: u64,
    lost: u64,
    finished: u64,
}

/// Logs the lease metrics and emits them as EMF: leases held now, and what changed since
/// `last`; returns the counters reported.
fn report_leases(cfg: &WorkerConfig, m: &LeaseMetrics, last: LeaseCounts) -> LeaseCounts {
    let now = LeaseCounts {
        taken: m.taken.load(Ordering::Relaxed),
        stolen: m.stolen.load(Ordering::Relaxed),
        released: m.released.load(Ordering::Relaxed),
        lost: m.lost.load(Ordering::Relaxed),
        finished: m.finished.load(Ordering::Relaxed),
    };
    let held = m.held.load(Ordering::Relaxed);
    info!(
        held,
        taken = now.taken,
        stolen = now.stolen,
        released = now.released,
        lost = now.lost,
        finished = now.finished,
        "lease stats"
    );
    let delta = |n: u64, l: u64| n.saturating_sub(l) as f64;
    cfg.emf.emit(
        now_ms(),
        &[("App", cfg.app.as_str())],
        &[&["App"]],
        &[
            (metric::LEASES_HELD, Unit::Count, held as f64),
            (
                metric::LEASES_TAKEN,
                Unit::Count,
                delta(now.taken, last.taken),
            ),
            (
                metric::LEASES_STOLEN,
                Unit::Count,
                delta(now.stolen, last.stolen),
            ),
            (
                metric::LEASES_RELEASED,
                Unit::Count,
                delta(now.released, last.released),
            ),
            (metric::LEASES_LOST, Unit::Count, delta(now.lost, last.lost)),
            (
                metric::SHARDS_FINISHED,
                Unit::Count,
                delta(now.finished, last.finished),
            ),
        ],
    );
    now
}

/// Per-shard throughput and iterator age since the last report.
struct ShardStats {
    since: Instant,
    records: u64,
    max_age_ms: i64,
}

impl ShardStats {
    fn new() -> ShardStats {
        ShardStats {
            since: Instant::now(),
            records: 0,
            max_age_ms: 0,
        }
    }

    fn observe(&mut self, batch: &ReadBatch) {
        self.records += batch.records.len() as u64;
        self.max_age_ms = self.max_age_ms.max(batch.millis_behind_latest.unwrap_or(0));
    }

    /// Logs and emits what was read since the last report, then starts over.
    fn report(&mut self, cfg: &WorkerConfig, shard_id: &str) {
        let secs = self.since.elapsed().as_secs_f64().max(1e-3);
        let rate = (self.records as f64 / secs).round();
        info!(
            records = self.records,
            records_per_sec = rate as u64,
            iterator_age_ms = self.max_age_ms,
            "shard stats"
        );
        cfg.emf.emit(
            now_ms(),
            &[("App", cfg.app.as_str()), ("ShardId", shard_id)],
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

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::ports::ShardInfo;

    fn shard(id: &str, parents: &[&str], closed: bool) -> ShardInfo {
        ShardInfo {
            shard_id: id.into(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
            closed,
        }
    }

    fn row(id: &str) -> Lease {
        Lease {
            app: "a".into(),
            shard_id: id.into(),
            owner: None,
            epoch: 0,
            expires_ms: 0,
            checkpoint: None,
            finished: false,
            parents: vec![],
            max_arrival: i64::MIN,
        }
    }

    fn progressed(id: &str) -> Lease {
        Lease {
            checkpoint: tally_core::SeqNo::parse("5"),
            ..row(id)
        }
    }

    #[test]
    fn a_cleaned_up_parent_is_not_created_again() {
        let shards = vec![
            shard("p", &[], true),
            shard("c1", &["p"], false),
            shard("c2", &["p"], false),
        ];
        let ids = |v: Vec<ShardInfo>| v.into_iter().map(|s| s.shard_id).collect::<Vec<_>>();
        // A fresh application: everything gets a row, the parent first in line.
        assert_eq!(
            ids(shards_needing_rows(shards.clone(), &[])),
            ["p", "c1", "c2"]
        );
        // Rows of the children were created before the parent's (a discovery cut short): the
        // children have no progress yet, so the parent still gets its row.
        assert_eq!(
            ids(shards_needing_rows(shards.clone(), &[row("c1"), row("c2")])),
            ["p", "c1", "c2"]
        );
        // The parent's row was deleted after its children progressed: it stays gone.
        assert_eq!(
            ids(shards_needing_rows(
                shards.clone(),
                &[progressed("c1"), row("c2")]
            )),
            ["c1", "c2"]
        );
        // An open shard always keeps its row.
        assert_eq!(
            ids(shards_needing_rows(vec![shard("o", &[], false)], &[])),
            ["o"]
        );
    }

    #[test]
    fn an_empty_read_that_reports_lag_is_not_idle() {
        let batch = |records: usize, behind: Option<i64>| ReadBatch {
            records: (0..records)
                .map(|i| tally_core::ports::StreamRecord {
                    seq: tally_core::SeqNo::parse(&(i + 1).to_string()).unwrap(),
                    arrival_ms: 0,
                    partition_key: "k".into(),
                    data: vec![],
                })
                .collect(),
            millis_behind_latest: behind,
            ..ReadBatch::default()
        };
        assert!(batch(0, Some(0)).is_caught_up());
        assert!(batch(0, None).is_caught_up());
        assert!(
            !batch(0, Some(86_400_000)).is_caught_up(),
            "a day behind is not idle"
        );
        assert!(!batch(3, Some(0)).is_caught_up());
    }

    #[test]
    fn a_cleaned_up_grandparent_is_not_created_again() {
        // p split into c1 and c2, each split again; p's, c1's and c2's rows are all cleaned up.
        let shards = vec![
            shard("p", &[], true),
            shard("c1", &["p"], true),
            shard("c2", &["p"], true),
            shard("g1", &["c1"], false),
            shard("g2", &["c1"], false),
            shard("g3", &["c2"], false),
            shard("g4", &["c2"], false),
        ];
        let rows = [
            progressed("g1"),
            progressed("g2"),
            progressed("g3"),
            progressed("g4"),
        ];
        let got: Vec<String> = shards_needing_rows(shards, &rows)
            .into_iter()
            .map(|s| s.shard_id)
            .collect();
        assert_eq!(got, ["g1", "g2", "g3", "g4"]);
    }
}
