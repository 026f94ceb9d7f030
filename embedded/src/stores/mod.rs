//! The stores on SQLite.
//!
//! Layout: this module holds the helpers every store uses (a lease row read, the fence check, a
//! write item's statements); one file per port implements it: `leases` ([`LeaseStore`]),
//! `counter` ([`CounterStore`]; likers' edges and the count mode in `edges`), `analytics` ([`AnalyticsStore`]), `baselines`
//! ([`BaselineWriters`], for benchmarks); `items` is the `items` table the summary items and the
//! edges are rows of.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tally_core::cost::Purpose;
use tally_core::dead_letter::DeadLetter;
use tally_core::lease::Lease;
use tally_core::ports::{
    Fence, Pending, PortError, PortResult, ReadProgress, ShardState, ShardTally,
};
use tally_core::{Position, SeqNo};

use crate::sql_err;

mod analytics;
mod baselines;
mod counter;
mod edges;
mod items;
mod leases;

const LEASE_COLUMNS: &str = "app, shard_id, owner, epoch, expires_ms, checkpoint, finished, parents, max_arrival, pending_end, pending_horizon_ms, spent, pending_first, behind_ms, behind_at_ms, holder_addr, pending_skew_ms";

/// `ShardTally` as stored: a JSON object of write units by purpose name, and `counted`.
pub(crate) fn spent_json(sp: &ShardTally) -> String {
    let mut o = serde_json::Map::new();
    for p in Purpose::ALL {
        o.insert(p.name().to_owned(), sp.units.get(p).into());
    }
    o.insert("counted".to_owned(), sp.counted.into());
    o.insert("latest_created_ms".to_owned(), sp.latest_created_ms.into());
    serde_json::Value::Object(o).to_string()
}

fn spent_from(json: Option<String>) -> ShardTally {
    let v: serde_json::Value = json
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    let mut sp = ShardTally {
        counted: v["counted"].as_u64().unwrap_or(0),
        latest_created_ms: v["latest_created_ms"].as_i64().unwrap_or(0),
        ..ShardTally::default()
    };
    for p in Purpose::ALL {
        sp.units.add(p, v[p.name()].as_u64().unwrap_or(0));
    }
    sp
}

fn read_state(r: &rusqlite::Row<'_>) -> rusqlite::Result<ShardState> {
    let checkpoint: Option<String> = r.get(5)?;
    let parents: String = r.get(7)?;
    let pending_end: Option<String> = r.get(9)?;
    Ok(ShardState {
        lease: Lease {
            app: r.get(0)?,
            shard_id: r.get(1)?,
            owner: r.get(2)?,
            epoch: r.get::<_, i64>(3)? as u64,
            expires_ms: r.get(4)?,
            checkpoint: checkpoint.as_deref().and_then(Position::parse),
            finished: r.get::<_, i64>(6)? != 0,
            parents: serde_json::from_str(&parents).unwrap_or_default(),
            max_arrival: r.get(8)?,
        },
        pending: match pending_end.as_deref().and_then(Position::parse) {
            Some(end) => Some(Pending {
                end,
                first: r
                    .get::<_, Option<String>>(12)?
                    .as_deref()
                    .and_then(SeqNo::parse),
                horizon_ms: r.get(10)?,
                skew_ms: r.get(16)?,
            }),
            None => None,
        },
        spent: spent_from(r.get(11)?),
        progress: match (r.get::<_, Option<i64>>(13)?, r.get::<_, Option<i64>>(14)?) {
            (Some(behind_ms), Some(at_ms)) => Some(ReadProgress { at_ms, behind_ms }),
            _ => None,
        },
        holder_addr: r.get(15)?,
    })
}

fn state_in(c: &Connection, app: &str, shard_id: &str) -> PortResult<ShardState> {
    c.query_row(
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE app = ?1 AND shard_id = ?2"),
        params![app, shard_id],
        read_state,
    )
    .optional()
    .map_err(sql_err)?
    .ok_or_else(|| PortError::NotFound {
        what: format!("lease {app}/{shard_id}"),
        hint: String::new(),
    })
}

/// Checks the fence inside a write transaction.
fn check_fence(tx: &Transaction<'_>, fence: &Fence) -> PortResult<ShardState> {
    let st = state_in(tx, &fence.app, &fence.shard_id)?;
    if st.lease.owner.as_deref() != Some(fence.owner.as_str()) || st.lease.epoch != fence.epoch {
        return Err(PortError::Fenced {
            app: fence.app.clone(),
            shard_id: fence.shard_id.clone(),
        });
    }
    Ok(st)
}

/// Writes a dead letter under its own key; a second write of it (a retried window) changes nothing.
fn write_dead_letter(tx: &Transaction<'_>, d: &DeadLetter) -> PortResult<()> {
    tx.prepare_cached("INSERT OR IGNORE INTO dead_letters (shard_id, seq, arrival_ms, reason, data, size) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .map_err(sql_err)?
        .execute(params![d.shard_id, d.key(), d.arrival_ms, d.reason, d.data, d.size as i64])
        .map_err(sql_err)?;
    Ok(())
}
