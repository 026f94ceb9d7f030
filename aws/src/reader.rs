//! A reader on one shard of a stream read by shard iterators — Kinesis, and DynamoDB Streams for
//! the edges' change log: one machine over two SDKs. It keeps the next iterator and the last
//! record delivered, and reads once more at a new iterator where a read was refused: expired (a
//! new one right after the last delivered record: nothing skipped or repeated), or — a reader at
//! the shard's trim horizon with nothing delivered yet — refused as trimmed, which an iterator
//! taken while the shard was empty is, on DynamoDB Local, once records come (a new one at the
//! trim horizon is the oldest record there is: nothing can be skipped). Kinesis never answers
//! trimmed.

use async_trait::async_trait;
use tally_core::ports::StreamRecord;
use tally_core::ports::{PortError, PortResult, ReadBatch, ShardReader, StartPosition};
use tally_core::SeqNo;

/// What a stream's API does for a reader on one of its shards.
#[async_trait]
pub(crate) trait ShardIterators: Send + Sync + 'static {
    /// The most records one read may ask for.
    const MAX_RECORDS: usize;
    /// An iterator at `from`.
    async fn iterator(&self, from: &StartPosition) -> PortResult<String>;
    /// One read of at most `limit` records at `iterator`.
    async fn read(&self, iterator: &str, limit: i32) -> Result<Page, Refused>;
}

/// What one read answered.
pub(crate) struct Page {
    pub records: Vec<StreamRecord>,
    /// The next iterator; `None` at the shard's end.
    pub next: Option<String>,
    pub millis_behind_latest: Option<i64>,
    pub child_shards: Vec<String>,
}

/// Why a read failed: records trimmed before the iterator's position, or anything else.
pub(crate) enum Refused {
    Trimmed(PortError),
    Port(PortError),
}

impl From<Refused> for PortError {
    fn from(r: Refused) -> PortError {
        match r {
            Refused::Trimmed(e) | Refused::Port(e) => e,
        }
    }
}

/// A reader on one shard (see the module's doc).
pub(crate) struct IteratorReader<A> {
    api: A,
    /// Where the reader started, for a new iterator before anything was delivered.
    start: StartPosition,
    /// The next iterator; `None` after the shard's end.
    iterator: Option<String>,
    /// The last record delivered.
    last: Option<SeqNo>,
}

impl<A: ShardIterators> IteratorReader<A> {
    /// A reader at `start`, its first iterator taken.
    pub(crate) async fn open(api: A, start: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let mut r = IteratorReader {
            api,
            start,
            iterator: None,
            last: None,
        };
        r.iterator = Some(r.api.iterator(&r.place()).await?);
        Ok(Box::new(r))
    }

    /// Right after the last record delivered, else where the reader started.
    fn place(&self) -> StartPosition {
        match &self.last {
            Some(s) => StartPosition::AfterSequence(s.clone()),
            None => self.start.clone(),
        }
    }

    /// Reads at `iterator`, once more at a new iterator where the first was refused as the
    /// module's doc says.
    async fn read(&mut self, iterator: &str, limit: i32) -> PortResult<Page> {
        let fresh_start = self.last.is_none() && matches!(self.start, StartPosition::TrimHorizon);
        match self.api.read(iterator, limit).await {
            Ok(page) => Ok(page),
            Err(Refused::Port(PortError::IteratorExpired(_))) => self.again(limit).await,
            Err(Refused::Trimmed(_)) if fresh_start => self.again(limit).await,
            Err(refused) => Err(refused.into()),
        }
    }

    /// A read at a new iterator at the reader's place.
    async fn again(&mut self, limit: i32) -> PortResult<Page> {
        let it = self.api.iterator(&self.place()).await?;
        self.iterator = Some(it.clone());
        Ok(self.api.read(&it, limit).await?)
    }
}

#[async_trait]
impl<A: ShardIterators> ShardReader for IteratorReader<A> {
    async fn next_batch(&mut self, limit: usize) -> PortResult<ReadBatch> {
        let Some(iterator) = self.iterator.clone() else {
            return Ok(ReadBatch {
                shard_end: true,
                millis_behind_latest: Some(0),
                ..ReadBatch::default()
            });
        };
        let limit = limit.clamp(1, A::MAX_RECORDS) as i32;
        let page = self.read(&iterator, limit).await?;
        if let Some(last) = page.records.last() {
            self.last = Some(last.seq.clone());
        }
        self.iterator = page.next;
        Ok(ReadBatch {
            records: page.records,
            millis_behind_latest: page.millis_behind_latest,
            shard_end: self.iterator.is_none(),
            child_shards: page.child_shards,
            // Sequence numbers have holes: a trimmed record cannot be told from none.
            trimmed_through: None,
        })
    }
}
