//! The likers' edges parted by post over several files, each written on a connection of its own,
//! so that a window's edges are written on as many cores as there are parts (one SQLite file
//! has one writer at a time: BENCHMARKS, "Edges over two files").
//!
//! A post's edges are all in one part, the `n`th of [`part_of`]: the post id's 128-bit MD5
//! (`tally_core::hashing::hash_key`, what Kinesis hashes a partition key with) modulo the number
//! of parts. So a post's likers, its recent likers and a viewer's edge are each read in one file,
//! and only a scan of every edge reads them all (merged in key order).
//!
//! How many parts a store has is fixed when its first part ([`EDGES_FILE`]) is set up, and
//! recorded there (table `edge_parts`): [`NEW_STORE_PARTS`]. Each part is also one shard of the
//! edges' change log (`edge_log`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use tally_core::ports::{PortError, PortResult};

use crate::{locked, sql_err};

/// The first part's file inside the data dir (it records the parts: [`layout_sql`]).
pub const EDGES_FILE: &str = "edges.db";

/// How many files a store made now parts its edges over.
pub const NEW_STORE_PARTS: usize = 2;

/// The layout's record in the first part, and its one row.
pub(crate) fn layout_sql(parts: usize) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS edge_parts (parts INTEGER NOT NULL); \
         INSERT INTO edge_parts (parts) SELECT {parts} WHERE NOT EXISTS (SELECT 1 FROM edge_parts);"
    )
}

/// The file of part `i` in a data dir: [`EDGES_FILE`], then `edges-1.db`, `edges-2.db`…
pub fn part_file(i: usize) -> String {
    match i {
        0 => EDGES_FILE.to_owned(),
        i => format!("edges-{i}.db"),
    }
}

/// Whether `name` is a file of the edges' parts (or its WAL or shared memory).
pub fn is_part_file(name: &str) -> bool {
    let base = name
        .strip_suffix("-wal")
        .or_else(|| name.strip_suffix("-shm"))
        .unwrap_or(name);
    base == EDGES_FILE
        || base
            .strip_prefix("edges-")
            .and_then(|rest| rest.strip_suffix(".db"))
            .is_some_and(|n| n.parse::<usize>().is_ok_and(|n| n > 0))
}

/// The names of the edges' parts' files in `dir` (with their WALs and shared memory), sorted:
/// what is there, whatever the store records (what `tally teardown` deletes).
pub fn files_present(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|name| is_part_file(name))
        .collect();
    names.sort();
    names
}

/// A file of the edges' parts in `dir`, if any is there: [`EDGES_FILE`] first, then (or with
/// `others_only`, only) those of the other parts.
pub(crate) fn part_file_left(dir: &Path, others_only: bool) -> Option<PathBuf> {
    let first = dir.join(EDGES_FILE);
    if !others_only && first.exists() {
        return Some(first);
    }
    files_present(dir)
        .into_iter()
        .find(|name| !name.starts_with(EDGES_FILE))
        .map(|name| dir.join(name))
}

/// The part of `n` that holds `post`'s edges.
pub fn part_of(post: &str, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    (tally_core::hashing::hash_key(post) % n as u128) as usize
}

/// The parts recorded in the first part's file (one while it is not set up yet: no `edges`). A
/// first part with edges and no record was set up by an earlier build (its edges in one file,
/// before parts), and is refused, saying so: read as one part of several, or given a record now,
/// half its posts would be read from files that never held them.
pub(crate) fn recorded(first: &Connection) -> PortResult<usize> {
    let has = |table| crate::has_table(first, table);
    if !has("edges")? {
        return Ok(1);
    }
    if !has("edge_parts")? {
        return Err(PortError::Other(format!(
            "{} was made by an earlier build of tally, which kept the likers' edges in one file: \
             count into a fresh --data-dir, or keep using the build that made it",
            first.path().unwrap_or_default()
        )));
    }
    let n: i64 = first
        .query_row("SELECT parts FROM edge_parts", [], |r| r.get(0))
        .map_err(sql_err)?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| PortError::Corrupt {
            item: format!("{EDGES_FILE}: edge_parts"),
            detail: format!("{n} parts"),
        })
}

/// The files of the edges of the store in `dir`, in part order: as its first part records, or
/// [`EDGES_FILE`] alone when it has none yet (for tools and tests that read the files); a first
/// part an earlier build made is refused ([`recorded`]).
pub fn part_files(dir: &Path) -> PortResult<Vec<PathBuf>> {
    let first = dir.join(EDGES_FILE);
    if !first.is_file() {
        return Ok(vec![first]);
    }
    let c = Connection::open_with_flags(&first, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| PortError::Other(format!("cannot open {}: {e}", first.display())))?;
    Ok((0..recorded(&c)?).map(|i| dir.join(part_file(i))).collect())
}

/// The file that holds `post`'s edges in the store in `dir`.
pub fn file_of(dir: &Path, post: &str) -> PortResult<PathBuf> {
    let mut files = part_files(dir)?;
    let i = part_of(post, files.len());
    Ok(files.swap_remove(i))
}

/// A handle's connections to the edges' parts, in part order (on a read-only store whose edges
/// are still in `tally.db`, and on a records reader, that connection alone).
pub(crate) struct EdgeParts(Vec<Arc<Mutex<Connection>>>);

impl EdgeParts {
    pub(crate) fn of(conns: Vec<Connection>) -> EdgeParts {
        EdgeParts(conns.into_iter().map(|c| Arc::new(Mutex::new(c))).collect())
    }

    /// `conn` as the one part.
    pub(crate) fn one(conn: Arc<Mutex<Connection>>) -> EdgeParts {
        EdgeParts(vec![conn])
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The part that holds `post`'s edges.
    pub(crate) fn index(&self, post: &str) -> usize {
        part_of(post, self.len())
    }

    /// Runs `f` on part `i`'s connection.
    pub(crate) fn with<T>(
        &self,
        i: usize,
        f: impl FnOnce(&mut Connection) -> PortResult<T>,
    ) -> PortResult<T> {
        locked(&self.0[i], f)
    }

    /// Runs `f` on the connection of the part that holds `post`'s edges.
    pub(crate) fn with_post<T>(
        &self,
        post: &str,
        f: impl FnOnce(&mut Connection) -> PortResult<T>,
    ) -> PortResult<T> {
        self.with(self.index(post), f)
    }

    /// Runs `f` on every part's connection in turn, in part order.
    pub(crate) fn each<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> PortResult<T>,
    ) -> PortResult<Vec<T>> {
        (0..self.len()).map(|i| self.with(i, &mut f)).collect()
    }
}
