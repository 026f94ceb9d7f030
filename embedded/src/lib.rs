#![warn(missing_docs)]
//! The embedded backend: every port on SQLite files under a data dir, [`DB_FILE`] and the likers'
//! edges' parts ([`EDGES_FILE`] and the others of `edge_parts`).
//!
//! Layout: `schema.sql` holds `tally.db`'s tables — `shards` and `batches` (the stream: one log,
//! sequence numbers from SQLite's AUTOINCREMENT rowid, rendered as decimal strings), `leases`
//! (lease and checkpoint per application and shard), `items` (the counter's summary items, the
//! same items and conditional writes as on DynamoDB), `dedup`, `dead_letters` (the counter),
//! `analytics_snapshots` and `trending` (analytics); `edges.sql` the likers' edges' table, in
//! `edges.db` and the other parts' files (`edge_file`, `edge_parts`). Each file is opened in WAL
//! mode with a lock wait (`wait_for_locks`), so a producer, counters and analytics in separate
//! processes share them; every fenced write is one `BEGIN IMMEDIATE` transaction that checks the
//! lease row first.
//!
//! Each handle owns one connection per file behind a mutex each and runs its statements on
//! tokio's blocking pool.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod change_rows;
mod edge_file;
mod edge_log;
mod edge_parts;
mod stores;
mod stream;

pub use change_rows::changes_in as logged_changes;
pub use edge_parts::{
    file_of as edge_file_of, files_present as edge_files_present, is_part_file as is_edge_file,
    part_files as edge_files, EDGES_FILE, NEW_STORE_PARTS,
};
pub use stores::INSERT_EDGE_SQL;
pub use stream::Unapplied;
pub use tally_core::rows::batch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rusqlite::Connection;
use tally_core::ports::{PortError, PortResult};
use tally_core::retry::Backoff;

/// The database file's name inside the data dir.
pub const DB_FILE: &str = "tally.db";

/// A handle on a data dir: implements every port.
#[derive(Clone)]
pub struct Embedded {
    /// One connection per handle; handles in one process share nothing else.
    conn: Arc<Mutex<Connection>>,
    /// The likers' edges' connections, one per part (`edge_parts`, `edge_file`); `conn` itself
    /// on a records reader (which reads none).
    edges: Arc<edge_parts::EdgeParts>,
    /// The edge commits this handle made, and those its last sync of the edges' parts covered
    /// (`edge_file`, "Durable in order").
    edge_syncs: Arc<edge_file::EdgeSyncs>,
    /// Moves on each edge write this handle makes: the change log's readers on this handle wait
    /// on it for new changes (`edge_log`) rather than polling.
    edge_commits: Arc<tokio::sync::watch::Sender<u64>>,
    /// Where the data lives, for messages.
    path: PathBuf,
    /// The handle's shard readers' connection, opened by the first of them
    /// ([`Embedded::records_reader`]).
    records: Arc<OnceLock<Option<Embedded>>>,
    /// A writing handle's checkpoint threads, one per file ([`checkpoint_in_background`]): held
    /// for their drop, which stops them after the fields before them are dropped.
    _checkpointers: Arc<Checkpointers>,
}

pub(crate) use tally_core::clock::now_ms;

/// Journal mode and schema, idempotent; several processes may run it at once.
/// A file that SQLite cannot read as a database is named as what it is not: a tally store.
fn not_a_store(path: &Path, e: PortError) -> PortError {
    match e.to_string() {
        m if m.contains("file is not a database") || m.contains("malformed") => PortError::Other(format!(
            "{} is not a tally store (SQLite: {m}): move it away, or point --data-dir at another directory",
            path.display()
        )),
        _ => e,
    }
}

/// Sets a writable store up: WAL, the schema, migrations — for `open` and `open_existing` alike.
/// Switching a new file to WAL takes an exclusive lock and does not wait for the busy handler:
/// when several processes open a fresh store at once, the losers retry.
fn prepare(conn: &Connection) -> PortResult<()> {
    retrying(conn, prepare_once)
}

/// Runs `once` (a file's setup) until it is not refused as busy, with a backoff: switching a new
/// file to WAL takes an exclusive lock and does not wait for the busy handler.
fn retrying(conn: &Connection, once: impl Fn(&Connection) -> PortResult<()>) -> PortResult<()> {
    let backoff = Backoff {
        base: Duration::from_millis(10),
        cap: Duration::from_secs(1),
        max_retries: 40,
    };
    let mut attempt = 0;
    loop {
        match once(conn) {
            Err(PortError::Conflict(_)) if attempt < backoff.max_retries => {
                if !conn.is_autocommit() {
                    conn.execute_batch("ROLLBACK").map_err(sql_err)?;
                }
                std::thread::sleep(backoff.ceiling(attempt));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A writable connection's page size, journal and durability: a new file's pages of
/// [`PAGE_SIZE`] (a file that has pages keeps its own), WAL (readers never wait for the writer),
/// `synchronous = NORMAL` (a commit is durable at the next checkpoint: a power cut may lose the
/// last commits, never corrupt the file; a crashed process loses nothing), and a checkpoint every
/// [`AUTOCHECKPOINT_BYTES`] of WAL (40 MiB, about the 10,000 pages of 4 KiB it was) instead of
/// SQLite's 1,000 pages: each checkpoint syncs the file (the demo's million records are put about
/// a second sooner; `cargo bench --bench demo` sets its floor's connection up with this too).
pub fn journal(conn: &Connection) -> PortResult<()> {
    // Before anything writes the file: SQLite fixes a file's page size when it first writes it
    // (in WAL mode for good), and ignores this on a file that has pages.
    conn.pragma_update(None, "page_size", PAGE_SIZE)
        .map_err(sql_err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql_err)?;
    autocheckpoint(conn, AUTOCHECKPOINT_BYTES)?;
    tune(conn)
}

/// A connection's own settings, which SQLite keeps per connection, not in the file:
/// `synchronous = NORMAL` (`journal`) and a page cache of [`CACHE_KIB`]. Every handle that may
/// write sets them, whichever way it was opened: a handle opened on a store set up already
/// (`Embedded::open_existing`, as the demo's counter and analytics are) kept SQLite's defaults —
/// a WAL sync at every commit and a 2 MiB cache under the edges' random writes.
fn tune(conn: &Connection) -> PortResult<()> {
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql_err)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)
        .map_err(sql_err)
}

/// Runs `f` with `c`'s commits synced (`synchronous = FULL`: the WAL is synced at each commit,
/// and with it every commit before), then back to [`tune`]'s `NORMAL`. For a commit in one file
/// that a later commit in the other depends on (`edge_file`, "Durable in order"): a power cut
/// that keeps the later one then keeps this one too.
pub(crate) fn synced<T>(
    c: &mut Connection,
    f: impl FnOnce(&mut Connection) -> PortResult<T>,
) -> PortResult<T> {
    c.pragma_update(None, "synchronous", "FULL")
        .map_err(sql_err)?;
    let out = f(c);
    let back = c
        .pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql_err);
    let out = out?;
    back.map(|()| out)
}

/// The WAL a connection's commit checkpoints past, bytes.
const AUTOCHECKPOINT_BYTES: i64 = 40 << 20;

/// The WAL past which a writing handle's own commit checkpoints, bytes (200 MiB): only a safety
/// net, for when its background checkpointer falls behind.
const WRITER_AUTOCHECKPOINT_BYTES: i64 = 200 << 20;

/// Sets the WAL a commit checkpoints past to `bytes`, in the file's own pages (SQLite counts
/// pages, and a store made before [`PAGE_SIZE`] keeps pages of 4 KiB).
fn autocheckpoint(conn: &Connection, bytes: i64) -> PortResult<()> {
    let page: i64 = conn
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .map_err(sql_err)?;
    conn.pragma_update(None, "wal_autocheckpoint", bytes / page.max(512))
        .map_err(sql_err)
}

/// How often a writing handle's background checkpointer copies the WAL back into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// How long a connection waits for the store's lock before its call fails (30 s), and how often it
/// asks again meanwhile ([`LOCK_POLL`]).
const LOCK_WAIT_POLLS: i32 = 30_000;
const LOCK_POLL: Duration = Duration::from_millis(1);

/// Waits for a lock another connection holds by asking again every [`LOCK_POLL`], for up to 30 s.
/// SQLite's own `busy_timeout` backs off to 100 ms between asks: a like put while the counter's
/// shards write their windows back to back (each committing and taking the lock again at once)
/// then waited for one of those gaps for up to ~200 ms (`cargo bench --bench freshness -- load`,
/// "the slowest probe's put"); asked every millisecond, it takes the first gap.
fn wait_for_locks(conn: &Connection) -> PortResult<()> {
    fn again(polls: i32) -> bool {
        std::thread::sleep(LOCK_POLL);
        polls < LOCK_WAIT_POLLS
    }
    conn.busy_handler(Some(again)).map_err(sql_err)
}

/// Checkpoints off the hot path: a thread with a connection of its own runs a PASSIVE checkpoint
/// (it never waits for, nor blocks, a reader or a writer) every [`CHECKPOINT_EVERY`], for as long
/// as a handle that started it lives. A commit then only appends its pages to the WAL; copying
/// them back and syncing the file (a fifth of the time counting likers, whose edge writes dirty a
/// page each: BENCHMARKS) happens beside it. Durability is unchanged (`journal`). `None`: its
/// connection could not be opened or its thread started, and the handle's commits checkpoint as
/// they go (`journal`'s setting).
fn checkpoint_in_background(path: &Path) -> Option<Checkpointer> {
    // Opened here, not on the thread: a checkpointer that cannot open leaves the writers' own
    // checkpoints on, rather than reporting itself started.
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let c = Connection::open_with_flags(path, flags).ok()?;
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tally-checkpoint".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(CHECKPOINT_EVERY)
            {
                // Busy (another checkpoint running) or failed: the next tick, or the writers'
                // own safety net, does it.
                let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
            // Closed here, after the handle's own connection: the last connection of the
            // process, whose close copies the WAL back and removes it when no other process
            // has the store open — so the next command does not recover a WAL left behind.
            drop(c);
        })
        .ok()?;
    Some(Checkpointer {
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// A writing handle's checkpoint thread: stopped, and waited for, when the handle's last clone
/// is dropped (after its connection, a field before it), so that its connection is closed
/// before the process exits. The wait includes that close's copying the WAL back when it is the
/// store's last connection: a command pays it at its exit rather than the next command at its
/// open.
struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A handle's checkpoint threads, one per file: all stopped at once when dropped, then waited
/// for — their last closes, which copy each file's WAL back, go on side by side, not one file
/// after another.
#[derive(Default)]
struct Checkpointers(Vec<Checkpointer>);

impl Drop for Checkpointers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            drop(c.stop.take());
        }
    }
}

/// The page size of a store's file, bytes, fixed when the file is made: 16 KiB, not SQLite's 4 KiB.
/// Likers' edges are written at random keys all over the `edges` table; on larger pages a B-tree
/// is a level shallower and splits a quarter as often, and the likers counter alone took ~5 %
/// less time on them (BENCHMARKS, "SQLite built as SQLite recommends"). A store made before keeps
/// its 4 KiB pages (`VACUUM` with the journal out of WAL changes them).
pub const PAGE_SIZE: i64 = 16 * 1024;

/// Each connection's page cache, KiB: likers' edges are a read and a write per changed edge, at
/// random keys over the whole `edges` table, which outgrows SQLite's default 2 MiB at once.
const CACHE_KIB: i64 = 64 * 1024;

fn prepare_once(conn: &Connection) -> PortResult<()> {
    journal(conn)?;
    // Schema creation serialized on the write lock; a store an earlier build made is refused
    // under it, before anything is created in it.
    conn.execute_batch("BEGIN IMMEDIATE").map_err(sql_err)?;
    let made = refuse_earlier_build(conn).and_then(|()| {
        conn.execute_batch(include_str!("schema.sql"))
            .map_err(sql_err)
    });
    let end = if made.is_ok() { "COMMIT" } else { "ROLLBACK" };
    conn.execute_batch(end).map_err(sql_err)?;
    made
}

/// The tables `schema.sql` creates.
const TABLES: &[&str] = &[
    "shards",
    "stream_meta",
    "batches",
    "leases",
    "items",
    "dedup",
    "dead_letters",
    "analytics_snapshots",
    "baseline_counts",
    "baseline_ids",
    "trending",
];

/// Tables only an earlier build of tally made in `tally.db`: a store that has one kept likers'
/// edges with a history this build no longer reads, and is refused.
const EARLIER_BUILDS_TABLES: &[&str] = &["window_edges", "edges", "records"];

/// Whether `conn`'s file has the table `name`.
pub(crate) fn has_table(conn: &Connection, name: &str) -> PortResult<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
    .map_err(sql_err)
}

/// How many of `names` are tables of `conn`'s file.
fn tables_present(conn: &Connection, names: &[&str]) -> PortResult<usize> {
    names
        .iter()
        .try_fold(0, |n, t| Ok(n + usize::from(has_table(conn, t)?)))
}

/// A store an earlier build of tally made is refused, with what to do: this build counts likers
/// from the edges' change log, which such a store does not have.
fn refuse_earlier_build(conn: &Connection) -> PortResult<()> {
    if tables_present(conn, EARLIER_BUILDS_TABLES)? == 0 {
        return Ok(());
    }
    let path = conn.path().unwrap_or_default().to_owned();
    Err(PortError::Other(format!(
        "{path} was made by an earlier build of tally, whose likers' edges this build does not \
         read (it counts likers from the edges' change log): count into a fresh --data-dir (put \
         the events again with `tally replay`), or keep using the build that made it"
    )))
}

/// Whether the store is already set up as this version expects — WAL and every table — read
/// without taking the write lock, so that a reading command never waits for a writer (another
/// process may hold the write lock for as long as it likes, paused or stuck). A store an
/// earlier build made is refused here.
fn is_prepared(conn: &Connection) -> PortResult<bool> {
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(sql_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(false);
    }
    refuse_earlier_build(conn)?;
    Ok(tables_present(conn, TABLES)? == TABLES.len())
}

pub(crate) fn sql_err(e: rusqlite::Error) -> PortError {
    match e {
        rusqlite::Error::SqliteFailure(f, ref m)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            PortError::Conflict(m.clone().unwrap_or_else(|| "database is busy".into()))
        }
        other => PortError::Other(format!("embedded store: {other}")),
    }
}

/// Runs `f` on a connection behind its mutex. A panic while it was held (a bug, answered as an
/// error by `blocking`) leaves it usable: an open transaction rolled back as it unwound. Later
/// calls go on.
fn locked<T>(
    m: &Mutex<Connection>,
    f: impl FnOnce(&mut Connection) -> PortResult<T>,
) -> PortResult<T> {
    let mut guard = m.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut guard)
}

/// Runs `f` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> PortResult<T> + Send + 'static,
) -> PortResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| PortError::Other(format!("embedded store task failed: {e}")))?
}

/// Opens a file of a read-only store (a read-only file or filesystem) to read, checked with
/// `probe`: as it is when SQLite can read it in WAL mode, else — WAL needs a shared-memory file
/// beside it, which may not be creatable there — as an immutable file (the state last
/// checkpointed into it).
fn open_read_only(path: &Path, probe: &str) -> PortResult<Connection> {
    use rusqlite::OpenFlags;
    let cannot =
        |e: rusqlite::Error| PortError::Other(format!("cannot open {}: {e}", path.display()));
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(cannot)?;
    wait_for_locks(&conn)?;
    if conn.query_row(probe, [], |r| r.get::<_, i64>(0)).is_ok() {
        return Ok(conn);
    }
    drop(conn);
    let uri = format!("file:{}?immutable=1", path.display());
    let conn = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(cannot)?;
    conn.query_row(probe, [], |r| r.get::<_, i64>(0))
        .map_err(cannot)?;
    Ok(conn)
}

impl Embedded {
    /// Opens (creating if needed) the store in `dir`. A new store gets `shards` shards.
    pub fn open(dir: &Path, shards: usize) -> PortResult<Embedded> {
        if dir.exists() && !dir.is_dir() {
            return Err(PortError::Other(format!(
                "the data dir {} is a file, not a directory: give --data-dir a directory (it holds {DB_FILE})",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            PortError::Other(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let path = dir.join(DB_FILE);
        let left = (!path.exists())
            .then(|| edge_parts::part_file_left(dir, false))
            .flatten();
        if let Some(edges) = left {
            return Err(PortError::Other(format!(
                "{} is left from a store whose {DB_FILE} is gone: a new store would count its \
                 likers' edges as its own. Restore {DB_FILE} beside it, or move it away (with \
                 its -wal and -shm files) to start afresh",
                edges.display()
            )));
        }
        let conn = Connection::open(&path)
            .map_err(|e| PortError::Other(format!("cannot open {}: {e}", path.display())))?;
        if conn
            .is_readonly(rusqlite::DatabaseName::Main)
            .unwrap_or(false)
        {
            return Err(PortError::Other(format!(
                "{} is read-only (a read-only file or filesystem): producing, counting and setup \
                 write to the store; the reading commands (query, total, top, latency, leases, \
                 dead-letters, serve, record) work on it",
                path.display()
            )));
        }
        wait_for_locks(&conn)?;
        prepare(&conn).map_err(|e| not_a_store(&path, e))?;
        // A store with its shards was made whole (its edges' files before its shards): a part
        // of it missing is refused, never made anew and empty.
        let shards_made: i64 = conn
            .query_row("SELECT COUNT(*) FROM shards", [], |r| r.get(0))
            .map_err(sql_err)?;
        let missing = if shards_made > 0 {
            edge_file::Missing::Refuse
        } else {
            edge_file::Missing::Make
        };
        let store = Embedded::writer(conn, dir, path, missing)?;
        store.with(|c| stream::create_shards_if_empty(c, shards))?;
        Ok(store)
    }

    /// Opens the store in `dir` for reading, creating nothing: a missing store is an error that
    /// names the path. On a read-only file or filesystem the store is opened read-only (and, when
    /// SQLite cannot create its shared-memory file there, as an immutable file: the state last
    /// checkpointed into it).
    pub fn open_existing(dir: &Path) -> PortResult<Embedded> {
        let path = dir.join(DB_FILE);
        if !path.is_file() {
            return Err(PortError::NotFound {
                what: path.display().to_string(),
                hint: ": no tally store there; pass the store's --data-dir, or create one with \
                       `tally setup` or by producing into it"
                    .into(),
            });
        }
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let cannot =
            |e: rusqlite::Error| PortError::Other(format!("cannot open {}: {e}", path.display()));
        let conn = Connection::open_with_flags(&path, flags).map_err(cannot)?;
        wait_for_locks(&conn)?;
        let read_only = conn
            .is_readonly(rusqlite::DatabaseName::Main)
            .map_err(sql_err)?;
        if !read_only {
            // A store set up already is read as it is: no write lock, so a writer that holds it
            // (another process, even a paused one) never keeps a reading command waiting.
            let ready = is_prepared(&conn).map_err(|e| not_a_store(&path, e))?;
            if !ready {
                prepare(&conn).map_err(|e| not_a_store(&path, e))?;
            }
            return Embedded::writer(conn, dir, path, edge_file::Missing::Refuse);
        }
        drop(conn);
        let conn = open_read_only(&path, "SELECT COUNT(*) FROM shards")?;
        refuse_earlier_build(&conn)?;
        let edges = edge_file::open_read_only(dir)?;
        let mut store = Embedded::on(conn, path);
        store.edges = Arc::new(edge_parts::EdgeParts::of(edges));
        Ok(store)
    }

    /// A handle that may write: the edges on a connection of their own (`edge_file`), and each
    /// connection's commits leaving checkpoints to a thread of the handle's own
    /// ([`checkpoint_in_background`]), one per file.
    fn writer(
        conn: Connection,
        dir: &Path,
        path: PathBuf,
        missing: edge_file::Missing,
    ) -> PortResult<Embedded> {
        tune(&conn)?;
        let edges = edge_file::open_writable(dir, missing).map_err(|e| match e {
            e @ PortError::NotFound { .. } => e,
            e => not_a_store(&dir.join(EDGES_FILE), e),
        })?;
        let mut checkpointers = Vec::new();
        let files = std::iter::once((&conn, path.clone())).chain(
            edges
                .iter()
                .enumerate()
                .map(|(i, c)| (c, dir.join(edge_parts::part_file(i)))),
        );
        for (c, file) in files {
            if let Some(checkpointer) = checkpoint_in_background(&file) {
                autocheckpoint(c, WRITER_AUTOCHECKPOINT_BYTES)?;
                checkpointers.push(checkpointer);
            }
        }
        Ok(Embedded {
            edges: Arc::new(edge_parts::EdgeParts::of(edges)),
            _checkpointers: Arc::new(Checkpointers(checkpointers)),
            ..Embedded::on(conn, path)
        })
    }

    /// Gives the store its recent index (`tally_core::edge::RECENT_INDEX`: a partial index of
    /// the liked edges by post and like time, which likers most recent first read), if it has
    /// none; answers whether it was added. Every edge written before is in it at once. Chosen
    /// by `recent_likers_index`, as on DynamoDB: each liked edge write then updates it too.
    pub fn add_recent_index(&self) -> PortResult<bool> {
        let added = self.edges.each(|c| {
            let had = stores::has_recent_index(c)?;
            if !had {
                c.execute_batch(stores::RECENT_INDEX_SQL).map_err(sql_err)?;
            }
            Ok(!had)
        })?;
        Ok(added.contains(&true))
    }

    /// Makes the stream of the store at `source` (its shards and records, and its sequence
    /// numbers' next) this store's, when this one has no record yet: a store rebuilt from another
    /// reads on where that one's counter stopped. Answers the records it holds now (`None`: it
    /// had records of its own, and is left as it was).
    pub fn take_stream_from(&self, source: &Path) -> PortResult<Option<u64>> {
        let src = source.join(DB_FILE);
        if !src.is_file() {
            return Err(PortError::NotFound {
                what: src.display().to_string(),
                hint: ": no tally store there".into(),
            });
        }
        self.with(|c| {
            c.execute("ATTACH DATABASE ?1 AS src", [src.display().to_string()])
                .map_err(sql_err)?;
            let copied = stream::take_from_attached(c);
            let detached = c.execute_batch("DETACH DATABASE src").map_err(sql_err);
            let copied = copied?;
            detached?;
            Ok(copied)
        })
    }

    /// Whether the store holds anything: a record, a lease or a count.
    pub fn holds_data(&self) -> PortResult<bool> {
        self.with(|c| {
            c.query_row(
                "SELECT EXISTS(SELECT 1 FROM batches) OR EXISTS(SELECT 1 FROM leases) \
                 OR EXISTS(SELECT 1 FROM items)",
                [],
                |r| r.get::<_, bool>(0),
            )
            .map_err(sql_err)
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection, synchronously.
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> PortResult<T>,
    ) -> PortResult<T> {
        locked(&self.conn, f)
    }

    fn on(conn: Connection, path: PathBuf) -> Embedded {
        let conn = Arc::new(Mutex::new(conn));
        Embedded {
            edges: Arc::new(edge_parts::EdgeParts::one(conn.clone())),
            edge_syncs: Arc::default(),
            edge_commits: Arc::new(tokio::sync::watch::Sender::new(0)),
            conn,
            path,
            records: Arc::default(),
            _checkpointers: Arc::default(),
        }
    }

    /// The handle its shard readers read records through: a connection of their own, so that a
    /// shard reads its next records while another's window is written (one connection runs one
    /// statement at a time, and a likers window's edge writes hold it for thousands). Reading
    /// takes no lock a writer waits for (WAL). This handle itself, if that connection cannot
    /// be opened.
    pub(crate) fn records_reader(&self) -> Embedded {
        let own = self.records.get_or_init(|| {
            use rusqlite::OpenFlags;
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let conn = Connection::open_with_flags(&self.path, flags).ok()?;
            wait_for_locks(&conn).ok()?;
            Some(Embedded::on(conn, self.path.clone()))
        });
        own.clone().unwrap_or_else(|| self.clone())
    }

    /// Runs `f` on the connection on tokio's blocking pool.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> PortResult<T> + Send + 'static,
    ) -> PortResult<T> {
        let this = self.clone();
        blocking(move || this.with(f)).await
    }

    /// Runs `f` on the edges' parts (`edge_parts`) on tokio's blocking pool.
    pub(crate) async fn run_edges<T: Send + 'static>(
        &self,
        f: impl FnOnce(&edge_parts::EdgeParts) -> PortResult<T> + Send + 'static,
    ) -> PortResult<T> {
        let edges = self.edges.clone();
        blocking(move || f(&edges)).await
    }

    /// Runs `f` on the connection of the part that holds `post`'s edges, on tokio's blocking
    /// pool.
    pub(crate) async fn run_post_edges<T: Send + 'static>(
        &self,
        post: String,
        f: impl FnOnce(&mut Connection, &str) -> PortResult<T> + Send + 'static,
    ) -> PortResult<T> {
        self.run_edges(move |parts| parts.with_post(&post, |c| f(c, &post)))
            .await
    }

    /// Runs `f` on part `part`'s connection, synchronously.
    pub(crate) fn with_part<T>(
        &self,
        part: usize,
        f: impl FnOnce(&mut Connection) -> PortResult<T>,
    ) -> PortResult<T> {
        self.edges.with(part, f)
    }

    /// What moves on each edge write this handle makes ([`Embedded::write_part`]).
    pub(crate) fn edge_commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.edge_commits.subscribe()
    }

    /// How many parts the edges are in (`edge_parts`).
    pub(crate) fn edge_parts(&self) -> usize {
        self.edges.len()
    }

    /// Runs `f` on part `part`'s connection (a write of edges), then notes its commit: the
    /// handle's next write in `tally.db` syncs it first ([`Embedded::sync_edges`]).
    pub(crate) async fn write_part<T: Send + 'static>(
        &self,
        part: usize,
        f: impl FnOnce(&mut Connection) -> PortResult<T> + Send + 'static,
    ) -> PortResult<T> {
        let out = self.run_edges(move |parts| parts.with(part, f)).await;
        // A failed call may have committed nothing; counting it costs one sync at most, and a
        // read of the log.
        self.edge_syncs.committed();
        self.edge_commits.send_modify(|n| *n += 1);
        out
    }

    /// Makes the handle's edge commits durable, before a write in `tally.db` that depends on
    /// them (a window's checkpoint past the records they came from): one synced commit of each
    /// of the edges' parts when the last did not cover them (`edge_file`, "Durable in order").
    pub(crate) async fn sync_edges(&self) -> PortResult<()> {
        let Some(written) = self.edge_syncs.due() else {
            return Ok(());
        };
        self.run_edges(|parts| parts.each(edge_file::sync)).await?;
        self.edge_syncs.covered(written);
        Ok(())
    }

    /// How many shards of the stream are open.
    pub fn open_shard_count(&self) -> PortResult<usize> {
        self.with(|c| {
            c.query_row("SELECT COUNT(*) FROM shards WHERE closed = 0", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
            .map_err(sql_err)
        })
    }

    /// How many shards the stream has (open and closed).
    pub fn shard_count(&self) -> PortResult<usize> {
        self.with(|c| {
            c.query_row("SELECT COUNT(*) FROM shards", [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
                .map_err(sql_err)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's settings, as SQLite reports them: `synchronous` and `cache_size`.
    fn settings_of(c: &Connection) -> PortResult<(i64, i64)> {
        let get = |p: &str| c.pragma_query_value(None, p, |r| r.get::<_, i64>(0));
        Ok((get("synchronous").unwrap(), get("cache_size").unwrap()))
    }

    /// Every handle that may write runs with `synchronous = NORMAL` (1) and its page cache on
    /// `tally.db`, the one opened on a store set up already as much as the one that set it up
    /// (which kept SQLite's FULL and 2 MiB before: the demo's counter and analytics open that
    /// way); its edges' connection too, with the same cache (its commits are synced before the
    /// counts that depend on them: `edge_file`, "Durable in order").
    #[test]
    fn every_writing_handle_is_tuned_however_it_was_opened() {
        let dir = tempfile::tempdir().unwrap();
        let made = Embedded::open(dir.path(), 1).unwrap();
        let again = Embedded::open_existing(dir.path()).unwrap();
        for e in [&made, &again] {
            assert_eq!(e.with(|c| settings_of(c)).unwrap(), (1, -CACHE_KIB));
            let parts = e.edges.each(|c| settings_of(c)).unwrap();
            assert_eq!(parts, vec![(1, -CACHE_KIB); NEW_STORE_PARTS]);
        }
    }

    /// `synced` commits with `synchronous = FULL` and leaves the connection at NORMAL again,
    /// when what it ran failed too.
    #[test]
    fn synced_commits_are_full_and_the_connection_goes_back_to_normal() {
        let dir = tempfile::tempdir().unwrap();
        let e = Embedded::open(dir.path(), 1).unwrap();
        let during = e.with(|c| synced(c, |c| settings_of(c))).unwrap();
        assert_eq!(during.0, 2);
        let failed = e.with(|c| {
            synced(c, |_| -> PortResult<()> {
                Err(PortError::Other("failed".into()))
            })
        });
        assert!(failed.is_err());
        assert_eq!(e.with(|c| settings_of(c)).unwrap().0, 1);
    }
}
