//! A counts answer, composed once: what `GET`/`POST /api/counts`, `GET /api/posts/{id}` and
//! `tally query` answer — the stored counts of up to 100 posts read side by side, plus what the
//! counter's workers have read and not yet written (asked first: [`super::pending`]), and
//! whether a viewer likes each post. Each caller adds its own freshness (`applied_through`).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tally_core::apps;
use tally_core::ports::{Consistency, CountReader, Counted, PostCount};

pub use super::params::check_ids;
use super::pending::{pending_for, pending_json, Asked, Windows};
use super::viewer::{self, Refused};
use super::{bad_request, params, since_of, ApiResult, Ctx, NoQuery};
use crate::answers::{self, Provisional};

/// What a counts call asks, checked.
pub struct CountsQuery<'a> {
    pub ids: &'a [String],
    /// "Since" from this time (ms), if asked.
    pub since_ms: Option<i64>,
    pub consistency: Consistency,
    pub viewer: Option<&'a str>,
}

impl<'a> CountsQuery<'a> {
    /// Strongly consistent reads of `ids`' counts.
    pub fn strong(ids: &'a [String], since_ms: Option<i64>, viewer: Option<&'a str>) -> Self {
        let consistency = Consistency::Strong;
        CountsQuery {
            ids,
            since_ms,
            consistency,
            viewer,
        }
    }
}

/// A counts answer: the store's counts read after the workers were asked (`asked`: `None` for
/// stored counts only), and the viewer's likes.
pub struct CountsAnswer {
    pub counts: Vec<PostCount>,
    /// Whether the viewer likes each post, and the read units of asking.
    pub liked: Option<(Vec<bool>, u64)>,
    pub asked: Option<Asked>,
    since_ms: Option<i64>,
    consistency: Consistency,
}

impl CountsAnswer {
    /// Reads the counts (and the viewer's likes) of `q` from `store`, after `asked`.
    pub(crate) async fn read(
        store: &dyn CountReader,
        counted: &Counted,
        q: &CountsQuery<'_>,
        asked: Option<Asked>,
    ) -> Result<CountsAnswer, Refused> {
        let counts = store
            .post_counts(q.ids, q.since_ms, q.consistency)
            .await
            .map_err(Refused::Store)?;
        let liked = match q.viewer {
            Some(u) => Some(viewer::liked(counted, u, q.ids, q.consistency).await?),
            None => None,
        };
        Ok(CountsAnswer {
            counts,
            liked,
            asked,
            since_ms: q.since_ms,
            consistency: q.consistency,
        })
    }

    /// What the workers' open windows add to post `i` of `ids`.
    pub fn provisional(&self, ids: &[String], i: usize) -> Provisional {
        let none = Windows::default();
        let windows = self.asked.as_ref().map_or(&none, |a| &a.windows);
        pending_for(&ids[i], &self.counts[i], windows, self.since_ms)
    }

    /// The answer of one post, `ids[0]`, as `GET /api/posts/{id}` gives it (without the
    /// freshness, which is the caller's): its count, the viewer's like and its read units added
    /// to the count's, what the workers were asked, and the time asked "since" from.
    pub fn post_json(&self, id: &str, viewer: Option<&str>) -> Value {
        let n = &self.counts[0];
        let ids = [id.to_owned()];
        let mut v = answers::post_count(
            id,
            n,
            self.provisional(&ids, 0),
            self.since_ms,
            json!(n.read_units),
        );
        if let (Some(t), Some(_)) = (self.since_ms, n.since) {
            v["since_requested_ms"] = json!(t);
        }
        if let (Some(u), Some((liked, units))) = (viewer, &self.liked) {
            viewer::add_to_post(&mut v, u, liked[0], *units);
        }
        if let Some(a) = &self.asked {
            v["provisional"] = pending_json(a);
        }
        v
    }

    /// The answer as JSON: one entry per id, in order, each as `/api/posts/{id}` answers a count
    /// (without the freshness, which is the caller's), the read units, the viewer's likes and
    /// what the workers were asked.
    pub fn json(&self, ids: &[String], viewer: Option<&str>) -> Value {
        let c = self.consistency;
        let items: Vec<Value> = ids
            .iter()
            .zip(&self.counts)
            .enumerate()
            .map(|(i, (id, n))| {
                let units = answers::read_units(n.read_units, c);
                answers::post_count(id, n, self.provisional(ids, i), self.since_ms, units)
            })
            .collect();
        let units: u64 = self.counts.iter().map(|n| n.read_units).sum();
        let mut v = json!({
            "counts": items,
            "read_units": answers::read_units(units, c),
            "consistency": answers::consistency(c),
        });
        if let (Some(u), Some((liked, units))) = (viewer, &self.liked) {
            viewer::add_to_counts(&mut v, u, liked, *units, c);
        }
        if let Some(a) = &self.asked {
            v["provisional"] = pending_json(a);
        }
        v
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CountsParams {
    /// Comma-separated post ids (GET).
    ids: Option<String>,
    since: Option<String>,
    #[serde(default, deserialize_with = "params::whole")]
    since_ms: Option<i64>,
    /// `strong` (default) or `eventual`.
    consistency: Option<String>,
    /// Add what the counter's workers read and have not written yet (default true).
    pending: Option<bool>,
    /// Also whether this user likes each post (`viewer_liked`), in one batch read.
    viewer: Option<String>,
}

/// What a counts call asks: `POST`'s body, and `GET`'s query read into it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CountsBody {
    ids: Vec<String>,
    since: Option<String>,
    #[serde(default, deserialize_with = "params::json_whole")]
    since_ms: Option<i64>,
    consistency: Option<String>,
    pending: Option<bool>,
    viewer: Option<String>,
}

/// `GET /api/counts`.
pub(super) async fn get(
    State(c): State<Ctx>,
    super::ApiQuery(p): super::ApiQuery<CountsParams>,
) -> ApiResult {
    let ids: Vec<String> = match &p.ids {
        Some(s) if !s.is_empty() => s.split(',').map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let ask = CountsBody {
        ids,
        since: p.since,
        since_ms: p.since_ms,
        consistency: p.consistency,
        pending: p.pending,
        viewer: p.viewer,
    };
    counts(&c, ask).await
}

/// `POST /api/counts`.
pub(super) async fn post(
    State(c): State<Ctx>,
    _: NoQuery,
    body: std::result::Result<Json<CountsBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    let Json(b) = body.map_err(|e| {
        bad_request(format!(
            "expected a JSON object {{\"ids\": [\"p1\", …]}}: {}",
            e.body_text()
        ))
    })?;
    counts(&c, b).await
}

/// Many counts in one call (`GET`'s query read as `POST`'s body): a feed page's posts, read side
/// by side.
async fn counts(c: &Ctx, ask: CountsBody) -> ApiResult {
    let ids = ask.ids;
    check_ids(&ids).map_err(bad_request)?;
    let since_ms = since_of(ask.since.as_deref(), ask.since_ms)?;
    let consistency = match ask.consistency.as_deref() {
        None | Some("strong") => Consistency::Strong,
        Some("eventual") => Consistency::Eventual,
        Some(other) => {
            return Err(bad_request(format!(
                "`consistency` must be `strong` or `eventual`, got {other:?}"
            )))
        }
    };
    if let Some(v) = &ask.viewer {
        viewer::check_viewer(v)?;
    }
    let q = CountsQuery {
        ids: &ids,
        since_ms,
        consistency,
        viewer: ask.viewer.as_deref(),
    };
    let answer = c.counts_answer(&q, ask.pending.unwrap_or(true)).await?;
    let mut v = answer.json(&ids, q.viewer);
    v["applied_through"] = c.fresh(apps::COUNTER);
    Ok(Json(v))
}

/// Tests only: pauses every counts answer ([`Ctx::counts_answer`]) between asking the workers and
/// reading the store.
pub const SERVE_PAUSE_VAR: &str = "TALLY_FAILPOINT_SERVE_PAUSE_MS";

/// Tests only: `TALLY_FAILPOINT_SERVE_PAUSE_MS` pauses every counts answer between asking the
/// workers and reading the store, so that a test can land a window in between.
pub(super) fn failpoint_pause() -> Option<std::time::Duration> {
    let ms: u64 = std::env::var(SERVE_PAUSE_VAR).ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}
