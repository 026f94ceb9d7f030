//! Provisional counts: what the counter's workers have read but not yet written, added to the
//! stored counts without being counted twice or dropped.
//!
//! A worker reports where it serves its open windows (`--http`, or `--advertise`) with each lease
//! renewal (`ShardState::holder_addr`). For a counts call the read side, *before* reading the
//! store, asks each live holder of a counter lease (one request per worker, side by side, within
//! [`Pending::timeout`]) for its windows' deltas of the posts asked about; then it reads the
//! counts, each with its live items' markers; and it adds a window's delta for a post only where
//! that post's item shows the window is not applied yet (`summary::pending_applies`). A window
//! that lands in between is in the stored count and not added; one still open is added once. A
//! shard whose holder does not answer (or reports no address) is named in the answer, which then
//! holds only what is stored for it. Only a shard's current holder is believed: an answer about a
//! shard the listing gives to another worker is ignored.

use crate::answers::Provisional;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tally_consumer::worker::now_ms;
use tally_core::buckets::minute_start;
use tally_core::ports::{PostCount, ShardState};
use tally_core::summary::pending_applies;
use tally_counter::board::{OpenWindow, ShardOpen};

/// How long a counts call waits for the workers, by default (`tally serve --pending-timeout`).
pub const TIMEOUT: Duration = Duration::from_millis(200);

/// What a worker's `/api/open` answers: who it is, and its held shards' windows.
#[derive(Debug, Serialize, Deserialize)]
pub struct OpenAnswer {
    pub owner: String,
    pub shards: Vec<ShardOpen>,
}

/// Asks the counter's workers for their open windows.
pub struct Pending {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// How long a counts call waits for the workers; a worker slower than this is named in the
    /// answer as not answering.
    pub timeout: Duration,
}

/// The open windows the holders answered with, and the shards whose holder did not answer.
#[derive(Debug, Default)]
pub struct Asked {
    /// (shard, window), from the shards' current holders.
    pub windows: Vec<(String, OpenWindow)>,
    /// Held shards whose holder did not answer in time, reported no address, or no longer lists
    /// the shard: their counts are the stored ones only.
    pub unanswered: Vec<String>,
    /// Workers asked.
    pub workers: usize,
}

impl Pending {
    pub fn new(timeout: Duration) -> Pending {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout));
        Pending {
            client: Client::builder(TokioExecutor::new()).build(http),
            timeout,
        }
    }

    /// Asks every live holder in `states` (the counter's lease listing) for its windows' deltas
    /// of `ids`, side by side, each within the timeout.
    pub async fn ask(&self, states: &[ShardState], ids: &[String]) -> Asked {
        let now = now_ms();
        let mut by_worker: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        let mut asked = Asked::default();
        for st in states.iter().filter(|s| !s.lease.finished) {
            let Some(owner) = st.lease.owner.clone().filter(|_| st.lease.expires_ms > now) else {
                continue; // no live holder: nothing read and not written is held anywhere
            };
            match &st.holder_addr {
                Some(addr) => by_worker
                    .entry((owner, addr.clone()))
                    .or_default()
                    .push(st.lease.shard_id.clone()),
                None => asked.unanswered.push(st.lease.shard_id.clone()),
            }
        }
        asked.workers = by_worker.len();
        let query = ids.join(",");
        let calls = by_worker.into_iter().map(|((owner, addr), shards)| {
            let url = format!("http://{addr}/api/open?ids={query}");
            async move {
                let answer = tokio::time::timeout(self.timeout, self.get(&url)).await;
                (owner, shards, answer.ok().flatten())
            }
        });
        for (owner, shards, answer) in futures_util::future::join_all(calls).await {
            let mut open: HashMap<String, Vec<OpenWindow>> = match answer {
                Some(a) if a.owner == owner => a
                    .shards
                    .into_iter()
                    .map(|s| (s.shard_id, s.windows))
                    .collect(),
                _ => HashMap::new(),
            };
            for shard in shards {
                match open.remove(&shard) {
                    Some(ws) => asked
                        .windows
                        .extend(ws.into_iter().map(|w| (shard.clone(), w))),
                    None => asked.unanswered.push(shard),
                }
            }
        }
        asked.unanswered.sort();
        asked
    }

    async fn get(&self, url: &str) -> Option<OpenAnswer> {
        let resp = self.client.get(url.parse().ok()?).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice(&body).ok()
    }
}

/// A post's pending delta (total, and since `since_ms`'s minute) from the windows not yet applied
/// to it, as its count's markers show.
pub fn pending_for(
    post: &str,
    count: &PostCount,
    windows: &[(String, OpenWindow)],
    since_ms: Option<i64>,
) -> Provisional {
    let from = since_ms.map(minute_start);
    let (mut total, mut since) = (0, 0);
    for (shard, w) in windows {
        let Some(minutes) = w.posts.get(post) else {
            continue;
        };
        if !pending_applies(&count.marks, shard, w.after.as_deref()) {
            continue;
        }
        for (&minute, &n) in minutes {
            total += n;
            if from.is_some_and(|f| minute >= f) {
                since += n;
            }
        }
    }
    Provisional { total, since }
}

/// What a counts answer says of its provisional part.
pub fn pending_json(asked: &Asked) -> Value {
    json!({
        "workers_asked": asked.workers,
        "windows": asked.windows.len(),
        "complete": asked.unanswered.is_empty(),
        "unanswered_shards": asked.unanswered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::lease::Lease;

    fn held(shard: &str, owner: &str, addr: &str) -> ShardState {
        ShardState {
            lease: Lease {
                app: "counter".into(),
                shard_id: shard.into(),
                owner: Some(owner.into()),
                epoch: 1,
                expires_ms: now_ms() + 60_000,
                checkpoint: None,
                finished: false,
                parents: vec![],
                max_arrival: 0,
            },
            pending: None,
            spent: Default::default(),
            progress: None,
            holder_addr: Some(addr.into()),
        }
    }

    /// A stale worker (it still answers for a shard the listing gives to another) is not
    /// believed about that shard; a worker that does not answer leaves its shards named.
    #[tokio::test]
    async fn only_a_shards_current_holder_is_believed() {
        let window = |n| OpenWindow {
            after: None,
            posts: [("p".to_owned(), [(0, n)].into_iter().collect())]
                .into_iter()
                .collect(),
        };
        let answer = serde_json::to_string(&OpenAnswer {
            owner: "old".into(),
            shards: vec![
                ShardOpen {
                    shard_id: "s0".into(),
                    windows: vec![window(5)],
                },
                ShardOpen {
                    shard_id: "s1".into(),
                    windows: vec![window(7)],
                },
            ],
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new().route(
            "/api/open",
            axum::routing::get(move || {
                let a = answer.clone();
                async move { ([("content-type", "application/json")], a) }
            }),
        );
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        // Nobody listens on port 9 of 127.0.0.1 (discard): that worker does not answer.
        let states = vec![
            held("s0", "new", &addr),
            held("s1", "old", &addr),
            held("s2", "gone", "127.0.0.1:9"),
        ];
        let asked = Pending::new(Duration::from_millis(500))
            .ask(&states, &["p".to_owned()])
            .await;
        server.abort();
        assert_eq!(asked.windows, vec![("s1".to_owned(), window(7))]);
        assert_eq!(asked.unanswered, vec!["s0".to_owned(), "s2".to_owned()]);
        assert_eq!(asked.workers, 3);
    }
}
