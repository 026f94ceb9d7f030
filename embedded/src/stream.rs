//! The embedded stream: shards with hash-key ranges over one append-only `batches` table — each
//! put's records for a shard in one row (`tally_core::rows::batch`), so that a put of 500
//! records writes a handful of rows and index entries, not 500.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use tally_core::hashing::{even_ranges, hash_key};
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ReadBatch, ShardInfo, ShardReader, StartPosition,
    Stream, StreamRecord,
};
use tally_core::rows::batch;
use tally_core::SeqNo;

use crate::{now_ms, sql_err, Embedded};

/// The next sequence number to give, kept in `stream_meta` so that no number is given twice
/// although `trim` deletes batches.
fn next_seq(tx: &Connection) -> PortResult<i64> {
    let stored: Option<i64> = tx
        .query_row(
            "SELECT value FROM stream_meta WHERE key = 'next_seq'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?;
    match stored {
        Some(n) => Ok(n),
        None => tx
            .query_row(
                "SELECT MAX(COALESCE((SELECT MAX(last_seq) FROM batches), 0),                  COALESCE((SELECT MAX(trimmed_through) FROM shards), 0)) + 1",
                [],
                |r| r.get(0),
            )
            .map_err(sql_err),
    }
}

/// Makes the stream of the attached database `src` this store's (its shards, records and
/// `stream_meta`) in one transaction, if this store has no record yet; the records it then
/// holds (also when it took them before: the same count to the same last record). `None`: it
/// has records of its own, and nothing changed.
pub(crate) fn take_from_attached(c: &mut Connection) -> PortResult<Option<u64>> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let count = |tx: &Connection, db: &str| -> PortResult<u64> {
        tx.query_row(
            &format!("SELECT COALESCE(SUM(last_seq - first_seq + 1), 0) FROM {db}.batches"),
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as u64)
        .map_err(sql_err)
    };
    if count(&tx, "main")? > 0 {
        // Taken already (a rebuild run again): the same records, to the same last one.
        let last = |db: &str| -> PortResult<Option<i64>> {
            tx.query_row(
                &format!("SELECT MAX(last_seq) FROM {db}.batches"),
                [],
                |r| r.get(0),
            )
            .map_err(sql_err)
        };
        let same = count(&tx, "main")? == count(&tx, "src")? && last("main")? == last("src")?;
        return same.then(|| count(&tx, "main")).transpose();
    }
    tx.execute_batch(
        "DELETE FROM main.shards; \
         INSERT INTO main.shards (shard_id, parents, hash_start, hash_end, closed, trimmed_through) \
           SELECT shard_id, parents, hash_start, hash_end, closed, trimmed_through FROM src.shards; \
         INSERT OR REPLACE INTO main.stream_meta (key, value) SELECT key, value FROM src.stream_meta; \
         INSERT INTO main.batches (shard_id, last_seq, first_seq, arrival_ms, records) \
           SELECT shard_id, last_seq, first_seq, arrival_ms, records FROM src.batches;",
    )
    .map_err(sql_err)?;
    let next = next_seq(&tx)?;
    tx.execute(
        "INSERT OR REPLACE INTO stream_meta (key, value) VALUES ('next_seq', ?1)",
        [next],
    )
    .map_err(sql_err)?;
    let records = count(&tx, "main")?;
    tx.commit().map_err(sql_err)?;
    Ok(Some(records))
}

fn shard_name(i: usize) -> String {
    format!("shardId-{i:012}")
}

pub(crate) fn create_shards_if_empty(c: &mut Connection, n: usize) -> PortResult<()> {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let existing: i64 = tx
        .query_row("SELECT COUNT(*) FROM shards", [], |r| r.get(0))
        .map_err(sql_err)?;
    if existing == 0 {
        for (i, (lo, hi)) in even_ranges(n).into_iter().enumerate() {
            tx.execute("INSERT INTO shards (shard_id, parents, hash_start, hash_end) VALUES (?1, '[]', ?2, ?3)", params![shard_name(i), lo.to_string(), hi.to_string()])
                .map_err(sql_err)?;
        }
    }
    tx.commit().map_err(sql_err)
}

struct OpenShard {
    id: String,
    lo: u128,
    hi: u128,
}

fn open_shards(c: &Connection) -> PortResult<Vec<OpenShard>> {
    let mut st = c
        .prepare_cached(
            "SELECT shard_id, hash_start, hash_end FROM shards WHERE closed = 0 ORDER BY shard_id",
        )
        .map_err(sql_err)?;
    let rows = st
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
    rows.into_iter()
        .map(|(id, lo, hi)| match (lo.parse(), hi.parse()) {
            (Ok(lo), Ok(hi)) => Ok(OpenShard { id, lo, hi }),
            _ => Err(PortError::Other(format!(
                "embedded store: shard {id} has a corrupt hash range"
            ))),
        })
        .collect()
}

/// The number of the next shard to create: never one given before, although `trim` deletes
/// closed shards' rows — past the stored counter (kept from the first split on) and past every
/// shard id the stream or a lease row still names (a stream never split has only those).
fn next_shard_number(tx: &Connection) -> PortResult<i64> {
    let stored: Option<i64> = tx
        .query_row(
            "SELECT value FROM stream_meta WHERE key = 'next_shard'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_err)?;
    let named: Option<i64> = tx
        .query_row(
            "SELECT MAX(CAST(substr(shard_id, 9) AS INTEGER)) FROM \
             (SELECT shard_id FROM shards UNION SELECT shard_id FROM leases) \
             WHERE shard_id LIKE 'shardId-%'",
            [],
            |r| r.get(0),
        )
        .map_err(sql_err)?;
    Ok(stored.unwrap_or(0).max(named.map_or(0, |n| n + 1)))
}

impl Embedded {
    /// Splits an open shard at the middle of its hash range into two children, closing it — the
    /// embedded twin of Kinesis's SplitShard, for resharding tests and demos.
    pub fn split_shard(&self, shard_id: &str) -> PortResult<(String, String)> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let shards = open_shards(&tx)?;
            let s = shards.iter().find(|s| s.id == shard_id).ok_or_else(|| PortError::NotFound { what: format!("open shard {shard_id}"), hint: String::new() })?;
            let next = next_shard_number(&tx)?;
            tx.execute("INSERT OR REPLACE INTO stream_meta (key, value) VALUES ('next_shard', ?1)", [next + 2]).map_err(sql_err)?;
            let mid = s.lo + (s.hi - s.lo) / 2;
            let (a, b) = (shard_name(next as usize), shard_name(next as usize + 1));
            let parents = serde_json::to_string(&[shard_id]).unwrap_or_default();
            tx.execute("UPDATE shards SET closed = 1 WHERE shard_id = ?1", params![shard_id]).map_err(sql_err)?;
            for (id, lo, hi) in [(&a, s.lo, mid), (&b, mid + 1, s.hi)] {
                tx.execute("INSERT INTO shards (shard_id, parents, hash_start, hash_end) VALUES (?1, ?2, ?3, ?4)", params![id, parents, lo.to_string(), hi.to_string()])
                    .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok((a, b))
        })
    }
}

/// Records of one shard that a trim would drop before an application applied them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unapplied {
    /// The application that has not applied them.
    pub app: String,
    /// The shard.
    pub shard_id: String,
    /// How many records the trim would drop unapplied.
    pub records: u64,
}

/// The last record a trim at `cutoff_ms` drops: the stream is trimmed as Kinesis trims it, a
/// prefix in sequence order, up to the last record that arrived before the cutoff (0: none).
fn trim_bound(c: &Connection, cutoff_ms: i64) -> PortResult<i64> {
    c.query_row(
        "SELECT COALESCE(MAX(last_seq), 0) FROM batches WHERE arrival_ms < ?1",
        [cutoff_ms],
        |r| r.get(0),
    )
    .map_err(sql_err)
}

impl Embedded {
    /// What [`Embedded::trim`] at `cutoff_ms` would drop that an application has not applied:
    /// per application with lease rows and per shard, the records after its checkpoint (all of
    /// them where it has no checkpoint yet; none of a shard it finished).
    pub fn unapplied_before(&self, cutoff_ms: i64) -> PortResult<Vec<Unapplied>> {
        self.with(|c| {
            let bound = trim_bound(c, cutoff_ms)?;
            let shards: Vec<String> = c
                .prepare("SELECT DISTINCT shard_id FROM batches WHERE first_seq <= ?1 ORDER BY shard_id")
                .map_err(sql_err)?
                .query_map([bound], |r| r.get(0))
                .map_err(sql_err)?
                .collect::<Result<_, _>>()
                .map_err(sql_err)?;
            // Lease tombstones live under `<app>#…`: they are no application.
            let apps: Vec<String> = c
                .prepare("SELECT DISTINCT app FROM leases WHERE app NOT LIKE '%#%' ORDER BY app")
                .map_err(sql_err)?
                .query_map([], |r| r.get(0))
                .map_err(sql_err)?
                .collect::<Result<_, _>>()
                .map_err(sql_err)?;
            let mut out = Vec::new();
            for app in &apps {
                for shard in &shards {
                    // Decoded by the core's codec: a corrupt checkpoint is an error, never
                    // "nothing applied". Records after it are not applied (a checkpoint inside an
                    // aggregate leaves the rest of that record unapplied).
                    let applied_through = match crate::stores::lease_row(c, app, shard)? {
                        Some(st) if st.lease.finished => continue,
                        Some(st) => st.lease.checkpoint.map_or(0, |p| {
                            let s: i64 = p.seq.as_str().parse().unwrap_or(0);
                            if p.sub.is_some() { s - 1 } else { s }
                        }),
                        None => 0,
                    };
                    let records: i64 = c
                        .query_row(
                            "SELECT COALESCE(SUM(MIN(last_seq, ?3) - MAX(first_seq, ?2 + 1) + 1), 0) FROM batches \
                             WHERE shard_id = ?1 AND last_seq > ?2 AND first_seq <= ?3",
                            params![shard, applied_through, bound],
                            |r| r.get(0),
                        )
                        .map_err(sql_err)?;
                    if records > 0 {
                        out.push(Unapplied { app: app.clone(), shard_id: shard.clone(), records: records as u64 });
                    }
                }
            }
            Ok(out)
        })
    }

    /// Drops the records that arrived before `cutoff_ms`, as a Kinesis stream's retention does (a
    /// prefix in sequence order), and the closed shards left without a record (Kinesis stops
    /// listing a closed shard once its records are past retention). Each shard keeps the last
    /// record dropped, so that a reader that had not reached it is told what it lost
    /// ([`ReadBatch::trimmed_through`]). Returns (records, shards) dropped.
    pub fn trim(&self, cutoff_ms: i64) -> PortResult<(usize, usize)> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let bound = trim_bound(&tx, cutoff_ms)?;
            tx.execute(
                "UPDATE shards SET trimmed_through = (SELECT MAX(last_seq) FROM batches b WHERE b.shard_id = shards.shard_id AND b.last_seq <= ?1) \
                 WHERE EXISTS (SELECT 1 FROM batches b WHERE b.shard_id = shards.shard_id AND b.last_seq <= ?1)",
                [bound],
            )
            .map_err(sql_err)?;
            let records: i64 = tx
                .query_row("SELECT COALESCE(SUM(last_seq - first_seq + 1), 0) FROM batches WHERE last_seq <= ?1", [bound], |r| r.get(0))
                .map_err(sql_err)?;
            tx.execute("DELETE FROM batches WHERE last_seq <= ?1", [bound]).map_err(sql_err)?;
            let shards = tx
                .execute("DELETE FROM shards WHERE closed = 1 AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.shard_id = shards.shard_id)", [])
                .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok((records as usize, shards))
        })
    }
}

#[async_trait]
impl Stream for Embedded {
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
        self.run(|c| {
            let mut st = c
                .prepare_cached("SELECT shard_id, parents, closed FROM shards ORDER BY shard_id")
                .map_err(sql_err)?;
            let rows = st
                .query_map([], |r| {
                    crate::stores::row_of(r, "shard_id, parents, closed")
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            // Decoded by the core's codec: corrupt parents are an error naming the shard.
            rows.iter()
                .map(|row| {
                    let id = match row.get("shard_id") {
                        Some(tally_core::rows::Field::S(s)) => s.as_str(),
                        _ => "?",
                    };
                    tally_core::rows::shard_info(row, &format!("shards {id}"))
                })
                .collect()
        })
        .await
    }

    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let shard = shard_id.to_owned();
        let after: i64 = self
            .run(move |c| {
                let known: Option<i64> = c.query_row("SELECT 1 FROM shards WHERE shard_id = ?1", [&shard], |r| r.get(0)).optional().map_err(sql_err)?;
                if known.is_none() {
                    return Err(PortError::NotFound { what: format!("shard {shard}"), hint: String::new() });
                }
                match from {
                    StartPosition::TrimHorizon => Ok(0),
                    StartPosition::AfterSequence(s) => {
                        s.as_str().parse::<i64>().map_err(|_| PortError::Invalid(format!("sequence number {s} is not one of the embedded stream's")))
                    }
                    StartPosition::AtSequence(s) => s
                        .as_str()
                        .parse::<i64>()
                        .map(|n| n - 1)
                        .map_err(|_| PortError::Invalid(format!("sequence number {s} is not one of the embedded stream's"))),
                    StartPosition::Latest => c
                        .query_row("SELECT COALESCE(MAX(last_seq), 0) FROM batches WHERE shard_id = ?1", [&shard], |r| r.get(0))
                        .map_err(sql_err),
                    StartPosition::AtTimestamp(ts) => c
                        .query_row(
                            "SELECT COALESCE((SELECT MIN(first_seq) FROM batches WHERE shard_id = ?1 AND arrival_ms >= ?2), (SELECT COALESCE(MAX(last_seq), 0) + 1 FROM batches WHERE shard_id = ?1)) - 1",
                            params![shard, ts],
                            |r| r.get(0),
                        )
                        .map_err(sql_err),
                }
            })
            .await?;
        Ok(Box::new(EmbeddedReader {
            store: self.records_reader(),
            shard_id: shard_id.to_owned(),
            after,
        }))
    }

    async fn put_records(&self, entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        // Kinesis refuses the whole request when a record's data and partition key pass 1 MiB
        // (its default cap): the embedded stream takes what Kinesis would take.
        if let Some((i, e)) = entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.data.len() + e.partition_key.len() > MAX_RECORD_BYTES)
        {
            return Err(PortError::Invalid(format!(
                "1 validation error detected: Value at 'records.{}.member.data' failed to satisfy constraint: \
                 Member must have length less than or equal to {MAX_RECORD_BYTES} (a record of {} bytes with its partition key; \
                 Kinesis takes at most 1 MiB per record)",
                i + 1,
                e.data.len() + e.partition_key.len()
            )));
        }
        let entries = entries.to_vec();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let shards = open_shards(&tx)?;
            let now = now_ms();
            // Each shard's records of this put, in put order: one batch per shard.
            let mut out: Vec<Option<PutOutcome>> = vec![None; entries.len()];
            let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
            for (i, e) in entries.iter().enumerate() {
                let h = hash_key(&e.partition_key);
                let Some(s) = shards.iter().position(|s| s.lo <= h && h <= s.hi) else {
                    out[i] = Some(PutOutcome::Failed { code: "InternalFailure".into(), message: "no open shard covers the hash key".into() });
                    continue;
                };
                match groups.iter_mut().find(|(g, _)| *g == s) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((s, vec![i])),
                }
            }
            let mut next = next_seq(&tx)?;
            {
                let mut ins = tx
                    .prepare_cached("INSERT INTO batches (shard_id, last_seq, first_seq, arrival_ms, records) VALUES (?1, ?2, ?3, ?4, ?5)")
                    .map_err(sql_err)?;
                for (s, members) in &groups {
                    let first = next;
                    let mut blob = Vec::with_capacity(members.iter().map(|&i| entries[i].data.len() + entries[i].partition_key.len() + 8).sum());
                    for (k, &i) in members.iter().enumerate() {
                        batch::push(&mut blob, &entries[i].partition_key, &entries[i].data);
                        let seq = (first + k as i64).to_string();
                        out[i] = Some(PutOutcome::Ok { shard_id: shards[*s].id.clone(), seq: SeqNo::parse(&seq).unwrap_or_else(|| unreachable!("decimal")) });
                    }
                    next = first + members.len() as i64;
                    ins.execute(params![shards[*s].id, next - 1, first, now, blob]).map_err(sql_err)?;
                }
            }
            tx.execute("INSERT OR REPLACE INTO stream_meta (key, value) VALUES ('next_seq', ?1)", [next]).map_err(sql_err)?;
            let out: Vec<PutOutcome> = out.into_iter().map(|o| o.unwrap_or_else(|| unreachable!("every entry is put or failed"))).collect();
            tx.commit().map_err(sql_err)?;
            Ok(out)
        })
        .await
    }
}

/// The largest record Kinesis takes by default: data and partition key together.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// A reader: the last delivered sequence number is its whole state.
struct EmbeddedReader {
    store: Embedded,
    shard_id: String,
    /// Records after this rowid come next.
    after: i64,
}

#[async_trait]
impl ShardReader for EmbeddedReader {
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch> {
        let (shard, after) = (self.shard_id.clone(), self.after);
        let batch = self
            .store
            .run(move |conn| {
                // One read transaction: the records and the closed flag come from one snapshot.
                let tx = conn.transaction().map_err(sql_err)?;
                let c: &Connection = &tx;
                // The batches holding records after `after`, until `limit` records are taken.
                let mut st = c
                    .prepare_cached("SELECT first_seq, arrival_ms, records, last_seq FROM batches WHERE shard_id = ?1 AND last_seq > ?2 ORDER BY last_seq")
                    .map_err(sql_err)?;
                let mut rows = st.query(params![shard, after]).map_err(sql_err)?;
                let mut records: Vec<StreamRecord> = Vec::new();
                while records.len() < limit {
                    let Some(row) = rows.next().map_err(sql_err)? else { break };
                    let first: i64 = row.get(0).map_err(sql_err)?;
                    let arrival_ms: i64 = row.get(1).map_err(sql_err)?;
                    let blob = row.get_ref(2).map_err(sql_err)?.as_blob().map_err(|e| sql_err(e.into()))?;
                    let item = format!("batches {shard}/{}", row.get::<_, i64>(3).map_err(sql_err)?);
                    for (i, (partition_key, data)) in batch::records(blob, &item)?.into_iter().enumerate() {
                        let seq = first + i as i64;
                        if seq <= after || records.len() == limit {
                            continue;
                        }
                        records.push(StreamRecord {
                            seq: SeqNo::of_number(seq as u64),
                            arrival_ms,
                            partition_key: partition_key.to_owned(),
                            data: data.to_vec(),
                        });
                    }
                }
                drop(rows);
                drop(st);
                let mut batch = ReadBatch { millis_behind_latest: Some(0), ..ReadBatch::default() };
                let trimmed: Option<i64> = c
                    .query_row("SELECT trimmed_through FROM shards WHERE shard_id = ?1", [&shard], |r| r.get(0))
                    .optional()
                    .map_err(sql_err)?
                    .flatten();
                // Records after our position were trimmed before we read them: say so, once.
                if let Some(t) = trimmed.filter(|t| *t > after) {
                    batch.trimmed_through = Some(SeqNo::of_number(t as u64));
                }
                if records.len() == limit {
                    if let Some(last) = records.last() {
                        batch.millis_behind_latest = Some((now_ms() - last.arrival_ms).max(0));
                    }
                } else {
                    let closed: i64 = c.query_row("SELECT closed FROM shards WHERE shard_id = ?1", [&shard], |r| r.get(0)).map_err(sql_err)?;
                    if closed != 0 {
                        // Closed shards take no more puts: whatever the select saw is the end.
                        batch.shard_end = true;
                        let mut st = c.prepare_cached("SELECT shard_id FROM shards WHERE parents LIKE ?1 ORDER BY shard_id").map_err(sql_err)?;
                        batch.child_shards = st
                            .query_map([format!("%\"{shard}\"%")], |r| r.get(0))
                            .map_err(sql_err)?
                            .collect::<Result<Vec<String>, _>>()
                            .map_err(sql_err)?;
                    }
                }
                batch.records = records;
                Ok(batch)
            })
            .await?;
        if let Some(t) = &batch.trimmed_through {
            self.after = self.after.max(t.as_str().parse().unwrap_or(self.after));
        }
        if let Some(last) = batch.records.last() {
            self.after = last.seq.as_str().parse().unwrap_or(self.after);
        }
        Ok(batch)
    }
}
