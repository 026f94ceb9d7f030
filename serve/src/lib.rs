//! The read service (`tally serve`): the read side over HTTP — a JSON API, Prometheus metrics,
//! health checks and a dashboard page — on either backend; the small endpoint a consumer worker
//! exposes with `--http` (its own metrics and health); and the answers `tally query` shares with
//! it ([`counts`], [`answers`]), so that the two never say a count differently.
//!
//! Layout: this module holds the server and the routes; `counts` composes a counts answer;
//! `freshness` says how far each app has applied the stream; `prom` renders Prometheus text;
//! `homed` reads each post from its home region; `dashboard.html` is the page (no external
//! assets: it works offline and reads the same JSON API).
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tally_core::apps;
use tally_core::buckets::minute_start;
use tally_core::clock::now_ms;

use tally_core::ports::Readers;

pub mod answers;
pub mod freshness;
pub mod homed;
pub mod params;
pub mod prom;

pub mod auth;
pub mod client;
pub mod counts;
mod extract;
pub mod pending;
mod recent;
pub mod viewer;
pub mod worker;
pub mod workers;

pub use extract::{ApiPath, ApiQuery, NoQuery};
pub use freshness::{applied_through, Listing, Listings};
use pending::{pending_for, Pending};

/// What every route reads from.
#[derive(Clone)]
pub struct Ctx {
    pub read: Readers,
    /// The trending scores' half-life (`analytics.half_life`).
    pub half_life: std::time::Duration,
    /// The lease rows, listed in the background: freshness, leases and metrics read these.
    pub listings: Arc<Listings>,
    /// Asks the counter's workers for what they read and have not written (`None`: counts are
    /// the stored ones only).
    pub pending: Option<Arc<Pending>>,
    /// The bearer token every request but the open ones must carry (`None`: anyone may read).
    pub token: Option<auth::Token>,
}

impl Ctx {
    /// The context of a read side, its lease listings refreshed every [`freshness::REFRESH`]
    /// until the returned task is aborted.
    pub async fn start(
        read: Readers,
        half_life: std::time::Duration,
    ) -> Result<(Ctx, tokio::task::JoinHandle<()>)> {
        let (listings, task) =
            Listings::start(read.leases.clone(), &read.homes, freshness::REFRESH).await?;
        Ok((Ctx::new(read, half_life, listings), task))
    }

    /// A context answering from `listings`, asking the workers with the default timeout.
    fn new(read: Readers, half_life: std::time::Duration, listings: Arc<Listings>) -> Ctx {
        let pending = Some(Arc::new(Pending::new(pending::default_timeout())));
        let token = None;
        Ctx {
            read,
            half_life,
            listings,
            pending,
            token,
        }
    }

    /// The context of one answer of counts (`tally query`, `tally total --json`): only the
    /// counter's lease rows listed (and those of the stage whose windows hold counts), once.
    pub async fn once(read: Readers, half_life: std::time::Duration) -> Result<Ctx> {
        let mut wanted = vec![apps::COUNTER, read.counted.mode().counts_app()];
        wanted.dedup();
        let listings = Listings::list(read.leases.clone(), &read.homes, &wanted).await?;
        Ok(Ctx::new(read, half_life, Arc::new(listings)))
    }

    /// A counts answer as every caller reads it: the open windows of the workers that write
    /// counts first (none asked when `provisional` is off or `pending` is `None`), the store
    /// second (see [`pending`]).
    pub async fn counts_answer(
        &self,
        q: &counts::CountsQuery<'_>,
        provisional: bool,
    ) -> Result<counts::CountsAnswer, viewer::Refused> {
        let asked = match self.pending.as_ref().filter(|_| provisional) {
            Some(p) => Some(p.ask(&self.holders(), q.ids).await),
            None => None,
        };
        if let Some(f) = counts::failpoint_pause() {
            tokio::time::sleep(f).await;
        }
        counts::CountsAnswer::read(self.read.counts.as_ref(), &self.read.counted, q, asked).await
    }

    /// The latest listing of the application whose windows hold counts: counting likers, the
    /// counter's second stage (over the edges' change log); else the counter.
    pub fn holders(&self) -> Arc<Listing> {
        self.listings.get(self.read.counted.mode().counts_app())
    }

    /// A post's count beside a page of its likers: read as `/api/posts/{id}` reads it (the
    /// workers first, the store second, in one view with the page read after it), with its
    /// freshness; the page adds its fields and its read units ([`add_units`]).
    async fn likers_count(&self, id: &str, pending: Option<bool>) -> Result<Value, ApiError> {
        let ids = [id.to_owned()];
        let q = counts::CountsQuery::strong(&ids, None, None);
        let answer = self.counts_answer(&q, pending.unwrap_or(true)).await?;
        let mut v = answer.post_json(id, None);
        v["applied_through"] = self.fresh(apps::COUNTER);
        Ok(v)
    }

    /// How fresh `app`'s answers are, from the latest listing; across regions the counter's adds
    /// `homes`: how fresh the counts of each other home's posts are, by home — that home's
    /// counter's lease rows as replicated here, so the replication lag is in it.
    pub fn fresh(&self, app: &str) -> Value {
        let mut v = applied_through(&self.listings.get(app));
        let homes = self.listings.homes();
        if app == apps::COUNTER && !homes.is_empty() {
            let by_home = homes
                .iter()
                .map(|(h, l)| ((*h).to_owned(), applied_through(l)));
            v["homes"] = Value::Object(by_home.collect());
        }
        v
    }
}

/// An error answer: a status and a one-line message, as JSON.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        ApiError(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}"))
    }
}

impl From<tally_core::ports::PortError> for ApiError {
    fn from(e: tally_core::ports::PortError) -> ApiError {
        ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

fn bad_request(msg: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg.into())
}

type ApiResult = std::result::Result<Json<Value>, ApiError>;

/// The read side's routes.
pub fn router(ctx: Ctx) -> Router {
    let token = ctx.token.clone();
    // Who likes what only where the store keeps it: on a store counting events the likers paths
    // are no routes (404, saying why), as its document says.
    let likers_routes = match ctx.read.counted.likers() {
        Some(edges) => Router::new()
            .route("/api/posts/{id}/likers", get(likers))
            .route("/api/posts/{id}/likers/among", get(likers_among))
            .route("/api/posts/{id}/likers/recent", get(recent::recent_likers))
            .layer(Extension(viewer::Edges(edges.clone()))),
        None => Router::new()
            .route("/api/posts/{id}/likers", get(no_likers))
            .route("/api/posts/{id}/likers/{*rest}", get(no_likers)),
    };
    let routes = Router::new()
        .merge(likers_routes)
        .route("/", get(dashboard))
        .route("/api/posts/{id}", get(post))
        .route("/api/counts", get(counts::get).post(counts::post))
        .route("/api/total", get(total))
        .route("/api/trending", get(trending))
        .route("/api/top-liked", get(top_liked))
        .route("/api/latency", get(latency))
        .route("/api/leases", get(leases))
        .route("/api/dead-letters", get(dead_letters))
        .route("/api/cost", get(cost))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|_: NoQuery| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/api/openapi.json", get(openapi))
        .fallback(not_found)
        .with_state(ctx);
    match token {
        Some(t) => routes.layer(axum::middleware::from_fn_with_state(t, auth::require)),
        None => routes,
    }
}

/// The API's OpenAPI 3.1 description (`serve/src/openapi.json`, checked against the answers by
/// `tests/e2e/openapi.rs`).
pub const OPENAPI: &str = include_str!("openapi.json");

/// The document as this server answers, so that every request the served document admits is one
/// this server takes: on a store that counts likers
/// without `as_of_ms`, which only a store counting events answers; on a store counting events
/// without the likers routes and `viewer`, which only a store keeping likers answers.
async fn openapi(State(c): State<Ctx>, _: NoQuery) -> Response {
    let text = match c.read.counted.likers() {
        Some(_) => openapi_counting_likers(),
        None => openapi_counting_events(),
    };
    ([(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// [`OPENAPI`] without the parameters a store counting likers refuses (`as_of_ms`).
pub fn openapi_counting_likers() -> String {
    let mut doc: Value = serde_json::from_str(OPENAPI).unwrap_or(Value::Null);
    if let Some(ps) = doc
        .pointer_mut("/paths/~1api~1posts~1{id}/get/parameters")
        .and_then(Value::as_array_mut)
    {
        ps.retain(|p| p["name"] != "as_of_ms");
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| OPENAPI.to_owned())
}

/// [`OPENAPI`] without what a store counting events refuses: the likers routes, and `viewer`
/// (a parameter, and a field of the counts request).
pub fn openapi_counting_events() -> String {
    let mut doc: Value = serde_json::from_str(OPENAPI).unwrap_or(Value::Null);
    if let Some(paths) = doc["paths"].as_object_mut() {
        paths.retain(|path, _| !path.contains("/likers"));
        for op in paths.values_mut().filter_map(Value::as_object_mut) {
            for o in op.values_mut() {
                if let Some(ps) = o["parameters"].as_array_mut() {
                    ps.retain(|p| p["name"] != "viewer");
                }
            }
        }
    }
    if let Some(props) = doc
        .pointer_mut("/components/schemas/CountsRequest/properties")
        .and_then(Value::as_object_mut)
    {
        props.remove("viewer");
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| OPENAPI.to_owned())
}

/// A likers path on a store counting events: not found, and why.
async fn no_likers() -> ApiError {
    ApiError(StatusCode::NOT_FOUND, viewer::NO_LIKERS.into())
}

/// An unknown path: a JSON error naming it, as every other error of the API.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "no such path: {} (the API is under /api/: posts/ID, counts, total, trending, top-liked, latency, leases, dead-letters, cost, openapi.json; and /metrics, /healthz, /readyz, /)",
            uri.path()
        ),
    )
}

/// Binds `addr` and serves `router` until `shutdown`; prints the address it listens on.
pub async fn listen(
    addr: SocketAddr,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = bind(addr).await?;
    say_serving(listener.local_addr()?);
    serve_on(listener, router, shutdown).await
}

/// Says where a command serves, on standard error ("serving on http://ADDR/"): a standalone
/// command's one line (`tally up` says where its parts listen in its own words).
pub fn say_serving(addr: SocketAddr) {
    eprintln!("serving on http://{addr}/");
}

/// Binds `addr` for HTTP: an address in use (or not ours) is an error naming it, before anything
/// else starts.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} for HTTP"))
}

/// Serves `router` on a bound listener until `shutdown`.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .context("HTTP server")
}

async fn dashboard() -> Html<&'static str> {
    Html(include_str!("dashboard.html"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostParams {
    /// Count likes created at or after this time (ms since the epoch)…
    #[serde(default, deserialize_with = "params::whole")]
    since_ms: Option<i64>,
    /// …or in this last duration (`15m`, `2h`).
    since: Option<String>,
    /// Count likes created before this time: the count as it stood then (counting events only).
    #[serde(default, deserialize_with = "params::whole")]
    as_of_ms: Option<i64>,
    /// Add what the counter's workers read and have not written yet (default true).
    pending: Option<bool>,
    /// Also whether this user likes the post (`viewer_liked`).
    viewer: Option<String>,
}

use params::time_param;

/// The time "since" asks from: `since` (a duration) if given, else `since_ms`; `since_ms` is
/// checked either way (a value the document refuses is refused, whatever else is given).
fn since_of(
    since: Option<&str>,
    since_ms: Option<i64>,
) -> std::result::Result<Option<i64>, ApiError> {
    let since_ms = time_param("since_ms", since_ms)?;
    match since {
        Some(s) => Ok(Some(params::since_param("since", s, now_ms())?)),
        None => Ok(since_ms),
    }
}

async fn post(
    State(c): State<Ctx>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<PostParams>,
) -> ApiResult {
    tally_core::event::check_id("post_id", &id).map_err(|e| bad_request(e.to_string()))?;
    let since_ms = since_of(p.since.as_deref(), p.since_ms)?;
    let as_of_ms = time_param("as_of_ms", p.as_of_ms)?;
    if let Some(v) = &p.viewer {
        viewer::check_viewer(v)?;
    }
    if as_of_ms.is_some() {
        viewer::check_events(&c.read.counted, "as_of_ms")?;
    }
    let ids = [id];
    let q = counts::CountsQuery::strong(&ids, since_ms, p.viewer.as_deref());
    let answer = c.counts_answer(&q, p.pending.unwrap_or(true)).await?;
    let mut v = answer.post_json(&ids[0], q.viewer);
    v["applied_through"] = c.fresh(apps::COUNTER);
    if let Some(t) = as_of_ms {
        // Likes created before T's minute: the total less those created since (counting events,
        // where each like and unlike is an event of its own minute, that is the count then).
        let later = c.read.counts.post_count(&ids[0], Some(t)).await?;
        let none = pending::Windows::default();
        let windows = answer.asked.as_ref().map_or(&none, |a| &a.windows);
        let p = pending_for(&ids[0], &later, windows, Some(t));
        v["as_of_ms"] = json!(minute_start(t));
        v["as_of_requested_ms"] = json!(t);
        v["count_as_of"] = json!(later.total + p.total - later.since.unwrap_or(0) - p.since);
        add_units(&mut v, later.read_units);
    }
    Ok(Json(v))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LikersParams {
    /// At most this many users (default 100, at most 1,000).
    #[serde(default, deserialize_with = "params::whole")]
    limit: Option<usize>,
    /// The page after this user (the previous page's `next`).
    after: Option<String>,
    /// Add what the counter's workers read and have not written yet (default true).
    pending: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AmongParams {
    /// The users (comma-separated, at most 100: a viewer's friends).
    users: String,
    /// Add what the counter's workers read and have not written yet (default true).
    pending: Option<bool>,
}

/// Adds `units` to an answer's read units.
fn add_units(v: &mut Value, units: u64) {
    v["read_units"] = json!(v["read_units"].as_u64().unwrap_or(0) + units);
}

/// A page of the users who like a post, in user id order.
async fn likers(
    State(c): State<Ctx>,
    Extension(viewer::Edges(edges)): Extension<viewer::Edges>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<LikersParams>,
) -> ApiResult {
    tally_core::event::check_id("post_id", &id).map_err(|e| bad_request(e.to_string()))?;
    let limit = p.limit.unwrap_or(100);
    if !(1..=tally_core::ports::MAX_LIKERS_PER_PAGE).contains(&limit) {
        return Err(bad_request(format!(
            "`limit` must be between 1 and {}, got {limit}",
            tally_core::ports::MAX_LIKERS_PER_PAGE
        )));
    }
    if let Some(a) = &p.after {
        tally_core::event::check_id("user_id", a)
            .map_err(|e| bad_request(format!("`after`: {e}")))?;
    }
    let mut v = c.likers_count(&id, p.pending).await?;
    let page = edges.likers(&id, p.after.as_deref(), limit).await?;
    v["likers"] = json!(page.users);
    v["next"] = json!(page.next);
    add_units(&mut v, page.read_units);
    Ok(Json(v))
}

/// Which of some users (a viewer's friends) like a post: their edges in one batch read.
async fn likers_among(
    State(c): State<Ctx>,
    Extension(viewer::Edges(edges)): Extension<viewer::Edges>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<AmongParams>,
) -> ApiResult {
    tally_core::event::check_id("post_id", &id).map_err(|e| bad_request(e.to_string()))?;
    let users = viewer::check_among(&p.users).map_err(bad_request)?;
    let mut v = c.likers_count(&id, p.pending).await?;
    let pairs: Vec<(String, String)> = users.iter().map(|u| (id.clone(), u.clone())).collect();
    let (states, edge_units) = edges
        .edges(&pairs, tally_core::ports::Consistency::Strong)
        .await?;
    let likers: Vec<&String> = users
        .iter()
        .zip(&states)
        .filter(|(_, e)| e.as_ref().is_some_and(|e| e.liked))
        .map(|(u, _)| u)
        .collect();
    v["likers"] = json!(likers);
    v["users"] = json!(users);
    add_units(&mut v, edge_units);
    Ok(Json(v))
}

async fn total(State(c): State<Ctx>, _: NoQuery) -> ApiResult {
    Ok(Json(json!({
        "total": c.read.counts.global_total().await?,
        "applied_through": c.fresh(apps::COUNTER),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrendingParams {
    #[serde(default, deserialize_with = "params::whole")]
    k: Option<usize>,
}

async fn trending(State(c): State<Ctx>, ApiQuery(p): ApiQuery<TrendingParams>) -> ApiResult {
    let k = p.k.unwrap_or(10);
    if k == 0 || k > 1_000 {
        return Err(bad_request("`k` must be between 1 and 1000"));
    }
    let top =
        tally_analytics::top(c.read.analytics.as_ref(), apps::ANALYTICS, c.half_life, k).await?;
    Ok(Json(json!({
        "trending": top.iter().map(|e| json!({"post_id": e.post_id, "score": e.score, "error": e.error})).collect::<Vec<_>>(),
        "half_life_secs": c.half_life.as_secs(),
        "applied_through": c.fresh(apps::ANALYTICS),
    })))
}

/// All-time most liked: the analytics sketch ranks (bounded memory), the counter gives each
/// post's exact count.
async fn top_liked(State(c): State<Ctx>, ApiQuery(p): ApiQuery<TrendingParams>) -> ApiResult {
    let k = p.k.unwrap_or(10);
    if k == 0 || k > 1_000 {
        return Err(bad_request("`k` must be between 1 and 1000"));
    }
    let top = tally_analytics::top_liked(c.read.analytics.as_ref(), apps::ANALYTICS, k).await?;
    let mut out = Vec::with_capacity(top.len());
    for e in &top {
        let exact = c.read.counts.post_count(&e.post_id, None).await?;
        out.push(json!({"post_id": e.post_id, "likes": e.score.round(), "error": e.error.round(), "count": exact.total}));
    }
    Ok(Json(json!({
        "top_liked": out,
        "applied_through": c.fresh(apps::ANALYTICS),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyParams {
    #[serde(default, deserialize_with = "params::whole")]
    since_ms: Option<i64>,
    since: Option<String>,
}

async fn latency(State(c): State<Ctx>, ApiQuery(p): ApiQuery<LatencyParams>) -> ApiResult {
    let since = since_of(p.since.as_deref(), p.since_ms)?.unwrap_or(0);
    let w =
        tally_analytics::latency_windows(c.read.analytics.as_ref(), apps::ANALYTICS, since).await?;
    let internal =
        |e: serde_json::Error| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut v = serde_json::to_value(w.report()).map_err(internal)?;
    v["since_ms"] = json!(since);
    // The merged histograms' cumulative buckets, and each stored window (the latest 200).
    let hist = |h: &hdrhistogram::Histogram<u64>| {
        let (b, count, sum) = tally_core::latency::buckets(h);
        json!({"le_ms": b.iter().map(|x| x.0).collect::<Vec<_>>(), "cumulative": b.iter().map(|x| x.1).collect::<Vec<_>>(), "count": count, "sum_ms": sum})
    };
    v["buckets"] = json!({
        "creation_ms": hist(&w.merged.creation),
        "arrival_ms": hist(&w.merged.arrival),
        "iterator_age_ms": hist(&w.merged.iterator_age),
    });
    let skip = w.windows.len().saturating_sub(200);
    v["per_window"] = serde_json::to_value(&w.windows[skip..]).map_err(internal)?;
    v["applied_through"] = c.fresh(apps::ANALYTICS);
    Ok(Json(v))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeasesParams {
    app: Option<String>,
}

async fn leases(State(c): State<Ctx>, ApiQuery(p): ApiQuery<LeasesParams>) -> ApiResult {
    let app = p.app.unwrap_or_else(|| apps::COUNTER.to_owned());
    if ![apps::COUNTER, apps::CHANGES, apps::ANALYTICS].contains(&app.as_str()) {
        return Err(bad_request(format!(
            "`app` must be `{}`, `{}` or `{}`",
            apps::COUNTER,
            apps::CHANGES,
            apps::ANALYTICS
        )));
    }
    Ok(Json(freshness::lease_rows(&c.listings.get(&app))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageParams {
    #[serde(default, deserialize_with = "params::whole")]
    limit: Option<usize>,
    /// The `next` of the previous page.
    after: Option<String>,
    /// Gone: an offset reads every letter it skips.
    #[serde(default, deserialize_with = "params::whole")]
    offset: Option<usize>,
}

/// A page cursor as the API hands it out: opaque (URL-safe base64 of the shard and the key).
/// Dead letters a page at a time, in key order: `limit` (1–1000) after the cursor `after`, and
/// `next`, the cursor of the following page (null: the last page).
async fn dead_letters(State(c): State<Ctx>, ApiQuery(p): ApiQuery<PageParams>) -> ApiResult {
    let limit = p.limit.unwrap_or(50);
    if limit == 0 || limit > 1_000 {
        return Err(bad_request("`limit` must be between 1 and 1000"));
    }
    if p.offset.is_some() {
        return Err(bad_request(
            "`offset` is not supported: pages follow one another by key — pass the previous page's `next` as `after`",
        ));
    }
    let after = match &p.after {
        None => None,
        Some(s) => Some(params::decode_cursor(s).ok_or_else(|| {
            bad_request(
                "`after` is not a cursor: a page's `next` (URL-safe base64, 1 to 1,024 characters)",
            )
        })?),
    };
    let total = c.read.letters.dead_letter_count().await?;
    let (page, next) = c
        .read
        .letters
        .dead_letter_page(after.as_ref(), limit)
        .await?;
    let items: Vec<Value> = page.iter().map(answers::dead_letter).collect();
    Ok(Json(json!({
        "total": total,
        "limit": limit,
        "dead_letters": items,
        "next": next.as_ref().map(params::encode_cursor),
        "applied_through": c.fresh(apps::COUNTER),
    })))
}

/// What the counter's writes cost, from its shards' rows: write units by purpose (DynamoDB's
/// rules; lease takes and renewals are the workers' own, in their `/metrics`) of both its stages
/// counting likers, events counted (by the stream's), and units per like.
async fn cost(State(c): State<Ctx>, _: NoQuery) -> ApiResult {
    let mut total = tally_core::ports::ShardTally::default();
    for st in &c.listings.get(apps::COUNTER).states {
        total.merge(&st.spent);
    }
    for st in &c.listings.get(apps::CHANGES).states {
        total.units.merge(&st.spent.units);
    }
    let units = answers::write_units(&total.units);
    let per_like = (total.counted > 0).then(|| total.units.total() as f64 / total.counted as f64);
    Ok(Json(json!({
        "write_units": units,
        "counted": total.counted,
        "units_per_like": per_like,
    })))
}

async fn metrics(State(c): State<Ctx>, _: NoQuery) -> Response {
    match prom::store_metrics(&c).await {
        Ok(text) => ([(header::CONTENT_TYPE, prom::CONTENT_TYPE)], text).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Ready when the store answers.
async fn ready(State(c): State<Ctx>, _: NoQuery) -> Response {
    ready_for(c.read.leases.as_ref(), apps::COUNTER).await
}

/// 200 when the lease store answers for `app` (a worker competes for leases through it), else 503.
pub async fn ready_for(leases: &dyn tally_core::ports::LeaseReader, app: &str) -> Response {
    match leases.list_leases(app).await {
        Ok(_) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")).into_response(),
    }
}

/// Where `tally serve` listens by default (and `tally demo --serve` without an address).
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";

/// How the read side serves: what `tally serve`'s flags and `analytics.half_life` say.
#[derive(Clone, Debug, Default)]
pub struct ServeConfig {
    /// How long a count waits for the counter's workers' open windows (zero: stored counts only).
    pub pending_timeout: std::time::Duration,
    /// The token every request must carry (`None`: open).
    pub token: Option<auth::Token>,
    /// The trending scores' half-life (`analytics.half_life`).
    pub half_life: std::time::Duration,
}

/// The read side on `listener` — the JSON API, `/metrics` and the dashboard over `readers` —
/// until `shutdown` completes: what `tally serve` runs, callable from a program or a test.
pub async fn run(
    listener: tokio::net::TcpListener,
    readers: Readers,
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (mut ctx, refresher) = Ctx::start(readers, cfg.half_life).await?;
    ctx.pending =
        (!cfg.pending_timeout.is_zero()).then(|| Arc::new(Pending::new(cfg.pending_timeout)));
    ctx.token = cfg.token;
    let served = serve_on(listener, router(ctx), shutdown).await;
    refresher.abort();
    served
}
