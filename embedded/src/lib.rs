//! The embedded backend: every port on one SQLite file under a data dir.
//!
//! Layout: `schema.sql` holds the tables — `shards` and `records` (the stream: one log, sequence
//! numbers from SQLite's AUTOINCREMENT rowid, rendered as decimal strings), `leases` (lease and
//! checkpoint per application and shard), `items` (the counter's summary items, the same items
//! and conditional writes as on DynamoDB), `dedup`, `dead_letters` (the counter),
//! `analytics_snapshots` and `trending` (analytics). The file is opened in WAL mode with a busy
//! timeout, so a producer, counters and analytics in separate processes share it; every fenced
//! write is one `BEGIN IMMEDIATE` transaction that checks the lease row first.
//!
//! Each handle owns one connection behind a mutex and runs its statements on tokio's blocking
//! pool.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod stores;
mod stream;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Where the data lives, for messages.
    path: PathBuf,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Journal mode and schema, idempotent; several processes may run it at once.
fn prepare(conn: &Connection) -> PortResult<()> {
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sql_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql_err)?;
    // Serialize schema creation and migration on a write lock.
    conn.execute_batch(&format!("BEGIN IMMEDIATE; {}", include_str!("schema.sql")))
        .map_err(sql_err)?;
    let migrated = migrate(conn);
    let end = if migrated.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    conn.execute_batch(end).map_err(sql_err)?;
    migrated
}

/// Columns added since a store's tables were first created: `(table, column, declaration)`.
/// `schema.sql` has them for a new store; an older store gets them here.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("dead_letters", "size", "INTEGER NOT NULL DEFAULT 0"),
    ("leases", "pending_horizon_ms", "INTEGER"),
    ("leases", "spent", "TEXT"),
];

fn migrate(conn: &Connection) -> PortResult<()> {
    for (table, column, decl) in ADDED_COLUMNS {
        let has: bool = conn
            .query_row(
                &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"),
                [column],
                |r| r.get::<_, i64>(0),
            )
            .map_err(sql_err)?
            > 0;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))
                .map_err(sql_err)?;
        }
    }
    Ok(())
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

impl Embedded {
    /// Opens (creating if needed) the store in `dir`. A new store gets `shards` shards.
    pub fn open(dir: &Path, shards: usize) -> PortResult<Embedded> {
        std::fs::create_dir_all(dir).map_err(|e| {
            PortError::Other(format!("cannot create data dir {}: {e}", dir.display()))
        })?;
        let path = dir.join(DB_FILE);
        let conn = Connection::open(&path)
            .map_err(|e| PortError::Other(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(sql_err)?;
        // Switching a new file to WAL takes an exclusive lock and does not wait for the busy
        // handler: when several processes open a fresh store at once, the losers retry.
        let backoff = Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_secs(1),
            max_retries: 40,
        };
        let mut attempt = 0;
        loop {
            match prepare(&conn) {
                Err(PortError::Conflict(_)) if attempt < backoff.max_retries => {
                    if !conn.is_autocommit() {
                        conn.execute_batch("ROLLBACK").map_err(sql_err)?;
                    }
                    std::thread::sleep(backoff.ceiling(attempt));
                    attempt += 1;
                }
                other => break other?,
            }
        }
        let store = Embedded {
            conn: Arc::new(Mutex::new(conn)),
            path,
        };
        store.with(|c| stream::create_shards_if_empty(c, shards))?;
        Ok(store)
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
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| PortError::Other("embedded store: connection mutex poisoned".into()))?;
        f(&mut guard)
    }

    /// Runs `f` on the connection on tokio's blocking pool.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> PortResult<T> + Send + 'static,
    ) -> PortResult<T> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.with(f))
            .await
            .map_err(|e| PortError::Other(format!("embedded store task failed: {e}")))?
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
