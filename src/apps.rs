//! The consumer applications as library calls: a counter or an analytics worker on a backend,
//! until a shutdown or until idle. What `tally count`, `tally analytics` and the demo run.

use std::future::Future;
use std::sync::Arc;

use anyhow::Result;
use tally_analytics::{Analytics, AnalyticsMetrics};
use tally_consumer::worker::{
    self, IdleExit, LeaseMetrics, ProcessorFactory, WorkerContext, WorkerDeps,
};
use tally_core::apps;
use tally_counter::board::Board;
use tally_counter::{Counter, CounterMetrics};

use crate::backend::Backend;
use crate::settings::Settings;

/// Runs a worker configured by `ctx` with this processor factory on the backend's stream until
/// `shutdown`, or until idle once `idle` is armed; returns its lease metrics.
async fn run_app(
    settings: &Settings,
    backend: &Backend,
    ctx: WorkerContext,
    factory: Arc<dyn ProcessorFactory>,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    leases: Arc<LeaseMetrics>,
) -> Result<Arc<LeaseMetrics>> {
    let stream = backend.stream_for(settings, &ctx.app).await?;
    run_on(
        settings, backend, stream, ctx, factory, idle, shutdown, leases,
    )
    .await
}

/// Runs a worker of `factory` on `stream` until `shutdown`, or until idle once `idle` is armed;
/// returns its lease metrics.
#[allow(clippy::too_many_arguments)]
async fn run_on(
    settings: &Settings,
    backend: &Backend,
    stream: Arc<dyn tally_core::ports::Stream>,
    ctx: WorkerContext,
    factory: Arc<dyn ProcessorFactory>,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    leases: Arc<LeaseMetrics>,
) -> Result<Arc<LeaseMetrics>> {
    let deps = WorkerDeps {
        stream,
        leases: backend.leases.clone(),
        factory,
    };
    worker::run(
        deps,
        settings.worker_config(),
        ctx,
        idle,
        leases.clone(),
        shutdown,
    )
    .await?;
    Ok(leases)
}

/// What a counter's run reports: its stream worker's metrics and leases and, counting likers,
/// its second stage's (the change log's worker).
#[derive(Clone, Default)]
pub struct CounterRun {
    /// The worker of the stream: counting events it counts them; counting likers it writes the
    /// edges.
    pub metrics: Arc<CounterMetrics>,
    pub leases: Arc<LeaseMetrics>,
    /// Counting likers, the worker of the edges' change log (idle otherwise).
    pub changes: Arc<CounterMetrics>,
    pub change_leases: Arc<LeaseMetrics>,
}

impl CounterRun {
    /// What both workers' writes cost, by purpose.
    pub fn units(&self) -> tally_core::cost::Units {
        let mut u = tally_serve::answers::counter_units(&self.metrics, &self.leases);
        u.merge(&tally_serve::answers::counter_units(
            &self.changes,
            &self.change_leases,
        ));
        u
    }

    /// Both workers' metrics as Prometheus text (a counter's `--http`).
    pub fn metrics_text(&self) -> anyhow::Result<String> {
        tally_serve::prom::counter_metrics(&[
            (tally_core::apps::COUNTER, &self.metrics, &self.leases),
            (
                tally_core::apps::CHANGES,
                &self.changes,
                &self.change_leases,
            ),
        ])
    }
}

/// Runs a counter until `shutdown`, or until idle once `idle` is armed.
pub async fn run_counter(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<CounterRun> {
    run_counter_with(
        settings,
        backend,
        idle,
        shutdown,
        CounterRun::default(),
        None,
    )
    .await
}

/// Where a counter worker shows its open windows: its board, and the address it serves it on.
pub struct Shown {
    pub board: Arc<Board>,
    pub advertise: String,
}

/// [`run_counter`] reporting into `run`'s metrics (a worker's `--http` endpoint reads them live),
/// its open windows on `shown`'s board when given. Counting likers it runs two workers side by
/// side: the stream's (its edges written) and the change log's (the edges' changes counted,
/// shown on the board); the second goes idle only once the first has, and has then counted
/// every change it wrote.
pub async fn run_counter_with(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    run: CounterRun,
    shown: Option<Shown>,
) -> Result<CounterRun> {
    let counter_ctx = || tally_counter::CounterContext {
        stream: backend.stream_identity.clone(),
        ..settings.counter_context()
    };
    let store = backend.counter.clone();
    let mut stream = Counter::open(
        store.clone(),
        settings.counter_config(),
        counter_ctx(),
        run.metrics.clone(),
    )
    .await?;
    let mut ctx = settings.worker_context(apps::COUNTER);
    if stream.shows_open() {
        // Counting events: the stream's worker shows its windows.
        if let Some(sh) = shown {
            stream = stream.on_board(sh.board);
            ctx.advertise = Some(sh.advertise);
        }
        let leases = run.leases.clone();
        run_app(
            settings,
            backend,
            ctx,
            Arc::new(stream),
            idle,
            shutdown,
            leases,
        )
        .await?;
        return Ok(run);
    }
    let mut changes = Counter::open_change_log(
        store,
        settings.counter_config(),
        counter_ctx(),
        run.changes.clone(),
    )
    .await?;
    let mut changes_ctx = settings.worker_context(apps::CHANGES);
    if let Some(sh) = shown {
        changes = changes.on_board(sh.board);
        changes_ctx.advertise = Some(sh.advertise);
    }
    let log = backend.counter.change_log()?;
    // One stop for both: the caller's shutdown, or either worker failing.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let changes_idle = Arc::new(IdleExit::default());
    let first = {
        let (stop, changes_idle) = (stop.clone(), changes_idle.clone());
        let stream_app = run_app(
            settings,
            backend,
            ctx,
            Arc::new(stream),
            idle.clone(),
            until(stopped.clone()),
            run.leases.clone(),
        );
        async move {
            let done = stream_app.await;
            match &done {
                // Idle: the second stage counts what it wrote, then goes idle too.
                Ok(_) if idle.is_armed() => changes_idle.arm(),
                _ => {
                    let _ = stop.send(true);
                }
            }
            done
        }
    };
    let second = {
        let stop = stop.clone();
        let log_app = run_on(
            settings,
            backend,
            log,
            changes_ctx,
            Arc::new(changes),
            changes_idle,
            until(stopped.clone()),
            run.change_leases.clone(),
        );
        async move {
            let done = log_app.await;
            if done.is_err() {
                // The counts stopped: the edges' writer stops too, rather than write on with
                // nothing counting them (the task is restarted whole).
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

/// Runs an analytics worker until `shutdown`, or until idle once `idle` is armed.
pub async fn run_analytics(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<(Arc<AnalyticsMetrics>, Arc<LeaseMetrics>)> {
    run_analytics_with(
        settings,
        backend,
        idle,
        shutdown,
        Default::default(),
        Default::default(),
    )
    .await
}

/// [`run_analytics`] reporting into these metrics.
pub async fn run_analytics_with(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    metrics: Arc<AnalyticsMetrics>,
    leases: Arc<LeaseMetrics>,
) -> Result<(Arc<AnalyticsMetrics>, Arc<LeaseMetrics>)> {
    let factory = Analytics::new(
        backend.analytics.clone(),
        settings.analytics_config(),
        settings.analytics_context(),
        metrics.clone(),
    );
    let leases = run_app(
        settings,
        backend,
        settings.worker_context(apps::ANALYTICS),
        Arc::new(factory),
        idle,
        shutdown,
        leases,
    )
    .await?;
    Ok((metrics, leases))
}

/// Runs a router worker (several regions: the records of posts homed elsewhere put to their
/// home's stream) until `shutdown`, or until idle once `idle` is armed.
pub async fn run_router(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    metrics: Arc<tally_router::RouterMetrics>,
    leases: Arc<LeaseMetrics>,
) -> Result<Arc<LeaseMetrics>> {
    let Some(homes) = settings.regions.homes()? else {
        anyhow::bail!(
            "the router routes between regions: set `regions.this` and `regions.homes` (docs/REGIONS.md)"
        );
    };
    let peers = crate::backend::peer_streams(settings).await?;
    let factory = tally_router::Router::new(
        backend.counter.clone(),
        tally_core::input::Input::of(&settings.input),
        homes,
        peers,
        metrics,
    )?;
    run_app(
        settings,
        backend,
        settings.worker_context(apps::ROUTER),
        Arc::new(factory),
        idle,
        shutdown,
        leases,
    )
    .await
}
