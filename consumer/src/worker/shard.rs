//! One task per held shard: it renews the lease beside the processing, reads batches, hands them
//! to the processor, and ends finished, stopped, lost or failed.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tally_core::clock::now_ms;
use tally_core::lease::Lease;
use tally_core::ports::{Fence, LeaseStore, PortError, ReadBatch, ReadProgress, ShardReader};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn, Instrument};

use super::keeper::LeaseKeeper;
use super::report::ShardStats;
use super::{IdleExit, LeaseMetrics, ShardProcessor, WorkerConfig, WorkerContext, WorkerDeps};
use crate::retry::{with_backoff, with_bounded_backoff, Retry};
use crate::ConsumerError;

/// How a shard task ended.
#[derive(Debug)]
pub(super) enum ShardEnd {
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

pub(super) struct Running {
    pub(super) handle: JoinHandle<ShardEnd>,
    /// The lease the task holds, released by the worker after a graceful stop.
    pub(super) fence: Fence,
    pub(super) stop: watch::Sender<bool>,
    /// When the shard's last empty read started, if it is caught up and flushed.
    pub(super) idle_at: Arc<Mutex<Option<Instant>>>,
    /// The worker that asked for the lease, as a renewal or a fleet listing heard it.
    pub(super) asked_by: Arc<Mutex<Option<String>>>,
}

/// Starts the task of a shard whose lease `w` has just taken.
pub(super) fn spawn_shard(w: &super::Worker, fence: Fence, lease: Lease) -> Running {
    let (deps, cfg, ctx) = (&w.deps, &w.cfg, &w.ctx);
    let (wake, idle_exit, metrics) = (&w.wake, &w.idle_exit, &w.metrics);
    let (stop_tx, stop_rx) = watch::channel(false);
    let idle_at = Arc::new(Mutex::new(None));
    let asked_by = Arc::new(Mutex::new(None));
    let processor = deps.factory.create(&fence);
    let keeper = LeaseKeeper::new(cfg, ctx, lease.expires_ms, asked_by.clone());
    let span = tracing::info_span!("shard", app = %ctx.app, shard_id = %fence.shard_id);
    let task = ShardTask {
        deps: deps.clone(),
        cfg: cfg.clone(),
        ctx: ctx.clone(),
        fence: fence.clone(),
        lease,
        stop: stop_rx,
        idle_at: idle_at.clone(),
        idle_exit: idle_exit.clone(),
        stats: ShardStats::new(),
        metrics: metrics.clone(),
        keeper,
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
        asked_by,
    }
}

struct ShardTask {
    deps: WorkerDeps,
    cfg: WorkerConfig,
    ctx: Arc<WorkerContext>,
    fence: Fence,
    lease: Lease,
    stop: watch::Receiver<bool>,
    idle_at: Arc<Mutex<Option<Instant>>>,
    idle_exit: Arc<IdleExit>,
    stats: ShardStats,
    /// The worker's lease metrics (renewals).
    metrics: Arc<LeaseMetrics>,
    /// The lease's extension, shared with the renewal loop and the processor; it keeps who asked
    /// for the lease, as a write of its row or the worker's fleet listing heard it first.
    keeper: LeaseKeeper,
}

impl ShardTask {
    async fn run(mut self, mut processor: Box<dyn ShardProcessor>) -> ShardEnd {
        let outcome = self.drive(processor.as_mut()).await;
        // What was read since the last report, however the task ends.
        self.stats.report(&self.ctx, &self.fence.shard_id);
        match outcome {
            // The worker releases stopped shards' leases together once all have flushed, so that
            // other workers see this one gone and take them all in one round.
            Ok(ShardEnd::Stopped) => ShardEnd::Stopped,
            Ok(ShardEnd::HandedOver(to)) => self.hand_over(&to).await,
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

    /// Flushed and checkpointed on another worker's request: the lease goes to it in one fenced
    /// write (no one else can take it between), or, should that write fail for another reason
    /// than a lost lease, back to the pool for the asker's next poll.
    async fn hand_over(&self, to: &str) -> ShardEnd {
        let expires = now_ms() + self.cfg.lease_duration.as_millis() as i64;
        match self.deps.leases.hand_over(&self.fence, to, expires).await {
            Ok(()) => {
                info!(to = %to, "lease handed over, its windows flushed");
                ShardEnd::HandedOver(to.to_owned())
            }
            Err(PortError::Fenced { .. }) => ShardEnd::Lost,
            Err(e) => {
                warn!(to = %to, error = %e, "handing the lease over failed; releasing it instead");
                let _ = self.deps.leases.release_lease(&self.fence).await;
                ShardEnd::HandedOver(to.to_owned())
            }
        }
    }

    /// The worker that asked for this lease, once a renewal has read the request.
    fn asked_by(&self) -> Option<String> {
        self.keeper.asked_by()
    }

    async fn drive(
        &mut self,
        processor: &mut dyn ShardProcessor,
    ) -> Result<ShardEnd, ConsumerError> {
        // Renewal runs beside the processing, so a slow commit never lets the lease lapse; the
        // moment a renewal is fenced the processing is dropped where it is (every write it makes
        // is fenced or idempotent, so this is a crash of the shard's work and nothing more), even
        // while it waits out a lasting throttle.
        let (lost_tx, mut lost) = watch::channel(false);
        let _renewer = AbortOnDrop(tokio::spawn(renew_loop(
            self.deps.leases.clone(),
            self.fence.clone(),
            self.cfg.renew_interval,
            lost_tx,
            self.metrics.clone(),
            self.keeper.clone(),
        )));
        let fenced = PortError::Fenced {
            app: self.fence.app.clone(),
            shard_id: self.fence.shard_id.clone(),
        };
        tokio::select! {
            biased;
            // Raised, or the renewal stopped: either way the lease is not held any more.
            _ = lost.wait_for(|l| *l) => Err(fenced.into()),
            end = self.work(processor) => end,
        }
    }

    /// The shard's work under a held lease: start the processor, open the shard, read and
    /// process until the shard ends or a stop is asked for.
    async fn work(
        &mut self,
        processor: &mut dyn ShardProcessor,
    ) -> Result<ShardEnd, ConsumerError> {
        processor.keep_lease(self.keeper.clone());
        let from = processor.start(&self.lease).await?;
        let shard_id = self.fence.shard_id.clone();
        let stream = self.deps.stream.clone();
        let opened = with_backoff(&self.ctx.backoff, "open shard", || {
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
            if *self.stop.borrow() {
                processor.flush(false).await?;
                return Ok(ShardEnd::Stopped);
            }
            // Asked for by a worker short of its share: flush and checkpoint as on a stop, then
            // hand the lease over (`run`).
            if let Some(to) = self.asked_by() {
                processor.flush(false).await?;
                return Ok(ShardEnd::HandedOver(to));
            }
            let read_started = Instant::now();
            let batch = self.read(reader.as_mut()).await?;
            processor.process(&batch, now_ms()).await?;
            self.stats.observe(&batch);
            if self.stats.since.elapsed() >= self.ctx.stats_interval {
                self.stats.report(&self.ctx, &self.fence.shard_id);
            }
            if batch.shard_end {
                info!(children = ?batch.child_shards, "shard read to its end");
                processor.flush(true).await?;
                return Ok(ShardEnd::Finished);
            }
            let pushed = reader.waits_for_records();
            self.after(&batch, read_started, processor, pushed).await?;
        }
    }

    /// After a read that did not end the shard: the processor's time-based work, the progress
    /// report, and the pause before the next read — none while records are still ahead (Kinesis
    /// answers empty reads in a sparse stretch of a shard: read on at its 5 reads per second per
    /// shard, never counting the shard as idle), the idle pause at the tip (where `--until-idle`
    /// flushes and notes when the shard went idle), none after records. A `pushed` read (by
    /// enhanced fan-out) waited for records already, and needs no pause.
    async fn after(
        &mut self,
        batch: &ReadBatch,
        read_started: Instant,
        processor: &mut dyn ShardProcessor,
        pushed: bool,
    ) -> Result<(), ConsumerError> {
        if batch.records.is_empty() && !batch.is_caught_up() {
            processor.tick(now_ms()).await?;
            self.progress(batch, processor.unapplied()).await?;
            if !pushed {
                tokio::time::sleep(Duration::from_millis(200).min(self.cfg.idle_poll)).await;
            }
        } else if batch.records.is_empty() {
            if let Some(armed) = self.idle_exit.armed_at() {
                processor.flush(false).await?;
                // A processor still waiting for records it knows of is not idle.
                if !processor.waiting() {
                    // Idle since the exit was armed only now (a read that started before it
                    // does not count: `idle_since`): the worker need not wait for its next poll
                    // to find every shard idle. Rung once a time, not at every idle read.
                    let went_idle = self.idle_at.lock().is_ok_and(|mut t| {
                        let before = t.replace(read_started);
                        read_started > armed && before.is_none_or(|b| b <= armed)
                    });
                    if went_idle {
                        self.idle_exit.shard_went_idle();
                    }
                }
            } else {
                processor.tick(now_ms()).await?;
            }
            self.progress(batch, processor.unapplied()).await?;
            if !pushed {
                tokio::select! {
                    _ = tokio::time::sleep(self.cfg.idle_poll) => {}
                    _ = self.stop.changed() => {}
                }
            }
        } else {
            if let Ok(mut t) = self.idle_at.lock() {
                *t = None;
            }
            processor.tick(now_ms()).await?;
            self.progress(batch, processor.unapplied()).await?;
        }
        Ok(())
    }

    /// After a read and what it led to (windows applied on time, or flushed): keeps how far
    /// behind the tip the shard is for the next renewal, and reports at once when it has just
    /// reached the tip with everything applied.
    async fn progress(&self, batch: &ReadBatch, unapplied: bool) -> Result<(), ConsumerError> {
        if self.note_progress(batch, unapplied) {
            self.report_progress().await?;
        }
        Ok(())
    }

    /// Keeps how far behind the tip this read was, for the next renewal: 0 once a read comes back
    /// empty at the tip with everything read applied (however long ago the last record arrived),
    /// else the stream's iterator age; a read that says neither — or a caught-up read with a
    /// window still open — leaves the last report. Returns whether the shard has just reached its
    /// tip (it was behind, or never reported).
    fn note_progress(&self, batch: &ReadBatch, unapplied: bool) -> bool {
        let behind = if batch.is_caught_up() {
            (!unapplied).then_some(0)
        } else {
            batch.millis_behind_latest.map(|m| m.max(0))
        };
        let Some(behind_ms) = behind else {
            return false;
        };
        let reached = behind_ms == 0 && self.keeper.progress().is_none_or(|r| r.behind_ms > 0);
        self.keeper.set_progress(ReadProgress {
            at_ms: now_ms(),
            behind_ms,
        });
        reached
    }

    /// Says at once, with a renewal, that the shard is read to its tip: readers of the lease rows
    /// see the lag go to 0 now, not at the next renewal (which a short `--until-idle` run may not
    /// reach). A failure other than a lost lease waits for the next renewal.
    async fn report_progress(&self) -> Result<(), ConsumerError> {
        let leases = self.deps.leases.as_ref();
        match renew(leases, &self.fence, &self.keeper, &self.metrics).await {
            Ok(()) => Ok(()),
            Err(e @ PortError::Fenced { .. }) => Err(e.into()),
            Err(e) => {
                warn!(error = %e, "reporting the shard's progress failed; the next renewal will");
                Ok(())
            }
        }
    }

    /// Whether the stream answers but no longer lists this shard (a closed shard past retention),
    /// as opposed to a stream that is missing or unreachable.
    async fn gone_from_stream(&self) -> Result<bool, ConsumerError> {
        let stream = self.deps.stream.clone();
        let shards =
            with_bounded_backoff(&self.ctx.backoff, "ListShards", || stream.list_shards()).await?;
        Ok(!shards.iter().any(|s| s.shard_id == self.fence.shard_id))
    }

    /// One read, retried with backoff on throttling and other retryable errors.
    async fn read(&self, reader: &mut dyn ShardReader) -> Result<ReadBatch, ConsumerError> {
        // A reader is borrowed mutably per call, so the loop is here; the policy is `Retry`'s.
        let mut retry = Retry::new(&self.ctx.backoff, "GetRecords");
        loop {
            match reader.next_batch(self.cfg.batch_limit).await {
                Ok(b) => return Ok(b),
                Err(e) => retry.pause(e).await?,
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease as `keeper` says (its expiry, the holder's progress and address), and notes
/// that it did.
async fn renew(
    leases: &dyn LeaseStore,
    fence: &Fence,
    keeper: &LeaseKeeper,
    metrics: &LeaseMetrics,
) -> Result<(), PortError> {
    let r = keeper.renewal();
    let asked = leases
        .renew_lease(fence, r.expires_ms, r.progress, r.addr.as_deref())
        .await?;
    metrics.renewed.fetch_add(1, Ordering::Relaxed);
    keeper.extended(&r, asked);
    Ok(())
}

/// Renews a lease whenever the last write that extended it (a renewal, or a processor's write of
/// the lease row that carried one, [`LeaseKeeper`]) is `renew_interval` old, until it is lost
/// (then raises `lost`) or aborted.
async fn renew_loop(
    leases: Arc<dyn LeaseStore>,
    fence: Fence,
    renew_interval: Duration,
    lost: watch::Sender<bool>,
    metrics: Arc<LeaseMetrics>,
    keeper: LeaseKeeper,
) {
    loop {
        let wait = keeper.due_in();
        if !wait.is_zero() {
            // Extended meanwhile by another write: due later.
            tokio::time::sleep(wait).await;
            continue;
        }
        match renew(leases.as_ref(), &fence, &keeper, &metrics).await {
            Ok(()) => {}
            Err(PortError::Fenced { .. }) => {
                let _ = lost.send(true);
                return;
            }
            // A renewal interval later it tries again: renewals run at most half the lease
            // duration apart.
            Err(e) => {
                warn!(error = %e, "renewing lease failed");
                tokio::time::sleep(renew_interval).await;
            }
        }
    }
}
