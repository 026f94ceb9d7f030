#![warn(missing_docs)]
//! The analytics consumer: trending posts and latency, an application of its own with its own
//! leases and checkpoints over the same stream.
//!
//! Per shard it folds likes into a bounded trending sketch ([`tally_core::trending`]) and
//! records latencies ([`tally_core::latency`]); every window (size or time) it stores the sketch
//! and the window's histograms atomically with its checkpoint. Reading commands merge the shards'
//! sketches and histograms. Producer retries count once, with the counter's semantics: each
//! window's first-seen event ids are stored with its snapshot, and a restart (or a lease move)
//! restores the filter across the shard's lineage within the dedup horizon.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod fold;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tally_consumer::emf::{Emf, Unit};
use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_consumer::ConsumerError;
use tally_core::clock::now_ms;
use tally_core::config::ReadMode;
use tally_core::config::{millis, range, Invalid};
use tally_core::latency::{percentiles, Latency, Percentiles};
use tally_core::lease::Lease;
use tally_core::ports::{
    all_time, AnalyticsReader, AnalyticsSnapshot, AnalyticsStore, Fence, PortResult, ReadBatch,
    StartPosition, StreamRecord, TrendingEntry,
};
use tally_core::trending::{merge, Trending};

use crate::fold::Fold;
use tally_core::boundary::{Extent, Parts};
use tally_core::kpl::Took;
use tally_core::Position;

/// The names of the metrics analytics emits per stored window (dimension `App`), in
/// milliseconds; the CloudWatch alarms in `terraform/` use them.
pub mod metric {
    /// Processing time − `created_at`: median, 99th percentile and maximum of the window.
    pub const CREATION_P50_MS: &str = "CreationToProcessingP50Ms";
    /// See [`CREATION_P50_MS`].
    pub const CREATION_P99_MS: &str = "CreationToProcessingP99Ms";
    /// See [`CREATION_P50_MS`].
    pub const CREATION_MAX_MS: &str = "CreationToProcessingMaxMs";
    /// Processing time − arrival in the stream, 99th percentile.
    pub const ARRIVAL_P99_MS: &str = "ArrivalToProcessingP99Ms";
    /// All of them.
    pub const ALL: &[&str] = &[
        CREATION_P50_MS,
        CREATION_P99_MS,
        CREATION_MAX_MS,
        ARRIVAL_P99_MS,
    ];
}

/// The analytics settings: the `[analytics]` section of the settings (durations in the unit
/// their key names) — what a user sets there, and nothing else ([`AnalyticsContext`]).
#[serde_with::serde_as]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnalyticsConfig {
    /// Posts kept by each shard's sketch: memory is bounded by this, not by distinct posts.
    pub sketch_capacity: usize,
    /// Half-life of the decayed like rate.
    #[serde(rename = "half_life_secs")]
    #[serde_as(as = "serde_with::DurationSeconds<u64>")]
    pub half_life: Duration,
    /// A snapshot is stored after this many user records (a KPL aggregate's count one by one; at
    /// most `tally_core::window::MAX_WINDOW_RECORDS`, as its first-seen ids are one store item)…
    pub window_records: usize,
    /// …or this long after the window opened.
    #[serde(rename = "window_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub window_time: Duration,
    /// How analytics reads Kinesis: `polling` (GetRecords) or `efo` (enhanced fan-out).
    pub read_mode: ReadMode,
}

/// What analytics runs with beside its settings — none of it an `[analytics]` setting: its
/// application name, where its metrics go, and what it takes from the counter's settings (the
/// dedup horizon, the count mode) and the input's. Passed to [`Analytics::new`].
#[derive(Clone, Debug)]
pub struct AnalyticsContext {
    /// Application name (leases and checkpoints).
    pub app: String,
    /// Each stored window's latency percentiles as CloudWatch embedded metric format, when on.
    pub emf: Emf,
    /// A retry of an event is recognised for this long after the event arrived (the counter's).
    pub dedup_horizon: Duration,
    /// What the counter counts: counting likers, a user's likes of a post are one like within
    /// the horizon.
    pub count: tally_core::edge::CountMode,
    /// What the records are (`[input]`: like events, or a table's change records).
    pub input: tally_core::input::Input,
}

impl Default for AnalyticsContext {
    /// The analytics application's, with the counter's defaults.
    fn default() -> Self {
        AnalyticsContext {
            app: tally_core::apps::ANALYTICS.to_owned(),
            emf: Emf::default(),
            dedup_horizon: tally_core::dedup::DEFAULT_HORIZON,
            count: tally_core::edge::CountMode::default(),
            input: tally_core::input::Input::default(),
        }
    }
}

impl Default for AnalyticsConfig {
    /// The defaults.
    fn default() -> Self {
        AnalyticsConfig {
            sketch_capacity: 200,
            half_life: Duration::from_secs(300),
            window_records: 20_000,
            window_time: Duration::from_secs(5),
            read_mode: ReadMode::Polling,
        }
    }
}

impl AnalyticsConfig {
    /// The `[analytics]` section's ranges (keys without the section).
    pub fn validate(&self) -> Result<(), Invalid> {
        // The sketch is stored as one DynamoDB item (≤ 400 KB) per shard.
        range("sketch_capacity", self.sketch_capacity, 1, 5_000)?;
        range("half_life_secs", self.half_life.as_secs(), 1, 30 * 86_400)?;
        // A window's first-seen ids are one store item, as the counter's are.
        range(
            "window_records",
            self.window_records,
            1,
            tally_core::window::MAX_WINDOW_RECORDS,
        )?;
        range("window_ms", millis(self.window_time), 1, 600_000)
    }
}

/// Counters for reports.
#[derive(Debug, Default, serde::Serialize)]
pub struct AnalyticsMetrics {
    /// Records read.
    pub records: AtomicU64,
    /// Likes folded into the sketches.
    pub likes: AtomicU64,
    /// Windows stored (each a snapshot with its checkpoint).
    pub snapshots: AtomicU64,
}

/// Makes an [`AnalyticsShard`] per shard.
pub struct Analytics {
    store: Arc<dyn AnalyticsStore>,
    cfg: AnalyticsConfig,
    ctx: Arc<AnalyticsContext>,
    metrics: Arc<AnalyticsMetrics>,
}

impl Analytics {
    /// Analytics on `store`, configured by `cfg`, running in `ctx`, counting into `metrics`.
    pub fn new(
        store: Arc<dyn AnalyticsStore>,
        cfg: AnalyticsConfig,
        ctx: AnalyticsContext,
        metrics: Arc<AnalyticsMetrics>,
    ) -> Analytics {
        Analytics {
            store,
            cfg,
            ctx: Arc::new(ctx),
            metrics,
        }
    }
}

impl ProcessorFactory for Analytics {
    fn create(&self, fence: &Fence) -> Box<dyn ShardProcessor> {
        Box::new(AnalyticsShard {
            store: self.store.clone(),
            cfg: self.cfg.clone(),
            ctx: self.ctx.clone(),
            metrics: self.metrics.clone(),
            fence: fence.clone(),
            fold: {
                let f = Fold::new(
                    self.cfg.sketch_capacity,
                    self.cfg.half_life.as_millis() as i64,
                    ALL_TIME,
                    self.ctx.dedup_horizon.as_millis() as i64,
                );
                let f = f.input(self.ctx.input.clone());
                match self.ctx.count.keeps_edges() {
                    true => f.likers(),
                    false => f,
                }
            },
            extent: Extent::default(),
            checkpoint: None,
            opened_at_ms: 0,
        })
    }
}

/// One shard's analytics state.
pub struct AnalyticsShard {
    store: Arc<dyn AnalyticsStore>,
    cfg: AnalyticsConfig,
    ctx: Arc<AnalyticsContext>,
    metrics: Arc<AnalyticsMetrics>,
    /// The lease held: every write of the shard is fenced by it.
    fence: Fence,
    /// Sketches, dedup filter and the open window's histograms.
    fold: Fold,
    /// The open window: its last record (or user record of an aggregate), not yet
    /// checkpointed, and how many user records it holds.
    extent: Extent,
    /// The last one checkpointed.
    checkpoint: Option<Position>,
    opened_at_ms: i64,
}

impl AnalyticsShard {
    /// The stored window's latency percentiles as EMF (nothing when off or the window is empty).
    fn emit_latency(&self, at_ms: i64) {
        let creation = percentiles(&self.fold.latency.creation);
        let arrival = percentiles(&self.fold.latency.arrival);
        if creation.count == 0 {
            return;
        }
        self.ctx.emf.emit(
            at_ms,
            &[
                ("App", self.ctx.app.as_str()),
                ("ShardId", &self.fence.shard_id),
            ],
            &[&["App"]],
            &[
                (
                    metric::CREATION_P50_MS,
                    Unit::Milliseconds,
                    creation.p50 as f64,
                ),
                (
                    metric::CREATION_P99_MS,
                    Unit::Milliseconds,
                    creation.p99 as f64,
                ),
                (
                    metric::CREATION_MAX_MS,
                    Unit::Milliseconds,
                    creation.max as f64,
                ),
                (
                    metric::ARRIVAL_P99_MS,
                    Unit::Milliseconds,
                    arrival.p99 as f64,
                ),
            ],
        );
    }

    /// Stores the window: its sketch, histograms and first-seen ids, with its checkpoint.
    async fn snapshot(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        self.fold.settle();
        let dedup = self.fold.dedup.seal();
        let fence = &self.fence;
        let Some(end) = self.extent.end().cloned() else {
            if shard_end {
                self.store.mark_finished(fence).await?;
            }
            return Ok(());
        };
        let snap = AnalyticsSnapshot {
            shard_id: fence.shard_id.clone(),
            end,
            max_arrival: self.fold.dedup.running_max(),
            taken_at_ms: now_ms(),
            trending: self.fold.trending.entries(),
            trending_at_ms: self.fold.trending.now_ms().max(0),
            top_liked: self.fold.top_liked.entries(),
            latency: self.fold.latency.encode(),
            dedup,
            horizon_ms: self.fold.dedup.horizon_ms(),
            shard_finished: shard_end,
        };
        self.store.save_snapshot(fence, &snap).await?;
        if self.fold.dedup.take_evicted() {
            tally_consumer::dedup::expire(
                self.store.as_ref(),
                fence,
                &self.fold.dedup,
                self.fold.dedup.horizon_ms(),
                &tally_core::retry::Backoff::default(),
            )
            .await;
        }
        self.metrics.snapshots.fetch_add(1, Ordering::Relaxed);
        self.emit_latency(snap.taken_at_ms);
        self.fold.latency = Latency::default();
        self.checkpoint = self.extent.take_end();
        Ok(())
    }
}

/// Analytics' windows: each closes after `window_records` user records (inside a KPL aggregate if
/// need be: its dedup record is one store item) and is stored when it does.
impl AnalyticsShard {
    /// Folds one record, part by part ([`Parts`]), storing each window it fills.
    async fn fold_record(&mut self, r: &StreamRecord, now: i64) -> Result<(), ConsumerError> {
        let mut parts = Parts::of(r, self.checkpoint.as_ref());
        while let Some(from) = parts.next() {
            let (took, reached) = self.fold_part(r, from, now);
            if reached {
                self.snapshot(false).await?;
            }
            parts.took(took);
        }
        Ok(())
    }

    fn fold_part(&mut self, r: &StreamRecord, from: u32, now: i64) -> (Took, bool) {
        if self.extent.is_empty() {
            self.opened_at_ms = now;
        }
        let room = self.extent.room(self.cfg.window_records);
        let (took, likes) = self.fold.take(&mut self.extent, r, from, room, now);
        self.metrics.likes.fetch_add(likes, Ordering::Relaxed);
        (took, self.extent.len() >= self.cfg.window_records)
    }
}

#[async_trait]
impl ShardProcessor for AnalyticsShard {
    async fn start(&mut self, _lease: &Lease) -> Result<StartPosition, ConsumerError> {
        let fence = &self.fence;
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        self.fold.dedup = tally_consumer::dedup::restore(
            self.store.as_ref(),
            fence,
            &st.lease,
            self.ctx.dedup_horizon.as_millis() as i64,
        )
        .await?;
        let sketches = self.store.trending_sketches(&fence.app).await?;
        if let Some((_, entries, at)) = sketches.iter().find(|(s, _, _)| *s == fence.shard_id) {
            self.fold.trending = Trending::restore(
                self.cfg.sketch_capacity,
                self.cfg.half_life.as_millis() as i64,
                entries,
                *at,
            );
        }
        let all = self.store.trending_sketches(&all_time(&fence.app)).await?;
        if let Some((_, entries, at)) = all.iter().find(|(s, _, _)| *s == fence.shard_id) {
            self.fold.top_liked =
                Trending::restore(self.cfg.sketch_capacity, ALL_TIME, entries, *at);
        }
        self.checkpoint = st.lease.checkpoint.clone();
        self.extent = Extent::default();
        Ok(StartPosition::after(self.checkpoint.as_ref()))
    }

    async fn process(&mut self, batch: &ReadBatch, now: i64) -> Result<(), ConsumerError> {
        if let Some(t) = &batch.trimmed_through {
            // What was folded comes before the trimmed records: stored first, then the loss.
            self.snapshot(false).await?;
            let through = Position::whole(t.clone());
            self.give_up(Some(through), UNREAD).await?;
        }
        if let Some(age) = batch.millis_behind_latest {
            self.fold.latency.record_iterator_age(age);
        }
        for r in &batch.records {
            self.metrics.records.fetch_add(1, Ordering::Relaxed);
            self.fold_record(r, now).await?;
        }
        Ok(())
    }

    async fn tick(&mut self, now: i64) -> Result<(), ConsumerError> {
        let age = now - self.opened_at_ms;
        if !self.extent.is_empty() && age >= self.cfg.window_time.as_millis() as i64 {
            self.snapshot(false).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        self.snapshot(shard_end).await
    }

    fn unapplied(&self) -> bool {
        !self.extent.is_empty()
    }

    async fn shard_gone(&mut self) -> Result<(), ConsumerError> {
        self.snapshot(false).await?;
        self.give_up(
            None,
            "the shard is gone from the stream (past its retention) before it was read to its end",
        )
        .await
    }
}

/// Why records were never read: the stream said they were trimmed.
const UNREAD: &str = "the stream's retention trimmed records before they were read";

impl AnalyticsShard {
    /// Puts records the stream no longer has on record as a gap of this application, in one
    /// atomic write with the checkpoint: moved to `through`, or the shard finished when `None`
    /// (it is gone). Trending and latency then describe what was read, and say what was not.
    async fn give_up(&mut self, through: Option<Position>, why: &str) -> Result<(), ConsumerError> {
        let fence = &self.fence;
        let after = self
            .checkpoint
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |c| c.to_string());
        let what = match &through {
            Some(t) => format!("records after {after} through {t} were never read"),
            None => format!("records after {after} were never read"),
        };
        let gap = tally_core::dead_letter::DeadLetter::gap(
            &fence.shard_id,
            &fence.app,
            self.checkpoint.as_ref(),
            through.as_ref(),
            now_ms(),
            &format!("{why}: {what}"),
        );
        let commit = tally_core::ports::GapCommit {
            fence,
            start_after: self.checkpoint.as_ref(),
            pending_end: None,
            through: through.as_ref(),
            finished: through.is_none(),
            gap: &gap,
        };
        tally_consumer::retry::with_backoff(
            &tally_core::retry::Backoff::default(),
            "record a gap",
            || self.store.commit_gap(commit.clone()),
        )
        .await?;
        tracing::error!(reason = %gap.reason, "records lost to the stream's retention; recorded as a gap");
        if let Some(t) = through {
            self.checkpoint = Some(t);
        }
        Ok(())
    }
}

/// The "half-life" of the all-time sketch: long enough that nothing decays.
const ALL_TIME: i64 = i64::MAX;

/// The `k` posts liked most of all time across shards (likes received, unlikes aside), with the
/// sketch's over-estimate bound; memory is bounded by `analytics.sketch_capacity` per shard.
pub async fn top_liked(
    store: &dyn AnalyticsReader,
    app: &str,
    k: usize,
) -> PortResult<Vec<TrendingEntry>> {
    let sketches: Vec<(Vec<TrendingEntry>, i64)> = store
        .trending_sketches(&all_time(app))
        .await?
        .into_iter()
        .map(|(_, e, at)| (e, at))
        .collect();
    Ok(merge(&sketches, ALL_TIME, k))
}

/// The top `k` posts across shards.
pub async fn top(
    store: &dyn AnalyticsReader,
    app: &str,
    half_life: Duration,
    k: usize,
) -> PortResult<Vec<TrendingEntry>> {
    let sketches: Vec<(Vec<TrendingEntry>, i64)> = store
        .trending_sketches(app)
        .await?
        .into_iter()
        .map(|(_, e, at)| (e, at))
        .collect();
    Ok(merge(&sketches, half_life.as_millis() as i64, k))
}

/// Latency percentiles over the windows stored at or after `since_ms`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LatencyReport {
    /// Processing time − creation time.
    pub creation_ms: Percentiles,
    /// Processing time − arrival in the stream.
    pub arrival_ms: Percentiles,
    /// Iterator age per read.
    pub iterator_age_ms: Percentiles,
    /// Windows merged.
    pub windows: usize,
}

/// One stored window's percentiles.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct WindowLatency {
    /// When the window was stored (ms since the epoch).
    pub taken_at_ms: i64,
    /// Processing time − `created_at`.
    pub creation_ms: Percentiles,
    /// Processing time − arrival in the stream.
    pub arrival_ms: Percentiles,
    /// How far behind its shard's tip the reader was.
    pub iterator_age_ms: Percentiles,
}

/// The stored windows since a time: each one's percentiles, and their merge (histograms).
#[derive(Debug, Clone, Default)]
pub struct LatencyWindows {
    /// Each stored window, oldest first.
    pub windows: Vec<WindowLatency>,
    /// Their histograms merged.
    pub merged: Latency,
}

impl LatencyWindows {
    /// The merged percentiles.
    pub fn report(&self) -> LatencyReport {
        LatencyReport {
            creation_ms: percentiles(&self.merged.creation),
            arrival_ms: percentiles(&self.merged.arrival),
            iterator_age_ms: percentiles(&self.merged.iterator_age),
            windows: self.windows.len(),
        }
    }
}

/// Reads the stored latency windows since `since_ms`, oldest first, and merges them.
pub async fn latency_windows(
    store: &dyn AnalyticsReader,
    app: &str,
    since_ms: i64,
) -> PortResult<LatencyWindows> {
    let mut out = LatencyWindows::default();
    for (at, bytes) in store.latency_snapshots(app, since_ms).await? {
        // A window that does not decode is named, never dropped from the percentiles unsaid.
        let l = Latency::decode(&bytes).ok_or_else(|| tally_core::ports::PortError::Corrupt {
            item: format!("the latency window of {app} taken at {at} ms"),
            detail: format!("its {} bytes are not three histograms", bytes.len()),
        })?;
        out.windows.push(WindowLatency {
            taken_at_ms: at,
            creation_ms: percentiles(&l.creation),
            arrival_ms: percentiles(&l.arrival),
            iterator_age_ms: percentiles(&l.iterator_age),
        });
        out.merged.merge(&l);
    }
    Ok(out)
}

/// Merges the stored latency windows.
pub async fn latency(
    store: &dyn AnalyticsReader,
    app: &str,
    since_ms: i64,
) -> PortResult<LatencyReport> {
    Ok(latency_windows(store, app, since_ms).await?.report())
}
