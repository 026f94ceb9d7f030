//! The edges' change log as a stream: each part's `changes` (`edges.sql`) is one shard,
//! `edges-<part>`, whose records are its change rows in order (sequence number = the row's
//! `seq`, data = the change's `tally_core::edge::EdgeChange` encoding). What the likers counter's
//! second stage reads, as it reads DynamoDB Streams on AWS.
//!
//! Rows are handed out only once they are durable: a reader that finds rows past the last sync
//! of its part syncs the part first (`edge_file`, "Durable in order"), so no count is ever
//! durable without the change it counted. Rows the counter has applied for good are dropped
//! ([`Stream::release`]): the log is kept for it alone.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags};
use tally_core::edge::EdgeChange;
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ReadBatch, ShardInfo, ShardReader, StartPosition,
    Stream, StreamRecord,
};
use tally_core::SeqNo;

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
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM changes", [], |r| {
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
        }))
    }

    async fn put_records(&self, _entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        Err(PortError::Invalid(
            "the edges' change log is written by edge writes, not put to".into(),
        ))
    }

    /// Drops the part's rows through `through`: the counter has applied them for good.
    async fn release(&self, shard_id: &str, through: &SeqNo) -> PortResult<()> {
        let part = part_of(shard_id, self.readers.len())?;
        let through: i64 = through.as_str().parse().unwrap_or(0);
        let store = self.store.clone();
        blocking(move || {
            store.with_part(part, |c| {
                c.execute("DELETE FROM changes WHERE seq <= ?1", [through])
                    .map(|_| ())
                    .map_err(sql_err)
            })
        })
        .await
    }
}

/// A reader of one part's log, after a row.
struct LogReader {
    log: EdgeLog,
    part: usize,
    after: i64,
}

#[async_trait]
impl ShardReader for LogReader {
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch> {
        let (log, part, after) = (self.log.clone(), self.part, self.after);
        let records = blocking(move || {
            let through = log.durable_through(part)?;
            locked(&log.readers[part], |c| read_rows(c, after, through, limit))
        })
        .await?;
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
}

/// The change rows after `after` through `through`, at most `limit`, as records.
fn read_rows(
    c: &Connection,
    after: i64,
    through: i64,
    limit: usize,
) -> PortResult<Vec<StreamRecord>> {
    let mut st = c
        .prepare_cached(
            "SELECT seq, written_ms, post, user, before_ms, after_ms FROM changes \
             WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
        )
        .map_err(sql_err)?;
    let rows = st
        .query_map(params![after, through, limit as i64], |r| {
            let change = EdgeChange {
                post_id: r.get::<_, String>(2)?.into(),
                user_id: r.get::<_, String>(3)?.into(),
                before: r.get(4)?,
                after: r.get(5)?,
            };
            Ok(StreamRecord {
                seq: SeqNo::of_number(r.get::<_, i64>(0)?.max(0) as u64),
                arrival_ms: r.get(1)?,
                partition_key: change.post_id.to_string(),
                data: change.encode(),
            })
        })
        .map_err(sql_err)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
}
