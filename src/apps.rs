//! The consumer applications as library calls: a counter or an analytics worker on a backend,
//! until a shutdown or until idle. What `tally count`, `tally analytics` and the demo run.

use std::future::Future;
use std::sync::Arc;

use anyhow::Result;
use tally_analytics::{Analytics, AnalyticsMetrics};
use tally_consumer::worker::{self, IdleExit, LeaseMetrics, ProcessorFactory, Run, WorkerDeps};
use tally_core::apps;

use crate::backend::Backend;
use crate::settings::Settings;

/// Runs `app`'s worker with this processor factory on the backend's stream until `shutdown`, or
/// until idle once `idle` is armed, its leases reported into `leases`.
async fn run_app(
    (settings, backend): (&Settings, &Backend),
    app: &'static str,
    factory: Arc<dyn ProcessorFactory>,
    (idle, shutdown): (Arc<IdleExit>, impl Future<Output = ()>),
    leases: Arc<LeaseMetrics>,
) -> Result<()> {
    let deps = WorkerDeps {
        stream: backend.stream_for(settings, app).await?,
        leases: backend.leases.clone(),
        factory,
    };
    let (cfg, ctx) = (settings.worker_config(), settings.worker_context(app));
    Ok(worker::run(deps, cfg, ctx, idle, leases, shutdown).await?)
}

pub use tally_counter::app::{CounterRun, Shown};
use tally_counter::app::{Opened, Workers};

/// Runs a counter until `shutdown`, or until idle once `idle` is armed, reporting into `run`'s
/// metrics (a worker's `--http` endpoint reads them live), its open windows on `shown`'s board
/// when given ([`tally_counter::app`]).
pub async fn run_counter(
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
    let opened = Opened::open(store, settings.counter.clone(), context, run).await?;
    // The store claimed first: a store refused registers no stream consumer.
    let on = Workers {
        stream: backend.stream_for(settings, apps::COUNTER).await?,
        leases: backend.leases.clone(),
        cfg: settings.worker_config(),
        ctx: settings.worker_context(apps::COUNTER),
        shown,
    };
    Ok(opened.run(on, idle, shutdown).await?)
}

/// Runs an analytics worker until `shutdown`, or until idle once `idle` is armed, reporting into
/// `run`.
pub async fn run_analytics(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    run: Run<AnalyticsMetrics>,
) -> Result<Run<AnalyticsMetrics>> {
    let factory = Analytics::new(
        backend.analytics.clone(),
        settings.analytics.clone(),
        settings.analytics_context(),
        run.metrics.clone(),
    );
    let (on, leases) = ((settings, backend), run.leases.clone());
    run_app(
        on,
        apps::ANALYTICS,
        Arc::new(factory),
        (idle, shutdown),
        leases,
    )
    .await?;
    Ok(run)
}

/// Runs a router worker (several regions: the records of posts homed elsewhere put to their
/// home's stream) until `shutdown`, or until idle once `idle` is armed, reporting into `run`.
pub async fn run_router(
    settings: &Settings,
    backend: &Backend,
    idle: Arc<IdleExit>,
    shutdown: impl Future<Output = ()>,
    run: Run<tally_router::RouterMetrics>,
) -> Result<Run<tally_router::RouterMetrics>> {
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
        run.metrics.clone(),
    )?;
    let (on, leases) = ((settings, backend), run.leases.clone());
    run_app(
        on,
        apps::ROUTER,
        Arc::new(factory),
        (idle, shutdown),
        leases,
    )
    .await?;
    Ok(run)
}
