//! How far an app has applied the stream: every answer says how fresh it is.

use serde_json::{json, Value};
use tally_consumer::worker::now_ms;
use tally_core::lease::Lease;
use tally_core::ports::{LeaseStore, PortResult};

/// A shard's arrival clock: the latest arrival time of a record it has applied, if any.
fn clock(l: &Lease) -> Option<i64> {
    (l.max_arrival != i64::MIN).then_some(l.max_arrival)
}

/// The smallest of the unfinished shards' values (all shards' largest when every one is
/// finished); `None` while some unfinished shard has none.
fn through<T>(rows: &[(Lease, T)], value: impl Fn(&Lease, &T) -> Option<i64>) -> Option<i64> {
    let active: Vec<&(Lease, T)> = rows.iter().filter(|(l, _)| !l.finished).collect();
    if active.is_empty() {
        rows.iter().filter_map(|(l, t)| value(l, t)).max()
    } else if active.iter().any(|(l, t)| value(l, t).is_none()) {
        None
    } else {
        active.iter().filter_map(|(l, t)| value(l, t)).min()
    }
}

/// How far `app` has applied the stream: every record that arrived up to `arrival_ms` on every
/// shard still being read is applied (the smallest arrival clock of the unfinished shards), and
/// how far that is behind now; for the counter also `event_ms`, the smallest of the shards'
/// latest counted `created_at` (likes created after it may not be counted yet). Null while some
/// unfinished shard has applied nothing. Per shard: `tally leases` and `/api/leases`.
pub async fn applied_through(leases: &dyn LeaseStore, app: &str) -> PortResult<Value> {
    let mut rows = Vec::new();
    for l in leases.list_leases(app).await? {
        let latest = match leases.shard_state(app, &l.shard_id).await {
            Ok(st) => st.spent.latest_created_ms,
            Err(_) => 0,
        };
        rows.push((l, latest));
    }
    let arrival = through(&rows, |l, _| clock(l));
    let now = now_ms();
    let mut v = json!({
        "app": app,
        "arrival_ms": arrival,
        "lag_ms": arrival.map(|t| (now - t).max(0)),
        "at_ms": now,
    });
    if app == tally_core::apps::COUNTER {
        let event = through(&rows, |_, t| (*t > 0).then_some(*t));
        v["event_ms"] = json!(event);
        v["event_lag_ms"] = json!(event.map(|t| (now - t).max(0)));
    }
    Ok(v)
}

/// Each shard's lease and progress, as JSON.
pub async fn lease_rows(leases: &dyn LeaseStore, app: &str) -> PortResult<Value> {
    let now = now_ms();
    let mut out = Vec::new();
    for l in leases.list_leases(app).await? {
        let pending = match leases.shard_state(app, &l.shard_id).await {
            Ok(st) => st
                .pending
                .map(|p| json!({"end": p.end.to_string(), "first": p.first.as_ref().map(ToString::to_string), "horizon_ms": p.horizon_ms})),
            Err(_) => None,
        };
        let c = clock(&l);
        out.push(json!({
            "shard_id": l.shard_id,
            "owner": l.owner,
            "held": l.is_held(now),
            "epoch": l.epoch,
            "expires_ms": l.expires_ms,
            "checkpoint": l.checkpoint.as_ref().map(|c| c.to_string()),
            "applied_arrival_ms": c,
            "lag_ms": if l.finished { None } else { c.map(|t| (now - t).max(0)) },
            "pending": pending,
            "finished": l.finished,
            "parents": l.parents,
        }));
    }
    Ok(Value::Array(out))
}
