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
    let deps = WorkerDeps {
        stream: backend.stream_for(settings, &ctx.app).await?,
        leases: backend.leases.clone(),
        factory,
    };
    let cfg = settings.worker_config();
    worker::run(deps, cfg, ctx, idle, leases.clone(), shutdown).await?;
    Ok(leases)
}

pub use tally_counter::app::{CounterRun, Shown};
use tally_counter::app::{Opened, Workers};

/// What both of a counter run's workers' writes cost, by purpose.
pub fn counter_units(run: &CounterRun) -> tally_core::cost::Units {
    let mut u = tally_serve::answers::counter_units(&run.metrics, &run.leases);
    u.merge(&tally_serve::answers::counter_units(
        &run.changes,
        &run.change_leases,
    ));
    u
}

/// Both of a counter run's workers' metrics as Prometheus text (a counter's `--http`).
pub fn counter_metrics_text(run: &CounterRun) -> anyhow::Result<String> {
    tally_serve::prom::counter_metrics(&[
        (apps::COUNTER, &run.metrics, &run.leases),
        (apps::CHANGES, &run.changes, &run.change_leases),
    ])
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

/// [`run_counter`] reporting into `run`'s metrics (a worker's `--http` endpoint reads them live),
/// its open windows on `shown`'s board when given ([`tally_counter::app`]).
pub async fn run_counter_with(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    run: CounterRun,
    shown: Option<Shown>,
) -> Result<CounterRun> {
    let context = tally_counter::CounterContext {
        stream: backend.stream_identity.clone(),
        ..settings.counter_context()
    };
    let store = backend.counter.clone();
    let opened = Opened::open(store, settings.counter.clone(), context, &run).await?;
    // The store claimed first: a store refused registers no stream consumer.
    let on = Workers {
        stream: backend.stream_for(settings, apps::COUNTER).await?,
        leases: backend.leases.clone(),
        cfg: settings.worker_config(),
        ctx: settings.worker_context(apps::COUNTER),
        shown,
    };
    Ok(opened.run(on, run, idle, shutdown).await?)
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
        settings.analytics.clone(),
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
