//! Backfilling a table: the items a table held before its changes streamed, put to the stream as
//! change records, so that the counter counts them with what the stream then delivers.
//!
//! Each item is put as an INSERT of its current state (a strongly consistent scan) at one time:
//! just before the scan began. Any change the stream delivers from the scan's start on is later,
//! so it wins over the item's backfilled state; a change before it is older than the state the
//! scan read, so the backfill's record wins. Either way each (post, user) ends at the table's
//! state, and a backfill run again puts the same items again at a later time (a no-op once
//! counted). What it needs: the table's changes reach the stream before the scan begins — else a
//! change between a page's read and the stream's start is in neither. It checks that
//! ([`SourceTable::streams_to`]), and refuses when it is not so.

use std::sync::atomic::{AtomicBool, Ordering};

use tally_core::clock::now_ms;
use tally_core::input::{Decoded, Format, InputConfig, Precision};
use tally_core::ports::{PortError, PutEntry, SourceTable, Stream, Streaming};
use tally_core::progress::Progress;

use crate::change::change_record;
use crate::keys::HotPosts;
use crate::ProducerError;

/// What a backfill reads and how it puts.
#[derive(Clone, Debug)]
pub struct BackfillConfig {
    /// The table's name, for the messages and the event ids.
    pub table: String,
    /// The stream's name, whose destination the table must have.
    pub stream: String,
    /// Put them even when the endpoint cannot say whether the table's changes reach the stream
    /// (DynamoDB Local): the caller has made sure they do.
    pub assume_streaming: bool,
    /// How the counter reads the stream (`[input]`): the items are put as it reads them.
    pub input: InputConfig,
    /// Records a second at most (`producer.rate`; 0: as fast as the stream takes them).
    pub rate: f64,
}

impl BackfillConfig {
    /// Refuses what no table could make right: a counter that does not read change records.
    pub fn check(&self) -> Result<(), BackfillError> {
        match self.input.format {
            Format::Dynamodb => Ok(()),
            Format::Events => Err(BackfillError::NotChangeRecords),
        }
    }
}

/// What a backfill put.
#[derive(Clone, Debug, Default)]
pub struct Backfilled {
    /// Items read.
    pub items: u64,
    /// Like items put.
    pub likes: u64,
    /// Items that are not likes, not put.
    pub skipped: u64,
    /// Like items that do not fit the mapping, put for the counter to dead-letter.
    pub unfit: u64,
    /// The time every item was put at: just before the scan began (ms).
    pub as_of_ms: i64,
}

/// Why a backfill did not put every item.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// The counter does not read change records.
    #[error(
        "backfill puts a table's items as change records: set `input.format = \"dynamodb\"` \
         (and the item mapping, `input.*`) as the counter reads the stream"
    )]
    NotChangeRecords,
    /// The endpoint cannot say whether the table streams to the stream.
    #[error(
        "the DynamoDB endpoint cannot say whether table {table} streams to {stream} \
         (DescribeKinesisStreamingDestination is not implemented there): once its changes \
         reach the stream, assume so (`tally backfill --assume-streaming`)"
    )]
    StreamingUnknown {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
    },
    /// The table's changes do not reach the stream.
    #[error(
        "table {table}'s changes do not reach stream {stream} yet ({what}): enable its Kinesis \
         streaming destination first (Terraform: `source_table_name`) and wait for it to be \
         ACTIVE — a change made before would be in neither the scan nor the stream"
    )]
    NotStreaming {
        /// The table.
        table: String,
        /// The stream.
        stream: String,
        /// What the table has instead.
        what: String,
    },
    /// Stopped between pages (`stop` was raised): run it again to put them all.
    #[error("backfilled {items} of table {table}'s items; run it again to put them all")]
    Stopped {
        /// The table.
        table: String,
        /// Items read by then.
        items: u64,
    },
    /// Reading the table failed.
    #[error(transparent)]
    Table(#[from] PortError),
    /// Putting failed.
    #[error(transparent)]
    Put(#[from] ProducerError),
}

/// Puts `table`'s items to `stream` as change records, as `cfg.input` reads them, at `cfg.rate`;
/// `progress` is told of the records put. Stops between pages when `stop` is raised.
pub async fn backfill(
    table: &dyn SourceTable,
    stream: &dyn Stream,
    cfg: &BackfillConfig,
    progress: &dyn Progress,
    stop: &AtomicBool,
) -> Result<Backfilled, BackfillError> {
    cfg.check()?;
    let input = &cfg.input;
    let (name, stream_name) = (cfg.table.clone(), cfg.stream.clone());
    match table.streams_to(&cfg.stream).await? {
        Streaming::Active => {}
        Streaming::Unknown if cfg.assume_streaming => {}
        Streaming::Unknown => {
            return Err(BackfillError::StreamingUnknown {
                table: name,
                stream: stream_name,
            })
        }
        Streaming::Not(what) => {
            return Err(BackfillError::NotStreaming {
                table: name,
                stream: stream_name,
                what,
            })
        }
    }
    let keys = table.key_attributes().await?;
    let started = now_ms();
    let at_ms = started - 1;
    let time = match input.time_precision {
        Precision::Millisecond => at_ms,
        Precision::Microsecond => at_ms * 1_000,
    };
    let mut done = Backfilled {
        as_of_ms: at_ms,
        ..Backfilled::default()
    };
    let mut scan = table.scan();
    while let Some(items) = scan.next().await? {
        let mut entries = Vec::with_capacity(items.len());
        for item in items {
            done.items += 1;
            let key: serde_json::Map<_, _> = item
                .iter()
                .filter(|(k, _)| keys.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let event_id = format!("backfill-{started}-{}", done.items);
            // Keyed by the item, as DynamoDB keys the stream's own records of it.
            let partition_key = tally_core::event::change_key(&key);
            let data = change_record("INSERT", key, item, time, &event_id);
            let partition_key = match input.decode(&data) {
                Ok(Decoded::Event(_)) => {
                    done.likes += 1;
                    partition_key.unwrap_or_else(|| cfg.table.clone())
                }
                // Not a like: nothing to put.
                Ok(Decoded::Skipped) => {
                    done.skipped += 1;
                    continue;
                }
                // Put all the same: the counter dead-letters it with the reason, as the stream's
                // own record of the item would be.
                Err(_) => {
                    done.unfit += 1;
                    partition_key.unwrap_or_else(|| cfg.table.clone())
                }
            };
            entries.push(PutEntry {
                partition_key,
                data,
            });
        }
        let hot = HotPosts::default();
        let on_put = |n| progress.inc(n);
        crate::put::put_all(stream, &hot, entries.into_iter(), cfg.rate, &on_put, stop).await?;
        if stop.load(Ordering::Relaxed) {
            return Err(BackfillError::Stopped {
                table: cfg.table.clone(),
                items: done.items,
            });
        }
    }
    Ok(done)
}
