//! The counter application run whole, on the consumer runtime. Counting events it is one worker,
//! the stream's. Counting likers it is two side by side: the stream's, whose windows write the
//! edges, and the edges' change log's, whose windows count the changes those writes made. The
//! two stop together — the caller's shutdown, or either failing, stops both (the task is
//! restarted whole) — and the second goes idle only once the first has, so that it has counted
//! every change the first wrote.

use std::future::Future;
use std::sync::Arc;

use tally_consumer::worker::{
    self, IdleExit, LeaseMetrics, ProcessorFactory, WorkerConfig, WorkerContext, WorkerDeps,
};
use tally_consumer::ConsumerError;
use tally_core::apps;
use tally_core::cost::{Purpose, Units};
use tally_core::ports::{CounterStore, LeaseStore, Stream};

use crate::board::Board;
use crate::claim::ClaimError;
use crate::{Counter, CounterConfig, CounterContext, CounterMetrics};

/// The counter's processors, opened: the store claimed for what it counts before anything else
/// is done (a store that counts otherwise, or is being rebuilt, is refused before a stream
/// consumer is registered for it).
pub struct Opened {
    /// The stream's processor.
    stream: Counter,
    /// Counting likers, the change log's processor and the log.
    changes: Option<(Counter, Arc<dyn Stream>)>,
    /// What its workers report into.
    run: CounterRun,
}

/// What the opened counter's workers run on.
pub struct Workers {
    /// The stream, as the counter application reads it (polling or enhanced fan-out).
    pub stream: Arc<dyn Stream>,
    /// Where the leases and checkpoints are.
    pub leases: Arc<dyn LeaseStore>,
    /// The workers' settings (`[lease]`).
    pub cfg: WorkerConfig,
    /// The stream worker's context; the change log's worker runs under [`apps::CHANGES`].
    pub ctx: WorkerContext,
    /// Where the worker that counts shows its open windows, if it does.
    pub shown: Option<Shown>,
}

/// Where a counter worker shows its open windows: its board, and the address it serves it on.
pub struct Shown {
    /// The board the read side is served from.
    pub board: Arc<Board>,
    /// Where the read side reaches it (`host:port`), reported with the worker's leases.
    pub advertise: String,
}

/// What a counter's run reports into: its stream worker's metrics and leases and, counting
/// likers, its change log worker's (idle otherwise). Shared, so that a `--http` endpoint reads
/// them live.
#[derive(Clone, Default)]
pub struct CounterRun {
    /// The stream's worker: counting events it counts them; counting likers it writes the edges.
    pub metrics: Arc<CounterMetrics>,
    /// The stream worker's leases.
    pub leases: Arc<LeaseMetrics>,
    /// Counting likers, the worker of the edges' change log.
    pub changes: Arc<CounterMetrics>,
    /// The change log worker's leases.
    pub change_leases: Arc<LeaseMetrics>,
}

impl CounterRun {
    /// Each worker's application name, metrics and leases: the stream's, then the change log's.
    pub fn stages(&self) -> [(&'static str, &CounterMetrics, &LeaseMetrics); 2] {
        [
            (apps::COUNTER, &self.metrics, &self.leases),
            (apps::CHANGES, &self.changes, &self.change_leases),
        ]
    }

    /// What both workers' writes cost, by purpose: their windows' units and their lease writes.
    pub fn units(&self) -> Units {
        let mut u = Units::default();
        for (_, m, l) in self.stages() {
            u.merge(&stage_units(m, l));
        }
        u
    }
}

/// What one counter worker's writes cost: its windows' units by purpose, and its lease writes.
pub fn stage_units(m: &CounterMetrics, l: &LeaseMetrics) -> Units {
    let mut u = m.cost.snapshot();
    u.add(Purpose::Leases, l.write_units());
    u
}

/// Why a counter run stopped short.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The store cannot be counted as configured.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// A worker failed.
    #[error(transparent)]
    Worker(#[from] ConsumerError),
}

impl Opened {
    /// Opens the counter of `store` (and, counting likers, its change log's), reporting into
    /// `run`'s metrics: the store's mode and stream claimed.
    pub async fn open(
        store: Arc<dyn CounterStore>,
        config: CounterConfig,
        context: CounterContext,
        run: CounterRun,
    ) -> Result<Opened, RunError> {
        let (c, x) = (config.clone(), context.clone());
        let stream = Counter::open(store.clone(), c, x, run.metrics.clone()).await?;
        if stream.shows_open() {
            let changes = None;
            return Ok(Opened {
                stream,
                changes,
                run,
            });
        }
        let log = store.change_log().map_err(ClaimError::from)?;
        let m = run.changes.clone();
        let changes = Counter::open_change_log(store, log.clone(), config, context, m).await?;
        let changes = Some((changes, log));
        Ok(Opened {
            stream,
            changes,
            run,
        })
    }

    /// Runs the counter on `on` until `shutdown`, or until idle once `idle` is armed; answers
    /// what its workers reported.
    pub async fn run(
        self,
        on: Workers,
        idle: Arc<IdleExit>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<CounterRun, RunError> {
        let Workers {
            stream,
            leases,
            cfg,
            mut ctx,
            shown,
        } = on;
        let (mut counter, run) = (self.stream, self.run);
        let deps = |stream, factory: Counter| WorkerDeps {
            stream,
            leases: leases.clone(),
            factory: Arc::new(factory) as Arc<dyn ProcessorFactory>,
        };
        let Some((mut changes, log)) = self.changes else {
            // Counting events: the stream's worker counts, and shows its windows.
            if let Some(sh) = shown {
                counter = counter.on_board(sh.board);
                ctx.advertise = Some(sh.advertise);
            }
            let deps = deps(stream, counter);
            worker::run(deps, cfg, ctx, idle, run.leases.clone(), shutdown).await?;
            return Ok(run);
        };
        let mut changes_ctx = WorkerContext {
            app: apps::CHANGES.to_owned(),
            advertise: None,
            ..ctx.clone()
        };
        if let Some(sh) = shown {
            changes = changes.on_board(sh.board);
            changes_ctx.advertise = Some(sh.advertise);
        }
        // One stop for both: the caller's shutdown, or either worker failing.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until = worker::until_raised;
        let changes_idle = Arc::new(IdleExit::default());
        let first = {
            let (stop, changes_idle) = (stop.clone(), changes_idle.clone());
            let writes = worker::run(
                deps(stream, counter),
                cfg.clone(),
                ctx,
                idle.clone(),
                run.leases.clone(),
                until(stopped.clone()),
            );
            async move {
                let done = writes.await;
                match &done {
                    // Idle: the second stage counts what it wrote, then goes idle too.
                    Ok(()) if idle.is_armed() => changes_idle.arm(),
                    _ => {
                        let _ = stop.send(true);
                    }
                }
                done
            }
        };
        let second = {
            let stop = stop.clone();
            let counts = worker::run(
                deps(log, changes),
                cfg,
                changes_ctx,
                changes_idle,
                run.change_leases.clone(),
                until(stopped.clone()),
            );
            async move {
                let done = counts.await;
                if done.is_err() {
                    // The counts stopped: the edges' writer stops too, rather than write on with
                    // nothing counting them.
                    let _ = stop.send(true);
                }
                done
            }
        };
        let both = async { tokio::join!(first, second) };
        tokio::pin!(both, shutdown);
        let (a, b) = loop {
            tokio::select! {
                done = &mut both => break done,
                () = &mut shutdown, if !*stop.borrow() => {
                    let _ = stop.send(true);
                }
            }
        };
        a?;
        b?;
        Ok(run)
    }
}
