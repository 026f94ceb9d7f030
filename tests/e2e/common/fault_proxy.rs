//! A fault-injecting HTTP proxy in front of a local AWS API peer: no emulator ever throttles, so
//! the tests make it. It forwards every request to the peer, except that a queued fault for the
//! request's `X-Amz-Target` is applied first: an AWS error response, a dropped connection after
//! the request was forwarded (the write happened, its answer is lost), a PutRecords answer in
//! which some entries failed (and were really not written), or a SubscribeToShard event stream
//! ended early. SubscribeToShard answers are streamed through as they come.
//!
//! Beside the queued faults, a [`FaultMix`] draws one per request at random (seeded): answers
//! lost after the peer applied the request, HTTP 500s, throttles, delays and expired iterators,
//! the mix a service under load answers with.

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
    /// Answer HTTP 500 (an internal error), without forwarding.
    ServerError,
    /// Forward after this long.
    Delay(std::time::Duration),
    /// Forward untouched: a queued pass keeps a pattern of faults in step with the requests.
    Pass,
}

/// The chances, per request, of each fault drawn at random (on every operation but
/// SubscribeToShard; an expired iterator only on GetRecords).
#[derive(Clone, Debug, Default)]
pub struct FaultMix {
    pub seed: u64,
    /// Forward, then drop the connection: the request took effect, its answer is lost.
    pub lost_answer: f64,
    /// HTTP 500.
    pub server_error: f64,
    /// ProvisionedThroughputExceededException.
    pub throttle: f64,
    /// Forward after 0.2–2 s.
    pub delay: f64,
    /// GetRecords: ExpiredIteratorException.
    pub expired_iterator: f64,
}

/// What draws the mix's faults.
struct Mixer {
    mix: FaultMix,
    rng: rand::rngs::StdRng,
}

impl Mixer {
    fn draw(&mut self, op: &str) -> Option<Fault> {
        use rand::Rng;
        if op == "SubscribeToShard" {
            return None;
        }
        let x: f64 = self.rng.gen();
        let m = &self.mix;
        let mut at = 0.0;
        let mut hit = |p: f64| {
            at += p;
            x < at
        };
        if hit(m.lost_answer) {
            Some(Fault::DropAfterForward)
        } else if hit(m.server_error) {
            Some(Fault::ServerError)
        } else if hit(m.throttle) {
            Some(Fault::Error("ProvisionedThroughputExceededException"))
        } else if op == "GetRecords" && hit(m.expired_iterator) {
            Some(Fault::Error("ExpiredIteratorException"))
        } else if hit(m.delay) {
            let ms = self.rng.gen_range(200..2_000);
            Some(Fault::Delay(std::time::Duration::from_millis(ms)))
        } else {
            None
        }
    }
}

/// Faults queued for requests of one operation whose body contains a string.
struct Matching {
    op: String,
    needle: String,
    fault: Fault,
    times: usize,
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

/// What the proxy applies: queued faults per operation, faults for matching requests, a mix.
#[derive(Default)]
struct Plan {
    queued: HashMap<String, VecDeque<Fault>>,
    matching: Vec<Matching>,
    mixer: Option<Mixer>,
}

type Queue = Arc<Mutex<Plan>>;

/// A running proxy.
pub struct FaultProxy {
    /// Where clients connect.
    pub url: String,
    faults: Queue,
    /// Requests seen per operation, and faults applied (`fault:<kind>`).
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

impl FaultProxy {
    /// Starts a proxy on 127.0.0.1 in front of `upstream` (e.g. `http://127.0.0.1:8000`).
    pub fn start(upstream: &str) -> FaultProxy {
        FaultProxy::start_with(upstream, None)
    }

    /// Starts a proxy that also applies `mix` to every request.
    pub fn with_mix(upstream: &str, mix: FaultMix) -> FaultProxy {
        FaultProxy::start_with(upstream, Some(mix))
    }

    fn start_with(upstream: &str, mix: Option<FaultMix>) -> FaultProxy {
        use rand::SeedableRng;
        let faults: Queue = Arc::new(Mutex::new(Plan {
            mixer: mix.map(|mix| Mixer {
                rng: rand::rngs::StdRng::seed_from_u64(mix.seed),
                mix,
            }),
            ..Plan::default()
        }));
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
        let q = f.queued.entry(operation.to_owned()).or_default();
        for _ in 0..times {
            q.push_back(fault.clone());
        }
    }

    /// Applies `fault` to the next `times` requests of the operation whose body contains
    /// `needle` (before any queued fault of the operation).
    pub fn inject_matching(&self, operation: &str, needle: &str, fault: Fault, times: usize) {
        self.faults.lock().unwrap().matching.push(Matching {
            op: operation.to_owned(),
            needle: needle.to_owned(),
            fault,
            times,
        });
    }

    /// Queued faults not yet applied.
    pub fn remaining(&self) -> usize {
        let f = self.faults.lock().unwrap();
        f.queued.values().map(VecDeque::len).sum::<usize>()
            + f.matching.iter().map(|m| m.times).sum::<usize>()
    }

    /// Stops drawing faults from the mix (queued ones still apply).
    pub fn calm(&self) {
        self.faults.lock().unwrap().mixer = None;
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

    /// Faults applied so far: answers lost after the peer applied the call, 500s, error answers
    /// (throttles, expired iterators) and delays.
    pub fn faulted(&self) -> usize {
        ["DropAfterForward", "ServerError", "Error", "Delay"]
            .iter()
            .map(|k| self.seen(&format!("fault:{k}")))
            .sum()
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
    let (parts, body) = req.into_parts();
    let mut body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let fault = {
        let mut plan = faults.lock().unwrap();
        let text = String::from_utf8_lossy(&body);
        let matched = plan
            .matching
            .iter_mut()
            .find(|m| m.times > 0 && m.op == op && text.contains(&m.needle));
        match matched {
            Some(m) => {
                m.times -= 1;
                Some(m.fault.clone())
            }
            None => match plan.queued.get_mut(&op).and_then(VecDeque::pop_front) {
                Some(f) => Some(f),
                None => plan.mixer.as_mut().and_then(|m| m.draw(&op)),
            },
        }
    };
    if let Some(f) = &fault {
        let kind = format!("fault:{}", format!("{f:?}").split('(').next().unwrap_or(""));
        *seen.lock().unwrap().entry(kind).or_default() += 1;
    }
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
        Some(Fault::ServerError) => {
            let mut r = aws_error("InternalServerError", serde_json::json!({}));
            *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            return Ok(r);
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
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
