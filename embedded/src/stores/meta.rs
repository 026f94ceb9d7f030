//! What a store says of how it was counted, as items beside its counts (`#meta`): its count
//! mode, the one stream it counts, a rebuild into it under way.

use rusqlite::Connection;
use tally_core::edge::{self, CountMode};
use tally_core::ports::PortResult;
use tally_core::rows;
use tally_core::summary::{Attrs, Val, GLOBAL_PK};

use super::items::{get_item, put_item, query};
use crate::sql_err;

/// The stored mode; with `claim`, set first if unset. A store with counts and no mode is refused,
/// read or claimed: only an earlier build of tally counted without claiming a mode.
pub(super) fn count_mode(
    c: &mut Connection,
    claim: Option<CountMode>,
) -> PortResult<Option<CountMode>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let stored = match get_item(&tx, edge::MODE_PK, edge::MODE_SK)? {
        Some(a) => Some(rows::count_mode(
            &rows::attrs_row(&a),
            &item(edge::MODE_SK),
        )?),
        None => None,
    };
    let mode = match stored {
        Some(m) => Some(m),
        None if !query(&tx, GLOBAL_PK, "", "\u{10ffff}")?.is_empty() => {
            return Err(rows::counted_without_mode(tx.path().unwrap_or("the store")));
        }
        None => {
            if let Some(m) = claim {
                let a = Attrs::from([("mode".to_owned(), Val::S(m.as_str().to_owned()))]);
                put_item(&tx, edge::MODE_PK, edge::MODE_SK, &a)?;
            }
            claim
        }
    };
    tx.commit().map_err(sql_err)?;
    Ok(mode)
}

/// The `#meta` item `sk`, named in errors.
fn item(sk: &str) -> String {
    format!("{}/{sk}", edge::MODE_PK)
}

/// The value `v` of the `#meta` item `sk`, if it is there.
fn meta_value(c: &Connection, sk: &str) -> PortResult<Option<String>> {
    get_item(c, edge::MODE_PK, sk)?
        .map(|a| rows::meta_value(&rows::attrs_row(&a), &item(sk)))
        .transpose()
}

/// The source of a rebuild under way into the store (`None`: none).
pub(super) fn rebuilding(c: &Connection) -> PortResult<Option<String>> {
    meta_value(c, edge::REBUILDING_SK)
}

/// Records a rebuild from `source` under way, or (`None`) that it finished.
pub(super) fn set_rebuilding(c: &Connection, source: Option<&str>) -> PortResult<()> {
    match source {
        Some(v) => {
            let a = Attrs::from([("v".to_owned(), Val::S(v.to_owned()))]);
            put_item(c, edge::MODE_PK, edge::REBUILDING_SK, &a)
        }
        None => c
            .execute(
                "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
                [edge::MODE_PK, edge::REBUILDING_SK],
            )
            .map(|_| ())
            .map_err(sql_err),
    }
}

/// The stream the store is counted from; with `claim`, set to it when none is named yet.
pub(super) fn counted_stream(
    c: &mut Connection,
    claim: Option<&str>,
) -> PortResult<Option<String>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let out = match (meta_value(&tx, edge::STREAM_SK)?, claim) {
        (Some(s), _) => Some(s),
        (None, None) => None,
        (None, Some(want)) => {
            let a = Attrs::from([("v".to_owned(), Val::S(want.to_owned()))]);
            put_item(&tx, edge::MODE_PK, edge::STREAM_SK, &a)?;
            Some(want.to_owned())
        }
    };
    tx.commit().map_err(sql_err)?;
    Ok(out)
}
