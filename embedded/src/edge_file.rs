//! The likers' edges' own file, [`EDGES_FILE`] beside `tally.db`, read and written on a
//! connection of its own on every handle (with its own checkpointer: `Embedded::writer`).
//!
//! Why a file of its own: a likers window's edges are thousands of writes at random keys, and a
//! call holds its file's write lock for all of them (~50 ms for 20,000). In `tally.db` that is
//! the lock every put to the stream, every count and every lease takes; in a file of their own
//! those go on beside it (BENCHMARKS, "Edges in a file of their own"). Not `ATTACH`: a write
//! transaction on a connection with a second file attached takes both files' write locks
//! (`a_write_transaction_locks_every_attached_file`, embedded).
//!
//! **Durable in order.** A commit is synced (`synchronous = NORMAL`) only at a checkpoint, so a
//! power cut may lose a file's last commits; in one file those are always the last ones (a WAL
//! is read back up to its first missing frame), but across two files a later commit could be
//! kept and an earlier one lost. Where a commit in one file depends on one in the other, the
//! earlier one is synced before the later is made: a window's edge record is synced in
//! `tally.db` before its edges are written (and with it the stream's records the window read,
//! earlier in the same WAL), and the edges are synced here before the window's counts and
//! checkpoint are written in `tally.db` ([`EdgeSyncs`]: the first write of a window's counts,
//! its rest or its checkpoint after its shard's edge commits syncs this file once, [`sync`]; a
//! sync of a WAL makes every commit before it durable, another window's or another process's
//! too). So a power cut keeps a prefix of what a window did, as in one file: never counts
//! without their edges, nor edges without the records and the edge record they came from.
//! (With every edge call synced, the likers counter over the demo's records synced this WAL 73
//! times; now 33: BENCHMARKS.)
//!
//! A store made before kept its edges in `tally.db`'s `edges` table (`edges.sql`, created there
//! still). The first handle that may write moves them ([`move_from_main`]) in two commits, since
//! in WAL mode a commit is atomic per file, not across attached files: copied into this file,
//! then deleted from `tally.db`. A crash between the two leaves them in both, and the copy run
//! again adds none (`INSERT OR IGNORE`: no edge is written in this file before the move has
//! finished, since every handle that may write moves first). A read-only store that was never
//! moved reads its edges where they are.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rusqlite::Connection;
use tally_core::ports::{PortError, PortResult};

use crate::edge_parts::{self, EDGES_FILE};
use crate::{journal, retrying, sql_err, stores, synced, tune, wait_for_locks};

/// The `edges` table, the same in this file and (the stores made before) in `tally.db`.
pub(crate) const EDGES_SQL: &str = include_str!("edges.sql");

/// The edges' connections of a handle that may write, one per part (`edge_parts`): each file
/// opened (made and set up if new: WAL, pages, the table; the first with the layout), the
/// recent index as `tally.db` has it, and the edges a store made before kept in `main` moved
/// into the one part such a store has.
pub(crate) fn open_writable(dir: &Path, main: &Connection) -> PortResult<Vec<Connection>> {
    // A store whose edges are still in tally.db keeps one part: they are moved into it.
    let new_parts = if held_in_main(main)? {
        1
    } else {
        edge_parts::NEW_STORE_PARTS
    };
    let first = open_part(dir, 0, main, Some(new_parts))?;
    let parts = edge_parts::recorded(&first)?;
    let mut conns = vec![first];
    for i in 1..parts {
        conns.push(open_part(dir, i, main, None)?);
    }
    if parts > 1 && held_in_main(main)? {
        return Err(PortError::Other(format!(
            "{} holds likers' edges although its edges are parted over {parts} files: it was \
             written by an older tally since; count with the version that parted them",
            dir.join(crate::DB_FILE).display()
        )));
    }
    move_from_main(main, &dir.join(EDGES_FILE))?;
    Ok(conns)
}

/// Part `i`'s connection, its file made and set up if new (`layout`: the first part's, with the
/// parts a new store gets). A first part set up anew finds no other part's file left beside it.
fn open_part(
    dir: &Path,
    i: usize,
    main: &Connection,
    layout: Option<usize>,
) -> PortResult<Connection> {
    let path = dir.join(edge_parts::part_file(i));
    let conn = Connection::open(&path)
        .map_err(|e| PortError::Other(format!("cannot open {}: {e}", path.display())))?;
    wait_for_locks(&conn)?;
    // Set up already: read as it is, without the write lock (a counter may hold it).
    if !is_ready(&conn)? {
        let first = layout.is_some();
        let layout = layout.map(edge_parts::layout_sql).unwrap_or_default();
        retrying(&conn, |c| {
            journal(c)?;
            c.execute_batch("BEGIN IMMEDIATE").map_err(sql_err)?;
            // Under the first part's write lock: a store opened at once by several sets its
            // first part up once, and makes its other parts only after that (so a part there
            // while the first has no table is another store's).
            let set_up = (|| {
                if first && !has_edges_table(c)? {
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
    if stores::has_recent_index(main)? && !stores::has_recent_index(&conn)? {
        conn.execute_batch(stores::RECENT_INDEX_SQL)
            .map_err(sql_err)?;
    }
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
/// where SQLite cannot make their shared memory beside them), or `None` when the edges are
/// still in `tally.db` (a store made before, never opened to write since). A file there that
/// cannot be read is an error naming it, never a store read as if it had no edges.
pub(crate) fn open_read_only(dir: &Path, main: &Connection) -> PortResult<Option<Vec<Connection>>> {
    let path = dir.join(EDGES_FILE);
    // A store older still, with no `edges` table in `tally.db`: read as it was (unmoved).
    if !path.is_file() || held_in_main(main).unwrap_or(true) {
        return Ok(None);
    }
    let first = crate::open_read_only(&path, "SELECT COUNT(*) FROM edges LIMIT 1")?;
    let parts = edge_parts::recorded(&first)?;
    let mut conns = vec![first];
    for i in 1..parts {
        let path = dir.join(edge_parts::part_file(i));
        conns.push(crate::open_read_only(
            &path,
            "SELECT COUNT(*) FROM edges LIMIT 1",
        )?);
    }
    Ok(Some(conns))
}

/// Whether the file is set up already: WAL, and the table there.
fn is_ready(conn: &Connection) -> PortResult<bool> {
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .map_err(sql_err)?;
    Ok(mode.eq_ignore_ascii_case("wal") && has_edges_table(conn)?)
}

/// Whether the file has the `edges` table.
fn has_edges_table(conn: &Connection) -> PortResult<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'edges')",
        [],
        |r| r.get(0),
    )
    .map_err(sql_err)
}

/// Whether `tally.db` still holds edges (a store made before this file).
fn held_in_main(main: &Connection) -> PortResult<bool> {
    main.query_row("SELECT EXISTS(SELECT 1 FROM main.edges)", [], |r| r.get(0))
        .map_err(sql_err)
}

/// The move's copy: every edge of `tally.db` this file does not have.
const COPY_SQL: &str =
    "INSERT OR IGNORE INTO moved.edges (post, user, liked, at_ms, event_id, window, history) \
     SELECT post, user, liked, at_ms, event_id, window, history FROM main.edges";

/// Moves the edges `tally.db` holds into the file at `path`: copied in one commit (an edge this
/// file has already is kept: the copy of a move that crashed before its delete), then deleted
/// from `tally.db` in another. Nothing to do, and no lock taken, when it holds none.
fn move_from_main(main: &Connection, path: &Path) -> PortResult<()> {
    if !held_in_main(main)? {
        return Ok(());
    }
    main.execute("ATTACH DATABASE ?1 AS moved", [path.display().to_string()])
        .map_err(sql_err)?;
    // The copy synced before the delete is made ("Durable in order").
    let moved = main
        .pragma_update(
            Some(rusqlite::DatabaseName::Attached("moved")),
            "synchronous",
            "FULL",
        )
        .map_err(sql_err)
        .and_then(|()| in_transaction(main, COPY_SQL))
        .and_then(|()| in_transaction(main, "DELETE FROM main.edges"));
    let detached = main.execute_batch("DETACH DATABASE moved").map_err(sql_err);
    moved?;
    detached
}

/// Runs `sql` in one write transaction (rusqlite's, rolled back on drop if it fails).
fn in_transaction(c: &Connection, sql: &str) -> PortResult<()> {
    let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    tx.execute_batch(sql).map_err(sql_err)?;
    tx.commit().map_err(sql_err)
}

/// What orders a handle's writes across the two files ("Durable in order"): its edge commits,
/// numbered, the last of each shard's, and how many of them its last sync of the edges' file
/// covered. A window's writes in `tally.db` wait for its shard's edges only (another shard's
/// window syncs for its own). Number 1 is the edges a process before this handle wrote (a window
/// it gives up counts them): a shard with none of its own here waits for that one, so a
/// handle's first counts sync once anyway.
#[derive(Debug)]
pub(crate) struct EdgeSyncs {
    written: AtomicU64,
    synced: AtomicU64,
    by_shard: Mutex<HashMap<String, u64>>,
}

impl Default for EdgeSyncs {
    fn default() -> EdgeSyncs {
        EdgeSyncs {
            written: AtomicU64::new(1),
            synced: AtomicU64::new(0),
            by_shard: Mutex::default(),
        }
    }
}

impl EdgeSyncs {
    /// The shard's window has made an edge commit (called after it).
    pub(crate) fn committed(&self, shard: &str) {
        let n = self.written.fetch_add(1, Ordering::SeqCst) + 1;
        let mut by_shard = self.by_shard.lock().unwrap_or_else(|e| e.into_inner());
        let last = by_shard.entry(shard.to_owned()).or_default();
        *last = (*last).max(n);
    }

    /// Whether the shard's edge commits wait for a sync: what a sync starting now would cover
    /// (every commit made so far), or `None` when the last sync covered the shard's.
    pub(crate) fn due(&self, shard: &str) -> Option<u64> {
        let last = self
            .by_shard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(shard)
            .copied()
            .unwrap_or(1);
        (self.synced.load(Ordering::SeqCst) < last).then(|| self.written.load(Ordering::SeqCst))
    }

    /// A sync started after the first `written` edge commits covered them.
    pub(crate) fn covered(&self, written: u64) {
        self.synced.fetch_max(written, Ordering::SeqCst);
    }
}

/// Syncs the edges' file: one commit at `synchronous = FULL` that changes only the file's
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
