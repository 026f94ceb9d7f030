//! `GET /api/posts/{id}/likers/recent`: a post's likers most recent first — "liked by alice and
//! 23 others" — read off the edges table's recent index, with the post's count from the same
//! view (the counter's workers' open windows included, as every likers answer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;
use tally_core::ports::{PortError, RecentCursor, MAX_LIKERS_PER_PAGE};

use super::viewer::Edges;
use super::{bad_request, params, ApiError, ApiPath, ApiQuery, ApiResult, Ctx};

/// The query of a page of likers most recent first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecentParams {
    /// At most this many likers (default 20, at most 1,000).
    #[serde(default, deserialize_with = "params::whole")]
    limit: Option<usize>,
    /// The page after this one (the previous page's `next`).
    after: Option<String>,
    /// Add what the counter's workers read and have not written yet (default true).
    pending: Option<bool>,
}

/// A page of the users who like a post, most recent like first.
pub(super) async fn recent_likers(
    State(c): State<Ctx>,
    Extension(Edges(edges)): Extension<Edges>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<RecentParams>,
) -> ApiResult {
    tally_core::event::check_id("post_id", &id).map_err(|e| bad_request(e.to_string()))?;
    let limit = p.limit.unwrap_or(20);
    if !(1..=MAX_LIKERS_PER_PAGE).contains(&limit) {
        return Err(bad_request(format!(
            "`limit` must be between 1 and {MAX_LIKERS_PER_PAGE}, got {limit}"
        )));
    }
    let after = match &p.after {
        Some(a) => Some(RecentCursor::parse(a).ok_or_else(|| {
            bad_request(format!(
                "`after` must be a page's `next` (`<time>:<user>`), got {a:?}"
            ))
        })?),
        None => None,
    };
    let mut v = c.likers_count(&id, p.pending).await?;
    let stored = edges
        .recent_likers(&id, after.as_ref(), limit)
        .await
        .map_err(no_index)?;
    let likers = stored.likers.iter();
    let likers = likers.map(|l| json!({"user_id": l.user, "liked_at_ms": l.at_ms}));
    v["likers"] = json!(likers.collect::<Vec<_>>());
    v["next"] = json!(stored.next.as_ref().map(ToString::to_string));
    super::add_units(&mut v, stored.read_units);
    Ok(Json(v))
}

/// A store without the recent index answers 501 with what creates it; any other error as any.
fn no_index(e: PortError) -> ApiError {
    match e {
        PortError::NotFound { .. } => ApiError(StatusCode::NOT_IMPLEMENTED, e.to_string()),
        e => e.into(),
    }
}
