//! A fault-injecting HTTP proxy in front of a local AWS API peer: no emulator ever throttles, so
//! the tests make it. It forwards every request to the peer, except that a queued fault for the
//! request's `X-Amz-Target` is applied first: an AWS error response, a dropped connection after
//! the request was forwarded (the write happened, its answer is lost), a PutRecords answer in
//! which some entries failed (and were really not written), or a SubscribeToShard event stream
//! ended early. SubscribeToShard answers are streamed through as they come.

use std::collections::{HashMap, VecDeque};

use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// One injected fault.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this AWS error (`__type`), HTTP 400, without forwarding.
    Error(&'static str),
    /// Forward, then drop the connection without an answer.
    DropAfterForward,
    /// PutRecords: forward only every other entry and report the rest as throttled.
    PartialPut,
    /// SubscribeToShard: stream the answer through, then end it after this long (as Kinesis ends
    /// every subscription after 5 minutes, or a connection breaks).
    EndStreamAfter(std::time::Duration),
}

/// A response body: a whole one, or a stream passed through.
type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn whole(b: Bytes) -> Body {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// A streamed body that ends at a deadline.
struct Cut {
    inner: Incoming,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Cut {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(std::io::Error::other)
    }
}

type Queue = Arc<Mutex<HashMap<String, VecDeque<Fault>>>>;

/// A running proxy.
pub struct FaultProxy {
    /// Where clients connect.
    pub url: String,
    faults: Queue,
    /// Requests seen per operation.
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 in front of `upstream` (e.g. `http://127.0.0.1:8000`).
    pub fn start(upstream: &str) -> FaultProxy {
        let faults: Queue = Arc::default();
        let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (f2, s2, up) = (
            faults.clone(),
            seen.clone(),
            upstream.trim_end_matches('/').to_owned(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let client: Client<_, Full<Bytes>> =
                    Client::builder(TokioExecutor::new()).build_http();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let (f, s, up, client) = (f2.clone(), s2.clone(), up.clone(), client.clone());
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            handle(req, f.clone(), s.clone(), up.clone(), client.clone())
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
        });
        let addr = rx.recv().unwrap();
        FaultProxy {
            url: format!("http://{addr}"),
            faults,
            seen,
        }
    }

    /// Queues `times` faults for the operation (`GetRecords`, `TransactWriteItems`, …).
    pub fn inject(&self, operation: &str, fault: Fault, times: usize) {
        let mut f = self.faults.lock().unwrap();
        let q = f.entry(operation.to_owned()).or_default();
        for _ in 0..times {
            q.push_back(fault.clone());
        }
    }

    /// Faults not yet applied.
    pub fn remaining(&self) -> usize {
        self.faults
            .lock()
            .unwrap()
            .values()
            .map(VecDeque::len)
            .sum()
    }

    /// Requests seen for an operation (`GetRecords:poll`: GetRecords for more than one record).
    pub fn seen(&self, operation: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }
}

fn aws_error(kind: &str, extra: serde_json::Value) -> Response<Body> {
    let mut body = serde_json::json!({"__type": format!("com.amazonaws.injected#{kind}"), "message": "injected by the test's fault proxy"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    Response::builder()
        .status(400)
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amzn-errortype", kind)
        .body(whole(Bytes::from(body.to_string())))
        .unwrap()
}

async fn handle(
    req: Request<Incoming>,
    faults: Queue,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    upstream: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
) -> Result<Response<Body>, std::io::Error> {
    let target = req
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let op = target.rsplit('.').next().unwrap_or("").to_owned();
    *seen.lock().unwrap().entry(op.clone()).or_default() += 1;
    let fault = faults
        .lock()
        .unwrap()
        .get_mut(&op)
        .and_then(VecDeque::pop_front);
    let (parts, body) = req.into_parts();
    let mut body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if op == "GetRecords" {
        // A read of one record is a question (has the shard ended?); more is polling.
        let limit = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["Limit"].as_u64());
        if limit != Some(1) {
            *seen
                .lock()
                .unwrap()
                .entry("GetRecords:poll".into())
                .or_default() += 1;
        }
    }
    let mut dropped: Vec<usize> = Vec::new();
    match fault {
        Some(Fault::Error(kind)) => return Ok(aws_error(kind, serde_json::json!({}))),
        Some(Fault::PartialPut) => {
            let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let records = v["Records"].as_array().unwrap().clone();
            let kept: Vec<_> = records
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, r)| r.clone())
                .collect();
            dropped = (0..records.len()).filter(|i| i % 2 == 1).collect();
            v["Records"] = serde_json::Value::Array(kept);
            body = Bytes::from(v.to_string());
        }
        _ => {}
    }
    let mut fwd = Request::builder()
        .method(parts.method.clone())
        .uri(format!("{upstream}{}", parts.uri.path()));
    for (k, v) in parts.headers.iter() {
        if k != "host" && k != "content-length" {
            fwd = fwd.header(k, v);
        }
    }
    let resp = client
        .request(fwd.body(Full::new(body)).unwrap())
        .await
        .map_err(std::io::Error::other)?;
    let (rparts, rbody) = resp.into_parts();
    let mut out = Response::builder().status(rparts.status);
    for (k, v) in rparts.headers.iter() {
        if k != "content-length" {
            out = out.header(k, v);
        }
    }
    if op == "SubscribeToShard" {
        // An event stream: pass it through as it comes, cut short if asked.
        let body = match fault {
            Some(Fault::EndStreamAfter(d)) => Cut {
                inner: rbody,
                deadline: Box::pin(tokio::time::sleep(d)),
            }
            .boxed(),
            _ => rbody.map_err(std::io::Error::other).boxed(),
        };
        return Ok(out.body(body).unwrap());
    }
    let mut rbytes = rbody
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(std::io::Error::other)?;
    if let Some(Fault::DropAfterForward) = fault {
        return Err(std::io::Error::other(
            "injected: connection dropped after forwarding",
        ));
    }
    if !dropped.is_empty() {
        let mut v: serde_json::Value = serde_json::from_slice(&rbytes).unwrap();
        let mut ok = v["Records"].as_array().unwrap().clone().into_iter();
        let total = dropped.len() + ok.len();
        let merged: Vec<_> = (0..total)
            .map(|i| {
                if dropped.contains(&i) {
                    serde_json::json!({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "injected"})
                } else {
                    ok.next().unwrap()
                }
            })
            .collect();
        v["FailedRecordCount"] = serde_json::json!(dropped.len());
        v["Records"] = serde_json::Value::Array(merged);
        rbytes = Bytes::from(v.to_string());
    }
    Ok(out.body(whole(rbytes)).unwrap())
}
