//! A window's edge record on SQLite (the `window_edges` table): the (post, user) pairs a
//! pending likers window writes, stored before its first edge write and dropped in the
//! transaction that moves its checkpoint.

use rusqlite::{params, Connection};
use tally_core::cost::Purpose;
use tally_core::edge::{self, WINDOW_EDGES_KEY_BYTES};
use tally_core::ports::{Applied, PortError, PortResult};

use crate::sql_err;

/// Stores a window's edge record (`chunks` of `tally_core::edge::encode_pairs`) in one
/// transaction; a second write of the same window's record replaces it with the same. Synced
/// (`crate::synced`): the window's edges, in the edges' own file, are written next, and a power
/// cut that keeps them keeps this record and the records the window read.
pub(super) fn record_window_edges(
    c: &mut Connection,
    app: &str,
    shard: &str,
    end: &str,
    chunks: &[Vec<u8>],
) -> PortResult<Applied> {
    crate::synced(c, |c| record(c, app, shard, end, chunks))
}

fn record(
    c: &mut Connection,
    app: &str,
    shard: &str,
    end: &str,
    chunks: &[Vec<u8>],
) -> PortResult<Applied> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let mut out = Applied::default();
    {
        let mut st = tx
            .prepare_cached(
                "INSERT OR REPLACE INTO window_edges (app, shard_id, end_seq, chunk, chunks, pairs) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(sql_err)?;
        for (i, chunk) in chunks.iter().enumerate() {
            st.execute(params![
                app,
                shard,
                end,
                i as i64,
                chunks.len() as i64,
                chunk
            ])
            .map_err(sql_err)?;
            out.wrote(
                Purpose::Edges,
                tally_core::cost::write_units(chunk.len() + WINDOW_EDGES_KEY_BYTES),
            );
        }
    }
    tx.commit().map_err(sql_err)?;
    Ok(out)
}

/// A window's edge record, if stored whole.
pub(super) fn window_edges(
    c: &Connection,
    app: &str,
    shard: &str,
    end: &str,
) -> PortResult<Option<Vec<(String, String)>>> {
    let mut st = c
        .prepare_cached(
            "SELECT chunks, pairs FROM window_edges WHERE app = ?1 AND shard_id = ?2 AND end_seq = ?3 ORDER BY chunk",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![app, shard, end], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    if rows.is_empty() || rows.iter().any(|(n, _)| *n != rows.len() as i64) {
        return Ok(None);
    }
    let mut pairs = Vec::new();
    for (_, chunk) in &rows {
        pairs.extend(edge::decode_pairs(chunk).map_err(|e| {
            PortError::Other(format!("embedded store: {app}/{shard} at {end}: {e}"))
        })?);
    }
    Ok(Some(pairs))
}

/// Drops a shard's window edge records: its window is applied or given up (in the transaction
/// that moves its checkpoint).
pub(super) fn forget_window_edges(
    tx: &rusqlite::Transaction<'_>,
    app: &str,
    shard: &str,
) -> PortResult<()> {
    tx.prepare_cached("DELETE FROM window_edges WHERE app = ?1 AND shard_id = ?2")
        .map_err(sql_err)?
        .execute(params![app, shard])
        .map_err(sql_err)?;
    Ok(())
}
