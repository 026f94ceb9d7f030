//! Likers' edges on SQLite: rows of the typed `edges` table (`tally_core::rows::EdgeRow`),
//! written as [`tally_core::edge::apply_state`] says and charged as DynamoDB charges the same edge
//! item, and read back by (post, user). A post's likers, read in pages, are `likers`'s.

use rusqlite::{params, Connection, OptionalExtension};
use tally_core::cost::Purpose;
use tally_core::edge::{self, EdgeEvent, EdgeOutcome, EdgeState};
use tally_core::ports::{EdgesApplied, PortError, PortResult};
use tally_core::rows::{self, EdgeRow};
use tally_core::summary::{self, Attrs};

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
pub(super) fn edge_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<EdgeRow> {
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
        // A like is decided as for an absent edge and inserted unless one is there (most likes a
        // window writes make new edges: one statement, where reading first is two); else read
        // and decided on what is there. An unlike is read first: most are of an edge the store
        // has (the like before it), where inserting first would fail and read anyway. Either way
        // `apply_state` decides on what the store holds, in this transaction.
        let read = if e.liked { None } else { st.get(post, user)? };
        if read.is_none() {
            let t = edge::write_absent(e, window, &mut new);
            if st.insert(post, user, &new)? {
                out.applied.wrote(Purpose::Edges, units(&new));
                out.transitions.push(t);
                continue;
            }
        }
        let old = if read.is_some() {
            read
        } else {
            st.get(post, user)?
        };
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
