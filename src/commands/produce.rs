//! `tally produce` and `tally replay`.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;
use tally_core::event::partition_key_of;
use tally_core::input::Format;
use tally_core::ports::{PutEntry, Stream};
use tally_core::retry::Backoff;
use tally_producer::change::{ChangeConfig, Changes};
use tally_producer::generate::{Generator, Kind, Truth};
use tally_producer::keys::HotPosts;
use tally_producer::put::{
    batches, put_all, put_batch, Pacer, PutStats, MAX_BATCH_BYTES, MAX_BATCH_RECORDS,
};

use crate::backend::Backend;
use crate::cli::{ProduceArgs, ReplayArgs};
use crate::output::{print_json, rfc3339};
use crate::progress;
use crate::reading::open_input;
use crate::recording::{self, Recorded};
use crate::settings::Settings;

/// Interrupted by SIGINT or SIGTERM: what was put is said, and the exit status is 130.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by a signal: {0}")]
pub struct Interrupted(pub String);

impl Interrupted {
    pub const EXIT: i32 = crate::signal::EXIT;
}

/// The hot posts the settings name.
pub fn hot_posts(settings: &Settings) -> HotPosts {
    HotPosts::new(
        settings.producer.hot_posts.iter().cloned(),
        settings.producer.hot_post_keys,
    )
}

/// Generates and puts synthetic events; returns the truth.
pub async fn produce(
    settings: &Settings,
    backend: &Backend,
    events: u64,
    quiet: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(Truth, PutStats)> {
    let mut gen = Generator::new(settings.gen_config(events));
    // The bar follows the events (retries and malformed records come on top).
    let pb = progress::start(Some(events), "events", quiet);
    let put = Put {
        backend,
        settings,
        hot: hot_posts(settings),
        pb: &pb,
        stop,
    };
    let (stats, changed) = match settings.input.format {
        Format::Events => (put.generated(gen.by_ref()).await, None),
        Format::Dynamodb => {
            let mut changes = Changes::new(
                gen.by_ref(),
                ChangeConfig {
                    input: settings.input.clone(),
                    late_ratio: settings.producer.duplicate_ratio,
                    other_ratio: OTHER_ITEMS_RATIO,
                    seed: settings.producer.seed,
                },
            );
            let stats = put.generated(changes.by_ref()).await;
            (stats, Some(changes.stats().clone()))
        }
    };
    progress::finish(&pb);
    // Interrupted between batches, everything generated was put: the truth covers it.
    let mut truth = gen.truth();
    if let Some(c) = changed {
        // The records put are the table's: its copies and malformed records.
        truth.duplicates = c.duplicates;
        truth.malformed = c.malformed;
    }
    Ok((truth, stats?))
}

/// Where generated records go.
struct Put<'a> {
    backend: &'a Backend,
    settings: &'a Settings,
    hot: HotPosts,
    pb: &'a indicatif::ProgressBar,
    stop: &'a std::sync::atomic::AtomicBool,
}

impl Put<'_> {
    /// Puts the records, the bar following the events.
    async fn generated(&self, records: impl Iterator<Item = (Kind, PutEntry)>) -> Result<PutStats> {
        let events_only = |(kind, e): (Kind, PutEntry)| {
            if kind == Kind::Event {
                self.pb.inc(1);
            }
            e
        };
        put_all(
            self.backend.stream.as_ref(),
            &self.hot,
            records.map(events_only),
            self.settings.producer.rate,
            &|_| {},
            self.stop,
        )
        .await
        .map_err(Into::into)
    }
}

/// A change stream's share of actions followed by a change to another item of the post (its
/// metadata, a comment): records the counter skips.
const OTHER_ITEMS_RATIO: f64 = 0.05;

pub async fn run_produce(settings: &Settings, backend: &Backend, args: &ProduceArgs) -> Result<()> {
    let stop = crate::signal::stop_flag();
    let (truth, stats) = produce(settings, backend, args.events, args.json, &stop).await?;
    let interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(path) = &args.truth {
        let counts: std::collections::BTreeMap<&String, &i64> = truth.counts.iter().collect();
        let body = json!({"events": truth.events, "duplicates": truth.duplicates, "malformed": truth.malformed, "total": truth.total(), "counts": counts});
        std::fs::write(path, serde_json::to_vec_pretty(&body)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
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
    if interrupted {
        return Err(Interrupted(format!(
            "put {} records of {} events asked{}",
            stats.records,
            args.events,
            if args.truth.is_some() {
                "; the truth file covers them"
            } else {
                ""
            }
        ))
        .into());
    }
    Ok(())
}

/// A UTF-8 byte-order mark, as many exporters write at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The lines of a replay input as records: one per non-blank line (a leading byte-order mark
/// and a trailing `\r` removed), keyed by its `post_id` when it has one. Blank lines are
/// counted, not put; a read error ends the lines and is kept for [`ReplayLines::finish`].
pub struct ReplayLines {
    reader: Box<dyn BufRead>,
    line_no: u64,
    pub blank: u64,
    error: Option<anyhow::Error>,
}

impl ReplayLines {
    fn from_reader(reader: Box<dyn BufRead>) -> ReplayLines {
        ReplayLines {
            reader,
            line_no: 0,
            blank: 0,
            error: None,
        }
    }

    /// The read error that ended the lines early, if any.
    pub fn finish(self) -> Result<u64> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.blank),
        }
    }
}

impl Iterator for ReplayLines {
    type Item = PutEntry;

    fn next(&mut self) -> Option<PutEntry> {
        loop {
            let mut l = Vec::new();
            match self.reader.read_until(b'\n', &mut l) {
                Ok(0) => return None,
                Err(e) => {
                    self.error = Some(anyhow::anyhow!("reading line {}: {e}", self.line_no + 1));
                    return None;
                }
                Ok(_) => {}
            }
            self.line_no += 1;
            if l.last() == Some(&b'\n') {
                l.pop();
            }
            if l.last() == Some(&b'\r') {
                l.pop();
            }
            if self.line_no == 1 && l.starts_with(BOM) {
                l.drain(..BOM.len());
            }
            if l.iter().all(u8::is_ascii_whitespace) {
                self.blank += 1;
                continue;
            }
            let key = partition_key_of(&l).unwrap_or_else(|| format!("line-{}", self.line_no));
            return Some(PutEntry {
                partition_key: key,
                data: l,
            });
        }
    }
}

/// That `tally replay` can read `file` (`-`: standard input): a missing file or a directory is an
/// error naming the path and what was expected, before any store is opened.
pub fn check_replay_file(file: &Path) -> Result<()> {
    if file == Path::new("-") {
        return Ok(());
    }
    match std::fs::metadata(file) {
        Ok(m) if m.is_dir() => anyhow::bail!(
            "{} is a directory: expected an NDJSON file (.gz too), or - for standard input",
            file.display()
        ),
        Ok(_) => Ok(()),
        Err(e) => anyhow::bail!(
            "cannot read {}: {e} (expected an NDJSON file, .gz too, or - for standard input)",
            file.display()
        ),
    }
}

/// What `tally replay` reads: plain NDJSON (each line one record's data, keyed by its post), or a
/// recording (each record with the key and arrival time it had).
enum ReplayInput {
    Plain(ReplayLines),
    Recording(RecordedLines),
}

impl ReplayInput {
    fn open(path: &Path) -> Result<ReplayInput> {
        Ok(match recording::Reader::open(open_input(path)?)? {
            Ok(r) => ReplayInput::Recording(RecordedLines {
                reader: r,
                error: None,
            }),
            Err(input) => ReplayInput::Plain(ReplayLines::from_reader(input)),
        })
    }

    /// How many records it puts; reads it all, so that a file that cannot be read (a truncated
    /// .gz, a recording's broken line) fails before anything is put.
    fn count(self) -> Result<u64> {
        match self {
            ReplayInput::Plain(mut l) => {
                let n = l.by_ref().count() as u64;
                l.finish()?;
                Ok(n)
            }
            ReplayInput::Recording(mut r) => {
                let n = r.by_ref().count() as u64;
                r.finish()?;
                Ok(n)
            }
        }
    }
}

/// A recording's records as they are put: each with its recorded key.
struct RecordedLines {
    reader: recording::Reader,
    error: Option<anyhow::Error>,
}

impl RecordedLines {
    fn finish(self) -> Result<()> {
        self.error.map_or(Ok(()), Err)
    }
}

impl Iterator for RecordedLines {
    type Item = Recorded;

    fn next(&mut self) -> Option<Recorded> {
        match self.reader.next_record() {
            Ok(r) => r,
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

fn put_entry(r: Recorded) -> PutEntry {
    PutEntry {
        partition_key: r.partition_key,
        data: r.data,
    }
}

/// A recording's records in the order they arrived: shard by shard as recorded, merged by
/// arrival time, each shard's own order kept (so each key's order is kept too: a key is in one
/// shard at a time, and a child's records come after its parent's).
pub fn in_arrival_order(records: impl Iterator<Item = Recorded>) -> Vec<Recorded> {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap, VecDeque};
    let mut shards: Vec<VecDeque<Recorded>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for r in records {
        let i = *index.entry(r.shard_id.clone()).or_insert_with(|| {
            shards.push(VecDeque::new());
            shards.len() - 1
        });
        shards[i].push_back(r);
    }
    let total = shards.iter().map(VecDeque::len).sum();
    let mut heads: BinaryHeap<Reverse<(i64, usize)>> = shards
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some(Reverse((s.front()?.arrival_ms, i))))
        .collect();
    let mut out = Vec::with_capacity(total);
    while let Some(Reverse((_, i))) = heads.pop() {
        if let Some(r) = shards[i].pop_front() {
            out.push(r);
        }
        if let Some(next) = shards[i].front() {
            heads.push(Reverse((next.arrival_ms, i)));
        }
    }
    out
}

/// Puts records with their recorded gaps divided by `speed`, in batches of what is due, at most
/// `rate` records/s, until `stop` is raised; the bar's message is the recorded time reached.
async fn put_paced(
    stream: &dyn Stream,
    records: Vec<Recorded>,
    speed: f64,
    rate: f64,
    pb: &indicatif::ProgressBar,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<PutStats> {
    let mut stats = PutStats::default();
    let mut pacer = Pacer::new((rate > 0.0).then_some(rate));
    let backoff = Backoff::default();
    let Some(t0) = records.first().map(|r| r.arrival_ms) else {
        return Ok(stats);
    };
    let w0 = tokio::time::Instant::now();
    let due = |arrival_ms: i64| {
        w0 + Duration::from_secs_f64((arrival_ms - t0).max(0) as f64 / 1_000.0 / speed)
    };
    let mut records = records.into_iter().peekable();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(next) = records.peek() else { break };
        tokio::time::sleep_until(due(next.arrival_ms)).await;
        // Everything due by now, in batches of at most 500 records and 5 MiB.
        let now = tokio::time::Instant::now();
        let mut reached = t0;
        let due_now: Vec<PutEntry> =
            std::iter::from_fn(|| records.next_if(|r| due(r.arrival_ms) <= now))
                .map(|r| {
                    reached = r.arrival_ms;
                    put_entry(r)
                })
                .collect();
        for batch in batches(due_now, MAX_BATCH_RECORDS, MAX_BATCH_BYTES) {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let n = batch.len() as u64;
            pacer.wait(n).await;
            put_batch(stream, batch, &backoff, &mut stats).await?;
            pb.inc(n);
        }
        pb.set_message(format!("recorded time {}", rfc3339(reached)));
    }
    Ok(stats)
}

pub async fn run_replay(settings: &Settings, backend: &Backend, args: &ReplayArgs) -> Result<()> {
    // A file is read once first: for the progress bar's length, and so that a file that cannot
    // be read fails before anything is put. Standard input is read once.
    let len = if args.file == Path::new("-") {
        None
    } else {
        Some(ReplayInput::open(&args.file)?.count()?)
    };
    let speed = args.speed.unwrap_or(f64::INFINITY);
    let input = ReplayInput::open(&args.file)?;
    let pb = progress::start(len, "records", args.json);
    let stop = crate::signal::stop_flag();
    let stream = backend.stream.as_ref();
    let rate = settings.producer.rate;
    let (stats, blank) = match input {
        ReplayInput::Plain(mut lines) => {
            if speed.is_finite() {
                progress::finish(&pb);
                anyhow::bail!(
                    "--speed needs a recording (tally record writes one): a plain NDJSON file has no arrival times; --rate paces it"
                );
            }
            let stats = put_all(
                stream,
                &hot_posts(settings),
                lines.by_ref(),
                rate,
                &|n| pb.inc(n),
                &stop,
            )
            .await;
            progress::finish(&pb);
            let stats = stats?;
            (stats, lines.finish()?)
        }
        ReplayInput::Recording(mut recs) => {
            // Keys as recorded: the hot-post spreading was done when they were first put.
            let keep_keys = HotPosts::new(std::iter::empty(), 1);
            let stats = if speed.is_finite() {
                let ordered = in_arrival_order(recs.by_ref());
                recs.finish()?;
                put_paced(stream, ordered, speed, rate, &pb, &stop).await
            } else {
                let r = put_all(
                    stream,
                    &keep_keys,
                    recs.by_ref().map(put_entry),
                    rate,
                    &|n| pb.inc(n),
                    &stop,
                )
                .await
                .map_err(anyhow::Error::from);
                recs.finish()?;
                r
            };
            progress::finish(&pb);
            (stats?, 0)
        }
    };
    let name = if args.file == Path::new("-") {
        "standard input".to_owned()
    } else {
        args.file.display().to_string()
    };
    if args.json {
        print_json(
            &json!({"records": stats.records, "blank_lines": blank, "put_calls": stats.calls, "resent": stats.resent}),
        );
    } else {
        println!(
            "replayed {} records from {name} in {} calls{}",
            stats.records,
            stats.calls,
            if blank > 0 {
                format!(" ({blank} blank lines skipped)")
            } else {
                String::new()
            }
        );
    }
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Interrupted(format!(
            "put the first {} records of {name}; replaying the rest would put them again",
            stats.records
        ))
        .into());
    }
    Ok(())
}
