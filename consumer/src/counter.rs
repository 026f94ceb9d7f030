//! The counter: exact per-post counts, applied exactly once.
//!
//! Per shard: read → decode and validate → dedup by `event_id` → fold into a tumbling window of
//! per-post deltas that closes on size or time → cut the window's write items into chunks →
//! apply each chunk in one atomic write together with the shard's checkpoint row, conditioned on
//! the lease (owner and epoch) and on the progress recorded there. The first chunk records the
//! window's end in the checkpoint row ("pending"), which fixes the window's content; a worker
//! that restarts, or takes the lease over, re-reads the same records from the checkpoint, rebuilds
//! the same window and applies only the chunks not yet applied. The last chunk also stores the
//! window's dedup record and its global-total delta, and moves the checkpoint past the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tally_core::cost::{chunk_units, Purpose, Units};
use tally_core::dedup::Dedup;
use tally_core::lease::Lease;
use tally_core::ports::{
    ChunkCommit, CounterStore, Fence, GapCommit, LastChunk, Pending, PortError, ReadBatch,
    StartPosition, WindowShape,
};
use tally_core::retry::Backoff;
use tally_core::window::{plan_chunks, ClosedWindow, DeadLetter, WindowBuilder};
use tally_core::SeqNo;
use tracing::debug;

use crate::retry::with_backoff;
use crate::worker::{ProcessorFactory, ShardProcessor};
use crate::ConsumerError;

/// Empty reads at the shard's tip, in a row, after which a pending window whose last record was
/// never met is taken as trimmed.
const TIP_READS_FOR_A_GAP: u32 = 3;

/// Why a pending window cannot be completed.
const TRIMMED: &str =
    "the stream's retention trimmed the pending window's records before it was completed";

/// The counter's settings.
#[derive(Clone, Debug)]
pub struct CounterConfig {
    /// Application name (leases and checkpoints).
    pub app: String,
    /// A window closes after this many records…
    pub window_records: usize,
    /// …or this long after it opened, whichever comes first.
    pub window_time: Duration,
    /// A retry of an event is recognised for this long after the event arrived.
    pub dedup_horizon: Duration,
    /// Caps the store's items per atomic write (0: the store's own limit).
    pub max_items_per_commit: usize,
    /// Backoff for retryable store errors.
    pub backoff: Backoff,
    /// Test failpoint: abort the process right after this many chunk commits.
    pub crash_after_chunks: Option<u64>,
    /// Where a recorded gap is reported as a metric (CloudWatch embedded metric format).
    pub emf: crate::emf::Emf,
}

impl CounterConfig {
    /// Defaults.
    pub fn new(app: &str) -> CounterConfig {
        CounterConfig {
            app: app.to_owned(),
            window_records: 5_000,
            window_time: Duration::from_secs(1),
            dedup_horizon: Duration::from_secs(600),
            max_items_per_commit: 0,
            backoff: Backoff::default(),
            crash_after_chunks: None,
            emf: crate::emf::Emf::default(),
        }
    }
}

/// What the counter did, for reports and metrics.
#[derive(Debug, Default)]
pub struct CounterMetrics {
    pub records: AtomicU64,
    pub counted: AtomicU64,
    pub duplicates: AtomicU64,
    pub malformed: AtomicU64,
    pub windows: AtomicU64,
    pub chunks: AtomicU64,
    /// Items written to the store, as a DynamoDB table would count them (a summary item, a dead
    /// letter, the checkpoint row, the dedup record, the global total).
    pub items_written: AtomicU64,
    /// What those writes cost in DynamoDB write units, by purpose (see `tally_core::cost`).
    pub cost: CostMeter,
    /// The largest iterator age seen (ms).
    pub max_iterator_age_ms: AtomicU64,
}

/// Write units by purpose, added up from every shard task.
#[derive(Debug, Default)]
pub struct CostMeter([AtomicU64; 7]);

impl CostMeter {
    pub fn add(&self, u: &Units) {
        for (i, p) in Purpose::ALL.iter().enumerate() {
            self.0[i].fetch_add(u.get(*p), Ordering::Relaxed);
        }
    }

    pub fn add_one(&self, p: Purpose, n: u64) {
        let mut u = Units::default();
        u.add(p, n);
        self.add(&u);
    }

    pub fn snapshot(&self) -> Units {
        let mut u = Units::default();
        for (i, p) in Purpose::ALL.iter().enumerate() {
            u.add(*p, self.0[i].load(Ordering::Relaxed));
        }
        u
    }
}

/// Makes a [`CounterShard`] per shard.
pub struct Counter {
    store: Arc<dyn CounterStore>,
    cfg: CounterConfig,
    metrics: Arc<CounterMetrics>,
}

impl Counter {
    pub fn new(
        store: Arc<dyn CounterStore>,
        cfg: CounterConfig,
        metrics: Arc<CounterMetrics>,
    ) -> Counter {
        Counter {
            store,
            cfg,
            metrics,
        }
    }
}

impl ProcessorFactory for Counter {
    fn create(&self, shard_id: &str) -> Box<dyn ShardProcessor> {
        Box::new(CounterShard {
            store: self.store.clone(),
            cfg: self.cfg.clone(),
            metrics: self.metrics.clone(),
            shard_id: shard_id.to_owned(),
            fence: None,
            dedup: Dedup::new(self.cfg.dedup_horizon.as_millis() as i64),
            window: None,
            checkpoint: None,
            replay: None,
            tip_reads: 0,
        })
    }
}

/// The counter's state for one held shard.
pub struct CounterShard {
    store: Arc<dyn CounterStore>,
    cfg: CounterConfig,
    metrics: Arc<CounterMetrics>,
    shard_id: String,
    /// Set by `start`.
    fence: Option<Fence>,
    dedup: Dedup,
    /// The open window.
    window: Option<WindowBuilder>,
    /// The last record whose window is fully applied.
    checkpoint: Option<SeqNo>,
    /// A window found half-applied at start: it is rebuilt up to `end` and its first `done`
    /// chunks are skipped.
    replay: Option<Pending>,
    /// Empty reads at the tip in a row while `replay` waits for its last record.
    tip_reads: u32,
}

impl CounterShard {
    fn fence(&self) -> Result<&Fence, ConsumerError> {
        self.fence
            .as_ref()
            .ok_or_else(|| ConsumerError::Inconsistent {
                shard_id: self.shard_id.clone(),
                detail: "processor used before start".into(),
            })
    }

    async fn close_and_apply(&mut self, skip: u32, shard_end: bool) -> Result<(), ConsumerError> {
        let Some(window) = self.window.take() else {
            return Ok(());
        };
        let closed = window.close(&mut self.dedup);
        let shape = match &self.replay {
            Some(Pending {
                shape: Some(shape), ..
            }) => *shape,
            _ => self.shape(),
        };
        let charged = self.apply(&closed, skip, shard_end, shape).await?;
        self.emit_cost(&charged);
        if self.dedup.take_evicted() {
            self.expire_dedup(shape.horizon_ms).await;
        }
        let s = &closed.stats;
        self.metrics.counted.fetch_add(s.counted, Ordering::Relaxed);
        self.metrics
            .duplicates
            .fetch_add(s.duplicates, Ordering::Relaxed);
        self.metrics
            .malformed
            .fetch_add(s.malformed, Ordering::Relaxed);
        self.metrics.windows.fetch_add(1, Ordering::Relaxed);
        self.checkpoint = closed.end.clone();
        if self.replay.take().is_some() && self.dedup.horizon_ms() != self.shape().horizon_ms {
            // The completed window was built under an older horizon; what follows uses the
            // current one, restored as any restart at this checkpoint would restore it.
            let fence = self.fence()?.clone();
            let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
            self.dedup = self
                .restore_dedup(&fence, &st.lease, self.shape().horizon_ms)
                .await?;
        }
        Ok(())
    }

    /// Emits what a window's writes cost, by purpose (CloudWatch embedded metric format).
    fn emit_cost(&self, u: &Units) {
        let Ok(fence) = self.fence() else { return };
        let values: Vec<(&str, crate::emf::Unit, f64)> = Purpose::ALL
            .iter()
            .filter(|p| **p != Purpose::Leases)
            .map(|p| (p.metric(), crate::emf::Unit::Count, u.get(*p) as f64))
            .collect();
        self.cfg.emf.emit(
            crate::worker::now_ms(),
            &[("App", fence.app.as_str())],
            &[&["App"]],
            &values,
        );
    }

    /// Puts records the stream no longer has on record as a gap (a dead letter whose reason
    /// starts with `gap:`), in one atomic write that moves the checkpoint past them (and finishes
    /// the shard when `finished`), then goes on from there. Never a silent stall; never silent
    /// loss either: `tally dead-letters` lists the gap with its sequence range.
    async fn give_up(&mut self, finished: bool, why: &str) -> Result<(), ConsumerError> {
        let fence = self.fence()?.clone();
        let pending = self.replay.clone();
        let after = self
            .checkpoint
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |c| c.to_string());
        let what = match &pending {
            Some(p) => format!(
                "records after {after} through {} are lost to that window ({} of its {} chunks \
                 were applied, so its likes are partly counted)",
                p.end, p.done, p.count
            ),
            None => format!("records after {after} were never read"),
        };
        let at = pending
            .as_ref()
            .map(|p| p.end.clone())
            .or_else(|| self.checkpoint.clone())
            .or_else(|| SeqNo::parse("0"))
            .ok_or_else(|| ConsumerError::Inconsistent {
                shard_id: self.shard_id.clone(),
                detail: "no sequence number for a gap".into(),
            })?;
        let gap = DeadLetter {
            shard_id: self.shard_id.clone(),
            seq: at,
            arrival_ms: crate::worker::now_ms(),
            reason: format!("gap: {why}: {what}"),
            data: Vec::new(),
            size: 0,
        };
        let end = pending.as_ref().map(|p| p.end.clone());
        let commit = GapCommit {
            fence: &fence,
            start_after: self.checkpoint.as_ref(),
            pending_end: end.as_ref(),
            through: end.as_ref(),
            finished,
            gap: &gap,
        };
        with_backoff(&self.cfg.backoff, "record a gap", || {
            self.store.commit_gap(commit.clone())
        })
        .await?;
        tracing::error!(reason = %gap.reason, "records lost to the stream's retention; recorded as a gap");
        self.cfg.emf.emit(
            gap.arrival_ms,
            &[("App", fence.app.as_str())],
            &[&["App"]],
            &[(crate::worker::metric::GAPS, crate::emf::Unit::Count, 1.0)],
        );
        if let Some(end) = end {
            self.checkpoint = Some(end);
        }
        self.replay = None;
        self.window = None;
        // The filter as a restart at the new checkpoint would restore it (the given-up window's
        // ids were never stored).
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        self.dedup = self
            .restore_dedup(&fence, &st.lease, self.shape().horizon_ms)
            .await?;
        Ok(())
    }

    /// Deletes this shard's dedup records that the checkpoint's clock has passed by more than the
    /// horizon: no restore at this checkpoint or later can need them. Best effort — a record left
    /// behind is skipped by every restore and removed by the store's backstop expiry.
    async fn expire_dedup(&self, horizon_ms: i64) {
        let Ok(fence) = self.fence() else { return };
        let before = Dedup::min_arrival_to_restore(horizon_ms, self.dedup.running_max());
        let r = with_backoff(&self.cfg.backoff, "expire dedup records", || {
            self.store.expire_dedup(&fence.app, &fence.shard_id, before)
        })
        .await;
        match r {
            Ok(units) => self.metrics.cost.add_one(Purpose::Dedup, units),
            Err(e) => {
                tracing::warn!(error = %e, "expiring dedup records failed; restores skip them")
            }
        }
    }

    /// The shape of a window built now, from the current settings.
    fn shape(&self) -> WindowShape {
        let mut max = self.store.max_items_per_commit();
        if self.cfg.max_items_per_commit > 0 {
            max = max.min(self.cfg.max_items_per_commit);
        }
        WindowShape {
            max_items: max as u32,
            horizon_ms: self.cfg.dedup_horizon.as_millis() as i64,
        }
    }

    /// The duplicate filter as it stood at `row`'s checkpoint: this shard's dedup records within
    /// the horizon of its clock, and those of every ancestor (across any number of reshards) that
    /// can still hold an id within it. A shard that has not checkpointed yet starts at its
    /// parents' clock, so a new child loads only their last `horizon` of ids, not their history.
    async fn restore_dedup(
        &self,
        fence: &Fence,
        row: &Lease,
        horizon_ms: i64,
    ) -> Result<Dedup, ConsumerError> {
        // The clock: this shard's own, or, before its first checkpoint, its parents' (through
        // any ancestor that finished without a record of its own). Ancestors finished before
        // this shard began, so their clocks are behind the shard's.
        let mut clock = row.max_arrival;
        let mut frontier = row.parents.clone();
        let mut seen = std::collections::HashSet::new();
        while let Some(id) = frontier.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(a) = self.lease_row(&fence.app, &id).await? {
                if a.max_arrival == i64::MIN {
                    frontier.extend(a.parents);
                } else {
                    clock = clock.max(a.max_arrival);
                }
            }
        }
        let min = Dedup::min_arrival_to_restore(horizon_ms, clock);
        // Walk up the lineage; an ancestor whose clock is below `min` holds nothing newer, and
        // neither do its own ancestors. A row that is gone was deleted only once every child's
        // clock had passed its own by more than the horizon: nothing in it can matter here.
        let mut shards = vec![fence.shard_id.clone()];
        let mut frontier = row.parents.clone();
        while let Some(id) = frontier.pop() {
            if shards.contains(&id) {
                continue;
            }
            let Some(a) = self.lease_row(&fence.app, &id).await? else {
                continue;
            };
            if a.max_arrival == i64::MIN || a.max_arrival >= min {
                frontier.extend(a.parents);
                shards.push(id);
            }
        }
        let records = self.store.load_dedup(&fence.app, &shards, min).await?;
        let dedup = Dedup::restore(horizon_ms, clock, records);
        tracing::info!(
            ids = dedup.len(),
            shards = ?shards,
            clock,
            horizon_ms,
            "dedup filter restored"
        );
        Ok(dedup)
    }

    /// A shard's lease row, `None` if it was cleaned up.
    async fn lease_row(&self, app: &str, shard_id: &str) -> Result<Option<Lease>, ConsumerError> {
        match self.store.shard_state(app, shard_id).await {
            Ok(st) => Ok(Some(st.lease)),
            Err(PortError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn apply(
        &self,
        w: &ClosedWindow,
        skip: u32,
        shard_end: bool,
        shape: WindowShape,
    ) -> Result<Units, ConsumerError> {
        let fence = self.fence()?;
        let Some(end) = w.end.as_ref() else {
            return Ok(Units::default());
        };
        let mut charged = Units::default();
        let chunks = plan_chunks(w.items.len(), (shape.max_items as usize).max(1));
        debug!(end = %end, items = w.items.len(), chunks = chunks.len(), skip, "applying window");
        for chunk in chunks.iter().skip(skip as usize) {
            let is_last = chunk.index + 1 == chunk.count;
            let commit = ChunkCommit {
                fence,
                start_after: w.start_after.as_ref(),
                end,
                index: chunk.index,
                count: chunk.count,
                shape,
                items: &w.items[chunk.range.clone()],
                last: is_last.then_some(LastChunk {
                    dedup: &w.dedup,
                    total_delta: w.total_delta,
                    shard_finished: shard_end,
                }),
            };
            charged.merge(&self.commit_once(commit).await?);
            self.metrics.chunks.fetch_add(1, Ordering::Relaxed);
            // The items, the lease row, and on the last chunk the dedup record and global total.
            let extra = if is_last { 3 } else { 1 };
            self.metrics
                .items_written
                .fetch_add((chunk.range.len() + extra) as u64, Ordering::Relaxed);
            if let Some(n) = self.cfg.crash_after_chunks {
                if self.metrics.chunks.load(Ordering::Relaxed) >= n {
                    eprintln!("failpoint: aborting after {n} chunk commits");
                    std::process::abort();
                }
            }
        }
        Ok(charged)
    }

    /// Commits one chunk, retrying retryable errors. A failed condition is told apart by reading
    /// the checkpoint row back: still our lease (same owner and epoch) with this chunk recorded
    /// as applied means an earlier attempt landed although its answer was lost (a timeout, a
    /// dropped connection, an SDK-level retry) — only this take of the lease can have written
    /// it, so it is done; still our lease otherwise is an inconsistency; another owner or
    /// epoch means the lease was lost.
    async fn commit_once(&self, commit: ChunkCommit<'_>) -> Result<Units, ConsumerError> {
        let result = with_backoff(&self.cfg.backoff, "commit chunk", || {
            self.store.commit_chunk(commit.clone())
        })
        .await;
        let units = chunk_units(commit.items, commit.last.as_ref().map(|l| l.dedup));
        match result {
            Ok(()) => {
                self.metrics.cost.add(&units);
                Ok(units)
            }
            Err(PortError::Fenced { .. }) => {
                // A write refused by its condition is charged all the same.
                self.metrics
                    .cost
                    .add_one(Purpose::FailedConditions, units.total());
                let st = self
                    .store
                    .shard_state(&commit.fence.app, &commit.fence.shard_id)
                    .await?;
                let mine = st.lease.owner.as_deref() == Some(commit.fence.owner.as_str())
                    && st.lease.epoch == commit.fence.epoch;
                let applied = if commit.last.is_some() {
                    st.pending.is_none() && st.lease.checkpoint.as_ref() == Some(commit.end)
                } else {
                    st.pending
                        .as_ref()
                        .is_some_and(|p| &p.end == commit.end && p.done == commit.index + 1)
                };
                if mine && applied {
                    // An earlier attempt landed (and was charged) although its answer was lost.
                    self.metrics.cost.add(&units);
                    let mut charged = units;
                    charged.add(Purpose::FailedConditions, units.total());
                    return Ok(charged);
                }
                if mine {
                    return Err(ConsumerError::Inconsistent {
                        shard_id: commit.fence.shard_id.clone(),
                        detail: format!(
                            "the checkpoint row (checkpoint {:?}, pending {:?}) does not match chunk {} of {} of the window ending at {}",
                            st.lease.checkpoint, st.pending, commit.index, commit.count, commit.end
                        ),
                    });
                }
                Err(PortError::Fenced {
                    app: commit.fence.app.clone(),
                    shard_id: commit.fence.shard_id.clone(),
                }
                .into())
            }
            Err(e) if e.is_retryable() => Err(e.into()),
            Err(e) => Err(ConsumerError::Window {
                shard_id: commit.fence.shard_id.clone(),
                after: commit
                    .start_after
                    .map_or_else(|| "the shard's start".to_owned(), |s| s.to_string()),
                end: commit.end.to_string(),
                source: Box::new(e),
            }),
        }
    }
}

#[async_trait]
impl ShardProcessor for CounterShard {
    async fn start(
        &mut self,
        fence: &Fence,
        lease: &Lease,
    ) -> Result<StartPosition, ConsumerError> {
        self.fence = Some(fence.clone());
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        debug_assert_eq!(st.lease.parents, lease.parents);
        self.checkpoint = st.lease.checkpoint.clone();
        self.replay = st.pending.clone();
        self.window = None;
        // A half-applied window is rebuilt with the horizon it was built with; a child shard
        // also remembers its ancestors' recent ids, since a retry may land across reshards.
        let horizon = match &self.replay {
            Some(Pending { shape: Some(s), .. }) => s.horizon_ms,
            _ => self.shape().horizon_ms,
        };
        self.dedup = self.restore_dedup(fence, &st.lease, horizon).await?;
        if let Some(p) = &self.replay {
            tracing::info!(end = %p.end, done = p.done, count = p.count, "resuming a half-applied window");
        }
        Ok(StartPosition::after(self.checkpoint.as_ref()))
    }

    async fn process(&mut self, batch: &ReadBatch, now_ms: i64) -> Result<(), ConsumerError> {
        if let Some(age) = batch.millis_behind_latest {
            self.metrics
                .max_iterator_age_ms
                .fetch_max(age.max(0) as u64, Ordering::Relaxed);
        }
        if self.replay.is_some() && batch.is_caught_up() {
            // At the shard's tip without having met the pending window's last record: the
            // stream no longer has it. Several reads in a row must say so, so that one early
            // empty answer from a stream is not taken for it.
            self.tip_reads += 1;
            if self.tip_reads >= TIP_READS_FOR_A_GAP {
                self.give_up(false, TRIMMED).await?;
            }
        } else if !batch.records.is_empty() {
            self.tip_reads = 0;
        }
        for record in &batch.records {
            if self.replay.as_ref().is_some_and(|p| record.seq > p.end) {
                self.give_up(false, TRIMMED).await?;
            }
            self.metrics.records.fetch_add(1, Ordering::Relaxed);
            let window = self
                .window
                .get_or_insert_with(|| WindowBuilder::new(self.checkpoint.clone(), now_ms));
            window.push(&self.shard_id, record, &mut self.dedup);
            match &self.replay {
                Some(p) if record.seq == p.end => {
                    let done = p.done;
                    self.close_and_apply(done, false).await?;
                }
                Some(_) => {}
                None if self
                    .window
                    .as_ref()
                    .is_some_and(|w| w.len() >= self.cfg.window_records) =>
                {
                    self.close_and_apply(0, false).await?
                }
                None => {}
            }
        }
        Ok(())
    }

    async fn tick(&mut self, now_ms: i64) -> Result<(), ConsumerError> {
        let due = self
            .window
            .as_ref()
            .is_some_and(|w| now_ms - w.opened_at_ms() >= self.cfg.window_time.as_millis() as i64);
        if due && self.replay.is_none() {
            self.close_and_apply(0, false).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        if self.replay.is_some() {
            if shard_end {
                return self.give_up(true, TRIMMED).await;
            }
            // The rest of the pending window is not read yet; the next owner completes it.
            return Ok(());
        }
        if self.window.as_ref().is_some_and(|w| !w.is_empty()) {
            self.close_and_apply(0, shard_end).await
        } else if shard_end {
            let fence = self.fence()?.clone();
            Ok(self.store.mark_finished(&fence).await?)
        } else {
            Ok(())
        }
    }

    fn waiting(&self) -> bool {
        self.replay.is_some()
    }

    async fn shard_gone(&mut self) -> Result<(), ConsumerError> {
        self.give_up(
            true,
            "the shard is gone from the stream (past its retention) before it was read to its end",
        )
        .await
    }
}
