//! Likers' edges on SQLite: rows of the typed `edges` table (`tally_core::rows::EdgeRow`),
//! written as [`tally_core::edge::apply`] says — each change logged in the part's `change_log` in
//! the same transaction — charged as DynamoDB charges the same edge item, and read back by
//! (post, user). A post's likers, read in pages, are `likers`'s; the log's reader is
//! `crate::edge_log`'s.

use rusqlite::{params, Connection, OptionalExtension};
use tally_core::cost::Purpose;
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::ports::{EdgesWritten, PortResult};
use tally_core::rows::{self, EdgeRow};
use tally_core::summary;

use crate::change_rows::ChangePacker;
use crate::edge_parts::EdgeParts;
use crate::sql_err;

/// An edge new to the store, inserted unless one is there (its columns in the table's order,
/// `?1`…`?5`): what a write of an absent edge runs, and what `cargo bench --bench demo --
/// stages` times bare.
pub const INSERT_EDGE_SQL: &str = "INSERT INTO edges (post, user, liked, at_ms, event_id) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (post, user) DO NOTHING";

/// The statements that read and write edges and log their changes, prepared once for as many
/// edges as a caller reads or writes (a window's batch: thousands).
struct EdgeStatements<'c> {
    get: rusqlite::CachedStatement<'c>,
    update: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
    /// The packed id of the edge being written (`tally_core::rows::event_id_into`), one buffer
    /// for all.
    event_id: Vec<u8>,
}

impl<'c> EdgeStatements<'c> {
    fn new(c: &'c Connection) -> PortResult<EdgeStatements<'c>> {
        Ok(EdgeStatements {
            get: c
                .prepare_cached(
                    "SELECT liked, at_ms, event_id FROM edges WHERE post = ?1 AND user = ?2",
                )
                .map_err(sql_err)?,
            insert: c.prepare_cached(INSERT_EDGE_SQL).map_err(sql_err)?,
            update: c
                .prepare_cached(
                    "UPDATE edges SET liked = ?3, at_ms = ?4, event_id = ?5 \
                     WHERE post = ?1 AND user = ?2",
                )
                .map_err(sql_err)?,
            event_id: Vec::new(),
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

    /// Writes the edge `e`: inserted (`stored`: false; whether it was, none being there) or
    /// updated over the one [`Self::get`] read in this transaction.
    fn write(&mut self, e: &EdgeEvent, stored: bool) -> PortResult<bool> {
        rows::event_id_into(&e.event_id, &mut self.event_id);
        let st = if stored {
            &mut self.update
        } else {
            &mut self.insert
        };
        let n = st
            .execute(params![
                e.post_id.as_str(),
                e.user_id.as_str(),
                i64::from(e.liked),
                e.at_ms,
                self.event_id.as_slice()
            ])
            .map_err(sql_err)?;
        Ok(n == 1)
    }
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
/// one that failed otherwise, or every part failing, fails the call (an edge done is refused
/// when it is written again).
pub(super) fn merge_parts(
    done: Vec<(Vec<usize>, PortResult<EdgesWritten>)>,
) -> PortResult<EdgesWritten> {
    let mut out = EdgesWritten::default();
    let mut any_done = false;
    let mut failed = None;
    for (at, part) in done {
        match part {
            Ok(d) => {
                any_done = true;
                out.applied.merge(&d.applied);
                out.changed += d.changed;
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

/// The edge row in the columns `liked, at_ms, event_id` from column `at` on.
pub(super) fn edge_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<EdgeRow> {
    Ok(EdgeRow {
        liked: r.get::<_, i64>(at)? == 1,
        at_ms: r.get(at + 1)?,
        event_id: r.get(at + 2)?,
    })
}

/// Writes a part's edges in one transaction (every edge is done, or the call failed), each as
/// [`edge::apply`] says, logging each change it makes in the same transaction.
pub(super) fn write_edges(c: &mut Connection, edges: &[EdgeEvent]) -> PortResult<EdgesWritten> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let now = crate::now_ms();
    let mut out = EdgesWritten::default();
    let mut st = EdgeStatements::new(&tx)?;
    let mut log = ChangePacker::default();
    for e in edges {
        let (post, user) = (e.post_id.as_str(), e.user_id.as_str());
        let units = |s: &EdgeState| tally_core::cost::write_units(s.item_size(post, user));
        // A like is inserted unless an edge is there (most likes make new edges: one statement,
        // where reading first is two); else read and decided on what is there. An unlike is
        // read first: most are of an edge the store has (the like before it).
        let read = if e.liked { None } else { st.get(post, user)? };
        if read.is_none() && st.write(e, false)? {
            let (new, change) = edge::apply(None, e).expect("an absent edge is written");
            out.applied.wrote(Purpose::Edges, units(&new));
            out.changed += 1;
            log.push(&change);
            continue;
        }
        let old = match read {
            Some(r) => Some(r),
            None => st.get(post, user)?,
        };
        match edge::apply(old.as_ref(), e) {
            Some((new, change)) => {
                st.write(e, old.is_some())?;
                out.applied.wrote(Purpose::Edges, units(&new));
                out.changed += 1;
                log.push(&change);
            }
            // Refused: charged as DynamoDB charges one, the item it was refused by.
            None => out.applied.was_refused(old.as_ref().map_or(1, units)),
        }
    }
    drop(st);
    log.write(&tx, now)?;
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
        let s = parts.with_post(p, |c| EdgeStatements::new(c)?.get(p, u))?;
        units += summary::read_units(s.iter().map(|s| s.item_size(p, u)));
        out.push(s);
    }
    Ok((out, units))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::ports::PortError;

    fn ev(user: &str, liked: bool, at: i64, id: &str) -> EdgeEvent {
        EdgeEvent {
            post_id: "p".into(),
            user_id: user.into(),
            liked,
            at_ms: at,
            event_id: id.into(),
        }
    }

    fn logged(c: &Connection) -> Vec<(String, Option<i64>, Option<i64>)> {
        crate::change_rows::changes_in(c)
            .unwrap()
            .into_iter()
            .map(|c| (c.user_id.to_string(), c.before, c.after))
            .collect()
    }

    /// Each change logged once, in the write's transaction; a copy, an older event and an
    /// equal one logged nothing; an unlike of nothing is stored (an older like must lose to it)
    /// and logged as a change that moves no like.
    #[test]
    fn each_change_is_logged_once_and_a_refused_write_not_at_all() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch(crate::edge_file::EDGES_SQL).unwrap();
        let first =
            write_edges(&mut c, &[ev("u", true, 10, "a"), ev("v", false, 10, "b")]).unwrap();
        assert_eq!((first.changed, first.applied.written), (2, 2));
        let again = write_edges(
            &mut c,
            &[
                ev("u", true, 10, "a"),
                ev("u", false, 5, "c"),
                ev("v", true, 9, "d"),
            ],
        )
        .unwrap();
        assert_eq!(again.changed, 0, "a copy and two older events");
        let newer =
            write_edges(&mut c, &[ev("u", false, 20, "e"), ev("v", true, 20, "f")]).unwrap();
        assert_eq!(newer.changed, 2);
        assert_eq!(
            logged(&c),
            [
                ("u".to_owned(), None, Some(10)),
                ("v".to_owned(), None, None),
                ("u".to_owned(), Some(10), None),
                ("v".to_owned(), None, Some(20)),
            ]
        );
    }

    /// The parts' answers as one call's: the parts done merged; a part failed for a passing
    /// reason sent again (its edges' places, in order), the call failed when every part did or
    /// one failed otherwise.
    #[test]
    fn parts_answer_as_one_call() {
        let part = |n: u64| -> PortResult<EdgesWritten> {
            let mut out = EdgesWritten::default();
            for _ in 0..n {
                out.applied.wrote(Purpose::Edges, 1);
                out.changed += 1;
            }
            Ok(out)
        };
        let busy = || Err(PortError::Throttled("busy".into()));
        let both = merge_parts(vec![(vec![0, 2], part(2)), (vec![1], part(1))]).unwrap();
        assert_eq!((both.applied.written, both.changed), (3, 3));
        assert!(both.retry.is_empty() && both.error.is_none());

        let one = merge_parts(vec![(vec![1, 3], busy()), (vec![0, 2], part(2))]).unwrap();
        assert_eq!(one.applied.written, 2);
        assert_eq!(one.retry, vec![1, 3]);
        assert!(one.error.as_ref().is_some_and(PortError::is_retryable));

        let none = merge_parts(vec![(vec![0], busy()), (vec![1], busy())]);
        assert!(none.is_err_and(|e| e.is_retryable()));
        let other = merge_parts(vec![
            (vec![0], part(1)),
            (vec![1], Err(PortError::Other("broken".into()))),
        ]);
        assert!(other.is_err_and(|e| !e.is_retryable()));
    }
}
