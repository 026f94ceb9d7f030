//! The embedded default as an app develops against it (`tally up`): in one process, the
//! Kinesis-shaped ingest endpoint ([`tally_ingest`]) the app's producer code puts to, the
//! counter and analytics, and the read API and dashboard ([`tally_serve`]) it reads from — each
//! on its own connection to the store, as separate processes would be, until a shutdown. The
//! counter serves its open windows to the read API, so a like shows as soon as it is read.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Result};
use tally_core::apps;
use tally_counter::board::Board;

use crate::apps::{run_analytics, run_counter, Shown};
use crate::backend::Backend;
use crate::settings::{BackendKind, Settings};
use tally_ingest::IngestConfig;
use tally_serve::auth::Token;
use tally_serve::worker::WorkerHttp;
use tally_serve::ServeConfig;

/// Where `tally up` listens, and the token both endpoints ask for.
#[derive(Clone, Debug)]
pub struct UpConfig {
    /// The ingest endpoint (the Kinesis API's shape).
    pub ingest: SocketAddr,
    /// The read API and dashboard.
    pub api: SocketAddr,
    /// The token: the secret access key a put is signed with, and the read API's bearer token.
    pub token: Option<Token>,
}

/// Where it listens, once bound.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// The ingest endpoint.
    pub ingest: SocketAddr,
    /// The read API.
    pub api: SocketAddr,
}

/// Runs the whole embedded pipeline until `shutdown` completes; `on_bound` is told where it
/// listens once both endpoints are bound.
pub async fn run(
    settings: &Settings,
    cfg: UpConfig,
    on_bound: impl FnOnce(Bound),
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    if settings.backend != BackendKind::Embedded {
        bail!(
            "tally up runs the embedded default; on AWS the stream, the counter, analytics and \
             the read side are the stack's services (terraform/, docs/RUNBOOK.md)"
        );
    }
    // The ports first: a port in use is refused before the store (and its data dir) is made.
    let ingest_listener = tally_serve::bind(cfg.ingest).await?;
    let api_listener = tally_serve::bind(cfg.api).await?;
    let backend = Backend::open(settings).await?;
    on_bound(Bound {
        ingest: ingest_listener.local_addr()?,
        api: api_listener.local_addr()?,
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until = tally_consumer::worker::until_raised;
    let counter = {
        let (s, b, rx) = (
            settings.clone(),
            backend.another(settings).await?,
            stopped.clone(),
        );
        let board = Arc::new(Board::default());
        let run = crate::apps::CounterRun::default();
        let owner = s.worker_config().worker_id;
        let render = {
            let run = run.clone();
            move || tally_serve::prom::counter_metrics(&run)
        };
        let open = Some((board.clone(), owner));
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let (http, bound) = WorkerHttp::start(
            Some(localhost),
            b.leases.clone(),
            apps::COUNTER,
            render,
            open,
        )
        .await?;
        let shown = bound.map(|at| Shown {
            board,
            advertise: at.to_string(),
        });
        async move {
            let _http = http;
            run_counter(&s, &b, Default::default(), until(rx), run, shown)
                .await
                .map(drop)
        }
    };
    let analytics = {
        let (s, b, rx) = (
            settings.clone(),
            backend.another(settings).await?,
            stopped.clone(),
        );
        async move {
            run_analytics(&s, &b, Default::default(), until(rx), Default::default())
                .await
                .map(drop)
        }
    };
    let ingest = {
        let cfg = IngestConfig {
            stream: settings.stream.clone(),
            token: cfg.token.clone(),
            retention_hours: settings.stream_retention_hours,
        };
        let (stream, rx) = (backend.stream.clone(), stopped.clone());
        async move { tally_ingest::run(ingest_listener, stream, cfg, until(rx)).await }
    };
    let api = {
        let cfg = ServeConfig {
            pending_timeout: tally_serve::pending::default_timeout(),
            token: cfg.token.clone(),
            half_life: settings.analytics.half_life,
        };
        let readers = backend.readers_across_regions(settings).await?;
        let rx = stopped.clone();
        async move { tally_serve::run(api_listener, readers, cfg, until(rx)).await }
    };
    let mut parts = tokio::task::JoinSet::new();
    parts.spawn(async move { ("the counter", counter.await) });
    parts.spawn(async move { ("analytics", analytics.await) });
    parts.spawn(async move { ("the ingest endpoint", ingest.await) });
    parts.spawn(async move { ("the read API", api.await) });
    // A part that ends before the shutdown (its store refused, a port lost) stops the rest: a
    // pipeline that says it runs while nothing counts is worse than one that exits.
    let mut first: Option<anyhow::Error> = None;
    tokio::select! {
        _ = shutdown => {}
        Some(ended) = parts.join_next() => {
            let (what, r) = ended?;
            first = Some(match r {
                Err(e) => e.context(format!("{what} stopped")),
                Ok(()) => anyhow::anyhow!("{what} stopped before a shutdown was asked for"),
            });
        }
    }
    let _ = stop.send(true);
    // The counter finishes its open windows and checkpoints before it returns.
    while let Some(ended) = parts.join_next().await {
        let (what, r) = ended?;
        if let (Err(e), None) = (r, &first) {
            first = Some(e.context(format!("{what} stopped")));
        }
    }
    first.map_or(Ok(()), Err)
}
