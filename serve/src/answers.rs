//! The JSON answers the CLI (`--json`) and the HTTP API (`tally serve`, a consumer's `--http`)
//! share: a post's count, read units, a dead letter, write units by purpose. One builder each,
//! so that `tally query --json` and `/api/posts/{id}` can never say a count differently.

use serde_json::{json, Value};
use tally_core::buckets::minute_start;
use tally_core::cost::{Purpose, Units};
use tally_core::dead_letter::DeadLetter;
use tally_core::ports::{Consistency, PostCount};

/// What a count adds from windows read but not yet written (`serve::pending`): to the total, and
/// to the count since the asked time. Zero when the workers were not asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Provisional {
    pub total: i64,
    pub since: i64,
}

/// One post's count: `count` (stored plus provisional), `stored`, `pending`, `read_units`; with
/// a "since" time asked, also `count_since` and `pending_since` from the start of that time's
/// minute (`since_ms`: counts are kept per minute). An answer about one post adds the time asked
/// as `since_requested_ms`; a feed page's entries share theirs.
pub fn post_count(
    id: &str,
    n: &PostCount,
    provisional: Provisional,
    since_requested_ms: Option<i64>,
    read_units: Value,
) -> Value {
    let mut v = json!({
        "post_id": id,
        "count": n.total + provisional.total,
        "stored": n.total,
        "pending": provisional.total,
        "read_units": read_units,
    });
    if let (Some(t), Some(since)) = (since_requested_ms, n.since) {
        v["since_ms"] = json!(minute_start(t));
        v["count_since"] = json!(since + provisional.since);
        v["pending_since"] = json!(provisional.since);
    }
    v
}

/// Read units as DynamoDB charges them: `strong` for strongly consistent reads, half of it for
/// eventually consistent ones.
pub fn read_units(strong: u64, c: Consistency) -> Value {
    match c {
        Consistency::Strong => json!(strong),
        Consistency::Eventual => json!(strong as f64 / 2.0),
    }
}

/// The name of a consistency in answers.
pub fn consistency(c: Consistency) -> &'static str {
    match c {
        Consistency::Strong => "strong",
        Consistency::Eventual => "eventual",
    }
}

/// A dead letter: where it was (shard, sequence and sub-sequence number), why, and its bytes
/// (lossy UTF-8; `data_truncated` when the letter keeps only the first 4 KiB).
pub fn dead_letter(d: &DeadLetter) -> Value {
    json!({
        "shard_id": d.shard_id,
        "sequence_number": d.seq.seq.as_str(),
        "sub_sequence_number": d.seq.sub,
        "arrival_ms": d.arrival_ms,
        "reason": d.reason,
        "size": d.size,
        "data_truncated": (d.data.len() as u64) < d.size,
        "data": String::from_utf8_lossy(&d.data),
        "gap": d.gap.as_ref().map(|g| json!({
            "app": g.app,
            "through": g.through.as_ref().map(ToString::to_string),
        })),
    })
}

/// Write units by purpose: `{"counts": N, …, "total": N}`.
pub fn write_units(u: &Units) -> Value {
    let mut o = serde_json::Map::new();
    for p in Purpose::ALL {
        o.insert(p.name().to_owned(), u.get(p).into());
    }
    o.insert("total".to_owned(), u.total().into());
    Value::Object(o)
}
