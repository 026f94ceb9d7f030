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

/// Runs a worker configured by `cfg` with this processor factory until `shutdown`, or until idle
/// once `idle` is armed; returns its lease metrics.
async fn run_app(
    settings: &Settings,
    backend: &Backend,
    ctx: WorkerContext,
    factory: Arc<dyn ProcessorFactory>,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    leases: Arc<LeaseMetrics>,
) -> Result<Arc<LeaseMetrics>> {
    let deps = WorkerDeps {
        stream: backend.stream_for(settings, &ctx.app).await?,
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

/// Runs a counter worker until `shutdown`, or until idle once `idle` is armed.
pub async fn run_counter(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
) -> Result<(Arc<CounterMetrics>, Arc<LeaseMetrics>)> {
    run_counter_with(
        settings,
        backend,
        idle,
        shutdown,
        Default::default(),
        Default::default(),
        None,
    )
    .await
}

/// Where a counter worker shows its open windows: its board, and the address it serves it on.
pub struct Shown {
    pub board: Arc<Board>,
    pub advertise: String,
}

/// [`run_counter`] reporting into these metrics (a worker's `--http` endpoint reads them live),
/// its open windows on `shown`'s board when given.
pub async fn run_counter_with(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    metrics: Arc<CounterMetrics>,
    leases: Arc<LeaseMetrics>,
    shown: Option<Shown>,
) -> Result<(Arc<CounterMetrics>, Arc<LeaseMetrics>)> {
    let counter_ctx = tally_counter::CounterContext {
        stream: backend.stream_identity.clone(),
        ..settings.counter_context()
    };
    let mut factory = Counter::open(
        backend.counter.clone(),
        settings.counter_config(),
        counter_ctx,
        metrics.clone(),
    )
    .await?;
    let mut ctx = settings.worker_context(apps::COUNTER);
    if let Some(sh) = shown {
        factory = factory.on_board(sh.board);
        ctx.advertise = Some(sh.advertise);
    }
    let leases = run_app(
        settings,
        backend,
        ctx,
        Arc::new(factory),
        idle,
        shutdown,
        leases,
    )
    .await?;
    Ok((metrics, leases))
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
    metrics: Arc<crate::route::RouterMetrics>,
    leases: Arc<LeaseMetrics>,
) -> Result<Arc<LeaseMetrics>> {
    let Some(homes) = settings.regions.homes()? else {
        anyhow::bail!(
            "the router routes between regions: set `regions.this` and `regions.homes` (docs/REGIONS.md)"
        );
    };
    let peers = crate::backend::peer_streams(settings).await?;
    let factory = crate::route::Router::new(
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
