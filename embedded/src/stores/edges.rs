//! Likers' edges on SQLite: rows of the typed `edges` table (`tally_core::rows::EdgeRow`),
//! written as [`tally_core::edge::apply_state`] says and charged as DynamoDB charges the same edge
//! item; a window's edge record (`window_edges`); the store's count mode (`#meta`/`count`).

use rusqlite::{params, Connection, OptionalExtension};
use tally_core::cost::Purpose;
use tally_core::edge::{
    self, CountMode, EdgeEvent, EdgeOutcome, EdgeState, WINDOW_EDGES_KEY_BYTES,
};
use tally_core::ports::{
    Applied, EdgeScan, EdgesApplied, LikersPage, PortError, PortResult, RecentCursor, RecentLiker,
    RecentPage, ScanCursor,
};
use tally_core::rows::{self, EdgeRow};
use tally_core::summary::{self, Attrs, Val, GLOBAL_PK};

use super::items::{get_item, put_item, query};
use crate::sql_err;

/// An edge new to the store, inserted unless one is there (its columns in the table's order,
/// `?1`…`?7`): what a window's write of an absent edge runs, and what `cargo bench --bench demo
/// -- stages` times bare.
pub const INSERT_EDGE_SQL: &str =
    "INSERT INTO edges (post, user, liked, at_ms, event_id, window, history) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (post, user) DO NOTHING";

/// The statements that read and write edges, prepared once for as many edges as a caller
/// reads or writes (a window's batch: thousands).
struct EdgeStatements<'c> {
    get: rusqlite::CachedStatement<'c>,
    put: rusqlite::CachedStatement<'c>,
    update: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
    /// The history of the edge being written (`tally_core::rows::edge_history_into`), one buffer
    /// for all.
    history: Vec<u8>,
}

impl<'c> EdgeStatements<'c> {
    fn new(c: &'c Connection) -> PortResult<EdgeStatements<'c>> {
        Ok(EdgeStatements {
            get: c
                .prepare_cached(
                    "SELECT liked, at_ms, event_id, window, history FROM edges \
                     WHERE post = ?1 AND user = ?2",
                )
                .map_err(sql_err)?,
            put: c
                .prepare_cached(
                    "INSERT OR REPLACE INTO edges \
                     (post, user, liked, at_ms, event_id, window, history) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql_err)?,
            insert: c.prepare_cached(INSERT_EDGE_SQL).map_err(sql_err)?,
            update: c
                .prepare_cached(
                    "UPDATE edges SET liked = ?3, at_ms = ?4, event_id = ?5, window = ?6, \
                     history = ?7 WHERE post = ?1 AND user = ?2",
                )
                .map_err(sql_err)?,
            history: Vec::new(),
        })
    }

    /// The stored edge of (`post`, `user`), if there is one.
    fn get(&mut self, post: &str, user: &str) -> PortResult<Option<EdgeState>> {
        let row = self
            .get
            .query_row(params![post, user], |r| edge_row_at(r, 0))
            .optional()
            .map_err(sql_err)?;
        row.map(|row| rows::edge_from_row(post, user, row))
            .transpose()
    }

    /// Writes the edge of (`post`, `user`) whole; `stored`: over the one [`Self::get`] read in
    /// this transaction (updated in place, where a replace would delete it and insert it again).
    fn put(&mut self, post: &str, user: &str, s: &EdgeState, stored: bool) -> PortResult<()> {
        let st = if stored {
            &mut self.update
        } else {
            &mut self.put
        };
        Self::write(st, &mut self.history, post, user, s).map(|_| ())
    }

    /// Writes the edge of (`post`, `user`) if the store has none: whether it did.
    fn insert(&mut self, post: &str, user: &str, s: &EdgeState) -> PortResult<bool> {
        Self::write(&mut self.insert, &mut self.history, post, user, s).map(|n| n == 1)
    }

    /// Binds the edge's columns (`tally_core::rows::edge_columns`, borrowed from the state) and
    /// its history, encoded into `history`.
    fn write(
        st: &mut rusqlite::CachedStatement<'c>,
        history: &mut Vec<u8>,
        post: &str,
        user: &str,
        s: &EdgeState,
    ) -> PortResult<usize> {
        let c = rows::edge_columns(s);
        rows::edge_history_into(s, history);
        st.execute(params![
            post,
            user,
            i64::from(c.liked),
            c.at_ms,
            c.event_id,
            c.window,
            history.as_slice()
        ])
        .map_err(sql_err)
    }
}

/// The stored edge of (`post`, `user`), if there is one.
fn get_edge(c: &Connection, post: &str, user: &str) -> PortResult<Option<EdgeState>> {
    EdgeStatements::new(c)?.get(post, user)
}

/// The edge row in the columns `liked, at_ms, event_id, window, history` from column `at` on.
fn edge_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<EdgeRow> {
    Ok(EdgeRow {
        liked: r.get::<_, i64>(at)? == 1,
        at_ms: r.get(at + 1)?,
        event_id: r.get(at + 2)?,
        window: r.get(at + 3)?,
        history: r.get(at + 4)?,
    })
}

/// Moves edges a store kept as items (`sk` `E#<user>` in the `items` table, before the typed
/// table) into `edges`, in the schema's transaction: once, when the table is new.
pub(crate) fn migrate_edges(c: &Connection) -> PortResult<()> {
    let mut st = c
        .prepare("SELECT pk, sk, attrs FROM items WHERE sk >= 'E#' AND sk < 'E$'")
        .map_err(sql_err)?;
    let old = st
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let mut st = EdgeStatements::new(c)?;
    for (post, sk, json) in old {
        let user = &sk[edge::EDGE_PREFIX.len()..];
        let a: Attrs = serde_json::from_str(&json).map_err(|e| {
            PortError::Other(format!("embedded store: corrupt item {post}/{sk}: {e}"))
        })?;
        st.put(&post, user, &rows::edge_state(&a, &post, user)?, false)?;
    }
    c.execute("DELETE FROM items WHERE sk >= 'E#' AND sk < 'E$'", [])
        .map_err(sql_err)?;
    Ok(())
}

/// Writes a window's edges in one transaction (every edge is done, or the call failed).
pub(super) fn apply_edges(
    c: &mut Connection,
    window: &str,
    edges: &[EdgeEvent],
) -> PortResult<EdgesApplied> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let mut out = EdgesApplied {
        transitions: Vec::with_capacity(edges.len()),
        ..EdgesApplied::default()
    };
    let mut st = EdgeStatements::new(&tx)?;
    // The state of an edge new to the store, built into one buffer for the whole batch.
    let mut new = EdgeState::default();
    for e in edges {
        let (post, user) = (e.post_id.as_str(), e.user_id.as_str());
        let units = |s: &EdgeState| tally_core::cost::write_units(s.item_size(post, user));
        // Decided as for an absent edge and inserted unless one is there (most edges a window
        // writes are new: one statement, where reading first is two); else read and decided on
        // what is there. Either way `apply_state` decides on what the store holds.
        let t = edge::write_absent(e, window, &mut new);
        if st.insert(post, user, &new)? {
            out.applied.wrote(Purpose::Edges, units(&new));
            out.transitions.push(t);
            continue;
        }
        let old = st.get(post, user)?;
        let outcome = edge::apply_state(old.as_ref(), e, window);
        // A refused write is charged as DynamoDB charges one: the item it was refused by.
        let refused = old.as_ref().map_or(1, units);
        let (remember, forgotten) = match outcome {
            EdgeOutcome::Wrote(s, t) => {
                out.crossed += u64::from(s.crossed());
                st.put(post, user, &s, old.is_some())?;
                out.applied.wrote(Purpose::Edges, units(&s));
                out.transitions.push(t);
                continue;
            }
            EdgeOutcome::Mine(t) => {
                out.applied.was_refused(refused);
                out.transitions.push(t);
                continue;
            }
            EdgeOutcome::Superseded(remember) => (remember, false),
            EdgeOutcome::Forgotten(remember) => (remember, true),
        };
        out.applied.was_refused(refused);
        out.forgotten += u64::from(forgotten);
        // Clamped events that took no effect, remembered (a second write, as on DynamoDB).
        if let Some(s) = remember {
            st.put(post, user, &s, old.is_some())?;
            out.applied.wrote(Purpose::Edges, units(&s));
        }
    }
    drop(st);
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

/// The stored edges of these (post, user) pairs, in order, and what the reads cost (as the
/// same items cost on DynamoDB).
pub(super) fn edge_states(
    c: &Connection,
    pairs: &[(String, String)],
) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
    let mut units = 0;
    let mut out = Vec::with_capacity(pairs.len());
    for (p, u) in pairs {
        let s = get_edge(c, p, u)?;
        units += summary::read_units(s.iter().map(|s| s.item_size(p, u)));
        out.push(s);
    }
    Ok((out, units))
}

/// The partial index likers most recent first read (`tally_core::edge::RECENT_INDEX`): the liked
/// edges by post and like time.
pub(crate) const RECENT_INDEX_SQL: &str =
    "CREATE INDEX IF NOT EXISTS edges_recent ON edges (post, at_ms, user) WHERE liked = 1";

/// Whether the store has its recent index.
pub(crate) fn has_recent_index(c: &Connection) -> PortResult<bool> {
    c.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'edges_recent'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err)
}

/// A page of a post's likers, most recent like first, after `after`, read off the partial index
/// `edges_recent` (the same transaction as the edges: nothing to check); a store without it is
/// `NotFound`, naming the setting that adds it. Read units as DynamoDB
/// charges the same page: the index entries (eventually consistent) and the check of each
/// liker's edge (strongly consistent).
pub(super) fn recent_likers(
    c: &Connection,
    post: &str,
    after: Option<&RecentCursor>,
    limit: usize,
) -> PortResult<RecentPage> {
    let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
    if !has_recent_index(c)? {
        return Err(PortError::NotFound {
            what: format!("the index `{}` of the embedded store", edge::RECENT_INDEX),
            hint: ": likers most recent first read it. Set `recent_likers_index = true` and run \
                   `tally setup` (or any command that writes: it is added on opening)"
                .into(),
        });
    }
    let (at, user) = after.map_or((i64::MAX, ""), |a| (a.at_ms, a.user.as_str()));
    let mut st = c
        .prepare_cached(
            "SELECT user, liked, at_ms, event_id, window, history FROM edges INDEXED BY edges_recent \
             WHERE post = ?1 AND liked = 1 AND (at_ms, user) < (?2, ?3) \
             ORDER BY at_ms DESC, user DESC LIMIT ?4",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![post, at, user, limit as i64], |r| {
            Ok((r.get::<_, String>(0)?, edge_row_at(r, 1)?))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let mut page = RecentPage::default();
    for (user, row) in rows {
        let s = rows::edge_from_row(post, &user, row)?;
        page.read_units += summary::read_units([s.item_size(post, &user)]);
        page.likers.push(RecentLiker {
            user,
            at_ms: s.at_ms,
        });
    }
    page.read_units +=
        edge::recent_index_units(page.likers.iter().map(|l| (post, l.user.as_str(), l.at_ms)));
    page.next = (page.likers.len() == limit).then(|| {
        let last = &page.likers[limit - 1];
        RecentCursor {
            at_ms: last.at_ms,
            user: last.user.clone(),
        }
    });
    Ok(page)
}

/// A page of every edge in (post, user) order after `after`; read units as DynamoDB's Scan of
/// the same items would cost.
pub(super) fn scan_edges(
    c: &Connection,
    after: Option<&ScanCursor>,
    limit: usize,
) -> PortResult<EdgeScan> {
    let (post, user) = after.map_or(("", ""), |a| (a.pk.as_str(), a.sk.as_str()));
    let mut st = c
        .prepare_cached(
            "SELECT post, user, liked, at_ms, event_id, window, history FROM edges \
             WHERE (post, user) > (?1, ?2) ORDER BY post, user LIMIT ?3",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![post, user, limit.max(1) as i64], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                edge_row_at(r, 2)?,
            ))
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    let full = rows.len() == limit.max(1);
    let mut page = EdgeScan::default();
    let mut sizes = Vec::new();
    for (post, user, row) in rows {
        let s = rows::edge_from_row(&post, &user, row)?;
        sizes.push(s.item_size(&post, &user));
        page.edges.push((post, user, s));
    }
    page.read_units = summary::read_units(sizes);
    page.next = page
        .edges
        .last()
        .filter(|_| full)
        .map(|(p, u, _)| ScanCursor {
            pk: p.clone(),
            sk: u.clone(),
        });
    Ok(page)
}

/// A page of a post's likers, in user order after `after`; read units as DynamoDB's Query of the
/// post's edge items would cost (the edges it passes over, liked or not).
pub(super) fn likers(
    c: &Connection,
    post: &str,
    after: Option<&str>,
    limit: usize,
) -> PortResult<LikersPage> {
    let limit = limit.clamp(1, tally_core::ports::MAX_LIKERS_PER_PAGE);
    let mut from = after.map(|a| format!("{a}\0")).unwrap_or_default();
    let mut page = LikersPage::default();
    let mut st = c
        .prepare_cached(
            "SELECT user, liked, at_ms, event_id, window, history FROM edges \
             WHERE post = ?1 AND user >= ?2 ORDER BY user LIMIT ?3",
        )
        .map_err(sql_err)?;
    loop {
        let rows = st
            .query_map(params![post, from, limit as i64], |r| {
                Ok((r.get::<_, String>(0)?, edge_row_at(r, 1)?))
            })
            .map_err(sql_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_err)?;
        let full = rows.len() == limit;
        let mut sizes = Vec::new();
        let last = rows.last().map(|(u, _)| u.clone());
        for (user, row) in rows {
            let s = rows::edge_from_row(post, &user, row)?;
            sizes.push(s.item_size(post, &user));
            if s.liked && page.users.len() < limit {
                page.users.push(user);
            }
        }
        page.read_units += summary::read_units(sizes);
        match last {
            Some(u) if full && page.users.len() < limit => from = format!("{u}\0"),
            _ => {
                page.next = (page.users.len() == limit).then(|| page.users[limit - 1].clone());
                return Ok(page);
            }
        }
    }
}
