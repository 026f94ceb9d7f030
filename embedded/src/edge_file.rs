//! The likers' edges' own files (`edge_parts`: [`EDGES_FILE`] and the other parts beside
//! `tally.db`), each read and written on a connection of its own on every handle (with its own
//! checkpointer: `Embedded::writer`). Each holds its part's `edges` and their change log,
//! `change_log` (`edges.sql`; a write's changes packed into rows: `crate::change_rows`), written
//! in the edge write's own transaction, so the log has each change of an edge exactly once, in
//! the order of the writes.
//!
//! Why files of their own: a window's edges are thousands of writes at random keys, and a call
//! holds its file's write lock for all of them. In `tally.db` that is the lock every put to the
//! stream, every count and every lease takes; in files of their own those go on beside it
//! (BENCHMARKS, "Edges in a file of their own"). Not `ATTACH`: a write transaction on a
//! connection with a second file attached takes both files' write locks.
//!
//! **Durable in order.** A commit is synced (`synchronous = NORMAL`) only at a checkpoint, so a
//! power cut may lose a file's last commits; in one file those are always the last ones (a WAL
//! is read back up to its first missing frame), but across two files a later commit could be
//! kept and an earlier one lost. Where a commit in one file depends on one in the other, the
//! earlier one is synced before the later is made: the edges a window wrote are synced here
//! before its checkpoint moves in `tally.db` ([`EdgeSyncs`]: the handle's next write there after
//! its edge commits syncs every part once, [`sync`]), and the change log's reader syncs a part
//! before it hands out changes not synced yet (`edge_log`), so no count in `tally.db` is ever
//! durable without the change it counted. A sync of a WAL makes every commit before it durable,
//! another window's or another process's too.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::Connection;
use tally_core::ports::{PortError, PortResult};

use crate::edge_parts::{self, EDGES_FILE};
use crate::{has_table, journal, retrying, sql_err, stores, synced, tune, wait_for_locks};

/// The `edges` and `change_log` tables of every part.
pub(crate) const EDGES_SQL: &str = include_str!("edges.sql");

/// Whether a handle that may write makes the edges' files it does not find: a store being made
/// does, a store opened as it is (`Embedded::open_existing`, what reads open) never does — a
/// missing part is an error naming it, never a store read with its edges gone.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    Make,
    Refuse,
}

/// The edges' connections of a handle that may write, one per part (`edge_parts`): each file
/// opened (made and set up if new and `missing` allows: WAL, pages, the tables; the first with
/// the layout), and the recent index as the first part has it.
pub(crate) fn open_writable(dir: &Path, missing: Missing) -> PortResult<Vec<Connection>> {
    let first = open_part(dir, 0, Some(edge_parts::NEW_STORE_PARTS), missing)?;
    let parts = edge_parts::recorded(&first)?;
    let recent = stores::has_recent_index(&first)?;
    let mut conns = vec![first];
    for i in 1..parts {
        let c = open_part(dir, i, None, missing)?;
        if recent && !stores::has_recent_index(&c)? {
            c.execute_batch(stores::RECENT_INDEX_SQL).map_err(sql_err)?;
        }
        conns.push(c);
    }
    Ok(conns)
}

/// Part `i`'s connection, its file made and set up if new (`layout`: the first part's, with the
/// parts a new store gets). A first part set up anew finds no other part's file left beside it;
/// a part an earlier build made is refused; a part not there is refused unless `missing` says
/// to make it.
fn open_part(
    dir: &Path,
    i: usize,
    layout: Option<usize>,
    missing: Missing,
) -> PortResult<Connection> {
    let path = dir.join(edge_parts::part_file(i));
    if missing == Missing::Refuse && !path.is_file() {
        return Err(PortError::NotFound {
            what: path.display().to_string(),
            hint: ": a part of this store's likers' edges is missing, and without it counts and \
                   likers would be read with its edges gone. Restore it (with its -wal and -shm \
                   files) from where it was moved or backed up; nothing was changed"
                .into(),
        });
    }
    let conn = Connection::open(&path)
        .map_err(|e| PortError::Other(format!("cannot open {}: {e}", path.display())))?;
    wait_for_locks(&conn)?;
    if layout.is_some() {
        // An earlier build's first part is refused before any setup could give it a layout.
        edge_parts::recorded(&conn)?;
    }
    // Set up already: read as it is, without the write lock (a counter may hold it).
    if !is_ready(&conn, &path)? {
        let first = layout.is_some();
        let layout = layout.map(edge_parts::layout_sql).unwrap_or_default();
        retrying(&conn, |c| {
            journal(c)?;
            c.execute_batch("BEGIN IMMEDIATE").map_err(sql_err)?;
            // Under the first part's write lock: a store opened at once by several sets its
            // first part up once, and makes its other parts only after that (so a part there
            // while the first has no table is another store's).
            let set_up = (|| {
                if first && !has_table(c, "edges")? {
                    refuse_parts_left(dir)?;
                }
                c.execute_batch(&format!("{EDGES_SQL} {layout} COMMIT"))
                    .map_err(sql_err)
            })();
            if set_up.is_err() && !c.is_autocommit() {
                c.execute_batch("ROLLBACK").map_err(sql_err)?;
            }
            set_up
        })?;
    }
    tune(&conn)?;
    Ok(conn)
}

/// A part's file other than the first, left beside a first part being set up anew: from
/// another store, whose edges the new one would read as its own.
fn refuse_parts_left(dir: &Path) -> PortResult<()> {
    match edge_parts::part_file_left(dir, true) {
        Some(left) => Err(PortError::Other(format!(
            "{} is left from another store's likers' edges (its {EDGES_FILE} is gone): a new \
             store would count them as its own. Move it away (with its -wal and -shm files), \
             or restore {EDGES_FILE} beside it",
            left.display()
        ))),
        None => Ok(()),
    }
}

/// The edges' connections of a read-only store, one per part: read-only (as immutable files
/// where SQLite cannot make their shared memory beside them). A file there that cannot be read
/// is an error naming it, never a store read as if it had no edges.
pub(crate) fn open_read_only(dir: &Path) -> PortResult<Vec<Connection>> {
    let path = dir.join(EDGES_FILE);
    let probe = "SELECT COUNT(*) FROM change_log LIMIT 1";
    let first = crate::open_read_only(&path, probe).map_err(|e| earlier_build(&path, e))?;
    let parts = edge_parts::recorded(&first)?;
    let mut conns = vec![first];
    for i in 1..parts {
        let path = dir.join(edge_parts::part_file(i));
        conns.push(crate::open_read_only(&path, probe).map_err(|e| earlier_build(&path, e))?);
    }
    Ok(conns)
}

/// Whether the file is set up already — WAL, and the tables there — refusing a part an earlier
/// build made (its `edges` and no change log).
fn is_ready(conn: &Connection, path: &Path) -> PortResult<bool> {
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .map_err(sql_err)?;
    let (edges, changes) = (has_table(conn, "edges")?, has_table(conn, "change_log")?);
    if edges && !changes {
        return Err(earlier_build(path, PortError::Other(String::new())));
    }
    Ok(mode.eq_ignore_ascii_case("wal") && edges && changes)
}

/// The error for a part that is not of this build: made by an earlier one (no change log).
fn earlier_build(path: &Path, e: PortError) -> PortError {
    PortError::Other(format!(
        "{} was made by an earlier build of tally, whose likers' edges this build does not read \
         (it has no change log): count into a fresh --data-dir, or keep using the build that \
         made it{}",
        path.display(),
        if e.to_string().is_empty() {
            String::new()
        } else {
            format!(" ({e})")
        }
    ))
}

/// What orders a handle's writes across the files ("Durable in order"): its edge commits,
/// numbered, and how many of them its last sync of the edges' parts covered.
#[derive(Debug, Default)]
pub(crate) struct EdgeSyncs {
    written: AtomicU64,
    synced: AtomicU64,
}

impl EdgeSyncs {
    /// The handle has made an edge commit (called after it).
    pub(crate) fn committed(&self) {
        self.written.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether edge commits wait for a sync: what a sync starting now would cover (every commit
    /// made so far), or `None` when the last sync covered them all.
    pub(crate) fn due(&self) -> Option<u64> {
        let written = self.written.load(Ordering::SeqCst);
        (self.synced.load(Ordering::SeqCst) < written).then_some(written)
    }

    /// A sync started after the first `written` edge commits covered them.
    pub(crate) fn covered(&self, written: u64) {
        self.synced.fetch_max(written, Ordering::SeqCst);
    }
}

/// Syncs an edges' file: one commit at `synchronous = FULL` that changes only the file's
/// `user_version` (a commit that changes no page writes nothing and syncs nothing). Its sync of
/// the WAL makes every commit before it durable, whichever connection or process made it.
pub(crate) fn sync(c: &mut Connection) -> PortResult<()> {
    synced(c, |c| {
        let tx = c
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        let n: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql_err)?;
        // A 32-bit field: it wraps, and only its moving matters.
        tx.pragma_update(None, "user_version", (n + 1) % i64::from(i32::MAX))
            .map_err(sql_err)?;
        tx.commit().map_err(sql_err)
    })
}
