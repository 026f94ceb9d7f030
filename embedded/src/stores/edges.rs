//! Likers' edges on SQLite: rows of the typed `edges` table (`tally_core::rows::EdgeRow`),
//! written as [`tally_core::edge::apply_state`] says and charged as DynamoDB charges the same edge
//! item, and read back by (post, user). A post's likers, read in pages, are `likers`'s.

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use tally_core::cost::Purpose;
use tally_core::edge::{self, EdgeEvent, EdgeOutcome, EdgeState};
use tally_core::ports::{EdgesApplied, PortError, PortResult};
use tally_core::rows::{self, EdgeRow, StoredText};
use tally_core::summary::{self, Attrs};

use crate::edge_parts::EdgeParts;
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
    encoded: Encoded,
}

/// The columns of the edge being written that are encoded, not borrowed, one buffer each for
/// all the edges a caller writes.
#[derive(Default)]
struct Encoded {
    /// Its history (`tally_core::rows::edge_history_into`).
    history: Vec<u8>,
    /// The window that wrote it, packed (`tally_core::rows::edge_window_into`): the window
    /// `packed_window` names, packed again only when another is written (a call's edges are
    /// mostly its own window's).
    window: Vec<u8>,
    packed_window: String,
    /// The id of the event that set it, packed (`tally_core::rows::event_id_into`).
    event_id: Vec<u8>,
}

impl Encoded {
    /// `s`'s encoded columns, into the buffers.
    fn encode(&mut self, s: &EdgeState) {
        let c = rows::edge_columns(s);
        rows::edge_history_into(s, &mut self.history);
        rows::event_id_into(c.event_id, &mut self.event_id);
        if c.window != self.packed_window || self.window.is_empty() {
            rows::edge_window_into(c.window, &mut self.window);
            c.window.clone_into(&mut self.packed_window);
        }
    }
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
            encoded: Encoded::default(),
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
        Self::write(st, &mut self.encoded, post, user, s).map(|_| ())
    }

    /// Writes the edge of (`post`, `user`) if the store has none: whether it did.
    fn insert(&mut self, post: &str, user: &str, s: &EdgeState) -> PortResult<bool> {
        Self::write(&mut self.insert, &mut self.encoded, post, user, s).map(|n| n == 1)
    }

    /// Binds the edge's columns: those borrowed from the state
    /// (`tally_core::rows::edge_columns`) and those encoded into `encoded`.
    fn write(
        st: &mut rusqlite::CachedStatement<'c>,
        encoded: &mut Encoded,
        post: &str,
        user: &str,
        s: &EdgeState,
    ) -> PortResult<usize> {
        encoded.encode(s);
        let c = rows::edge_columns(s);
        st.execute(params![
            post,
            user,
            i64::from(c.liked),
            c.at_ms,
            encoded.event_id.as_slice(),
            encoded.window.as_slice(),
            encoded.history.as_slice()
        ])
        .map_err(sql_err)
    }
}

/// The stored edge of (`post`, `user`), if there is one.
fn get_edge(c: &Connection, post: &str, user: &str) -> PortResult<Option<EdgeState>> {
    EdgeStatements::new(c)?.get(post, user)
}

/// A window's edges by the part that holds them (`edge_parts`), the parts that have any: each
/// part's, with where each is in `edges`. `edges` in key order, so a post's run of edges is
/// placed once.
pub(super) fn by_part(
    edges: &[EdgeEvent],
    parts: usize,
) -> Vec<(usize, Vec<usize>, Vec<EdgeEvent>)> {
    let mut out: Vec<(usize, Vec<usize>, Vec<EdgeEvent>)> =
        (0..parts).map(|p| (p, Vec::new(), Vec::new())).collect();
    let mut last: Option<(&str, usize)> = None;
    for (i, e) in edges.iter().enumerate() {
        let part = match last {
            Some((post, part)) if post == e.post_id.as_str() => part,
            _ => crate::edge_parts::part_of(&e.post_id, parts),
        };
        last = Some((e.post_id.as_str(), part));
        out[part].1.push(i);
        out[part].2.push(e.clone());
    }
    out.retain(|(_, at, _)| !at.is_empty());
    out
}

/// What the parts' writes of one call did, as one call's answer: a part that failed for a
/// passing reason while another was done is to be sent again (its edges' places in `retry`);
/// one that failed otherwise, or every part failing, fails the call (an edge done is found done
/// when the window writes it again: `tally_core::edge::apply_state`).
pub(super) fn merge_parts(
    done: Vec<(Vec<usize>, PortResult<EdgesApplied>)>,
) -> PortResult<EdgesApplied> {
    let mut out = EdgesApplied::default();
    let mut any_done = false;
    let mut failed = None;
    for (at, part) in done {
        match part {
            Ok(d) => {
                any_done = true;
                out.applied.merge(&d.applied);
                out.transitions.extend(d.transitions);
                out.forgotten += d.forgotten;
                out.crossed += d.crossed;
                out.retry.extend(d.retry.iter().map(|i| at[*i]));
                out.error = d.error.or(out.error);
            }
            Err(e) if e.is_retryable() => {
                out.retry.extend(at);
                failed = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    match failed {
        Some(e) if !any_done => Err(e),
        Some(e) => {
            out.retry.sort_unstable();
            out.error = Some(e);
            Ok(out)
        }
        None => Ok(out),
    }
}

/// The edge row in the columns `liked, at_ms, event_id, window, history` from column `at` on.
pub(super) fn edge_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<EdgeRow> {
    Ok(EdgeRow {
        liked: r.get::<_, i64>(at)? == 1,
        at_ms: r.get(at + 1)?,
        event_id: stored_text(r, at + 2)?,
        window: stored_text(r, at + 3)?,
        history: r.get(at + 4)?,
    })
}

/// A packed column (`tally_core::rows::StoredText`): bytes, or text where a build before packed
/// rows wrote it.
fn stored_text(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<StoredText> {
    Ok(match r.get_ref(at)? {
        ValueRef::Blob(b) => StoredText::Packed(b.to_vec()),
        _ => StoredText::Text(r.get(at)?),
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

/// The stored edges of these (post, user) pairs, in order, each read in its post's part, and
/// what the reads cost (as the same items cost on DynamoDB).
pub(super) fn edge_states(
    parts: &EdgeParts,
    pairs: &[(String, String)],
) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
    let mut units = 0;
    let mut out = Vec::with_capacity(pairs.len());
    for (p, u) in pairs {
        let s = parts.with_post(p, |c| get_edge(c, p, u))?;
        units += summary::read_units(s.iter().map(|s| s.item_size(p, u)));
        out.push(s);
    }
    Ok((out, units))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::edge::Transition;

    /// A part's answer: `n` edges written, each making a transition of `post`.
    fn part(post: &str, n: usize) -> PortResult<EdgesApplied> {
        let mut out = EdgesApplied::default();
        for _ in 0..n {
            out.applied.wrote(Purpose::Edges, 1);
            out.transitions.push(Transition {
                post_id: post.into(),
                before: None,
                after: Some(1),
                held_for: None,
            });
        }
        Ok(out)
    }

    /// Edges written by different windows through one set of statements (a call's own, and the
    /// window a remembered edge keeps) each read back with the window that wrote it: the packed
    /// window is packed again when the window changes.
    #[test]
    fn each_edge_keeps_its_own_window() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(crate::edge_file::EDGES_SQL).unwrap();
        let mut st = EdgeStatements::new(&c).unwrap();
        let windows = [
            "0021@shardId-000000000000",
            "0022@shardId-000000000001",
            "0022@shardId-000000000001",
            "not-a-usual-window",
            "0021@shardId-000000000000",
        ];
        for (i, w) in windows.iter().enumerate() {
            let e = EdgeEvent {
                post_id: "p".into(),
                user_id: format!("u{i}").into(),
                liked: true,
                at_ms: 10,
                event_id: format!("e{i}").as_str().into(),
                clamped: false,
                lost: Vec::new(),
            };
            let s = edge::written_state(&e, w, None);
            if i % 2 == 0 {
                assert!(st.insert("p", &format!("u{i}"), &s).unwrap());
            } else {
                st.put("p", &format!("u{i}"), &s, false).unwrap();
            }
        }
        for (i, w) in windows.iter().enumerate() {
            let s = st.get("p", &format!("u{i}")).unwrap().expect("written");
            assert_eq!(s.writes[0].window, *w, "u{i}");
        }
    }

    /// The parts' answers as one call's: the parts done merged; a part failed for a passing
    /// reason sent again (its edges' places, in order), the call failed when every part did or
    /// one failed otherwise.
    #[test]
    fn parts_answer_as_one_call() {
        let busy = || Err(PortError::Throttled("busy".into()));
        let both = merge_parts(vec![(vec![0, 2], part("a", 2)), (vec![1], part("b", 1))]).unwrap();
        assert_eq!(both.applied.written, 3);
        assert_eq!(both.transitions.len(), 3);
        assert!(both.retry.is_empty() && both.error.is_none());

        let one = merge_parts(vec![(vec![1, 3], busy()), (vec![0, 2], part("a", 2))]).unwrap();
        assert_eq!(one.applied.written, 2);
        assert_eq!(one.retry, vec![1, 3]);
        assert!(one.error.as_ref().is_some_and(PortError::is_retryable));

        let none = merge_parts(vec![(vec![0], busy()), (vec![1], busy())]);
        assert!(none.is_err_and(|e| e.is_retryable()));
        let other = merge_parts(vec![
            (vec![0], part("a", 1)),
            (vec![1], Err(PortError::Other("broken".into()))),
        ]);
        assert!(other.is_err_and(|e| !e.is_retryable()));
    }
}
