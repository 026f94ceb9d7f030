//! Provisional counts: what the counter's workers have read but not yet written, added to the
//! stored counts without being counted twice, dropped, or taken back.
//!
//! A worker reports where it serves its open windows (`--http`, or `--advertise`) with each lease
//! renewal (`ShardState::holder_addr`). For a counts call the read side, *before* reading the
//! store, asks each live holder of a counter lease (one request per worker, side by side, within
//! [`Pending::timeout`]) for its windows' deltas of the posts asked about; then it reads the
//! counts, each with its live items' markers; and it adds a window's delta for a post only where
//! that post's item shows the window is not applied yet (`summary::pending_applies`). A window
//! that lands in between is in the stored count and not added; one still open is added once.
//!
//! **Never taken back.** Each answer says how far its windows reach (`through`, the marker of the
//! last record they hold). The read side remembers, per post and shard, the furthest-reaching
//! answer it has given ([`Memory`]) and keeps giving it until an answer from the shard's holder
//! reaches as far: a worker that dies with a window open, or a successor that has not yet read as
//! far, does not take a shown count back. The remembered windows are the dead worker's reads of
//! the shard after its checkpoint; its successor reads the same records after the same
//! checkpoint, and they stop being added once the post's marker shows their window applied.
//! **Not covered:** a successor whose first window closes short of the remembered reach moves the
//! marker with part of it, so the whole remembered window stops being added and the count dips
//! until the successor's answers reach as far (each record's marker in the answers would cover
//! it). Memory is per process: another `tally serve`, or `tally query`, has none.
//!
//! **Complete** means every unfinished shard's live holder answered: a shard whose holder did not
//! answer, reported no address, or is gone (its lease expired and not yet taken) is named in
//! `unanswered_shards`, whether or not its remembered answer was used. Only a shard's current
//! holder is believed: an answer about a shard the listing gives to another worker is ignored. What is not covered is said in ARCHITECTURE ("What an answer never shows").

use crate::answers::Provisional;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tally_core::buckets::minute_start;
use tally_core::clock::now_ms;
use tally_core::open::ShardOpen;
use tally_core::ports::PostCount;
use tally_core::summary::pending_applies;

use super::freshness::Listing;
use super::worker::OpenAnswer;

/// How long a counts call waits for the workers, by default (`tally serve --pending-timeout`,
/// and `tally query`), as the flag's default is written.
pub const TIMEOUT_TEXT: &str = "200ms";

/// [`TIMEOUT_TEXT`] as a duration (a unit test holds that it is one).
pub fn default_timeout() -> Duration {
    humantime::parse_duration(TIMEOUT_TEXT).unwrap_or_default()
}

/// Asks the counter's workers for their open windows.
pub struct Pending {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// How long a counts call waits for the workers; a worker slower than this is named in the
    /// answer as not answering.
    pub timeout: Duration,
    memory: std::sync::Mutex<Memory>,
}

/// One window's delta of one post on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostWindow {
    /// The shard whose window it is.
    pub shard: String,
    /// The marker of the checkpoint the window follows (`None`: the shard's first window).
    pub after: Option<String>,
    /// Net change by the start of the minute (ms) the events were created in.
    pub minutes: BTreeMap<i64, i64>,
}

/// The windows to add, by post.
#[derive(Debug, Default)]
pub struct Windows(HashMap<String, Vec<PostWindow>>);

impl Windows {
    fn of(&self, post: &str) -> &[PostWindow] {
        self.0.get(post).map_or(&[], Vec::as_slice)
    }

    /// How many windows (of one post on one shard) are held.
    pub fn count(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }
}

/// The open windows the holders answered with (or remembered), and the shards whose holder did
/// not answer.
#[derive(Debug, Default)]
pub struct Asked {
    pub windows: Windows,
    /// Unfinished shards whose live holder did not answer: it did not answer in time, reported no
    /// address, no longer lists the shard, or there is none (the lease expired and was not taken
    /// yet). Their counts are the stored ones plus what this read side remembers of them.
    pub unanswered: Vec<String>,
    /// Shards of which a remembered answer was given (their holder's own reached less far, or
    /// there was none).
    pub remembered: Vec<String>,
    /// Workers asked.
    pub workers: usize,
}

/// What one answer said of one post on one shard: its windows' deltas, and how far they reach.
#[derive(Clone, Debug)]
struct Said {
    windows: Vec<PostWindow>,
    through: Option<String>,
    at: std::time::Instant,
}

/// The furthest-reaching answer given per post and shard, so that no later answer gives less.
/// Bounded: an entry is forgotten once the shard's holder answers as far, or after [`FORGET`]
/// (a dead worker's successor has long re-read by then), and the oldest go first past
/// [`MEMORY_POSTS`] posts.
#[derive(Default)]
pub struct Memory {
    said: HashMap<String, HashMap<String, Said>>,
}

/// How long an answer is remembered.
const FORGET: Duration = Duration::from_secs(600);
/// How many posts' answers are remembered at most.
const MEMORY_POSTS: usize = 200_000;

impl Memory {
    /// Takes the holders' answers `live` (by shard) for `ids`: remembers each where it reaches
    /// at least as far as what was remembered, and returns the windows to add per post — the
    /// live answer's, or the remembered one where it reaches further or the shard did not
    /// answer — and the shards a remembered answer was given for.
    pub fn settle(
        &mut self,
        ids: &[String],
        live: &HashMap<String, ShardOpen>,
    ) -> (Windows, BTreeSet<String>) {
        let now = std::time::Instant::now();
        let mut out = Windows::default();
        let mut remembered = BTreeSet::new();
        // Which answers speak of each post: built once, so that the work per post follows the
        // windows that hold it, never the shard count.
        let mut speaking: HashMap<&str, Vec<&str>> = HashMap::new();
        for (shard, answer) in live {
            let mut posts: Vec<&str> = answer
                .windows
                .iter()
                .flat_map(|w| w.posts.keys().map(String::as_str))
                .collect();
            posts.sort_unstable();
            posts.dedup();
            for p in posts {
                speaking.entry(p).or_default().push(shard.as_str());
            }
        }
        // A page may name a post twice: its windows are added once.
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        for post in unique {
            let said = self.said.entry(post.clone()).or_default();
            // The answers that hold the post: remembered where they reach at least as far.
            for &shard in speaking.get(post.as_str()).into_iter().flatten() {
                let answer = &live[shard];
                let fresh = Said {
                    windows: answer
                        .windows
                        .iter()
                        .filter_map(|w| {
                            Some(PostWindow {
                                shard: shard.to_owned(),
                                after: w.after.clone(),
                                minutes: w.posts.get(post)?.clone(),
                            })
                        })
                        .collect(),
                    through: answer.through.clone(),
                    at: now,
                };
                match said.get(shard) {
                    Some(old) if old.through > fresh.through => {
                        remembered.insert(shard.to_owned());
                    }
                    _ => {
                        said.insert(shard.to_owned(), fresh);
                    }
                }
            }
            // What was remembered of shards whose answer now holds nothing of the post: an
            // answer that reaches as far supersedes it; a shorter one, or none, keeps it given.
            said.retain(|shard, s| {
                if now.duration_since(s.at) >= FORGET {
                    return false;
                }
                let Some(answer) = live.get(shard) else {
                    if !s.windows.is_empty() {
                        remembered.insert(shard.clone());
                    }
                    return true;
                };
                let holds = answer.windows.iter().any(|w| w.posts.contains_key(post));
                if holds {
                    return true;
                }
                if s.through > answer.through {
                    remembered.insert(shard.clone());
                    true
                } else {
                    false
                }
            });
            // In shard order: an answer's windows are the same whatever order the answers came
            // in.
            let mut shards: Vec<(&String, &Said)> = said.iter().collect();
            shards.sort_by(|a, b| a.0.cmp(b.0));
            for (_, s) in shards {
                out.0
                    .entry(post.clone())
                    .or_default()
                    .extend(s.windows.iter().cloned());
            }
            if said.is_empty() {
                self.said.remove(post);
            }
        }
        if self.said.len() > MEMORY_POSTS {
            self.forget_oldest(now);
        }
        (out, remembered)
    }

    /// The shards whose answers about any of `ids` are remembered.
    pub fn remembered(&self, ids: &[String]) -> HashSet<String> {
        ids.iter()
            .filter_map(|p| self.said.get(p))
            .flat_map(|said| said.keys().cloned())
            .collect()
    }

    /// Forgets the answers of the posts asked about longest ago, down to half the bound.
    fn forget_oldest(&mut self, now: std::time::Instant) {
        let mut ages: Vec<(Duration, String)> = self
            .said
            .iter()
            .map(|(p, s)| {
                let newest = s.values().map(|x| now.duration_since(x.at)).min();
                (newest.unwrap_or(FORGET), p.clone())
            })
            .collect();
        ages.sort_unstable();
        for (_, p) in ages.into_iter().skip(MEMORY_POSTS / 2) {
            self.said.remove(&p);
        }
    }
}

impl Pending {
    pub fn new(timeout: Duration) -> Pending {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout));
        Pending {
            client: Client::builder(TokioExecutor::new()).build(http),
            timeout,
            memory: Default::default(),
        }
    }

    /// Asks every live holder in `listing` (the lease listing of the application whose windows
    /// hold counts) for its windows' deltas of `ids`, side by side, each within the timeout;
    /// settles them with what was remembered.
    pub async fn ask(&self, listing: &Listing, ids: &[String]) -> Asked {
        // The shards whose earlier answers are remembered are asked by name: whether their
        // holder's answer now reaches as far is what keeps or forgets them.
        let named = self.memory().remembered(ids);
        let (live, mut asked) = self.ask_live(listing, ids, &named).await;
        let (windows, remembered) = self.memory().settle(ids, &live);
        asked.windows = windows;
        asked.remembered = remembered.into_iter().collect();
        asked
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live holders' answers, by shard, and what is known of who answered. Each worker is
    /// asked with the digest of the shards the listing gives it (`held`): one that holds just
    /// those lists only the shards whose windows hold a post asked about, and those of `named`
    /// it holds; every other shard of its answered, with nothing of the posts. So a call's work
    /// follows the windows that hold its posts, not the shard count.
    async fn ask_live(
        &self,
        listing: &Listing,
        ids: &[String],
        named: &HashSet<String>,
    ) -> (HashMap<String, ShardOpen>, Asked) {
        let now = now_ms();
        let workers = listing.workers();
        let mut asked = Asked {
            // No live holder: what its last one read and did not write is not known here.
            unanswered: workers.unheld.clone(),
            ..Asked::default()
        };
        let query = ids.join(",");
        // A worker whose every lease has expired since the listing is not asked: its shards are
        // unanswered.
        let mut to_ask = Vec::new();
        for w in &workers.by_worker {
            let expired = w.expired(now);
            if expired.len() == w.shards() {
                asked
                    .unanswered
                    .extend(expired.into_iter().map(str::to_owned));
            } else {
                to_ask.push((w, expired));
            }
        }
        asked.workers = to_ask.len();
        let calls = to_ask.into_iter().map(|(w, expired)| {
            let mut url = format!(
                "http://{}/api/open?ids={query}&held={:x}",
                w.addr,
                w.digest_live(&expired)
            );
            let mine: Vec<&str> = named
                .iter()
                .map(String::as_str)
                .filter(|s| w.holds(s, now))
                .collect();
            if !mine.is_empty() {
                url.push_str("&shards=");
                url.push_str(&mine.join(","));
            }
            async move {
                let answer = tokio::time::timeout(self.timeout, self.get(&url)).await;
                (w, expired, answer.ok().flatten())
            }
        });
        let mut live: HashMap<String, ShardOpen> = HashMap::new();
        for (w, expired, answer) in futures_util::future::join_all(calls).await {
            asked
                .unanswered
                .extend(expired.into_iter().map(str::to_owned));
            let answer = answer.filter(|a| a.owner == w.owner);
            match answer {
                Some(a) if a.holding_only => {
                    for s in a.shards {
                        if w.holds(&s.shard_id, now) {
                            live.insert(s.shard_id.clone(), s);
                        }
                    }
                }
                Some(a) => {
                    let mut open: HashMap<String, ShardOpen> = a
                        .shards
                        .into_iter()
                        .map(|s| (s.shard_id.clone(), s))
                        .collect();
                    for shard in w.live(now) {
                        match open.remove(shard) {
                            Some(s) => {
                                live.insert(shard.to_owned(), s);
                            }
                            None => asked.unanswered.push(shard.to_owned()),
                        }
                    }
                }
                None => asked
                    .unanswered
                    .extend(w.live(now).into_iter().map(str::to_owned)),
            }
        }
        asked.unanswered.sort();
        (live, asked)
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
    windows: &Windows,
    since_ms: Option<i64>,
) -> Provisional {
    let from = since_ms.map(minute_start);
    let (mut total, mut since) = (0, 0);
    for w in windows.of(post) {
        if !pending_applies(&count.marks, &w.shard, w.after.as_deref()) {
            continue;
        }
        for (&minute, &n) in &w.minutes {
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
        "windows": asked.windows.count(),
        "every_shard_answered": asked.unanswered.is_empty(),
        "unanswered_shards": asked.unanswered,
        "remembered_shards": asked.remembered,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_timeout_is_a_duration() {
        assert_eq!(
            super::default_timeout(),
            std::time::Duration::from_millis(200)
        );
    }

    use super::*;
    use tally_core::open::OpenWindow;
    use tally_core::ports::ShardState;

    fn held(shard: &str, owner: &str, addr: &str) -> ShardState {
        let until = now_ms() + 60_000;
        super::super::workers::tests::state(shard, Some(owner), Some(addr), until)
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
                    through: Some("0013".into()),
                },
                ShardOpen {
                    shard_id: "s1".into(),
                    windows: vec![window(7)],
                    through: Some("0013".into()),
                },
            ],
            holding_only: false,
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
        let listing = Listing::new("counter", states, now_ms());
        let asked = Pending::new(Duration::from_millis(500))
            .ask(&listing, &["p".to_owned()])
            .await;
        server.abort();
        assert_eq!(
            asked.windows.of("p"),
            [PostWindow {
                shard: "s1".into(),
                after: None,
                minutes: [(0, 7)].into_iter().collect(),
            }]
        );
        assert_eq!(asked.unanswered, vec!["s0".to_owned(), "s2".to_owned()]);
        assert_eq!(asked.workers, 3);
    }

    /// A worker asked with the digest of the shards the listing gives it lists only the shards
    /// whose windows hold a post asked about (and those named): the others it holds are
    /// answered, not unanswered. The fake worker honours `held` as a worker does: only when it
    /// is the digest of the shards it holds — here the listing's, less the one whose lease has
    /// expired since it was listed.
    #[tokio::test]
    async fn a_worker_listing_only_the_shards_holding_the_page_answers_for_all_it_holds() {
        let holds = ["s0", "s1", "s2"];
        let digest = format!("{:x}", tally_core::open::shards_digest(holds));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new().route(
            "/api/open",
            axum::routing::get(move |q: axum::extract::Query<HashMap<String, String>>| {
                let digest = digest.clone();
                async move {
                    let holding_only = q.get("held") == Some(&digest);
                    let mut shards = vec![answer("s1", None, 7, "0013")];
                    if !holding_only {
                        shards.push(ShardOpen {
                            shard_id: "s0".into(),
                            windows: vec![],
                            through: None,
                        });
                    }
                    axum::Json(OpenAnswer {
                        owner: "w".into(),
                        shards,
                        holding_only,
                    })
                }
            }),
        );
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let mut expired = held("s3", "w", &addr);
        expired.lease.expires_ms = now_ms() - 1;
        let states = vec![
            held("s0", "w", &addr),
            held("s1", "w", &addr),
            held("s2", "w", &addr),
            expired,
        ];
        let listing = Listing::new("counter", states, now_ms());
        let asked = Pending::new(Duration::from_millis(500))
            .ask(&listing, &["p".to_owned()])
            .await;
        assert_eq!(added(&asked.windows), vec![("s1".into(), 7)]);
        assert_eq!(asked.unanswered, ["s3"], "only the expired lease's shard");
        // Listed as holding a shard it does not: it answers for every shard it holds, and the
        // one it did not list is unanswered.
        let mut states = listing.states.clone();
        states.push(held("s9", "w", &addr));
        let listing = Listing::new("counter", states, now_ms());
        let asked = Pending::new(Duration::from_millis(500))
            .ask(&listing, &["p".to_owned()])
            .await;
        server.abort();
        assert_eq!(added(&asked.windows), vec![("s1".into(), 7)]);
        assert_eq!(asked.unanswered, ["s2", "s3", "s9"]);
    }

    fn answer(shard: &str, after: Option<&str>, n: i64, through: &str) -> ShardOpen {
        ShardOpen {
            shard_id: shard.into(),
            windows: vec![OpenWindow {
                after: after.map(str::to_owned),
                posts: [("p".to_owned(), [(0, n)].into_iter().collect())]
                    .into_iter()
                    .collect(),
            }],
            through: Some(through.into()),
        }
    }

    fn added(w: &Windows) -> Vec<(String, i64)> {
        w.of("p")
            .iter()
            .map(|w| (w.shard.clone(), w.minutes.values().sum()))
            .collect()
    }

    /// A shown window stays shown: when its worker stops answering, and while its successor has
    /// read less far; it gives way to an answer that reaches as far, and one with nothing of the
    /// post that reaches as far forgets it.
    #[test]
    fn an_answer_is_given_until_one_reaches_as_far() {
        let ids = ["p".to_owned()];
        let mut m = Memory::default();
        let live = |a: Vec<ShardOpen>| -> HashMap<String, ShardOpen> {
            a.into_iter().map(|s| (s.shard_id.clone(), s)).collect()
        };
        let (w, r) = m.settle(&ids, &live(vec![answer("s0", Some("0015"), 7, "0019")]));
        assert_eq!((added(&w), r.len()), (vec![("s0".into(), 7)], 0));
        // The worker is gone: the same window, remembered.
        let (w, r) = m.settle(&ids, &live(vec![]));
        assert_eq!(added(&w), vec![("s0".into(), 7)]);
        assert_eq!(r.into_iter().collect::<Vec<_>>(), ["s0"]);
        // Its successor has read less far: still the remembered one.
        let (w, _) = m.settle(&ids, &live(vec![answer("s0", Some("0015"), 4, "0017")]));
        assert_eq!(added(&w), vec![("s0".into(), 7)]);
        // Now as far and further: the successor's.
        let (w, r) = m.settle(&ids, &live(vec![answer("s0", Some("0015"), 9, "00210")]));
        assert_eq!((added(&w), r.len()), (vec![("s0".into(), 9)], 0));
        // Applied: an answer without the post, reaching further, forgets it.
        let mut none = answer("s0", Some("00210"), 0, "00211");
        none.windows.clear();
        let (w, _) = m.settle(&ids, &live(vec![none]));
        assert!(added(&w).is_empty());
        assert!(m.said.is_empty());
    }
}
