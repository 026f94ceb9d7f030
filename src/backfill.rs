//! Backfilling a table (`tally backfill`): the items a table held before its changes streamed, put to the stream as
//! change records, so that the counter counts them with what the stream then delivers.
//!
//! Each item is put as an INSERT of its current state (a strongly consistent scan) at one time:
//! just before the scan began. Any change the stream delivers from the scan's start on is later,
//! so it wins over the item's backfilled state; a change before it is older than the state the
//! scan read, so the backfill's record wins. Either way each (post, user) ends at the table's
//! state, and a backfill run again puts the same items again at a later time (a no-op once
//! counted). What it needs: the table's changes reach the stream before the scan begins — else a
//! change between a page's read and the stream's start is in neither. It checks that with
//! `DescribeKinesisStreamingDestination`, and refuses when it is not so.

use std::sync::atomic::AtomicBool;

use anyhow::{bail, Result};
use tally_core::clock::now_ms;
use tally_core::input::{Decoded, Format, Precision};
use tally_core::ports::{PutEntry, Stream};
use tally_producer::change::change_record;
use tally_producer::keys::HotPosts;

use crate::backend::{aws_settings, SourceTable, Streaming};
use crate::settings::Settings;
use crate::signal::Interrupted;

/// Which table to backfill.
#[derive(Clone, Debug)]
pub struct BackfillConfig {
    /// The table whose items are put.
    pub table: String,
    /// Put them even when the endpoint cannot say whether the table's changes reach the stream
    /// (DynamoDB Local): the caller has made sure they do.
    pub assume_streaming: bool,
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

/// Puts `cfg.table`'s items to `stream` as change records, as the settings' `[input]` reads
/// them, at the `[producer]` rate; `pb` follows the records put. Stops between pages when
/// `stop` is raised ([`Interrupted`]: run it again to put them all).
pub async fn backfill(
    settings: &Settings,
    stream: &dyn Stream,
    cfg: &BackfillConfig,
    pb: &indicatif::ProgressBar,
    stop: &AtomicBool,
) -> Result<Backfilled> {
    let input = &settings.input;
    if input.format != Format::Dynamodb {
        bail!(
            "backfill puts a table's items as change records: set `input.format = \"dynamodb\"` \
             (and the item mapping, `input.*`) as the counter reads the stream"
        );
    }
    let table = SourceTable::new(&aws_settings(settings), &cfg.table).await?;
    match table.streams_to(&settings.stream).await? {
        Streaming::Active => {}
        Streaming::Unknown if cfg.assume_streaming => {}
        Streaming::Unknown => bail!(
            "the DynamoDB endpoint cannot say whether table {} streams to {} \
             (DescribeKinesisStreamingDestination is not implemented there): pass \
             --assume-streaming once its changes reach the stream",
            cfg.table,
            settings.stream
        ),
        Streaming::Not(what) => bail!(
            "table {}'s changes do not reach stream {} yet ({what}): enable its Kinesis \
             streaming destination first (Terraform: `source_table_name`) and wait for it to be \
             ACTIVE — a change made before would be in neither the scan nor the stream",
            cfg.table,
            settings.stream
        ),
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
        tally_producer::put::put_all(
            stream,
            &HotPosts::default(),
            entries.into_iter(),
            settings.producer.rate,
            &|n| pb.inc(n),
            stop,
        )
        .await?;
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            bail!(Interrupted(format!(
                "backfilled {} of table {}'s items; run it again to put them all",
                done.items, cfg.table
            )));
        }
    }
    Ok(done)
}
