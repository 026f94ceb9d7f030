//! Reading a stream whole: its shards parents first, each from its oldest retained record to its
//! tip, and the files records come from (plain or gzip, or standard input). What `tally record`,
//! `tally replay` and `tally verify` share.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use tally_core::ports::{PortResult, ReadBatch, ShardInfo, ShardReader, StartPosition, Stream};
use tally_core::retry::Backoff;

/// The shards in an order where each comes after every parent it lists (a parent the stream no
/// longer lists is no constraint).
pub fn parents_first(shards: Vec<ShardInfo>) -> Result<Vec<ShardInfo>> {
    let listed: std::collections::HashSet<String> =
        shards.iter().map(|s| s.shard_id.clone()).collect();
    let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(shards.len());
    let mut todo = shards;
    while !todo.is_empty() {
        let before = todo.len();
        let (ready, rest): (Vec<ShardInfo>, Vec<ShardInfo>) = todo.into_iter().partition(|s| {
            s.parents
                .iter()
                .all(|p| done.contains(p) || !listed.contains(p))
        });
        done.extend(ready.iter().map(|s| s.shard_id.clone()));
        out.extend(ready);
        todo = rest;
        if todo.len() == before {
            anyhow::bail!(
                "shard parents form a cycle: {:?}",
                todo.iter().map(|s| &s.shard_id).collect::<Vec<_>>()
            );
        }
    }
    Ok(out)
}

/// The reader's next batch, a passing refusal (throttled, an expired iterator the reader has
/// already replaced) retried as the workers' shard tasks retry it, up to the default backoff's
/// retries: what a one-shot read of the stream (`tally record`, `tally verify`) reads with.
pub async fn next_batch(reader: &mut dyn ShardReader, limit: usize) -> PortResult<ReadBatch> {
    let backoff = Backoff::default();
    let mut retry = tally_consumer::retry::Retry::bounded(&backoff, "GetRecords");
    loop {
        match reader.next_batch(limit).await {
            Ok(b) => return Ok(b),
            Err(e) => retry.pause(e).await?,
        }
    }
}

/// Reads `shard` from `from` to its tip, or a closed shard to its end, handing each batch to
/// `each`: how `tally record` and `tally verify` read a stream and the edges' change log. A
/// closed shard's empty read is not its end: DynamoDB Streams may answer one with records
/// further on.
pub async fn read_to_tip(
    stream: &dyn Stream,
    shard: &ShardInfo,
    from: StartPosition,
    limit: usize,
    mut each: impl FnMut(ReadBatch) -> Result<()>,
) -> Result<()> {
    let mut reader = stream.open(&shard.shard_id, from).await?;
    loop {
        let batch = next_batch(reader.as_mut(), limit).await?;
        let done = batch.shard_end || (!shard.closed && batch.is_caught_up());
        each(batch)?;
        if done {
            return Ok(());
        }
    }
}

/// Opens the input (`-`: standard input), decompressing gzip (by its magic bytes, whatever the
/// name).
pub fn open_input(path: &Path) -> Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?)
    };
    let mut r = BufReader::with_capacity(1 << 16, raw);
    let gz = r.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(r),
        ))
    } else {
        Box::new(r)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use tally_core::ports::{PutEntry, PutOutcome, StreamRecord};
    use tally_core::SeqNo;

    use super::*;

    /// A shard that answers two empty reads that do not say how far behind they are (as
    /// DynamoDB Streams may, with records further on), then a record, then its end.
    struct Sparse(Mutex<VecDeque<ReadBatch>>);

    impl Sparse {
        fn new() -> Sparse {
            let record = StreamRecord {
                seq: SeqNo::parse("7").unwrap(),
                arrival_ms: 0,
                partition_key: "p".into(),
                data: b"{}".to_vec(),
            };
            let reads = [
                ReadBatch::default(),
                ReadBatch::default(),
                ReadBatch {
                    records: vec![record],
                    ..ReadBatch::default()
                },
                ReadBatch {
                    shard_end: true,
                    ..ReadBatch::default()
                },
            ];
            Sparse(Mutex::new(reads.into()))
        }
    }

    #[async_trait::async_trait]
    impl Stream for Sparse {
        async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
            unreachable!()
        }
        async fn open(&self, _: &str, _: StartPosition) -> PortResult<Box<dyn ShardReader>> {
            let reads = std::mem::take(&mut *self.0.lock().unwrap());
            Ok(Box::new(Reads(reads)))
        }
        async fn put_records(&self, _: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
            unreachable!()
        }
    }

    struct Reads(VecDeque<ReadBatch>);

    #[async_trait::async_trait]
    impl ShardReader for Reads {
        async fn next_batch(&mut self, _: usize) -> PortResult<ReadBatch> {
            Ok(self.0.pop_front().expect("read past the shard's end"))
        }
    }

    async fn records_read(closed: bool) -> usize {
        let shard = ShardInfo {
            shard_id: "s".into(),
            parents: vec![],
            closed,
        };
        let mut n = 0;
        read_to_tip(
            &Sparse::new(),
            &shard,
            StartPosition::TrimHorizon,
            10,
            |b| {
                n += b.records.len();
                Ok(())
            },
        )
        .await
        .unwrap();
        n
    }

    #[tokio::test]
    async fn a_closed_shard_is_read_to_its_end_and_an_open_one_to_an_idle_read() {
        assert_eq!(records_read(true).await, 1, "past its empty reads");
        assert_eq!(records_read(false).await, 0, "an idle read is its tip");
    }
}
