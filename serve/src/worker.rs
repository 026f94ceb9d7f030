//! A worker's own HTTP endpoint (`tally count|analytics --http`): its metrics and probes, and a
//! counter worker's end of the read side's protocol — `/api/open`, what it has read and not
//! written ([`OpenAnswer`]), which `serve::pending` asks for — with where the read side reaches
//! it (`--advertise`, or the ECS task's address).

use std::collections::HashSet;
use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tally_core::ports::LeaseReader;
use tally_counter::board::{Board, Listed, ShardOpen};

/// What a worker's `/api/open` answers: who it is, and its held shards' windows.
#[derive(Debug, Serialize, Deserialize)]
pub struct OpenAnswer {
    /// The worker's id: an answer from another worker than the lease's holder is not believed.
    pub owner: String,
    /// Each held shard's windows read and not written, for the posts asked about (with
    /// `holding_only`, only the shards whose windows hold one of them, and those named).
    pub shards: Vec<ShardOpen>,
    /// Whether only the shards whose windows hold a post asked about (and those the call named)
    /// are listed: the call's `held` was the digest of the shards this worker holds
    /// (`board::shards_digest`), and every other one holds nothing of the posts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holding_only: bool,
}

/// Serves a worker's `/metrics`, `/healthz` and `/readyz` on `--http` — and a counter's open
/// windows on `/api/open` — until dropped.
pub struct WorkerHttp(Option<tokio::task::JoinHandle<()>>);

/// What a counter worker's `/api/open?ids=a,b[&held=D[&shards=s,t]]` answers: its held shards'
/// windows that are read but not written, for those posts — with `held`, the digest (hex) of the
/// shards the caller lists it as holding, if that is what it holds: only the shards whose
/// windows hold one of those posts, and those of `shards` it holds (`serve::pending` is the
/// reader).
async fn open_windows(
    board: Arc<Board>,
    owner: String,
    q: axum::extract::Query<std::collections::HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let ids: Vec<String> = q
        .get("ids")
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let bad = |e: String| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(json!({ "error": e })),
        )
            .into_response()
    };
    if let Err(e) = super::params::check_ids(&ids) {
        return bad(e);
    }
    let held = match q.get("held").map(|h| u64::from_str_radix(h, 16)) {
        Some(Ok(h)) => Some(h),
        Some(Err(_)) => {
            return bad(format!(
                "`held` must be a shard digest in hexadecimal, got {:?}",
                q["held"]
            ))
        }
        None => None,
    };
    let named: HashSet<String> = q
        .get("shards")
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let listed = match held {
        Some(held) => Listed::Holding {
            held,
            named: &named,
        },
        None => Listed::Every,
    };
    let answered = board.answer(&ids, listed);
    let answer = OpenAnswer {
        owner,
        shards: answered.shards,
        holding_only: answered.holding_only,
    };
    axum::Json(answer).into_response()
}

/// Where the read side reaches a worker whose `--http` is bound at `bound`: `--advertise`; else
/// the bound address; on every interface, the ECS task's IP (its metadata endpoint), else the
/// host name.
pub async fn advertise_addr(advertise: Option<&str>, bound: std::net::SocketAddr) -> String {
    if let Some(adv) = advertise {
        return adv.to_owned();
    }
    if !bound.ip().is_unspecified() {
        return bound.to_string();
    }
    let host = match ecs_task_ip().await {
        Some(ip) => ip,
        None => tally_consumer::worker::host_name(),
    };
    format!("{host}:{}", bound.port())
}

/// The task's IPv4 address from the ECS task metadata endpoint (v4), when running in a task.
async fn ecs_task_ip() -> Option<String> {
    let uri = std::env::var("ECS_CONTAINER_METADATA_URI_V4").ok()?;
    let body = super::client::get_text(&uri, std::time::Duration::from_secs(2))
        .await
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["Networks"][0]["IPv4Addresses"][0]
        .as_str()
        .map(str::to_owned)
}

impl WorkerHttp {
    /// Binds `--http` first: an address in use stops the worker at start, naming it, since a
    /// health check would otherwise probe nothing (or another process).
    pub async fn start(
        http: Option<std::net::SocketAddr>,
        leases: Arc<dyn LeaseReader>,
        app: &'static str,
        render: impl Fn() -> anyhow::Result<String> + Clone + Send + Sync + 'static,
        open: Option<(Arc<Board>, String)>,
    ) -> Result<(WorkerHttp, Option<std::net::SocketAddr>)> {
        let Some(addr) = http else {
            return Ok((WorkerHttp(None), None));
        };
        let listener = super::bind(addr).await?;
        let bound = listener.local_addr()?;
        let index = format!(
            "tally {app} worker: /metrics (Prometheus), /healthz, /readyz{}; the dashboard is tally serve's\n",
            if open.is_some() { ", /api/open?ids=… (open windows)" } else { "" }
        );
        let mut router = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let index = index.clone();
                async move { index }
            }),
        );
        if let Some((board, owner)) = open {
            router = router.route(
                "/api/open",
                axum::routing::get(move |q| open_windows(board.clone(), owner.clone(), q)),
            );
        }
        let router = router
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let render = render.clone();
                    async move { super::prom::text(render()) }
                }),
            )
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let leases = leases.clone();
                    async move { super::ready_for(leases.as_ref(), app).await }
                }),
            );
        let task = tokio::spawn(async move {
            if let Err(e) = super::serve_on(listener, router, std::future::pending()).await {
                tracing::error!(error = %format!("{e:#}"), "the worker's HTTP endpoint stopped");
            }
        });
        Ok((WorkerHttp(Some(task)), Some(bound)))
    }
}

impl Drop for WorkerHttp {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}
