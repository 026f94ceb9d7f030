//! Likers' edges on SQLite: items of the post's partition (`E#<user>`) in the `items` table,
//! written as [`tally_core::edge::apply`] says, and the store's count mode (`#meta`/`count`).

use rusqlite::{params, Connection};
use tally_core::cost::Purpose;
use tally_core::edge::{
    self, CountMode, EdgeEvent, EdgeOutcome, EdgeState, WINDOW_EDGES_KEY_BYTES,
};
use tally_core::ports::{Applied, EdgesApplied, LikersPage, PortError, PortResult};
use tally_core::summary::{self, Attrs, Val, GLOBAL_PK};

use super::items::{get_item, put_item, query};
use crate::sql_err;

/// Writes a window's edges in one transaction (every edge is done, or the call failed).
pub(super) fn apply_edges(
    c: &mut Connection,
    window: &str,
    edges: &[EdgeEvent],
) -> PortResult<EdgesApplied> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let mut out = EdgesApplied::default();
    for e in edges {
        let sk = edge::edge_sk(&e.user_id);
        let item = get_item(&tx, &e.post_id, &sk)?;
        let units = |a: &Attrs| summary::write_units(&e.post_id, &sk, a);
        let (remember, forgotten) =
            match edge::apply(item.as_ref(), e, window).map_err(PortError::Other)? {
                EdgeOutcome::Wrote(a, t) => {
                    out.crossed += u64::from(edge::crosses(item.as_ref(), window));
                    put_item(&tx, &e.post_id, &sk, &a)?;
                    out.applied.wrote(Purpose::Edges, units(&a));
                    out.transitions.push(t);
                    continue;
                }
                EdgeOutcome::Mine(t) => {
                    out.applied.was_refused(item.as_ref().map_or(1, units));
                    out.transitions.push(t);
                    continue;
                }
                EdgeOutcome::Superseded(remember) => (remember, false),
                EdgeOutcome::Forgotten(remember) => (remember, true),
            };
        out.applied.was_refused(item.as_ref().map_or(1, units));
        out.forgotten += u64::from(forgotten);
        // Clamped events that took no effect, remembered (a second write, as on DynamoDB).
        if let Some(a) = remember {
            put_item(&tx, &e.post_id, &sk, &a)?;
            out.applied.wrote(Purpose::Edges, units(&a));
        }
    }
    tx.commit().map_err(sql_err)?;
    Ok(out)
}

/// Stores a window's edge record (`chunks` of `tally_core::edge::encode_pairs`) in one
/// transaction; a second write of the same window's record replaces it with the same.
pub(super) fn record_window_edges(
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

fn mode_of(a: &Attrs) -> PortResult<CountMode> {
    match a.get("mode") {
        Some(Val::S(s)) => CountMode::parse(s),
        _ => None,
    }
    .ok_or_else(|| PortError::Other(format!("embedded store: a corrupt count mode item: {a:?}")))
}

/// The stored edges of these (post, user) pairs, in order, and what the reads cost.
pub(super) fn edge_states(
    c: &Connection,
    pairs: &[(String, String)],
) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
    let mut units = 0;
    let mut out = Vec::with_capacity(pairs.len());
    for (p, u) in pairs {
        let sk = edge::edge_sk(u);
        let item = get_item(c, p, &sk)?;
        units += summary::read_units(item.iter().map(|a| summary::item_size(p, &sk, a)));
        out.push(
            item.as_ref()
                .map(|a| tally_core::rows::edge_state(a, p, u))
                .transpose()?,
        );
    }
    Ok((out, units))
}

/// A page of a post's likers, in user order after `after`.
pub(super) fn likers(
    c: &Connection,
    post: &str,
    after: Option<&str>,
    limit: usize,
) -> PortResult<LikersPage> {
    let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
    let mut from = after.map_or_else(|| edge::EDGE_PREFIX.to_owned(), |a| edge::edge_sk(a) + "\0");
    let mut page = LikersPage::default();
    let mut st = c
        .prepare_cached(
            "SELECT sk, attrs FROM items WHERE pk = ?1 AND sk >= ?2 AND sk < 'E$' ORDER BY sk LIMIT ?3",
        )
        .map_err(sql_err)?;
    loop {
        let rows = st
            .query_map(params![post, from, limit as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(sql_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_err)?;
        let full = rows.len() == limit;
        let mut sizes = Vec::new();
        for (sk, json) in &rows {
            let a: Attrs = serde_json::from_str(json).map_err(|e| {
                PortError::Other(format!("embedded store: corrupt item {post}/{sk}: {e}"))
            })?;
            sizes.push(summary::item_size(post, sk, &a));
            let user = &sk[edge::EDGE_PREFIX.len()..];
            let liked = tally_core::rows::edge_state(&a, post, user)?.liked;
            if liked && page.users.len() < limit {
                page.users.push(sk[edge::EDGE_PREFIX.len()..].to_owned());
            }
        }
        page.read_units += summary::read_units(sizes);
        match rows.last() {
            Some((sk, _)) if full && page.users.len() < limit => from = format!("{sk}\0"),
            _ => {
                page.next = (page.users.len() == limit).then(|| page.users[limit - 1].clone());
                return Ok(page);
            }
        }
    }
}
