//! The `items` table: DynamoDB's items as rows of attribute maps (JSON), keyed by partition and
//! sort key. The summary items and the edges are written through it.

use rusqlite::{params, Connection, OptionalExtension};
use tally_core::ports::{PortError, PortResult};
use tally_core::summary::Attrs;

use crate::sql_err;

/// One item, if it is there.
pub(super) fn get_item(c: &Connection, pk: &str, sk: &str) -> PortResult<Option<Attrs>> {
    let json: Option<String> = c
        .prepare_cached("SELECT attrs FROM items WHERE pk = ?1 AND sk = ?2")
        .map_err(sql_err)?
        .query_row(params![pk, sk], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    json.map(|j| serde_json::from_str(&j).map_err(|e| corrupt(pk, sk, &e)))
        .transpose()
}

/// Writes one item whole.
pub(super) fn put_item(c: &Connection, pk: &str, sk: &str, a: &Attrs) -> PortResult<()> {
    put(c, "INSERT OR REPLACE", pk, sk, a).map(drop)
}

/// Writes one item whole if there is none: whether it wrote.
pub(super) fn put_new_item(c: &Connection, pk: &str, sk: &str, a: &Attrs) -> PortResult<bool> {
    put(c, "INSERT OR IGNORE", pk, sk, a).map(|n| n == 1)
}

/// Whether partition `pk` holds any item.
pub(super) fn has_items(c: &Connection, pk: &str) -> PortResult<bool> {
    c.prepare_cached("SELECT EXISTS(SELECT 1 FROM items WHERE pk = ?1)")
        .map_err(sql_err)?
        .query_row([pk], |r| r.get(0))
        .map_err(sql_err)
}

fn put(c: &Connection, insert: &str, pk: &str, sk: &str, a: &Attrs) -> PortResult<usize> {
    let json = serde_json::to_string(a).map_err(|e| PortError::Other(e.to_string()))?;
    let sql = format!("{insert} INTO items (pk, sk, attrs) VALUES (?1, ?2, ?3)");
    c.prepare_cached(&sql)
        .map_err(sql_err)?
        .execute(params![pk, sk, json])
        .map_err(sql_err)
}

/// The items of partition `pk` with `lo <= sk < hi`, with DynamoDB's sizes.
pub(super) fn query(
    c: &Connection,
    pk: &str,
    lo: &str,
    hi: &str,
) -> PortResult<Vec<(String, Attrs)>> {
    let mut st = c
        .prepare_cached("SELECT sk, attrs FROM items WHERE pk = ?1 AND sk >= ?2 AND sk < ?3")
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![pk, lo, hi], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    rows.into_iter()
        .map(|(sk, j)| {
            serde_json::from_str(&j)
                .map(|a| (sk.clone(), a))
                .map_err(|e| corrupt(pk, &sk, &e))
        })
        .collect()
}

/// An item whose attributes are not the JSON map tally writes.
fn corrupt(pk: &str, sk: &str, e: &serde_json::Error) -> PortError {
    PortError::Corrupt {
        item: format!("{pk}/{sk}"),
        detail: format!("its attributes are not an attribute map: {e}"),
    }
}
