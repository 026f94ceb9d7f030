//! How far an app has applied the stream: every answer says how fresh it is.

use serde_json::{json, Value};
use tally_consumer::worker::now_ms;
use tally_core::lease::Lease;
use tally_core::ports::{LeaseStore, PortResult};

/// A shard's arrival clock: the latest arrival time of a record it has applied, if any.
fn clock(l: &Lease) -> Option<i64> {
    (l.max_arrival != i64::MIN).then_some(l.max_arrival)
}

/// How far `app` has applied the stream: every record that arrived up to `arrival_ms` on every
/// shard still being read is applied (the smallest clock of the unfinished shards), and how far
/// that is behind now. `arrival_ms` is null while some unfinished shard has applied nothing.
/// Per shard: `tally leases` and `/api/leases`.
pub async fn applied_through(leases: &dyn LeaseStore, app: &str) -> PortResult<Value> {
    let rows = leases.list_leases(app).await?;
    let active: Vec<&Lease> = rows.iter().filter(|l| !l.finished).collect();
    let through = if active.is_empty() {
        rows.iter().filter_map(clock).max()
    } else if active.iter().any(|l| clock(l).is_none()) {
        None
    } else {
        active.iter().filter_map(|l| clock(l)).min()
    };
    let now = now_ms();
    Ok(json!({
        "app": app,
        "arrival_ms": through,
        "lag_ms": through.map(|t| (now - t).max(0)),
        "at_ms": now,
    }))
}

/// Each shard's lease and progress, as JSON.
pub async fn lease_rows(leases: &dyn LeaseStore, app: &str) -> PortResult<Value> {
    let now = now_ms();
    let mut out = Vec::new();
    for l in leases.list_leases(app).await? {
        let pending = match leases.shard_state(app, &l.shard_id).await {
            Ok(st) => st
                .pending
                .map(|p| json!({"end": p.end.as_str(), "horizon_ms": p.horizon_ms})),
            Err(_) => None,
        };
        let c = clock(&l);
        out.push(json!({
            "shard_id": l.shard_id,
            "owner": l.owner,
            "held": l.is_held(now),
            "epoch": l.epoch,
            "expires_ms": l.expires_ms,
            "checkpoint": l.checkpoint.as_ref().map(|c| c.as_str()),
            "applied_arrival_ms": c,
            "lag_ms": if l.finished { None } else { c.map(|t| (now - t).max(0)) },
            "pending": pending,
            "finished": l.finished,
            "parents": l.parents,
        }));
    }
    Ok(Value::Array(out))
}
