#![warn(missing_docs)]
//! The counter: exact per-post counts, applied exactly once. An application on the consumer
//! runtime (`tally_consumer::worker`), as analytics is; neither knows the other.
//!
//! Per shard: read → decode and validate → dedup by `event_id` → fold into a tumbling window of
//! per-post deltas that closes on size or time → apply it: record the window's end as pending in
//! the lease row (fenced by owner and epoch), which fixes the window's content; write each touched
//! post's summary items with plain writes conditioned on the item's marker (a refused one was
//! applied already); write the dead letters, the shard's global-total delta and the window's
//! dedup record the same way; then move the checkpoint to the end (fenced, and only for that
//! pending window). A worker that restarts, or takes the lease over, re-reads the same records
//! from the checkpoint, rebuilds the same window and applies it again: what was written is
//! refused, what was not is written. See `tally_core::summary` for why this is exact.
//!
//! Counting likers the counter is two applications of this same processor: the stream's
//! ([`Counter::open`]), whose windows write each edge's latest event and count nothing, and the
//! edges' change log's ([`Counter::open_change_log`]), whose windows count the changes those
//! writes made — each logged once by the store, in the edge's order — as above.
//!
//! Layout: this crate's root holds the settings, the metrics and the per-shard processor; `app`
//! runs the counter application whole (one worker, or counting likers two);
//! `counting` is what differs by what is counted (chosen once by `Counter::open` or
//! `Counter::open_change_log`, which also claim the store's mode; `claim` names why a claim
//! fails); `apply` writes a closed window and
//! meters it — on a task of its own while the shard reads on — with what `writes` holds (the
//! store, settings, board and lease, and the batch calls every window's writes share);
//! `restore` keeps the duplicate filter in the store (restored across the lineage, expired by
//! arrival), `gap` gives up records the stream no longer has, on record; `board` shows the
//! windows read and not written to the read side.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use counting::Counting;
use tally_consumer::worker::{LeaseKeeper, ProcessorFactory, ShardProcessor};
use tally_consumer::ConsumerError;
use tally_core::boundary::Parts;
use tally_core::config::ReadMode;
use tally_core::config::{millis, range, Invalid};
use tally_core::cost::{Purpose, Units};
use tally_core::dedup::Dedup;
use tally_core::edge::CountMode;
use tally_core::input::Input;
use tally_core::kpl::Took;
use tally_core::lease::Lease;
use tally_core::ports::{CounterStore, Fence, Pending, ReadBatch, StartPosition, StreamRecord};
use tally_core::retry::Backoff;
use tally_core::window::{Bound, WindowBuilder};
use tally_core::Position;

pub mod app;
mod apply;
pub mod board;
mod claim;
mod counting;
mod gap;
mod holders;
pub mod rebuild;
mod writes;

use board::{Board, ShardWindows};
pub use claim::ClaimError;
use gap::{GONE, HEAD_TRIMMED, TIP_READS_FOR_A_GAP, TRIMMED};

/// The counter's settings: the `[counter]` section of the settings (durations in the unit their
/// key names) — what a user sets, and nothing the process adds ([`CounterContext`]).
#[serde_with::serde_as]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CounterConfig {
    /// A window closes after this many records (counting events, after 20,000 at most: its
    /// dedup record is one store item; behind the tip, after the shard's share of
    /// `worker_window_records` at most: [`CounterConfig::window_share`])…
    pub window_records: usize,
    /// …or this long after it opened, whichever comes first.
    #[serde(rename = "window_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub window_time: Duration,
    /// Also close a window as soon as a read reaches the shard's tip: counts are visible within
    /// a poll at low rates, at the price of more (smaller) windows; at high rates windows fill
    /// before the tip is reached, so nothing changes there.
    pub close_when_caught_up: bool,
    /// At a low rate, a worker that shows its open windows to the read side (`--http`:
    /// provisional counts) keeps a window holding fewer than `window_min_records` records open
    /// past `window_ms`, up to this long after it opened, so that its fixed writes (the lease
    /// row's two, the global total, the dedup record) are shared by more likes; the read side
    /// shows the likes from the open window meanwhile. No effect at or below `window_ms`.
    #[serde(rename = "window_max_ms")]
    #[serde_as(as = "serde_with::DurationMilliSeconds<u64>")]
    pub window_max_time: Duration,
    /// See `window_max_ms`.
    pub window_min_records: usize,
    /// How the counter reads Kinesis: `polling` (GetRecords) or `efo` (enhanced fan-out).
    pub read_mode: ReadMode,
    /// What a post's count is: its likers (each edge's latest action) or its distinct events.
    /// A store counted in one refuses the other.
    pub count: CountMode,
    /// A retry of an event is recognised for this long after the event arrived (events mode;
    /// likers need no duplicate filter). Also analytics' horizon and the lineage's.
    #[serde(rename = "dedup_horizon_secs")]
    #[serde_as(as = "serde_with::DurationSeconds<u64>")]
    pub dedup_horizon: Duration,
    /// Posts whose items (or a window's edges) one store call writes (the embedded store: one
    /// SQLite transaction; DynamoDB: that many items, a few dozen requests in flight at a
    /// time). Unset: the store's own ([`tally_core::ports::WindowWriter::posts_per_call`]),
    /// set when the counter opens; read it with [`CounterConfig::batch`].
    pub posts_per_batch: Option<usize>,
    /// The records a worker's windows may hold together (their memory, about 500 bytes each),
    /// shared equally by the shards it holds, each of which has two windows at most (one open,
    /// one being written); a window's share is never below 20,000 records (the bound counting
    /// events), so a worker of many shards keeps windows of 20,000.
    pub worker_window_records: usize,
}

/// What the process adds to the counter's settings — none of it a setting: how store calls are
/// retried, the tests' failpoint, where its metrics go, what the records are. Passed to
/// [`Counter::open`] beside the [`CounterConfig`].
#[derive(Clone, Debug, Default)]
pub struct CounterContext {
    /// Backoff for retryable store errors.
    pub backoff: Backoff,
    /// Test failpoint: abort the process right after this many batches of post writes.
    pub crash_after_batches: Option<u64>,
    /// Where a recorded gap is reported as a metric (CloudWatch embedded metric format).
    pub emf: tally_consumer::emf::Emf,
    /// What the records are (`[input]`: like events, or a table's change records).
    pub input: Input,
    /// The stream it counts (`kinesis:<region>:<name>`, `embedded:<name>`): claimed in the store
    /// when the counter opens it; a store counted from another stream is refused.
    pub stream: String,
}

impl Default for CounterConfig {
    /// The defaults.
    fn default() -> Self {
        CounterConfig {
            window_records: tally_core::window::MAX_LIKERS_WINDOW_RECORDS,
            window_time: Duration::from_secs(1),
            close_when_caught_up: false,
            window_max_time: Duration::from_secs(10),
            window_min_records: 20,
            read_mode: ReadMode::Polling,
            dedup_horizon: tally_core::dedup::DEFAULT_HORIZON,
            count: CountMode::default(),
            posts_per_batch: None,
            worker_window_records: 800_000,
        }
    }
}

impl CounterConfig {
    /// Posts (or edges) per call to `store`: `posts_per_batch`, or the store's own if unset
    /// ([`tally_core::ports::WindowWriter::posts_per_call`]). The counter resolves it once, when
    /// it opens; a rebuild, for the store it writes into.
    pub fn batch_on<S: tally_core::ports::WindowWriter + ?Sized>(&self, store: &S) -> usize {
        self.posts_per_batch
            .unwrap_or_else(|| store.posts_per_call())
            .max(1)
    }

    /// Posts (or edges) per store call, as [`CounterConfig::batch_on`] resolved it when the
    /// counter opened (unresolved: [`tally_core::ports::DEFAULT_POSTS_PER_CALL`]).
    pub fn batch(&self) -> usize {
        self.posts_per_batch
            .unwrap_or(tally_core::ports::DEFAULT_POSTS_PER_CALL)
            .max(1)
    }

    /// `dedup_horizon_secs` in ms: the horizon windows are built with now.
    pub fn dedup_horizon_ms(&self) -> i64 {
        self.dedup_horizon.as_millis() as i64
    }

    /// The most records a window of a worker holding `held` shards may hold before its counting
    /// bounds it further (counting events: 20,000): `window_records`, or its share of
    /// `worker_window_records` if smaller (a shard has two windows at most: one open, one being
    /// written) — never below 20,000 records (the share a worker of many shards had before
    /// there was a budget) unless `window_records` is.
    pub fn window_share(&self, held: usize) -> usize {
        let share = self.worker_window_records / (2 * held.max(1));
        self.window_records
            .min(share.max(tally_core::window::MAX_WINDOW_RECORDS))
    }

    /// Whether a window holding `records` user records, opened `age_ms` ago, closes on time:
    /// at `window_ms`; at a low rate (fewer than `window_min_records`), when this worker shows
    /// its open windows (`shows_open`: the read side sees the likes meanwhile), at
    /// `window_max_ms` (ARCHITECTURE, "Windows sized by cost").
    pub fn due(&self, records: usize, age_ms: i64, shows_open: bool) -> bool {
        let (time, max) = (millis(self.window_time), millis(self.window_max_time));
        let age = age_ms.max(0) as u64;
        if age < time {
            return false;
        }
        !shows_open || records >= self.window_min_records || age >= max
    }

    /// The `[counter]` section's ranges (keys without the section).
    pub fn validate(&self) -> Result<(), Invalid> {
        if let Some(n) = self.posts_per_batch {
            range("posts_per_batch", n, 1, 100_000)?;
        }
        range(
            "window_records",
            self.window_records,
            1,
            tally_core::window::MAX_LIKERS_WINDOW_RECORDS,
        )?;
        range(
            "worker_window_records",
            self.worker_window_records,
            1,
            100_000_000,
        )?;
        range("window_ms", millis(self.window_time), 1, 600_000)?;
        range("window_max_ms", millis(self.window_max_time), 1, 600_000)?;
        range(
            "window_min_records",
            self.window_min_records,
            1,
            tally_core::window::MAX_WINDOW_RECORDS,
        )?;
        range(
            "dedup_horizon_secs",
            self.dedup_horizon.as_secs(),
            1,
            86_400,
        )
    }
}

/// What the counter did, for reports and metrics.
#[derive(Debug, Default)]
pub struct CounterMetrics {
    /// Records read.
    pub records: AtomicU64,
    /// Records of the windows this worker applied: the rest of `records` were read into a window
    /// another holder of the shard applies (the lease moved first), or were applied already.
    pub applied_records: AtomicU64,
    /// Events counted in the windows applied (likers: each edge's latest event kept).
    pub counted: AtomicU64,
    /// Copies of events met before, in the windows applied (producer retries).
    pub duplicates: AtomicU64,
    /// Malformed records dead-lettered.
    pub malformed: AtomicU64,
    /// Change records of items that are no likes, skipped.
    pub skipped: AtomicU64,
    /// Windows applied.
    pub windows: AtomicU64,
    /// Likers, the first stage: edge writes that changed an edge (each logged once, for the
    /// second stage to count); the others were copies or older events.
    pub edges_changed: AtomicU64,
    /// Store calls that wrote a batch of posts' items.
    pub batches: AtomicU64,
    /// Items written to the store, as a DynamoDB table would count them (a summary item, a dead
    /// letter, the lease row's pending end and checkpoint, the dedup record, the global total).
    pub items_written: AtomicU64,
    /// Writes refused because their effect was there already (a replay, a stale writer).
    pub writes_refused: AtomicU64,
    /// Live items read to plan a write (an hour rolling over after a restart).
    pub items_read: AtomicU64,
    /// What those writes cost in DynamoDB write units, by purpose (see `tally_core::cost`).
    pub cost: CostMeter,
    /// The largest iterator age seen (ms).
    pub max_iterator_age_ms: AtomicU64,
}

/// Write units by purpose, added up from every shard task.
#[derive(Debug, Default)]
pub struct CostMeter([AtomicU64; Purpose::ALL.len()]);

impl CostMeter {
    /// Adds a window's units.
    pub fn add(&self, u: &Units) {
        for (i, p) in Purpose::ALL.iter().enumerate() {
            self.0[i].fetch_add(u.get(*p), Ordering::Relaxed);
        }
    }

    /// The units so far.
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
    ctx: Arc<CounterContext>,
    /// Whether its shards show their open windows ([`Counter::on_board`]).
    shows_open: bool,
    counting: Arc<dyn Counting>,
    metrics: Arc<CounterMetrics>,
    board: Arc<Board>,
}

impl Counter {
    /// The counter of the stream on `store`, configured by `cfg`, running in `ctx`, counting
    /// into `metrics`, once it has claimed the store for its count mode (`claim`): refused on a
    /// store that counts otherwise, or that a rebuild is writing into. Counting events it counts
    /// the stream's events; counting likers it is the first stage, which writes the edges (the
    /// second, [`Counter::open_change_log`], counts their changes).
    pub async fn open(
        store: Arc<dyn CounterStore>,
        cfg: CounterConfig,
        ctx: CounterContext,
        metrics: Arc<CounterMetrics>,
    ) -> Result<Counter, ClaimError> {
        Self::opened(store, cfg, ctx, metrics, None).await
    }

    /// The likers counter's second stage on `store`: it counts the edges' change log `log` (what
    /// [`tally_core::ports::EdgeWriter::change_log`] gives), as [`Counter::open`] counts the
    /// stream; its application is `tally_core::apps::CHANGES`.
    pub async fn open_change_log(
        store: Arc<dyn CounterStore>,
        log: Arc<dyn tally_core::ports::Stream>,
        cfg: CounterConfig,
        ctx: CounterContext,
        metrics: Arc<CounterMetrics>,
    ) -> Result<Counter, ClaimError> {
        Self::opened(store, cfg, ctx, metrics, Some(log)).await
    }

    async fn opened(
        store: Arc<dyn CounterStore>,
        mut cfg: CounterConfig,
        ctx: CounterContext,
        metrics: Arc<CounterMetrics>,
        log: Option<Arc<dyn tally_core::ports::Stream>>,
    ) -> Result<Counter, ClaimError> {
        let counting = counting::chosen(&cfg, log);
        counting::claim(store.as_ref(), counting.as_ref()).await?;
        claim::one_stream(store.as_ref(), &ctx.stream, ctx.input.is_homed()).await?;
        cfg.posts_per_batch = Some(cfg.batch_on(store.as_ref()));
        Ok(Counter {
            store,
            cfg,
            ctx: Arc::new(ctx),
            shows_open: false,
            counting,
            metrics,
            board: Arc::default(),
        })
    }

    /// Its settings, as the counter resolved them when it opened (`posts_per_batch`: the
    /// store's own unless set).
    pub fn config(&self) -> &CounterConfig {
        &self.cfg
    }

    /// Shows the held shards' open windows on `board` (what the worker's `--http` serves),
    /// where they hold deltas (not the likers counter's first stage: its windows hold edges).
    pub fn on_board(mut self, board: Arc<Board>) -> Counter {
        self.shows_open = self.counting.shows_open();
        self.board = board;
        self
    }

    /// Whether its open windows hold deltas to show.
    pub fn shows_open(&self) -> bool {
        self.counting.shows_open()
    }
}

impl ProcessorFactory for Counter {
    fn create(&self, fence: &Fence) -> Box<dyn ShardProcessor> {
        Box::new(CounterShard {
            store: self.store.clone(),
            cfg: self.cfg.clone(),
            ctx: self.ctx.clone(),
            shows_open: self.shows_open,
            counting: self.counting.clone(),
            metrics: self.metrics.clone(),
            fence: fence.clone(),
            dedup: Dedup::new(self.cfg.dedup_horizon_ms()),
            windows: self.board.hold(&fence.shard_id),
            board: self.board.clone(),
            checkpoint: None,
            replay: None,
            tip_reads: 0,
            latest_created_ms: 0,
            keeper: None,
            in_flight: None,
            last_edges: 0,
        })
    }
}

/// The counter's state for one held shard.
pub struct CounterShard {
    store: Arc<dyn CounterStore>,
    cfg: CounterConfig,
    ctx: Arc<CounterContext>,
    /// Whether its open windows are shown (see [`CounterConfig::due`]).
    shows_open: bool,
    /// How it counts, chosen when the counter was built.
    counting: Arc<dyn Counting>,
    metrics: Arc<CounterMetrics>,
    /// The lease held: every write of the shard is fenced by it.
    fence: Fence,
    dedup: Dedup,
    /// The open window, and the closed one being applied: shared with the worker's board.
    windows: Arc<Mutex<ShardWindows>>,
    board: Arc<Board>,
    /// The last record (or user record of an aggregate) whose window is fully applied.
    checkpoint: Option<Position>,
    /// A window found pending at start: it is rebuilt up to `end` and applied again (what was
    /// written is refused).
    replay: Option<Pending>,
    /// Empty reads at the tip in a row while `replay` waits for its last record.
    tip_reads: u32,
    /// The latest `created_at` counted on the shard, as its row keeps it (freshness in event time).
    latest_created_ms: i64,
    /// The lease's keeper: each window's checkpoint renews the lease in the same write.
    keeper: Option<LeaseKeeper>,
    /// A window being applied on a task of its own while the shard reads on
    /// ([`CounterShard::close_and_apply`]); `checkpoint` is its end already.
    in_flight: Option<tokio::task::JoinHandle<Result<(), ConsumerError>>>,
    /// The edges the shard's last window held: room its next one is made with.
    last_edges: usize,
}

impl CounterShard {
    /// What this shard's writes are made with, for the lease it holds.
    fn writes(&self) -> writes::ShardWrites {
        writes::ShardWrites {
            store: self.store.clone(),
            cfg: self.cfg.clone(),
            ctx: self.ctx.clone(),
            metrics: self.metrics.clone(),
            windows: self.windows.clone(),
            fence: self.fence.clone(),
            keeper: self.keeper.clone(),
        }
    }

    /// What applies this shard's windows, for the lease it holds.
    fn applier(&self) -> apply::Applier {
        apply::Applier {
            writes: self.writes(),
            counting: self.counting.clone(),
        }
    }

    /// The duplicate filter as it stands at the shard's stored checkpoint, with `horizon_ms`
    /// (`tally_consumer::dedup::restore`).
    async fn restore_dedup(&self, horizon_ms: i64) -> Result<Dedup, ConsumerError> {
        let fence = &self.fence;
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        tally_consumer::dedup::restore(self.store.as_ref(), fence, &st.lease, horizon_ms).await
    }

    /// Closes the open window and applies it. A window of a shard read on (not the rebuild of a
    /// pending one, not the shard's last, and not one after which the duplicate filter's stored
    /// records must expire) is applied on a task of its own while the shard reads and folds the
    /// next one — a like put meanwhile is read, and shown, at once instead of after the writes
    /// — and the next window closes only once it is done ([`CounterShard::settle`]): windows
    /// are still applied one at a time, in order, each as it always was.
    async fn close_and_apply(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        self.settle().await?;
        // Closed and put up as applying at once: a reader of the board never misses it.
        let closed = {
            let mut w = board::lock(&self.windows);
            let Some(window) = w.close_open() else {
                return Ok(());
            };
            let closed = Arc::new(window.close(&mut self.dedup));
            self.last_edges = closed.edges.len();
            w.applying = Some(closed.clone());
            closed
        };
        self.board.tidy();
        let replaying = self.replay.is_some();
        let horizon_ms = self.window_horizon();
        let decided = tally_core::ports::Decided::from(horizon_ms);
        let latest = self.latest_created_ms.max(closed.stats.latest_created_ms);
        let evicted = self.dedup.take_evicted();
        let applier = self.applier();
        self.latest_created_ms = latest;
        let end = closed.end.clone();
        let closing = apply::Closing {
            window: closed,
            replaying,
            shard_end,
            decided,
            latest_created_ms: latest,
        };
        if !replaying && !shard_end && !evicted {
            self.in_flight = Some(tokio::spawn(async move {
                applier.apply_and_count(closing).await.map(|_| ())
            }));
            // What the next window folds from: this one's end (records up to it are read).
            if end.is_some() {
                self.checkpoint = end;
            }
            return Ok(());
        }
        let closed = applier.apply_and_count(closing).await?;
        if evicted {
            let (store, backoff) = (self.store.as_ref(), &self.ctx.backoff);
            tally_consumer::dedup::expire(store, &self.fence, &self.dedup, horizon_ms, backoff)
                .await;
        }
        self.checkpoint = closed.end.clone();
        if self.replay.take().is_some() && self.dedup.horizon_ms() != self.horizon_ms() {
            // The completed window was built under an older horizon; what follows uses the
            // current one, restored as any restart at this checkpoint would restore it.
            self.dedup = self.restore_dedup(self.horizon_ms()).await?;
        }
        Ok(())
    }

    /// Waits for the window applied on its own task, if any: its failure (a lost lease, a
    /// write that failed for good) is the shard's.
    async fn settle(&mut self) -> Result<(), ConsumerError> {
        let Some(task) = self.in_flight.take() else {
            return Ok(());
        };
        match task.await {
            Ok(done) => done,
            Err(e) => Err(ConsumerError::Inconsistent {
                shard_id: self.fence.shard_id.clone(),
                detail: format!("the task applying a window ended without an answer: {e}"),
            }),
        }
    }

    /// Settles the window applied on its own task if it is done (its failure is the shard's
    /// at once), without waiting for it.
    async fn settle_if_done(&mut self) -> Result<(), ConsumerError> {
        if self.in_flight.as_ref().is_some_and(|t| t.is_finished()) {
            self.settle().await?;
        }
        Ok(())
    }

    /// Whether the open window holds anything.
    fn has_open(&self) -> bool {
        board::lock(&self.windows)
            .open
            .as_ref()
            .is_some_and(|w| !w.is_empty())
    }

    /// The dedup horizon of windows built now, from the current settings.
    fn horizon_ms(&self) -> i64 {
        self.cfg.dedup_horizon_ms()
    }

    /// The horizon of the window being built: the pending one's, when rebuilding it.
    fn window_horizon(&self) -> i64 {
        self.replay
            .as_ref()
            .map_or_else(|| self.horizon_ms(), |p| p.horizon_ms)
    }
}

/// The counter's windows: each closes at its size, or at the pending window's recorded end when
/// rebuilding it, and is applied when it does.
impl CounterShard {
    /// Folds one record, part by part ([`Parts`]), applying each window it fills.
    async fn fold_record(
        &mut self,
        record: &StreamRecord,
        now_ms: i64,
    ) -> Result<(), ConsumerError> {
        let mut parts = Parts::of(record, self.checkpoint.as_ref());
        while let Some(from) = parts.next() {
            let (took, reached) = self.fold_part(record, from, now_ms);
            if reached {
                self.close_and_apply(false).await?;
            }
            parts.took(took);
        }
        Ok(())
    }

    /// Folds the user records of `record` from `from` on into the open window (opening one at
    /// `now_ms` if none is), as many as fit before its bound: what that took, and whether the
    /// window has reached its bound.
    fn fold_part(&mut self, record: &StreamRecord, from: u32, now_ms: i64) -> (Took, bool) {
        let bound = match &self.replay {
            Some(p) => Bound::End(&p.end),
            None => Bound::Size(
                self.counting
                    .window_records(self.cfg.window_share(self.board.held())),
            ),
        };
        let mut w = board::lock(&self.windows);
        if w.open.is_none() {
            w.opening();
        }
        let window = w.open.get_or_insert_with(|| {
            let w =
                WindowBuilder::new(self.checkpoint.clone(), now_ms).input(self.ctx.input.clone());
            let mut w = self.counting.fold(w);
            w.reserve_edges(self.last_edges);
            w
        });
        let took = window.push_to(&self.fence.shard_id, record, from, bound, &mut self.dedup);
        let reached = window.reached(bound);
        self.board.note_met(&self.fence.shard_id, &mut w);
        (took, reached)
    }
}

#[async_trait]
impl ShardProcessor for CounterShard {
    fn keep_lease(&mut self, keeper: LeaseKeeper) {
        self.keeper = Some(keeper);
    }

    async fn start(&mut self, lease: &Lease) -> Result<StartPosition, ConsumerError> {
        let fence = &self.fence;
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        debug_assert_eq!(st.lease.parents, lease.parents);
        self.checkpoint = st.lease.checkpoint.clone();
        self.replay = st.pending.clone();
        self.latest_created_ms = st.spent.latest_created_ms;
        *board::lock(&self.windows) = ShardWindows::default();
        // A pending window is rebuilt with the horizon it was built with; a child shard also
        // remembers its ancestors' recent ids, since a retry may land across reshards.
        let horizon = self.window_horizon();
        self.dedup =
            tally_consumer::dedup::restore(self.store.as_ref(), fence, &st.lease, horizon).await?;
        if let Some(p) = &self.replay {
            tracing::info!(end = %p.end, "resuming a pending window");
        }
        Ok(StartPosition::after(self.checkpoint.as_ref()))
    }

    async fn process(&mut self, batch: &ReadBatch, now_ms: i64) -> Result<(), ConsumerError> {
        self.settle_if_done().await?;
        if let Some(age) = batch.millis_behind_latest {
            self.metrics
                .max_iterator_age_ms
                .fetch_max(age.max(0) as u64, Ordering::Relaxed);
        }
        if let Some(t) = &batch.trimmed_through {
            self.records_trimmed(t).await?;
        }
        if self.replay.is_some() && batch.is_at_tip() {
            // At the shard's tip, as the stream says, without having met the pending window's
            // last record: the stream no longer has it. Several reads in a row must say so, so
            // that one early empty answer is not taken for it. A stream that does not say where
            // its tip is (DynamoDB Streams) gives the window up at the shard's end, or refuses
            // the read as trimmed.
            self.tip_reads += 1;
            if self.tip_reads >= TIP_READS_FOR_A_GAP {
                self.give_up(false, TRIMMED, None).await?;
            }
        } else if !batch.records.is_empty() {
            self.tip_reads = 0;
        }
        for record in &batch.records {
            self.metrics.records.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = &self.replay {
                let rebuilding = self.has_open();
                if record.seq > p.end.seq {
                    // Past the pending window's end without meeting it: its end is gone.
                    self.give_up(false, TRIMMED, None).await?;
                } else if !rebuilding && p.first != record.seq {
                    // The rebuild does not start at the window's first record: its head is gone,
                    // and what is left must not be applied as if it were the whole window.
                    self.give_up(false, HEAD_TRIMMED, None).await?;
                }
            }
            if self
                .checkpoint
                .as_ref()
                .is_some_and(|c| Position::whole(record.seq.clone()) <= *c)
            {
                // Given up with its window.
                continue;
            }
            self.fold_record(record, now_ms).await?;
        }
        let at_tip = batch.is_caught_up() || batch.millis_behind_latest.is_some_and(|m| m <= 0);
        // A window that shows nothing (the likers counter's first stage: its edges are shown by
        // the second stage once written) closes at the tip: what it holds is seen sooner.
        let closes = self.cfg.close_when_caught_up || !self.counting.shows_open();
        if closes && at_tip && self.replay.is_none() && self.has_open() {
            self.close_and_apply(false).await?;
        }
        Ok(())
    }

    async fn tick(&mut self, now_ms: i64) -> Result<(), ConsumerError> {
        self.settle_if_done().await?;
        let due = board::lock(&self.windows).open.as_ref().is_some_and(|w| {
            self.cfg
                .due(w.len(), now_ms - w.opened_at_ms(), self.shows_open)
        });
        if due && self.replay.is_none() {
            self.close_and_apply(false).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        self.settle().await?;
        if self.replay.is_some() {
            if shard_end {
                return self.give_up(true, TRIMMED, None).await;
            }
            // The rest of the pending window is not read yet; the next owner completes it.
            return Ok(());
        }
        if self.has_open() {
            // Flushed means written: a stop, a hand-over or an idle shard waits for it.
            self.close_and_apply(shard_end).await?;
            self.settle().await
        } else if shard_end {
            Ok(self.store.mark_finished(&self.fence).await?)
        } else {
            Ok(())
        }
    }

    fn waiting(&self) -> bool {
        self.replay.is_some()
    }

    fn unapplied(&self) -> bool {
        self.replay.is_some() || self.has_open() || self.in_flight.is_some()
    }

    async fn shard_gone(&mut self) -> Result<(), ConsumerError> {
        self.give_up(true, GONE, None).await
    }
}

impl Drop for CounterShard {
    fn drop(&mut self) {
        // A window still being applied is left as a crash leaves it: pending, for the shard's
        // next holder to rebuild (its writes so far are fenced and marker-guarded).
        if let Some(task) = self.in_flight.take() {
            task.abort();
        }
        self.board.release(&self.fence.shard_id, &self.windows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's windows share its records: a worker of few shards gets windows up to
    /// `window_records`, one of many the 20,000 a window had before the budget, and a smaller
    /// `window_records` always wins.
    #[test]
    fn a_window_holds_its_shard_s_share_of_the_worker_s_records() {
        let cfg = CounterConfig::default();
        let share = |held| cfg.window_share(held);
        assert_eq!(share(0), 100_000);
        assert_eq!(share(1), 100_000);
        assert_eq!(share(4), 100_000);
        assert_eq!(share(8), 50_000);
        assert_eq!(share(20), 20_000);
        assert_eq!(share(1_000), 20_000);
        let small = CounterConfig {
            window_records: 5_000,
            ..CounterConfig::default()
        };
        assert_eq!(small.window_share(1), 5_000);
        assert_eq!(small.window_share(1_000), 5_000);
        let budget = CounterConfig {
            worker_window_records: 60_000,
            ..CounterConfig::default()
        };
        assert_eq!(budget.window_share(1), 30_000);
        assert_eq!(budget.window_share(2), 20_000);
    }
}
