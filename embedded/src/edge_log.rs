//! The edges' change log as a stream: each part's `change_log` (`edges.sql`) is one shard,
//! `edges-<part>`, whose records are its changes in order (data = the change's
//! `tally_core::edge::EdgeChange` encoding). An edge write packs its changes into rows of at most
//! `CHANGES_PER_ROW` (`crate::change_rows`): a change's sequence number is its row's `seq` times
//! that, plus its place in the row. What the likers counter's second stage reads, as it reads
//! DynamoDB Streams on AWS.
//!
//! Rows are handed out only once they are durable: a reader that finds rows past the last sync
//! of its part syncs the part first (`edge_file`, "Durable in order"), so no count is ever
//! durable without the change it counted. Rows the counter has applied for good are dropped
//! ([`Stream::release`]): the log is kept for it alone.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags};
use tally_core::edge::EdgeChange;
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ReadBatch, ShardInfo, ShardReader, StartPosition,
    Stream, StreamRecord,
};
use tally_core::SeqNo;
use tokio::sync::watch;

use crate::change_rows::{unpack, CHANGES_PER_ROW};
use crate::{blocking, edge_file, edge_parts, locked, now_ms, sql_err, wait_for_locks, Embedded};

/// The shard id of part `i`'s log.
fn shard_of(part: usize) -> String {
    format!("edges-{part}")
}

/// The part a shard id names.
fn part_of(shard: &str, parts: usize) -> PortResult<usize> {
    shard
        .strip_prefix("edges-")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n < parts)
        .ok_or_else(|| PortError::NotFound {
            what: format!("shard {shard} of the edges' change log"),
            hint: format!(" (it has edges-0 to edges-{})", parts.saturating_sub(1)),
        })
}

/// The edges' change log of a store: a read connection per part, and how far each part is
/// synced.
#[derive(Clone)]
pub(crate) struct EdgeLog {
    store: Embedded,
    readers: Arc<Vec<Mutex<Connection>>>,
    synced: Arc<Vec<AtomicI64>>,
}

impl EdgeLog {
    /// The log of `store`'s parts, each read on a connection of its own (a part's writer holds
    /// its own connection through a window's edge writes).
    pub(crate) fn of(store: &Embedded) -> PortResult<EdgeLog> {
        let dir = store.path().parent().unwrap_or(std::path::Path::new("."));
        let mut readers = Vec::new();
        for i in 0..store.edge_parts() {
            let path = dir.join(edge_parts::part_file(i));
            let c = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| PortError::Other(format!("cannot open {}: {e}", path.display())))?;
            wait_for_locks(&c)?;
            readers.push(Mutex::new(c));
        }
        let synced = (0..readers.len()).map(|_| AtomicI64::new(0)).collect();
        Ok(EdgeLog {
            store: store.clone(),
            readers: Arc::new(readers),
            synced: Arc::new(synced),
        })
    }

    /// The last row of part `part` that is durable: its log's last row, the part synced first
    /// if that row is past the last sync.
    fn durable_through(&self, part: usize) -> PortResult<i64> {
        let last: i64 = locked(&self.readers[part], |c| {
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM change_log", [], |r| {
                r.get(0)
            })
            .map_err(sql_err)
        })?;
        if last > self.synced[part].load(Ordering::SeqCst) {
            // A sync after `last` was read makes it durable, whoever wrote it.
            self.store.with_part(part, edge_file::sync)?;
            self.synced[part].fetch_max(last, Ordering::SeqCst);
        }
        Ok(self.synced[part].load(Ordering::SeqCst))
    }
}

#[async_trait]
impl Stream for EdgeLog {
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
        Ok((0..self.readers.len())
            .map(|i| ShardInfo {
                shard_id: shard_of(i),
                parents: Vec::new(),
                closed: false,
            })
            .collect())
    }

    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let part = part_of(shard_id, self.readers.len())?;
        let seq = |s: &SeqNo| {
            s.as_str().parse::<i64>().map_err(|_| {
                PortError::Invalid(format!(
                    "{s} is no sequence number of the edges' change log"
                ))
            })
        };
        // Row seqs start at 1: sequence number 0 is before every change.
        let after = match from {
            StartPosition::TrimHorizon => 0,
            StartPosition::AfterSequence(s) => seq(&s)?,
            StartPosition::AtSequence(s) => seq(&s)? - 1,
            StartPosition::Latest | StartPosition::AtTimestamp(_) => {
                return Err(PortError::Invalid(
                    "the edges' change log is read from a checkpoint or its start".into(),
                ))
            }
        };
        Ok(Box::new(LogReader {
            log: self.clone(),
            part,
            after,
            commits: self.store.edge_commits(),
        }))
    }

    async fn put_records(&self, _entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        Err(PortError::Invalid(
            "the edges' change log is written by edge writes, not put to".into(),
        ))
    }

    /// Drops the part's rows before the one holding `through`: the counter has applied them for
    /// good (that row goes once a later one is released).
    async fn release(&self, shard_id: &str, through: &SeqNo) -> PortResult<()> {
        let part = part_of(shard_id, self.readers.len())?;
        let row = through.as_str().parse::<i64>().unwrap_or(0) / CHANGES_PER_ROW;
        let store = self.store.clone();
        blocking(move || {
            store.with_part(part, |c| {
                c.execute("DELETE FROM change_log WHERE seq < ?1", [row])
                    .map(|_| ())
                    .map_err(sql_err)
            })
        })
        .await
    }
}

/// How long a read that found nothing waits for the store's handle to write edges before it
/// answers (writers in other processes are seen at the next read). Short, though an idle part is
/// then asked about 20 times a second (one indexed SQLite read each): a wait as long as the idle
/// poll would hold every `--until-idle` exit up by that much, since the read in flight when the
/// exit is armed does not count.
const WAIT_FOR_CHANGES: Duration = Duration::from_millis(50);

/// A reader of one part's log, after a change.
struct LogReader {
    log: EdgeLog,
    part: usize,
    after: i64,
    /// The handle's edge writes ([`Embedded::edge_commits`]).
    commits: watch::Receiver<u64>,
}

#[async_trait]
impl ShardReader for LogReader {
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch> {
        let (log, part, after) = (self.log.clone(), self.part, self.after);
        // Writes from here on wake an empty read's wait.
        self.commits.borrow_and_update();
        let records = blocking(move || {
            let through = log.durable_through(part)?;
            locked(&log.readers[part], |c| read_rows(c, after, through, limit))
        })
        .await?;
        if records.is_empty() {
            let _ = tokio::time::timeout(WAIT_FOR_CHANGES, self.commits.changed()).await;
        }
        let mut batch = ReadBatch {
            millis_behind_latest: Some(0),
            ..ReadBatch::default()
        };
        if let Some(last) = records.last() {
            self.after = last.seq.as_str().parse().unwrap_or(self.after);
            if records.len() == limit {
                batch.millis_behind_latest = Some((now_ms() - last.arrival_ms).max(0));
            }
        }
        batch.records = records;
        Ok(batch)
    }

    /// An empty read waited for the handle's next edge write already.
    fn waits_for_records(&self) -> bool {
        true
    }
}

/// The changes after sequence number `after` in rows through `through`, at most `limit`, as
/// records.
fn read_rows(
    c: &Connection,
    after: i64,
    through: i64,
    limit: usize,
) -> PortResult<Vec<StreamRecord>> {
    let mut st = c
        .prepare_cached(
            "SELECT seq, written_ms, changes FROM change_log \
             WHERE seq >= ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
        )
        .map_err(sql_err)?;
    let mut rows = st
        .query(params![after / CHANGES_PER_ROW, through, limit as i64])
        .map_err(sql_err)?;
    let mut out = Vec::with_capacity(limit.min(1_024));
    while let Some(r) = rows.next().map_err(sql_err)? {
        let (seq, written_ms): (i64, i64) =
            (r.get(0).map_err(sql_err)?, r.get(1).map_err(sql_err)?);
        let changes = r
            .get_ref(2)
            .and_then(|v| v.as_blob().map_err(Into::into))
            .map_err(sql_err)?;
        for (i, change) in unpack(changes).enumerate() {
            let n = seq * CHANGES_PER_ROW + i as i64;
            if n <= after {
                continue;
            }
            let bad = |why: String| PortError::Corrupt {
                item: format!("change_log row {seq}"),
                detail: why,
            };
            let data = change.map_err(bad)?;
            let post = EdgeChange::decode(data).map_err(bad)?.post_id;
            out.push(StreamRecord {
                seq: SeqNo::of_number(n as u64),
                arrival_ms: written_ms,
                partition_key: post.to_string(),
                data: data.to_vec(),
            });
            if out.len() == limit {
                return Ok(out);
            }
        }
    }
    Ok(out)
}
