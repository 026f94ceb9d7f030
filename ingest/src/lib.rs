//! The embedded stream over HTTP in the Kinesis API's own shape (`tally ingest`): an app's
//! producer — the AWS SDKs, boto3, the AWS CLI, `examples/send_likes.py` — puts likes into the
//! embedded default with the code it runs against Kinesis, only an endpoint URL apart. Each
//! request is put as it comes (`PutRecord`, `PutRecords` with per-record results; and
//! `DescribeStreamSummary`, a producer's health check), with
//! Kinesis's limits and errors ([`kinesis`]); with a token, every request must be signed
//! (Signature Version 4) with it as the secret access key ([`sigv4`]).
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod kinesis;
pub mod sigv4;

use std::sync::Arc;

use anyhow::Result;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tally_core::ports::{PortError, Stream};

use kinesis::KinesisError;
use tally_serve::auth::Token;

/// Where `tally ingest` listens by default: beside the read API's port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:4567";

/// What `tally ingest` serves.
#[derive(Clone, Debug)]
pub struct IngestConfig {
    /// The stream's name, as producers name it (`StreamName`).
    pub stream: String,
    /// The secret a request must be signed with (`None`: any signature, or none, is taken).
    pub token: Option<Token>,
    /// The retention `DescribeStreamSummary` reports (hours; the embedded stream keeps records
    /// until `tally trim`).
    pub retention_hours: u32,
}

#[derive(Clone)]
struct Ctx {
    stream: Arc<dyn Stream>,
    cfg: Arc<IngestConfig>,
}

/// The router: `POST /` in the Kinesis API's shape, `GET /healthz`.
pub fn router(stream: Arc<dyn Stream>, cfg: IngestConfig) -> Router {
    Router::new()
        .route("/", post(put))
        .route("/healthz", get(|| async { "ok\n" }))
        // A PutRecords call carries up to 5 MiB of data, base64 in JSON: a third more.
        .layer(DefaultBodyLimit::max(8 * 1024 * 1024))
        .with_state(Ctx {
            stream,
            cfg: Arc::new(cfg),
        })
}

/// Serves `stream` on `listener` until `shutdown` completes: what `tally ingest` runs.
pub async fn run(
    listener: tokio::net::TcpListener,
    stream: Arc<dyn Stream>,
    cfg: IngestConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    tally_serve::serve_on(listener, router(stream, cfg), shutdown).await
}

async fn put(
    State(ctx): State<Ctx>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match put_checked(&ctx, &method, &uri, &headers, &body).await {
        Ok(v) => reply(StatusCode::OK, &v, None),
        Err(e) => {
            let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
            reply(status, &e.body(), Some(e.code))
        }
    }
}

async fn put_checked(
    ctx: &Ctx,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<serde_json::Value, KinesisError> {
    if let Some(token) = &ctx.cfg.token {
        let all: Vec<(String, String)> = headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let signed = sigv4::Signed {
            method: method.as_str(),
            path: uri.path(),
            query: uri.query().unwrap_or(""),
            headers: &all,
            body,
        };
        sigv4::verify(&signed, token.secrets(), std::time::SystemTime::now())?;
    }
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let not_found = |stream: &str| KinesisError {
        status: 400,
        code: "ResourceNotFoundException",
        message: format!(
            "Stream {stream} under account 000000000000 not found (this endpoint serves {})",
            ctx.cfg.stream
        ),
    };
    if target == kinesis::DESCRIBE_STREAM_SUMMARY {
        let stream = kinesis::described(body)?;
        if stream != ctx.cfg.stream {
            return Err(not_found(&stream));
        }
        let shards = ctx.stream.list_shards().await.map_err(|e| KinesisError {
            status: 500,
            code: "InternalFailure",
            message: e.to_string(),
        })?;
        let open = shards.iter().filter(|s| !s.closed).count();
        return Ok(kinesis::summary(&stream, open, ctx.cfg.retention_hours));
    }
    let put = kinesis::read(target, body)?;
    if put.stream != ctx.cfg.stream {
        return Err(not_found(&put.stream));
    }
    let outcomes = ctx
        .stream
        .put_records(&put.entries)
        .await
        .map_err(|e| match e {
            PortError::Invalid(m) => KinesisError::validation(m),
            other => KinesisError {
                status: 500,
                code: "InternalFailure",
                message: other.to_string(),
            },
        })?;
    kinesis::answer(&put, &outcomes)
}

fn reply(status: StatusCode, body: &serde_json::Value, error: Option<&'static str>) -> Response {
    let mut r = (status, body.to_string()).into_response();
    let h = r.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/x-amz-json-1.1"),
    );
    if let Some(code) = error {
        h.insert("x-amzn-errortype", HeaderValue::from_static(code));
    }
    r
}
