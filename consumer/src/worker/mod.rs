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
//!
//! Layout: this module holds the settings, the processor trait and the loop (`Worker`: reap,
//! discover, take leases, clean up finished rows, stop); `shard` runs one held shard,
//! `discovery` decides which shards get a lease row, `report` logs and emits the metrics whose
//! names are in `metric`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tally_core::lease::{plan, Lease, LeaseAction, LeasePolicy};
use tally_core::ports::{
    Ask, Fence, LeaseStore, Member, ReadBatch, ShardState, StartPosition, Stream,
};
use tally_core::retry::Backoff;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::{info, warn, Instrument};

use crate::emf::Emf;
use crate::retry::with_bounded_backoff;
use crate::ConsumerError;

mod discovery;
pub mod metric;
mod report;
mod shard;

use discovery::shards_needing_rows;
use report::{report_leases, LeaseCounts};
use shard::spawn_shard;

pub use tally_core::clock::now_ms;

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
    /// Whether the processor still waits for records it knows exist (the rest of a window it
    /// must complete): the shard is then not idle, however empty the reads.
    fn waiting(&self) -> bool {
        false
    }
    /// Whether records read are not applied yet (a window open or pending): a shard is reported
    /// at its tip only once they are.
    fn unapplied(&self) -> bool {
        false
    }
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
    pub renewed: AtomicU64,
    /// Takes refused because another worker moved first.
    pub take_failed: AtomicU64,
    /// Requests for a lease of a worker above its share (`LeaseStore::ask_handoff`), and leases
    /// this worker handed over on such a request.
    pub asked: AtomicU64,
    pub handed_over: AtomicU64,
    /// Writes of this worker's fleet row.
    pub heartbeats: AtomicU64,
    /// Full listings of the application's leases, and listings of its fleet rows.
    pub listings: AtomicU64,
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

/// Arms `--until-idle`: once armed, the worker exits when every shard is caught up and flushed.
#[derive(Debug, Default)]
pub struct IdleExit {
    armed_at: Mutex<Option<Instant>>,
    /// The same moment by the wall clock, to compare with other workers' reports.
    armed_at_ms: Mutex<Option<i64>>,
}

impl IdleExit {
    /// Arms the exit now: shards count as idle only after an empty read that started later.
    pub fn arm(&self) {
        if let Ok(mut a) = self.armed_at.lock() {
            a.get_or_insert_with(Instant::now);
        }
        if let Ok(mut a) = self.armed_at_ms.lock() {
            a.get_or_insert_with(now_ms);
        }
    }

    fn armed_at_ms(&self) -> Option<i64> {
        self.armed_at_ms.lock().ok().and_then(|a| *a)
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
    /// Asked for by another worker: flushed, checkpointed and handed over to it.
    HandedOver(String),
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
    /// The worker that asked for the lease, as a renewal or a fleet listing heard it.
    asked_by: Arc<Mutex<Option<String>>>,
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

/// A worker's state between iterations of its loop.
struct Worker {
    deps: WorkerDeps,
    cfg: WorkerConfig,
    idle_exit: Arc<IdleExit>,
    metrics: Arc<LeaseMetrics>,
    /// Shard tasks notify it when they end, so that the loop reaps them at once.
    wake: Arc<Notify>,
    /// The shard tasks of this worker, by shard.
    running: HashMap<String, Running>,
    /// When shards were last listed (`None`: list them now).
    last_discovery: Option<Instant>,
    /// Only a failure of the very first discovery (a missing stream, say) ends the worker.
    discovered_once: bool,
    /// Since when each finished shard's row has been due for cleanup.
    finished_since: HashMap<String, Instant>,
    /// When lease metrics were last reported, and what they were.
    last_stats: Instant,
    reported: LeaseCounts,
    /// When an armed idle exit last said what it waits for.
    last_wait_report: Option<Instant>,
    /// When a failed lease listing was last logged.
    last_list_warning: Option<Instant>,
    /// When this worker last said it is alive (its fleet row), and the fleet it last listed.
    last_heartbeat: Option<Instant>,
    joined: bool,
    fleet: Vec<String>,
    /// When a failed heartbeat was last logged.
    last_beat_warning: Option<Instant>,
    /// When a full listing of the leases last found nothing to take or steal (`None`: the last
    /// one did, or nothing was listed yet).
    settled_at: Option<Instant>,
    /// Leases this worker asked their holders for, by shard: the request and when (ms).
    asked: HashMap<String, (Ask, i64)>,
    /// The requests its fleet row carries, as last written.
    asks_written: Vec<Ask>,
    /// When a member last vanished from the fleet listing (its row expired or deleted).
    member_lost_at: Option<Instant>,
}

/// How long an armed idle exit waits before saying what it waits for, and how often it repeats.
const IDLE_WAIT_REPORT: Duration = Duration::from_secs(5);

async fn run_inner(
    deps: WorkerDeps,
    cfg: WorkerConfig,
    idle_exit: Arc<IdleExit>,
    metrics: Arc<LeaseMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConsumerError> {
    tokio::pin!(shutdown);
    let mut w = Worker {
        deps,
        cfg,
        idle_exit,
        metrics,
        wake: Arc::new(Notify::new()),
        running: HashMap::new(),
        last_discovery: None,
        discovered_once: false,
        finished_since: HashMap::new(),
        last_stats: Instant::now(),
        reported: LeaseCounts::default(),
        last_wait_report: None,
        last_list_warning: None,
        last_heartbeat: None,
        joined: false,
        fleet: Vec::new(),
        last_beat_warning: None,
        settled_at: None,
        asked: HashMap::new(),
        asks_written: Vec::new(),
        member_lost_at: None,
    };
    let result = loop {
        match w.iterate().await {
            Ok(Round::Continue) => {}
            Ok(Round::Idle) => break Ok(()),
            Err(e) => break Err(e),
        }
        tokio::select! {
            _ = &mut shutdown => { info!("shutting down"); break Ok(()); }
            _ = tokio::time::sleep(w.cfg.lease_poll_interval) => {}
            _ = w.wake.notified() => {}
        }
    };
    let stopped = w.stop().await;
    match (result, stopped) {
        (Err(e), _) => Err(e),
        (Ok(()), Some(e)) if w.idle_exit.armed_at().is_some() => Err(e),
        _ => Ok(()),
    }
}

/// What one iteration of the loop found.
enum Round {
    Continue,
    /// `--until-idle` is armed and every shard is caught up and flushed.
    Idle,
}

impl Worker {
    /// One round: reap ended tasks, report, discover shards, take leases, clean up finished
    /// rows, and check for idleness.
    async fn iterate(&mut self) -> Result<Round, ConsumerError> {
        let held_before = self.running.len();
        self.reap().await?;
        self.metrics
            .held
            .store(self.running.len() as u64, Ordering::Relaxed);
        if self.last_stats.elapsed() >= self.cfg.stats_interval {
            self.reported = report_leases(&self.cfg, &self.metrics, self.reported);
            self.last_stats = Instant::now();
        }
        if self
            .last_discovery
            .is_none_or(|t| t.elapsed() >= self.cfg.discovery_interval)
        {
            self.discover().await?;
        }
        let fleet_before = self.fleet.clone();
        if !self.beat().await {
            // Joining: the fleet row is written; leases are taken from the next poll on, once
            // the workers started together have all written theirs.
            return Ok(Round::Continue);
        }
        if self.settled(held_before, &fleet_before) {
            return Ok(Round::Continue);
        }
        // A passing failure skips this round (the next poll lists again): the loop must go on
        // to see a shutdown, and the shard tasks go on meanwhile.
        self.metrics.listings.fetch_add(1, Ordering::Relaxed);
        let states = match self.deps.leases.list_states_to_plan(&self.cfg.app).await {
            Ok(l) => l,
            Err(e) if e.is_retryable() => {
                crate::retry::Retry::new(&self.cfg.backoff, "list leases")
                    .note(&e, &mut self.last_list_warning);
                return Ok(Round::Continue);
            }
            Err(e) => return Err(e.into()),
        };
        let leases: Vec<Lease> = states.iter().map(|s| s.lease.clone()).collect();
        let acted = self.take_leases(&leases).await;
        self.settled_at = (!acted).then(Instant::now);
        self.clean_up_finished(&leases).await;
        Ok(if self.all_idle(&states) {
            info!("every shard is caught up and flushed");
            Round::Idle
        } else {
            Round::Continue
        })
    }

    /// Whether this round may skip the full lease listing: the last one found nothing to do, less
    /// than half a lease duration ago, and nothing has changed since that this worker can see (no
    /// shard task ended, the fleet is the same, no idle exit waits on the listing). A lease left by
    /// a worker killed since is then found at most half a lease duration after it expires; a
    /// worker at its share reads its fleet's rows each poll and the leases only that often.
    fn settled(&self, held_before: usize, fleet_before: &[String]) -> bool {
        // A killed member renewed its leases at most a renewal interval after its last heartbeat,
        // so they expire within a renewal interval of its fleet row: list every poll until then.
        let lost_recently = self
            .member_lost_at
            .is_some_and(|t| t.elapsed() < self.cfg.renew_interval + self.cfg.lease_poll_interval);
        !lost_recently
            && self.running.len() == held_before
            && self.fleet == fleet_before
            && self.idle_exit.armed_at().is_none()
            && self
                .settled_at
                .is_some_and(|t| t.elapsed() < self.cfg.lease_duration / 2)
    }

    /// Keeps this worker's fleet row alive (written every renewal interval) and lists the live
    /// fleet (every poll: one small read), which the lease plan counts in its fair share. Returns
    /// false on the first call, when the row has just been written.
    async fn beat(&mut self) -> bool {
        let first = !std::mem::replace(&mut self.joined, true);
        self.publish().await;
        if first {
            return false;
        }
        self.metrics.fleet_listings.fetch_add(1, Ordering::Relaxed);
        match self.deps.leases.fleet(&self.cfg.app, now_ms()).await {
            Ok(members) => {
                self.hear_asks(&members);
                let fleet: Vec<String> = members.into_iter().map(|m| m.worker).collect();
                if self.fleet.iter().any(|w| !fleet.contains(w)) {
                    self.member_lost_at = Some(Instant::now());
                }
                self.fleet = fleet;
            }
            Err(e) => crate::retry::Retry::new(&self.cfg.backoff, "fleet listing")
                .note(&e, &mut self.last_beat_warning),
        }
        true
    }

    /// Writes this worker's fleet row when the renewal interval has passed since the last, or at
    /// once when the leases it asks for have changed (so that their holders hear of it at their
    /// next fleet listing).
    async fn publish(&mut self) {
        let mut asks: Vec<Ask> = self.asked.values().map(|(a, _)| a.clone()).collect();
        asks.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        let due = self
            .last_heartbeat
            .is_none_or(|t| t.elapsed() >= self.cfg.renew_interval);
        if !due && asks == self.asks_written {
            return;
        }
        let expires = now_ms() + self.cfg.lease_duration.as_millis() as i64;
        let leases = &self.deps.leases;
        match leases
            .heartbeat(&self.cfg.app, &self.cfg.worker_id, expires, &asks)
            .await
        {
            Ok(()) => {
                self.last_heartbeat = Some(Instant::now());
                self.metrics.heartbeats.fetch_add(1, Ordering::Relaxed);
                self.asks_written = asks;
            }
            Err(e) => crate::retry::Retry::new(&self.cfg.backoff, "fleet heartbeat")
                .note(&e, &mut self.last_beat_warning),
        }
    }

    /// Tells the shard tasks whose leases other members ask for (at the epoch they hold) to hand
    /// them over.
    fn hear_asks(&self, members: &[Member]) {
        let me = self.cfg.worker_id.as_str();
        for m in members {
            for ask in m.asks.iter().filter(|a| a.holder == me) {
                if let Some(r) = self.running.get(&ask.shard_id) {
                    if r.fence.epoch == ask.epoch {
                        shard::note_ask(&r.asked_by, Some(m.worker.clone()));
                    }
                }
            }
        }
    }

    /// Reaps ended shard tasks; a failure that a retry cannot mend ends the worker.
    async fn reap(&mut self) -> Result<(), ConsumerError> {
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.handle.is_finished())
            .map(|(s, _)| s.clone())
            .collect();
        for shard in ended {
            let Some(r) = self.running.remove(&shard) else {
                continue;
            };
            match r.handle.await {
                Ok(ShardEnd::Finished) => {
                    self.metrics.finished.fetch_add(1, Ordering::Relaxed);
                    info!(shard_id = %shard, "shard finished");
                    // Its children may be new: list the shards now rather than at the next
                    // discovery, so that they start within a poll.
                    self.last_discovery = None;
                }
                Ok(ShardEnd::Stopped) => {}
                Ok(ShardEnd::HandedOver(to)) => {
                    self.metrics.handed_over.fetch_add(1, Ordering::Relaxed);
                    info!(shard_id = %shard, to = %to, "shard handed over");
                }
                Ok(ShardEnd::Lost) => {
                    self.metrics.lost.fetch_add(1, Ordering::Relaxed);
                    warn!(shard_id = %shard, "lease lost; shard stopped");
                }
                Ok(ShardEnd::Failed(e)) if e.is_retryable() => {
                    // A passing fault outside the retry loops (a shard task retries them for as
                    // long as it holds its lease): the lease was given back, and this or another
                    // worker takes the shard again at its next poll.
                    warn!(shard_id = %shard, error = %e, "shard task failed; the shard will be retried");
                }
                Ok(ShardEnd::Failed(e)) => {
                    // Never a silent stall: a fault that a retry cannot mend stops the worker,
                    // naming the shard (and, for a window, its records).
                    tracing::error!(shard_id = %shard, error = %e, "shard task failed for good; stopping the worker");
                    return Err(e);
                }
                Err(e) => warn!(shard_id = %shard, error = %e, "shard task panicked"),
            }
        }
        Ok(())
    }

    /// Lists the shards and makes sure each that needs one has a lease row.
    async fn discover(&mut self) -> Result<(), ConsumerError> {
        let (deps, cfg) = (&self.deps, &self.cfg);
        let discovered = async {
            // Bounded: the first discovery's failure ends the worker with a clear error, and a
            // later one is logged and tried again at the next discovery.
            let shards =
                with_bounded_backoff(&cfg.backoff, "ListShards", || deps.stream.list_shards())
                    .await?;
            let rows = with_bounded_backoff(&cfg.backoff, "list leases", || {
                deps.leases.list_leases(&cfg.app)
            })
            .await?;
            let shards = shards_needing_rows(shards, &rows);
            with_bounded_backoff(&cfg.backoff, "create lease rows", || {
                deps.leases.ensure_leases(&cfg.app, &shards)
            })
            .await
        }
        .await;
        match discovered {
            Ok(()) => {
                self.last_discovery = Some(Instant::now());
                self.discovered_once = true;
                Ok(())
            }
            Err(e) if !self.discovered_once => Err(e.into()),
            Err(e) => {
                warn!(error = %e, "shard discovery failed");
                Ok(())
            }
        }
    }

    /// Takes (or steals) what the lease plan says, and starts a task for each lease taken; returns
    /// whether the plan had anything to do.
    async fn take_leases(&mut self, leases: &[Lease]) -> bool {
        let now = now_ms();
        let me = self.cfg.worker_id.as_str();
        // A request is pending while its lease is still where it was asked for (once handed over
        // it is ours at a new epoch).
        self.asked.retain(|shard, (ask, _)| {
            leases.iter().any(|l| {
                l.shard_id == *shard && l.epoch == ask.epoch && l.owner.as_deref() != Some(me)
            })
        });
        self.take_overdue(leases, now).await;
        let me = self.cfg.worker_id.as_str();
        // A lease in our name that no task of ours runs (a restart under the same worker id, or
        // one just handed over) is ours to take again at once; one we asked for counts as ours
        // (it is on its way), so that we never ask for more than our share.
        let view: Vec<Lease> = leases
            .iter()
            .cloned()
            .map(|mut l| {
                if l.owner.as_deref() == Some(me) && !self.running.contains_key(&l.shard_id) {
                    l.owner = None;
                }
                if self.asked.contains_key(&l.shard_id) {
                    l.owner = Some(me.to_owned());
                }
                // A shard of ours counts as finished once its task has ended and been reaped.
                if self.running.contains_key(&l.shard_id) {
                    l.finished = false;
                }
                l
            })
            .collect();
        let policy = LeasePolicy {
            max_leases_per_worker: self.cfg.max_leases_per_worker,
        };
        let actions = plan(&view, me, now, &policy, &self.fleet);
        let acted = !actions.is_empty() || !self.asked.is_empty();
        let asked_before = self.asked.len();
        for action in actions {
            match action {
                LeaseAction::Take { shard_id, epoch } => {
                    self.take(leases, &shard_id, epoch, false, now).await;
                }
                LeaseAction::Steal {
                    shard_id,
                    epoch,
                    from,
                } => self.steal(&shard_id, epoch, from, now).await,
            }
        }
        // Requests made go out with the fleet row now, not at the next renewal interval.
        if self.asked.len() != asked_before {
            self.publish().await;
        }
        acted
    }

    /// A lease of a worker above its share is asked for, so that its holder flushes, checkpoints
    /// and hands it over (`LeaseStore::ask_handoff`; the holder reads the request with its next
    /// renewal).
    async fn steal(&mut self, shard_id: &str, epoch: u64, from: String, now: i64) {
        let held = Fence {
            app: self.cfg.app.clone(),
            shard_id: shard_id.to_owned(),
            owner: from,
            epoch,
        };
        match self
            .deps
            .leases
            .ask_handoff(&held, &self.cfg.worker_id)
            .await
        {
            Ok(true) => {
                self.metrics.asked.fetch_add(1, Ordering::Relaxed);
                info!(shard_id = %shard_id, from = %held.owner, "asked for the lease");
                let ask = Ask {
                    shard_id: shard_id.to_owned(),
                    holder: held.owner,
                    epoch,
                };
                self.asked.insert(shard_id.to_owned(), (ask, now));
            }
            Ok(false) => {
                self.metrics.take_failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!(shard_id = %shard_id, error = %e, "asking for a lease failed"),
        }
    }

    /// A lease asked for and not handed over a lease duration later (its holder alive and
    /// renewing, but stuck) is taken outright: its open windows are dropped and read again here.
    async fn take_overdue(&mut self, leases: &[Lease], now: i64) {
        let patience = self.cfg.lease_duration.as_millis() as i64;
        let overdue: Vec<(String, u64)> = self
            .asked
            .iter()
            .filter(|(_, (_, at))| now - at >= patience)
            .map(|(shard, (ask, _))| (shard.clone(), ask.epoch))
            .collect();
        for (shard_id, epoch) in overdue {
            warn!(shard_id = %shard_id, "the holder did not hand the lease over in time; taking it");
            self.asked.remove(&shard_id);
            self.take(leases, &shard_id, epoch, true, now).await;
        }
    }

    /// Takes a lease at `epoch` and starts its shard task.
    async fn take(&mut self, leases: &[Lease], shard_id: &str, epoch: u64, stolen: bool, now: i64) {
        if self.running.contains_key(shard_id) {
            return;
        }
        let me = self.cfg.worker_id.as_str();
        let expires = now + self.cfg.lease_duration.as_millis() as i64;
        match self
            .deps
            .leases
            .take_lease(&self.cfg.app, shard_id, epoch, me, expires)
            .await
        {
            Ok(Some(fence)) => {
                let counter = if stolen {
                    &self.metrics.stolen
                } else {
                    &self.metrics.taken
                };
                counter.fetch_add(1, Ordering::Relaxed);
                info!(shard_id = %shard_id, epoch = fence.epoch, stolen, "lease taken");
                if let Some(lease) = leases.iter().find(|l| l.shard_id == shard_id).cloned() {
                    let task = spawn_shard(
                        &self.deps,
                        &self.cfg,
                        fence,
                        lease,
                        &self.wake,
                        &self.idle_exit,
                        &self.metrics,
                    );
                    self.running.insert(shard_id.to_owned(), task);
                }
            }
            Ok(None) => {
                self.metrics.take_failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!(shard_id = %shard_id, error = %e, "taking lease failed"),
        }
    }

    /// Deletes a finished shard's row once every child has made progress (a checkpoint of its
    /// own) and moved its arrival clock past the shard's dedup horizon, after a grace period;
    /// discovery will not create it again.
    async fn clean_up_finished(&mut self, leases: &[Lease]) {
        let horizon_ms = self.cfg.lineage_horizon.as_millis() as i64;
        for l in leases.iter().filter(|l| l.finished) {
            let children: Vec<&Lease> = leases
                .iter()
                .filter(|c| c.parents.contains(&l.shard_id))
                .collect();
            let due = !children.is_empty()
                && children.iter().all(|c| {
                    (c.finished || c.checkpoint.is_some())
                        && c.max_arrival > l.max_arrival.saturating_add(horizon_ms)
                });
            if !due {
                continue;
            }
            let since = *self
                .finished_since
                .entry(l.shard_id.clone())
                .or_insert_with(Instant::now);
            if since.elapsed() >= self.cfg.finished_lease_grace {
                if let Err(e) = self
                    .deps
                    .leases
                    .delete_lease(&self.cfg.app, &l.shard_id)
                    .await
                {
                    warn!(shard_id = %l.shard_id, error = %e, "deleting finished lease failed");
                }
                self.finished_since.remove(&l.shard_id);
            }
        }
    }

    /// Until idle: every shard finished, or ours, caught up and flushed, or held by another live
    /// worker that has reported it at its tip with nothing left to apply since the exit was armed
    /// (so that workers run `--until-idle` together all end). Any other shard is waited for.
    fn all_idle(&mut self, states: &[ShardState]) -> bool {
        let (Some(armed), Some(armed_ms)) =
            (self.idle_exit.armed_at(), self.idle_exit.armed_at_ms())
        else {
            return false;
        };
        let now = now_ms();
        let waiting: Vec<&Lease> = states
            .iter()
            .filter(|st| {
                let l = &st.lease;
                let ours_idle = self.running.get(&l.shard_id).is_some_and(|r| {
                    r.idle_at
                        .lock()
                        .ok()
                        .and_then(|t| *t)
                        .is_some_and(|t| t > armed)
                });
                let theirs_idle = !self.running.contains_key(&l.shard_id)
                    && l.is_held(now)
                    && st.pending.is_none()
                    && st
                        .progress
                        .is_some_and(|p| p.behind_ms == 0 && p.at_ms >= armed_ms);
                !(l.finished || ours_idle || theirs_idle)
            })
            .map(|st| &st.lease)
            .collect();
        if !waiting.is_empty() && armed.elapsed() >= IDLE_WAIT_REPORT {
            self.report_waiting(&waiting);
        }
        waiting.is_empty()
    }

    /// Says what an armed idle exit is waiting for, at most every [`IDLE_WAIT_REPORT`]: shards
    /// still being read here, and shards whose leases other workers hold (this worker cannot
    /// take a lease that its owner renews, so it waits for as long as that worker runs).
    fn report_waiting(&mut self, waiting: &[&Lease]) {
        if self
            .last_wait_report
            .is_some_and(|t| t.elapsed() < IDLE_WAIT_REPORT)
        {
            return;
        }
        self.last_wait_report = Some(Instant::now());
        let now = now_ms();
        let mut reading = Vec::new();
        let mut elsewhere = Vec::new();
        let mut unowned = Vec::new();
        for l in waiting {
            if self.running.contains_key(&l.shard_id) {
                reading.push(l.shard_id.clone());
            } else if l.is_held(now) {
                let owner = l.owner.as_deref().unwrap_or("?");
                elsewhere.push(format!("{} (held by {owner})", l.shard_id));
            } else {
                unowned.push(l.shard_id.clone());
            }
        }
        if elsewhere.is_empty() && unowned.is_empty() {
            info!(
                reading = %reading.join(", "),
                "waiting until every shard is caught up"
            );
        } else if elsewhere.is_empty() {
            info!(
                reading = %reading.join(", "),
                not_yet_taken = %unowned.join(", "),
                "waiting until every shard is caught up"
            );
        } else {
            warn!(
                held_elsewhere = %elsewhere.join(", "),
                reading = %reading.join(", "),
                "waiting until every shard is caught up: other workers hold some shards' leases, \
                 so this worker exits only once they stop (or bound the wait with --timeout)"
            );
        }
    }

    /// Graceful stop: flush, checkpoint and release every held lease together. Returns the
    /// first shard failure while stopping.
    async fn stop(&mut self) -> Option<ConsumerError> {
        for r in self.running.values() {
            let _ = r.stop.send(true);
        }
        let deadline = tokio::time::Instant::now() + self.cfg.shutdown_timeout;
        let mut first_error = None;
        let mut to_release = Vec::new();
        for (shard, r) in self.running.drain() {
            match tokio::time::timeout_at(deadline, r.handle).await {
                Ok(Ok(ShardEnd::Stopped)) => to_release.push(r.fence),
                Ok(Ok(ShardEnd::Failed(e))) => {
                    warn!(shard_id = %shard, error = %e, "shard failed while stopping");
                    first_error.get_or_insert(e);
                }
                Ok(_) => {}
                Err(_) => {
                    warn!(shard_id = %shard, "shard did not stop in time; its lease will expire")
                }
            }
        }
        for fence in &to_release {
            match self.deps.leases.release_lease(fence).await {
                Ok(()) => {
                    self.metrics.released.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    warn!(shard_id = %fence.shard_id, error = %e, "releasing lease failed; it will expire")
                }
            }
        }
        if let Err(e) = self
            .deps
            .leases
            .leave_fleet(&self.cfg.app, &self.cfg.worker_id)
            .await
        {
            warn!(error = %e, "leaving the fleet failed; its row will expire");
        }
        self.metrics.held.store(0, Ordering::Relaxed);
        report_leases(&self.cfg, &self.metrics, self.reported);
        first_error
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
