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
//! Layout: this module holds the loop (`Worker`: reap, discover, take leases, clean up finished
//! rows, stop); `config` the settings and what a worker needs, `processor` what an application
//! plugs in, `shard` runs one held shard, `fleet` the heartbeats and the handoff protocol,
//! `idle` the until-idle exit, `discovery` decides which shards get a lease row, `report` logs
//! and emits the metrics whose names are in `metric`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tally_core::lease::{plan, Lease, LeaseAction, LeasePolicy};
use tokio::sync::Notify;
use tracing::{info, warn, Instrument};

use crate::retry::with_bounded_backoff;
use crate::ConsumerError;

mod config;
mod discovery;
mod fleet;
mod idle;
mod keeper;
pub mod metric;
mod processor;
mod report;
mod shard;

pub use config::{default_worker_id, host_name, WorkerConfig, WorkerContext, WorkerDeps};
pub use idle::IdleExit;
pub use keeper::LeaseKeeper;
pub use processor::{ProcessorFactory, ShardProcessor};
pub use report::{LeaseMetrics, Run};

use discovery::shards_needing_rows;
use fleet::Fleet;
use report::{report_leases, LeaseCounts};
use shard::{spawn_shard, Running, ShardEnd};

use tally_core::clock::now_ms;

/// A shutdown shared by several workers: resolves once the flag `rx` watches is raised (or its
/// sender is gone).
pub async fn until_raised(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Runs a worker until `shutdown` resolves, or until idle when `idle_exit` is armed.
pub async fn run(
    deps: WorkerDeps,
    cfg: WorkerConfig,
    ctx: WorkerContext,
    idle_exit: Arc<IdleExit>,
    metrics: Arc<LeaseMetrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConsumerError> {
    let span = tracing::info_span!("worker", app = %ctx.app, worker = %cfg.worker_id);
    let ctx = Arc::new(ctx);
    async move {
        tokio::pin!(shutdown);
        let mut w = Worker {
            deps,
            cfg,
            ctx,
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
            fleet: Fleet::default(),
            settled_at: None,
        };
        let result = loop {
            match w.iterate().await {
                Ok(Round::Continue) => {}
                Ok(Round::Idle) => break Ok(()),
                Err(e) => break Err(e),
            }
            if w.pause(&mut shutdown).await == Pause::ShuttingDown {
                info!("shutting down");
                break Ok(());
            }
        };
        let stopped = w.stop().await;
        match (result, stopped) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(e)) if w.idle_exit.armed_at().is_some() => Err(e),
            _ => Ok(()),
        }
    }
    .instrument(span)
    .await
}

/// A worker's state between iterations of its loop.
struct Worker {
    deps: WorkerDeps,
    cfg: WorkerConfig,
    ctx: Arc<WorkerContext>,
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
    /// Its fleet and the leases it asked for (`fleet`).
    fleet: Fleet,
    /// When a full listing of the leases last found nothing to take or steal (`None`: the last
    /// one did, or nothing was listed yet).
    settled_at: Option<Instant>,
}

/// What one iteration of the loop found.
enum Round {
    Continue,
    /// `--until-idle` is armed and every shard is caught up and flushed.
    Idle,
}

/// How the pause between two rounds ended.
#[derive(PartialEq)]
enum Pause {
    /// The next round is due.
    Round,
    ShuttingDown,
}

impl Worker {
    /// Between two rounds: until the next lease poll (after the round that joined the fleet: the
    /// join wait, `lease.join_ms`), a shard task's end, or — with the idle exit
    /// armed — a shard going idle when every shard of this worker is (the round that finds the
    /// worker idle then comes at once, not up to a poll later: `tally count --until-idle` ended
    /// on the poll's 500 ms steps, BENCHMARKS "The idle exit at once"). A shard going idle while
    /// others are not changes nothing a round would see here, so the pause goes on to its poll.
    async fn pause(&mut self, shutdown: &mut (impl Future<Output = ()> + Unpin)) -> Pause {
        let wait = if self.fleet.joining {
            self.cfg.join_wait()
        } else {
            self.cfg.lease_poll_interval
        };
        let next_poll = tokio::time::Instant::now() + wait;
        let idle_exit = self.idle_exit.clone();
        loop {
            tokio::select! {
                _ = &mut *shutdown => return Pause::ShuttingDown,
                _ = tokio::time::sleep_until(next_poll) => return Pause::Round,
                _ = self.wake.notified() => return Pause::Round,
                _ = idle_exit.a_shard_went_idle() => {
                    if self.ours_idle() {
                        return Pause::Round;
                    }
                }
            }
        }
    }

    /// One round: reap ended tasks, report, discover shards, take leases, clean up finished
    /// rows, and check for idleness.
    async fn iterate(&mut self) -> Result<Round, ConsumerError> {
        let held_before = self.running.len();
        self.reap().await?;
        self.metrics
            .held
            .store(self.running.len() as u64, Ordering::Relaxed);
        if self.last_stats.elapsed() >= self.ctx.stats_interval {
            self.reported = report_leases(&self.ctx, &self.metrics, self.reported);
            self.last_stats = Instant::now();
        }
        if self
            .last_discovery
            .is_none_or(|t| t.elapsed() >= self.cfg.discovery_interval)
        {
            self.discover().await?;
        }
        let fleet_before = self.fleet.members.clone();
        if !self.beat().await {
            // Joining: the fleet row is written; leases are taken from the next round on (after
            // the join wait, `lease.join_ms`), once the workers started together have all
            // written theirs.
            return Ok(Round::Continue);
        }
        if self.settled(held_before, &fleet_before) {
            return Ok(Round::Continue);
        }
        // A passing failure skips this round (the next poll lists again): the loop must go on
        // to see a shutdown, and the shard tasks go on meanwhile.
        self.metrics.listings.fetch_add(1, Ordering::Relaxed);
        let states = match self.deps.leases.list_states_to_plan(&self.ctx.app).await {
            Ok(l) => l,
            Err(e) if e.is_retryable() => {
                crate::retry::Retry::new(&self.ctx.backoff, "list leases")
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
        let (deps, ctx) = (&self.deps, &self.ctx);
        let discovered = async {
            // Bounded: the first discovery's failure ends the worker with a clear error, and a
            // later one is logged and tried again at the next discovery.
            let shards =
                with_bounded_backoff(&ctx.backoff, "ListShards", || deps.stream.list_shards())
                    .await?;
            let rows = with_bounded_backoff(&ctx.backoff, "list leases", || {
                deps.leases.list_leases(&ctx.app)
            })
            .await?;
            let shards = shards_needing_rows(shards, &rows);
            with_bounded_backoff(&ctx.backoff, "create lease rows", || {
                deps.leases.ensure_leases(&ctx.app, &shards)
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
        self.fleet.asked.retain(|shard, (ask, _)| {
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
                if self.fleet.asked.contains_key(&l.shard_id) {
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
        let actions = plan(&view, me, now, &policy, &self.fleet.members);
        let acted = !actions.is_empty() || !self.fleet.asked.is_empty();
        let asked_before = self.fleet.asked.len();
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
        if self.fleet.asked.len() != asked_before {
            self.publish().await;
        }
        acted
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
            .take_lease(&self.ctx.app, shard_id, epoch, me, expires)
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
                if let Some(mut lease) = leases.iter().find(|l| l.shard_id == shard_id).cloned() {
                    // Held until the take's expiry: its first renewal is due a renewal interval on.
                    lease.expires_ms = expires;
                    let task = spawn_shard(self, fence, lease);
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
        let horizon_ms = self.ctx.lineage_horizon.as_millis() as i64;
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
                    .delete_lease(&self.ctx.app, &l.shard_id)
                    .await
                {
                    warn!(shard_id = %l.shard_id, error = %e, "deleting finished lease failed");
                }
                self.finished_since.remove(&l.shard_id);
            }
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
        match self
            .deps
            .leases
            .leave_fleet(&self.ctx.app, &self.cfg.worker_id)
            .await
        {
            // A delete is a write (one unit), whether or not the row had lapsed.
            Ok(()) => {
                self.metrics.heartbeats.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!(error = %e, "leaving the fleet failed; its row will expire"),
        }
        self.metrics.held.store(0, Ordering::Relaxed);
        report_leases(&self.ctx, &self.metrics, self.reported);
        first_error
    }
}
