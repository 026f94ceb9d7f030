//! The put path: PutRecords batches, resending only what failed.

use std::time::Duration;

use rand::Rng;
use tally_core::ports::{PutEntry, PutOutcome, Stream};
use tally_core::retry::Backoff;

use crate::keys::HotPosts;
use crate::ProducerError;

/// Most records in one PutRecords call.
pub const MAX_BATCH_RECORDS: usize = 500;
/// Most bytes (data plus partition keys) in one PutRecords call.
pub const MAX_BATCH_BYTES: usize = 5 * 1024 * 1024;

/// Puts everything `records` yields (each re-keyed by `hot`), in PutRecords batches resending
/// only what failed, at `rate` records/s (0: as fast as the stream takes them), until `stop` is
/// raised (between batches: what was taken from `records` is put); `on_put` is told how many
/// records each batch put. What `tally produce`, `replay`, `backfill` and `demo` put with.
pub async fn put_all(
    stream: &dyn Stream,
    hot: &HotPosts,
    records: impl Iterator<Item = PutEntry>,
    rate: f64,
    on_put: &(dyn Fn(u64) + Sync),
    stop: &std::sync::atomic::AtomicBool,
) -> Result<PutStats, ProducerError> {
    let mut stats = PutStats::default();
    let mut pacer = Pacer::new((rate > 0.0).then_some(rate));
    let backoff = Backoff::default();
    // Paced, about ten batches a second: a rate below a batch's size still spreads its records.
    let per_batch = if rate > 0.0 {
        ((rate / 10.0).ceil() as usize).clamp(1, MAX_BATCH_RECORDS)
    } else {
        MAX_BATCH_RECORDS
    };
    let mut records = records.map(|e| hot.rekey(e));
    // Nothing more is taken once a stop is asked for; what was taken is put.
    let take = |records: &mut dyn Iterator<Item = PutEntry>| -> Vec<PutEntry> {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        records.take(per_batch).collect()
    };
    let mut next = take(&mut records);
    while !next.is_empty() {
        let current = std::mem::take(&mut next);
        // The next records are made (generated, read, encoded) while these are put: the put
        // waits on the store or the network, the making on a core, so they overlap instead of
        // taking turns (`cargo bench --bench demo -- stages`).
        let (put, following) = tokio::join!(
            async {
                for batch in batches(current, per_batch, MAX_BATCH_BYTES) {
                    let n = batch.len() as u64;
                    pacer.wait(n).await;
                    put_batch(stream, batch, &backoff, &mut stats).await?;
                    on_put(n);
                }
                Ok::<(), ProducerError>(())
            },
            async { take(&mut records) }
        );
        put?;
        next = following;
    }
    Ok(stats)
}

/// Cuts entries into batches within the PutRecords limits, in order.
pub fn batches(entries: Vec<PutEntry>, max_records: usize, max_bytes: usize) -> Vec<Vec<PutEntry>> {
    let mut out = Vec::new();
    let mut cur: Vec<PutEntry> = Vec::new();
    let mut bytes = 0;
    for e in entries {
        let size = e.data.len() + e.partition_key.len();
        if !cur.is_empty() && (cur.len() == max_records || bytes + size > max_bytes) {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += size;
        cur.push(e);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The entries whose outcome is a failure, with the last failure's message.
pub fn failed_entries(
    entries: &[PutEntry],
    outcomes: &[PutOutcome],
) -> (Vec<PutEntry>, Option<String>) {
    let mut last = None;
    let mut failed: Vec<PutEntry> = entries
        .iter()
        .zip(outcomes)
        .filter_map(|(e, o)| match o {
            PutOutcome::Failed { code, message } => {
                last = Some(format!("{code}: {message}"));
                Some(e.clone())
            }
            PutOutcome::Ok { .. } => None,
        })
        .collect();
    // An answer with fewer outcomes than entries leaves the rest unconfirmed: resend them.
    failed.extend(entries.iter().skip(outcomes.len()).cloned());
    (failed, last)
}

/// Totals of a put run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutStats {
    /// Records put.
    pub records: u64,
    /// PutRecords calls made.
    pub calls: u64,
    /// Entries resent after a partial failure.
    pub resent: u64,
}

/// Puts records at their recorded pace: each `(arrival_ms, record)` due at its gap from the
/// first divided by `speed`, in batches of what is due (≤ 500 records / 5 MiB), at most `rate`
/// records/s (0: no limit), until `stop` is raised; `on_put` is told how many records each
/// batch put and the recorded time reached. What `tally replay --speed` puts with.
pub async fn put_at_pace(
    stream: &dyn Stream,
    records: Vec<(i64, PutEntry)>,
    speed: f64,
    rate: f64,
    on_put: &(dyn Fn(u64, i64) + Sync),
    stop: &std::sync::atomic::AtomicBool,
) -> Result<PutStats, ProducerError> {
    let mut stats = PutStats::default();
    let mut pacer = Pacer::new((rate > 0.0).then_some(rate));
    let backoff = Backoff::default();
    let Some(t0) = records.first().map(|r| r.0) else {
        return Ok(stats);
    };
    let w0 = tokio::time::Instant::now();
    let due = |arrival_ms: i64| {
        w0 + Duration::from_secs_f64((arrival_ms - t0).max(0) as f64 / 1_000.0 / speed)
    };
    let mut records = records.into_iter().peekable();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(next) = records.peek() else { break };
        tokio::time::sleep_until(due(next.0)).await;
        // Everything due by now, in batches of at most 500 records and 5 MiB.
        let now = tokio::time::Instant::now();
        let mut reached = t0;
        let due_now: Vec<PutEntry> = std::iter::from_fn(|| records.next_if(|r| due(r.0) <= now))
            .map(|(at, e)| {
                reached = at;
                e
            })
            .collect();
        for batch in batches(due_now, MAX_BATCH_RECORDS, MAX_BATCH_BYTES) {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let n = batch.len() as u64;
            pacer.wait(n).await;
            put_batch(stream, batch, &backoff, &mut stats).await?;
            on_put(n, reached);
        }
    }
    Ok(stats)
}

/// Puts records as they come from `records` — each batch whatever has arrived by the time the
/// last batch is in (≤ 500 records / 5 MiB), so that a record is put as soon as it is read, not
/// when a batch fills — each re-keyed by `hot`, at most `rate` records/s (0: no limit), until
/// `records` ends or `stop` is raised; `on_put` is told how many records each batch put. What
/// `tally replay -` puts standard input with, line by line as a pipe delivers them.
pub async fn put_as_they_come(
    stream: &dyn Stream,
    hot: &HotPosts,
    mut records: tokio::sync::mpsc::Receiver<PutEntry>,
    rate: f64,
    on_put: &(dyn Fn(u64) + Sync),
    stop: &std::sync::atomic::AtomicBool,
) -> Result<PutStats, ProducerError> {
    let mut stats = PutStats::default();
    let mut pacer = Pacer::new((rate > 0.0).then_some(rate));
    let backoff = Backoff::default();
    let mut next: Option<PutEntry> = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let first = match next.take() {
            Some(e) => e,
            // Waiting for a record, a stop is looked at every 200 ms.
            None => match tokio::time::timeout(Duration::from_millis(200), records.recv()).await {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(_) => continue,
            },
        };
        let first = hot.rekey(first);
        let mut bytes = first.data.len() + first.partition_key.len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_RECORDS {
            let Ok(e) = records.try_recv() else { break };
            let e = hot.rekey(e);
            let size = e.data.len() + e.partition_key.len();
            if bytes + size > MAX_BATCH_BYTES {
                next = Some(e);
                break;
            }
            bytes += size;
            batch.push(e);
        }
        let n = batch.len() as u64;
        pacer.wait(n).await;
        put_batch(stream, batch, &backoff, &mut stats).await?;
        on_put(n);
    }
    Ok(stats)
}

/// Puts one batch, resending only the failed entries until all are in or the budget runs out.
pub async fn put_batch(
    stream: &dyn Stream,
    batch: Vec<PutEntry>,
    backoff: &Backoff,
    stats: &mut PutStats,
) -> Result<(), ProducerError> {
    let mut pending = batch;
    let mut attempt = 0;
    let n = pending.len() as u64;
    loop {
        stats.calls += 1;
        let last = match stream.put_records(&pending).await {
            Ok(outcomes) => {
                let (failed, last) = failed_entries(&pending, &outcomes);
                if failed.is_empty() {
                    stats.records += n;
                    return Ok(());
                }
                stats.resent += failed.len() as u64;
                pending = failed;
                last.unwrap_or_default()
            }
            Err(e) if e.is_retryable() => e.to_string(),
            Err(e) => return Err(e.into()),
        };
        if attempt >= backoff.max_retries {
            return Err(ProducerError::GaveUp {
                failed: pending.len(),
                attempts: attempt + 1,
                last,
            });
        }
        let delay = backoff.delay(attempt, rand::thread_rng().gen::<f64>());
        tracing::debug!(
            failed = pending.len(),
            attempt,
            delay_ms = delay.as_millis() as u64,
            "PutRecords: resending failed entries"
        );
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// Paces puts to a target rate (records per second).
#[derive(Debug)]
pub struct Pacer {
    rate: Option<f64>,
    start: tokio::time::Instant,
    sent: u64,
}

impl Pacer {
    /// `None`: as fast as possible.
    pub fn new(rate: Option<f64>) -> Pacer {
        Pacer {
            rate: rate.filter(|r| *r > 0.0),
            start: tokio::time::Instant::now(),
            sent: 0,
        }
    }

    /// Waits until `n` more records may be sent.
    pub async fn wait(&mut self, n: u64) {
        if let Some(rate) = self.rate {
            let due = self.start + Duration::from_secs_f64(self.sent as f64 / rate);
            tokio::time::sleep_until(due).await;
        }
        self.sent += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::SeqNo;

    fn entry(i: usize, size: usize) -> PutEntry {
        PutEntry {
            partition_key: format!("k{i}"),
            data: vec![b'x'; size],
        }
    }

    #[test]
    fn batches_respect_count_and_bytes() {
        let b = batches(
            (0..1_201).map(|i| entry(i, 10)).collect(),
            500,
            MAX_BATCH_BYTES,
        );
        assert_eq!(
            b.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![500, 500, 201]
        );
        let b = batches(
            (0..12).map(|i| entry(i, 1024 * 1024)).collect(),
            500,
            MAX_BATCH_BYTES,
        );
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 4]);
        assert!(batches(vec![], 500, 10).is_empty());
    }

    #[test]
    fn only_failed_entries_are_resent() {
        let es: Vec<PutEntry> = (0..4).map(|i| entry(i, 1)).collect();
        let ok = PutOutcome::Ok {
            shard_id: "s".into(),
            seq: SeqNo::parse("1").unwrap(),
        };
        let bad = PutOutcome::Failed {
            code: "ProvisionedThroughputExceededException".into(),
            message: "slow down".into(),
        };
        let (failed, last) = failed_entries(&es, &[ok.clone(), bad.clone(), ok, bad]);
        assert_eq!(failed, vec![es[1].clone(), es[3].clone()]);
        assert_eq!(
            last.unwrap(),
            "ProvisionedThroughputExceededException: slow down"
        );
        let (failed, _) = failed_entries(&es, &[]);
        assert_eq!(failed.len(), 4);
    }

    /// A stream that fails the odd entries of its first `failing_calls` calls, and stores the rest.
    struct Flaky {
        failing_calls: usize,
        calls: std::sync::Mutex<usize>,
        stored: std::sync::Mutex<Vec<PutEntry>>,
    }

    #[async_trait::async_trait]
    impl Stream for Flaky {
        async fn list_shards(
            &self,
        ) -> tally_core::ports::PortResult<Vec<tally_core::ports::ShardInfo>> {
            Ok(vec![])
        }
        async fn open(
            &self,
            _: &str,
            _: tally_core::ports::StartPosition,
        ) -> tally_core::ports::PortResult<Box<dyn tally_core::ports::ShardReader>> {
            Err(tally_core::ports::PortError::Other("not readable".into()))
        }
        async fn put_records(
            &self,
            entries: &[PutEntry],
        ) -> tally_core::ports::PortResult<Vec<PutOutcome>> {
            let call = {
                let mut c = self.calls.lock().unwrap();
                *c += 1;
                *c
            };
            Ok(entries
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    if call <= self.failing_calls
                        && (i % 2 == 1 || self.failing_calls == usize::MAX)
                    {
                        PutOutcome::Failed {
                            code: "ProvisionedThroughputExceededException".into(),
                            message: "slow down".into(),
                        }
                    } else {
                        self.stored.lock().unwrap().push(e.clone());
                        PutOutcome::Ok {
                            shard_id: "s".into(),
                            seq: SeqNo::parse(&self.stored.lock().unwrap().len().to_string())
                                .unwrap(),
                        }
                    }
                })
                .collect())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn put_batch_resends_only_failures_and_stores_each_once() {
        let flaky = Flaky {
            failing_calls: 3,
            calls: Default::default(),
            stored: Default::default(),
        };
        let es: Vec<PutEntry> = (0..8).map(|i| entry(i, 3)).collect();
        let mut stats = PutStats::default();
        put_batch(&flaky, es.clone(), &Backoff::default(), &mut stats)
            .await
            .unwrap();
        let mut stored = flaky.stored.lock().unwrap().clone();
        stored.sort_by(|a, b| a.partition_key.cmp(&b.partition_key));
        let mut expected = es;
        expected.sort_by(|a, b| a.partition_key.cmp(&b.partition_key));
        assert_eq!(stored, expected, "every entry exactly once");
        // 8 entries: 4 fail, then 2 of those, then 1: 7 resent over 4 calls.
        assert_eq!((stats.calls, stats.resent, stats.records), (4, 7, 8));
    }

    #[tokio::test(start_paused = true)]
    async fn put_batch_gives_up_with_a_clear_error() {
        let flaky = Flaky {
            failing_calls: usize::MAX,
            calls: Default::default(),
            stored: Default::default(),
        };
        let b = Backoff {
            max_retries: 3,
            ..Backoff::default()
        };
        let err = put_batch(
            &flaky,
            (0..4).map(|i| entry(i, 1)).collect(),
            &b,
            &mut PutStats::default(),
        )
        .await
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("still failed after 4 attempts")
                && msg.contains("ProvisionedThroughputExceededException"),
            "{msg}"
        );
    }
}
