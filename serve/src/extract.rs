//! The read API's extractors: a query string and a path as the document states them, or a 400 in
//! JSON naming what is wrong (axum's own answers are plain text) — and no query string at all
//! where the document lists no parameter.

use axum::extract::{Path, Query};
use axum::http::request::Parts;

use super::{bad_request, ApiError};

/// A query string, or a 400 in JSON naming what is wrong with it.
pub struct ApiQuery<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for ApiQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e) => {
                let text = e.body_text();
                let why = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                Err(bad_request(format!("bad query string: {why}")))
            }
        }
    }
}

/// No query string: a route whose document lists no parameter answers one with a 400 naming it
/// (as every route answers an unknown parameter), never ignores it.
pub struct NoQuery;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        match parts.uri.query() {
            Some(q) if !q.is_empty() => Err(bad_request(format!(
                "this route takes no parameters, got the query string {q:?}"
            ))),
            _ => Ok(NoQuery),
        }
    }
}

/// A path's parameters, or a 400 in JSON (`%FF` is not text).
pub struct ApiPath<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for ApiPath<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(bad_request(format!("bad path: {}", e.body_text()))),
        }
    }
}
