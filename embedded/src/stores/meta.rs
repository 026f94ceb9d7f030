//! What a store says of how it was counted, as items beside its counts (`#meta`): its count
//! mode, the clock skews it was counted with, the one stream it counts.

use rusqlite::Connection;
use tally_core::edge::{self, CountMode};
use tally_core::ports::{PortError, PortResult};
use tally_core::summary::{Attrs, Val, GLOBAL_PK};

use super::items::{get_item, put_item, query};
use crate::sql_err;

/// The stored mode; with `claim`, set first if unset (`events` for a store counted before modes).
pub(super) fn count_mode(
    c: &mut Connection,
    claim: Option<CountMode>,
) -> PortResult<Option<CountMode>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let stored = match get_item(&tx, edge::MODE_PK, edge::MODE_SK)? {
        Some(a) => Some(mode_of(&a)?),
        None => None,
    };
    let mode = match (stored, claim) {
        (Some(m), _) => Some(m),
        (None, None) => None,
        (None, Some(want)) => {
            let counted_before = !query(&tx, GLOBAL_PK, "", "\u{10ffff}")?.is_empty();
            let m = if counted_before {
                CountMode::Events
            } else {
                want
            };
            let a = Attrs::from([("mode".to_owned(), Val::S(m.as_str().to_owned()))]);
            put_item(&tx, edge::MODE_PK, edge::MODE_SK, &a)?;
            Some(m)
        }
    };
    tx.commit().map_err(sql_err)?;
    Ok(mode)
}

/// The clock skews the store was counted with; with `record`, added first if new.
pub(super) fn clock_skews(c: &mut Connection, record: Option<i64>) -> PortResult<Vec<i64>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let mut skews = match get_item(&tx, edge::MODE_PK, edge::SKEWS_SK)? {
        Some(a) => match a.get("v") {
            Some(Val::S(text)) => edge::skews_from_text(text).map_err(PortError::Other)?,
            _ => {
                return Err(PortError::Other(format!(
                    "embedded store: a corrupt clock skew item: {a:?}"
                )))
            }
        },
        None => Vec::new(),
    };
    if let Some(v) = record.filter(|v| !skews.contains(v)) {
        skews.push(v);
        let a = Attrs::from([("v".to_owned(), Val::S(edge::skews_to_text(&skews)))]);
        put_item(&tx, edge::MODE_PK, edge::SKEWS_SK, &a)?;
    }
    tx.commit().map_err(sql_err)?;
    Ok(skews)
}

/// The stream the store is counted from; with `claim`, set to it when none is named yet.
pub(super) fn counted_stream(
    c: &mut Connection,
    claim: Option<&str>,
) -> PortResult<Option<String>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let stored = match get_item(&tx, edge::MODE_PK, edge::STREAM_SK)? {
        Some(a) => match a.get("v") {
            Some(Val::S(v)) => Some(v.clone()),
            _ => {
                return Err(PortError::Corrupt {
                    item: format!("{}/{}", edge::MODE_PK, edge::STREAM_SK),
                    detail: "`v` is not the stream's name".into(),
                })
            }
        },
        None => None,
    };
    let out = match (stored, claim) {
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

fn mode_of(a: &Attrs) -> PortResult<CountMode> {
    match a.get("mode") {
        Some(Val::S(s)) => CountMode::parse(s),
        _ => None,
    }
    .ok_or_else(|| PortError::Other(format!("embedded store: a corrupt count mode item: {a:?}")))
}
