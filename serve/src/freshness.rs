//! How far an app has applied the stream: every answer says how fresh it is — from one listing of
//! the app's lease rows, refreshed in the background ([`Listings`]), so that an answer costs the
//! same whatever the shard count.
//!
//! Two figures, each with its own name: **lag** is how far behind its shard's tip a reader is (as
//! the lease holder reports it with each renewal: the stream's iterator age, 0 once a read comes
//! back empty at the tip); the **time since the last record** is how long ago the latest applied
//! record arrived, which on an idle stream grows while nothing is behind.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use serde_json::{json, Value};
use tally_core::apps;
use tally_core::clock::now_ms;
use tally_core::lease::Lease;
use tally_core::ports::{LeaseReader, PortResult, ShardState};

use super::workers::Workers;

/// One listing of an app's lease rows: what every answer about that app reads until the next.
#[derive(Clone, Debug)]
pub struct Listing {
    pub app: String,
    pub states: Vec<ShardState>,
    /// When it was listed.
    pub at_ms: i64,
    /// Its shards by holder, made on first use ([`Listing::workers`]).
    workers: OnceLock<Workers>,
}

impl Listing {
    /// A listing of `app`'s rows `states`, listed at `at_ms`.
    pub fn new(app: &str, states: Vec<ShardState>, at_ms: i64) -> Listing {
        Listing {
            app: app.to_owned(),
            states,
            at_ms,
            workers: OnceLock::new(),
        }
    }

    /// Lists `app`'s rows now (one store call).
    pub async fn fetch(leases: &dyn LeaseReader, app: &str) -> PortResult<Listing> {
        let states = leases.list_states(app).await?;
        Ok(Listing::new(app, states, now_ms()))
    }

    /// Its unfinished shards by the worker that holds each: made once, on first use, for every
    /// call answered from this listing.
    pub fn workers(&self) -> &Workers {
        self.workers.get_or_init(|| Workers::of(&self.states))
    }
}

/// The listings the read side answers from, one per app (and, across regions, one of each other
/// home's counter), each refreshed every `every` by one background task: requests never list the
/// leases themselves.
pub struct Listings {
    slots: Vec<Slot>,
}

/// One listing kept fresh: whose rows (this region's when `home` is `None`), and the latest.
struct Slot {
    home: Option<String>,
    app: &'static str,
    leases: Arc<dyn LeaseReader>,
    latest: RwLock<Arc<Listing>>,
}

/// How often `tally serve` lists the lease rows.
pub const REFRESH: Duration = Duration::from_secs(1);

impl Listings {
    /// Lists every app the read side answers of (the counter's stages, analytics) and each other
    /// home's counter once (an unreachable store fails here, before serving), then refreshes in
    /// the background until the returned handle is dropped.
    pub async fn start(
        leases: Arc<dyn LeaseReader>,
        homes: &BTreeMap<String, Arc<dyn LeaseReader>>,
        every: Duration,
    ) -> PortResult<(Arc<Listings>, tokio::task::JoinHandle<()>)> {
        let all = [apps::COUNTER, apps::CHANGES, apps::ANALYTICS];
        let this = Arc::new(Listings::list(leases, homes, &all).await?);
        let bg = this.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                bg.refresh().await;
            }
        });
        Ok((this, task))
    }

    /// Lists `apps` in this region and each other home's counter (`homes`: its lease rows as
    /// replicated here), once.
    pub(crate) async fn list(
        leases: Arc<dyn LeaseReader>,
        homes: &BTreeMap<String, Arc<dyn LeaseReader>>,
        apps: &[&'static str],
    ) -> PortResult<Listings> {
        let mut wanted: Vec<(Option<String>, &'static str, Arc<dyn LeaseReader>)> = apps
            .iter()
            .map(|app| (None, *app, leases.clone()))
            .collect();
        for (home, l) in homes {
            wanted.push((Some(home.clone()), apps::COUNTER, l.clone()));
        }
        let mut slots = Vec::new();
        for (home, app, leases) in wanted {
            let l = Listing::fetch(leases.as_ref(), app).await?;
            slots.push(Slot {
                home,
                app,
                leases,
                latest: RwLock::new(Arc::new(l)),
            });
        }
        Ok(Listings { slots })
    }

    /// Lists every app again; a failed listing keeps the last one (its `at_ms` says how old).
    pub async fn refresh(&self) {
        for slot in &self.slots {
            match Listing::fetch(slot.leases.as_ref(), slot.app).await {
                Ok(l) => {
                    if let Ok(mut s) = slot.latest.write() {
                        *s = Arc::new(l);
                    }
                }
                Err(e) => {
                    tracing::warn!(app = slot.app, home = ?slot.home, error = %e, "listing the lease rows failed; answers keep the last listing")
                }
            }
        }
    }

    /// The latest listing of `app` in this region.
    pub fn get(&self, app: &str) -> Arc<Listing> {
        self.slots
            .iter()
            .find(|s| s.home.is_none() && s.app == app)
            .and_then(|s| s.latest.read().ok().map(|l| l.clone()))
            .unwrap_or_else(|| Arc::new(Listing::new(app, Vec::new(), 0)))
    }

    /// The latest listing of each other home's counter, by region (empty: one region).
    pub fn homes(&self) -> Vec<(&str, Arc<Listing>)> {
        self.slots
            .iter()
            .filter_map(|s| {
                let l = s.latest.read().ok()?.clone();
                Some((s.home.as_deref()?, l))
            })
            .collect()
    }
}

/// A shard's arrival clock: the latest arrival time of a record it has applied, if any.
fn clock(l: &Lease) -> Option<i64> {
    (l.max_arrival != i64::MIN).then_some(l.max_arrival)
}

/// How far behind its tip a shard is (`None`: never reported), and when its reader reported it.
/// A live reader's report is the figure; with no live reader (the lease released or expired: no
/// worker running, or the one that held it died) the shard falls further behind by the time since
/// the report whenever records arrive, so that time is added — an upper bound, which a stopped
/// pipeline shows growing, never as "at the tip".
pub fn lag(s: &ShardState, now_ms: i64) -> Option<(i64, i64)> {
    s.progress.map(|p| {
        let read = s.lease.is_held(now_ms);
        let unread_for = if read { 0 } else { (now_ms - p.at_ms).max(0) };
        (p.behind_ms.saturating_add(unread_for), p.at_ms)
    })
}

/// Whether an unfinished shard has no live reader (its lease released or expired).
fn unread(s: &ShardState, now_ms: i64) -> bool {
    !s.lease.finished && !s.lease.is_held(now_ms)
}

/// The smallest of the unfinished shards' values (all shards' largest when every one is
/// finished); `None` while some unfinished shard has none — except a shard that has applied
/// nothing and whose reader reports its tip: it has no records, so it bounds nothing (its first
/// record, while the window holding it is open — at most `counter.window_ms` — is the one it
/// misses, as `lag_ms` does).
fn through(
    states: &[ShardState],
    now_ms: i64,
    value: impl Fn(&ShardState) -> Option<i64>,
) -> Option<i64> {
    let empty = |s: &ShardState| {
        s.lease.checkpoint.is_none()
            && s.pending.is_none()
            && lag(s, now_ms).is_some_and(|(b, _)| b <= 0)
    };
    let active: Vec<&ShardState> = states
        .iter()
        .filter(|s| !s.lease.finished && (value(s).is_some() || !empty(s)))
        .collect();
    if active.is_empty() {
        states.iter().filter_map(&value).max()
    } else if active.iter().any(|s| value(s).is_none()) {
        None
    } else {
        active.iter().filter_map(|s| value(s)).min()
    }
}

/// How far the listing's app has applied the stream:
/// - `lag_ms`: how far behind the tip the most lagging unfinished shard's reader is (0: every
///   shard read to its tip), as of `lag_reported_ms` (the oldest of those reports); null while
///   some unfinished shard's reader has not reported; a shard with no live reader adds the time
///   since its report ([`lag`]), and `unread_shards` says how many unfinished shards have none
///   (0: every one is being read; a stopped pipeline shows here and in a growing lag);
/// - `arrival_ms`: every record that arrived up to then is applied on every shard still being
///   read, and `since_last_record_ms` how long ago that is (on an idle stream this grows while
///   `lag_ms` stays 0);
/// - for the counter `event_ms`, the smallest of the shards' latest counted `created_at`;
/// - `listed_ms`: when the lease rows behind this answer were listed.
///
/// Per shard: `tally leases` and `/api/leases`.
pub fn applied_through(l: &Listing) -> Value {
    let now = now_ms();
    let arrival = through(&l.states, now, |s| clock(&s.lease));
    let active: Vec<&ShardState> = l.states.iter().filter(|s| !s.lease.finished).collect();
    let lags: Vec<Option<(i64, i64)>> = active.iter().map(|s| lag(s, now)).collect();
    let (lag_ms, reported) = if l.states.is_empty() || lags.iter().any(Option::is_none) {
        (None, None)
    } else {
        (
            lags.iter().flatten().map(|(b, _)| *b).max().or(Some(0)),
            lags.iter().flatten().map(|(_, t)| *t).min(),
        )
    };
    let unread_shards = l.states.iter().filter(|s| unread(s, now)).count();
    let mut v = json!({
        "app": l.app,
        "lag_ms": lag_ms,
        "lag_reported_ms": reported,
        "unread_shards": unread_shards,
        "arrival_ms": arrival,
        "since_last_record_ms": arrival.map(|t| (now - t).max(0)),
        "listed_ms": l.at_ms,
        "at_ms": now,
    });
    if l.app == apps::COUNTER {
        let latest =
            |s: &ShardState| (s.spent.latest_created_ms > 0).then_some(s.spent.latest_created_ms);
        let event = through(&l.states, now, latest);
        v["event_ms"] = json!(event);
        v["event_lag_ms"] = json!(event.map(|t| (now - t).max(0)));
    }
    v
}

/// Each shard's lease and progress, as JSON.
pub fn lease_rows(l: &Listing) -> Value {
    let now = now_ms();
    let out: Vec<Value> = l
        .states
        .iter()
        .map(|s| {
            let l = &s.lease;
            let c = clock(l);
            json!({
                "shard_id": l.shard_id,
                "owner": l.owner,
                "held": l.is_held(now),
                "epoch": l.epoch,
                "expires_ms": l.expires_ms,
                "checkpoint": l.checkpoint.as_ref().map(|c| c.to_string()),
                "applied_arrival_ms": c,
                "lag_ms": if l.finished { Some(0) } else { lag(s, now).map(|(b, _)| b) },
                "lag_reported_ms": lag(s, now).map(|(_, t)| t),
                "read": !unread(s, now),
                "since_last_record_ms": c.map(|t| (now - t).max(0)),
                "pending": s.pending.as_ref().map(|p| json!({"end": p.end.to_string(), "first": p.first.to_string(), "horizon_ms": p.horizon_ms})),
                "finished": l.finished,
                "parents": l.parents,
            })
        })
        .collect();
    Value::Array(out)
}
