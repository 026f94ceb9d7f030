//! The stores on SQLite.
//!
//! Layout: this module holds the helpers every store uses (a lease row read, the fence check, a
//! write item's statements); one file per port implements it: `leases` ([`LeaseStore`]),
//! `counter` ([`CounterStore`]; likers' edges in `edges`, the store's meta items in `meta`), `analytics` ([`AnalyticsStore`]), `baselines`
//! ([`BaselineWriters`](tally_baselines::BaselineWriters), for benchmarks); `items` is the `items` table the summary items are rows of
//! (the edges have their own typed table, `edges`, in their own file: `crate::edge_file`, and
//! are read and written on the handle's edges' connection, `Embedded::run_edges`).

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tally_core::cost::Purpose;
use tally_core::dead_letter::DeadLetter;
use tally_core::ports::{Fence, PortError, PortResult, ShardState, ShardTally};
use tally_core::rows::{Field, Row};

use crate::sql_err;

mod analytics;
mod baselines;
mod counter;
mod edges;
mod items;
mod leases;
mod likers;
mod meta;

pub use edges::INSERT_EDGE_SQL;
pub(crate) use likers::{has_recent_index, RECENT_INDEX_SQL};

const LEASE_COLUMNS: &str = "app, shard_id, owner, epoch, expires_ms, checkpoint, finished, parents, max_arrival, pending_end, pending_horizon_ms, spent, pending_first, behind_ms, behind_at_ms, holder_addr";

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

/// A lease row's columns as a stored row (`tally_core::rows`), each as SQLite holds it (a null
/// is absent).
fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    row_of(r, LEASE_COLUMNS)
}

/// A row's `columns` (as the query selected them, `, `-separated) as a stored row
/// (`tally_core::rows`), each as SQLite holds it (a null is absent).
pub(crate) fn row_of(r: &rusqlite::Row<'_>, columns: &str) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut row = Row::new();
    for (i, name) in columns.split(", ").enumerate() {
        let f = match r.get_ref(i)? {
            ValueRef::Null => continue,
            ValueRef::Integer(n) => Field::N(n),
            ValueRef::Text(t) => Field::S(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Real(x) => Field::Other(format!("the real {x}")),
            ValueRef::Blob(b) => Field::Bytes(b.to_vec()),
        };
        row.insert(name.to_owned(), f);
    }
    Ok(row)
}

/// The rows of a query of lease columns, decoded.
fn states_of(rows: Vec<Row>) -> PortResult<Vec<ShardState>> {
    rows.iter()
        .map(|r| tally_core::rows::shard_state(r, "leases"))
        .collect()
}

/// The lease row of `app`'s `shard_id`, decoded, if there is one.
pub(crate) fn lease_row(
    c: &Connection,
    app: &str,
    shard_id: &str,
) -> PortResult<Option<ShardState>> {
    c.query_row(
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE app = ?1 AND shard_id = ?2"),
        params![app, shard_id],
        read_row,
    )
    .optional()
    .map_err(sql_err)?
    .map(|row| tally_core::rows::shard_state(&row, "leases"))
    .transpose()
}

fn state_in(c: &Connection, app: &str, shard_id: &str) -> PortResult<ShardState> {
    lease_row(c, app, shard_id)?.ok_or_else(|| PortError::NotFound {
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
