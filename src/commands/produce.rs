//! `tally produce` and `tally replay`.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::json;
use tally_core::event::partition_key_of;
use tally_core::ports::{PutEntry, Stream};
use tally_core::retry::Backoff;
use tally_producer::generate::{Generator, Truth};
use tally_producer::keys::HotPosts;
use tally_producer::put::{
    batches, put_batch, Pacer, PutStats, MAX_BATCH_BYTES, MAX_BATCH_RECORDS,
};

use super::{gen_config, print_json, progress};
use crate::backend::Backend;
use crate::cli::{ProduceArgs, ReplayArgs};
use crate::settings::Settings;

/// Puts everything `records` yields, in PutRecords batches, at `rate` records/s.
pub async fn put_all(
    stream: &dyn Stream,
    hot: &HotPosts,
    records: impl Iterator<Item = PutEntry>,
    rate: f64,
    quiet: bool,
    len: Option<u64>,
) -> Result<PutStats> {
    let pb = progress(len, quiet);
    let mut stats = PutStats::default();
    let mut pacer = Pacer::new((rate > 0.0).then_some(rate));
    let backoff = Backoff::default();
    let mut buf: Vec<PutEntry> = Vec::with_capacity(MAX_BATCH_RECORDS);
    let mut records = records.map(|e| hot.rekey(e)).peekable();
    while records.peek().is_some() {
        buf.extend(records.by_ref().take(MAX_BATCH_RECORDS));
        for batch in batches(std::mem::take(&mut buf), MAX_BATCH_RECORDS, MAX_BATCH_BYTES) {
            let n = batch.len() as u64;
            pacer.wait(n).await;
            put_batch(stream, batch, &backoff, &mut stats).await?;
            pb.inc(n);
        }
    }
    pb.finish_and_clear();
    Ok(stats)
}

/// The hot posts the settings name.
pub fn hot_posts(s: &Settings) -> HotPosts {
    HotPosts::new(
        s.producer.hot_posts.iter().cloned(),
        s.producer.hot_post_keys,
    )
}

/// Generates and puts synthetic events; returns the truth.
pub async fn produce(
    s: &Settings,
    backend: &Backend,
    events: u64,
    quiet: bool,
) -> Result<(Truth, PutStats)> {
    let mut gen = Generator::new(gen_config(s, events));
    let stats = put_all(
        backend.stream.as_ref(),
        &hot_posts(s),
        gen.by_ref().map(|(_, e)| e),
        s.producer.rate,
        quiet,
        None,
    )
    .await?;
    Ok((gen.truth(), stats))
}

pub async fn run_produce(s: &Settings, backend: &Backend, a: &ProduceArgs) -> Result<()> {
    let (truth, stats) = produce(s, backend, a.events, a.json).await?;
    if let Some(path) = &a.truth {
        let counts: std::collections::BTreeMap<&String, &i64> = truth.counts.iter().collect();
        let body = json!({"events": truth.events, "duplicates": truth.duplicates, "malformed": truth.malformed, "total": truth.total(), "counts": counts});
        std::fs::write(path, serde_json::to_vec_pretty(&body)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        print_json(
            &json!({"records": stats.records, "events": truth.events, "duplicates": truth.duplicates, "malformed": truth.malformed, "expected_total": truth.total(), "put_calls": stats.calls, "resent": stats.resent}),
        );
    } else {
        println!(
            "put {} records ({} events, {} duplicates, {} malformed) in {} calls; expected total {}",
            stats.records,
            truth.events,
            truth.duplicates,
            truth.malformed,
            stats.calls,
            truth.total()
        );
    }
    Ok(())
}

/// Opens a file, decompressing gzip (by magic bytes, whatever the name).
fn open_maybe_gz(path: &Path) -> Result<Box<dyn BufRead>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    let f = std::fs::File::open(path)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(
            f,
        ))))
    } else {
        Ok(Box::new(BufReader::new(f)))
    }
}

/// One record per non-empty line, keyed by its `post_id` when it has one.
pub fn replay_entries(path: &Path) -> Result<impl Iterator<Item = Result<PutEntry>>> {
    let reader = open_maybe_gz(path)?;
    let mut line_no = 0u64;
    Ok(reader.split(b'\n').filter_map(move |line| {
        line_no += 1;
        match line {
            Err(e) => Some(Err(anyhow::anyhow!("reading line {line_no}: {e}"))),
            Ok(mut l) => {
                if l.last() == Some(&b'\r') {
                    l.pop();
                }
                if l.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                let key = partition_key_of(&l).unwrap_or_else(|| format!("line-{line_no}"));
                Some(Ok(PutEntry {
                    partition_key: key,
                    data: l,
                }))
            }
        }
    }))
}

pub async fn run_replay(s: &Settings, backend: &Backend, a: &ReplayArgs) -> Result<()> {
    // Count lines first for the progress bar and to surface read errors before any put.
    let entries: Vec<PutEntry> = replay_entries(&a.file)?.collect::<Result<_>>()?;
    let n = entries.len() as u64;
    let stats = put_all(
        backend.stream.as_ref(),
        &hot_posts(s),
        entries.into_iter(),
        s.producer.rate,
        a.json,
        Some(n),
    )
    .await?;
    if a.json {
        print_json(
            &json!({"records": stats.records, "put_calls": stats.calls, "resent": stats.resent}),
        );
    } else {
        println!(
            "replayed {} records from {} in {} calls",
            stats.records,
            a.file.display(),
            stats.calls
        );
    }
    Ok(())
}
