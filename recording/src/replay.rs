//! Replaying a file into a stream: plain NDJSON (each line one record, keyed by its post) or a
//! recording (`tally record`: each record with the key and arrival time it had, put again at its
//! recorded pace if asked). What `tally replay` runs.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use tally_core::event::partition_key_of;
use tally_core::ports::{PutEntry, Stream};
use tally_core::progress::Progress;
use tally_producer::keys::HotPosts;
use tally_producer::put::{put_all, put_as_they_come, put_at_pace, PutStats, MAX_BATCH_RECORDS};

use crate::reading::open_input;
use crate::{self as recording, Recorded};

/// What to replay and how.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// The file (`-`: standard input; `.gz` read as gzip).
    pub file: PathBuf,
    /// A recording at its recorded pace, sped up this many times (`None`: as fast as it goes).
    pub speed: Option<f64>,
    /// Records per second at most (0: as fast as the stream takes them).
    pub rate: f64,
    /// Plain NDJSON: the hot posts' keys fanned out (a recording keeps its recorded keys).
    pub hot: HotPosts,
}

/// What a replay put.
#[derive(Clone, Debug, Default)]
pub struct Replayed {
    /// Records, calls and resends.
    pub stats: PutStats,
    /// Blank lines skipped.
    pub blank: u64,
}

impl ReplayConfig {
    /// The file's name as a person reads it.
    pub fn source(&self) -> String {
        if self.file == Path::new("-") {
            "standard input".to_owned()
        } else {
            self.file.display().to_string()
        }
    }

    /// How many records the file holds (`None` for standard input, read once): read through,
    /// so that a file that cannot be read (a truncated .gz, a recording's broken line) fails
    /// before anything is put.
    pub fn records(&self) -> Result<Option<u64>> {
        if self.file == Path::new("-") {
            return Ok(None);
        }
        check_replay_file(&self.file)?;
        ReplayInput::open(&self.file)?.count().map(Some)
    }
}

/// Replays `cfg.file` into `stream` until done or `stop` is raised (between batches);
/// `pb` follows the records put.
pub async fn replay(
    stream: &dyn Stream,
    cfg: &ReplayConfig,
    pb: &dyn Progress,
    stop: &AtomicBool,
) -> Result<Replayed> {
    check_replay_file(&cfg.file)?;
    let speed = cfg.speed.unwrap_or(f64::INFINITY);
    if cfg.file == Path::new("-") && speed.is_infinite() {
        return replay_as_it_comes(stream, cfg, pb, stop).await;
    }
    match ReplayInput::open(&cfg.file)? {
        ReplayInput::Plain(mut lines) => {
            if speed.is_finite() {
                anyhow::bail!(
                    "--speed needs a recording (tally record writes one): a plain NDJSON file has no arrival times; --rate paces it"
                );
            }
            let stats = put_all(
                stream,
                &cfg.hot,
                lines.by_ref(),
                cfg.rate,
                &|n| pb.inc(n),
                stop,
            )
            .await?;
            let blank = lines.finish()?;
            Ok(Replayed { stats, blank })
        }
        ReplayInput::Recording(mut recs) => {
            let stats = if speed.is_finite() {
                let ordered: Vec<(i64, PutEntry)> = in_arrival_order(recs.by_ref())
                    .into_iter()
                    .map(|r| (r.arrival_ms, put_entry(r)))
                    .collect();
                recs.finish()?;
                let on_put = |n, reached| {
                    pb.inc(n);
                    pb.at(&format!("recorded time {}", recording::rfc3339(reached)));
                };
                put_at_pace(stream, ordered, speed, cfg.rate, &on_put, stop).await?
            } else {
                // Keys as recorded: the hot-post spreading was done when they were first put.
                let keep_keys = HotPosts::new(std::iter::empty(), 1);
                let r = put_all(
                    stream,
                    &keep_keys,
                    recs.by_ref().map(put_entry),
                    cfg.rate,
                    &|n| pb.inc(n),
                    stop,
                )
                .await;
                recs.finish()?;
                r?
            };
            Ok(Replayed { stats, blank: 0 })
        }
    }
}

/// Standard input put as it comes: each line (or a recording's record) as soon as it is read,
/// so that a producer writing to a pipe has each record counted while the pipe stays open. The
/// lines are read on a thread of their own (a read blocks until a line comes).
async fn replay_as_it_comes(
    stream: &dyn Stream,
    cfg: &ReplayConfig,
    pb: &dyn Progress,
    stop: &AtomicBool,
) -> Result<Replayed> {
    let (tx, rx) = tokio::sync::mpsc::channel::<PutEntry>(2 * MAX_BATCH_RECORDS);
    let (path, hot) = (cfg.file.clone(), cfg.hot.clone());
    let reader = tokio::task::spawn_blocking(move || -> Result<u64> {
        match ReplayInput::open(&path)? {
            ReplayInput::Plain(mut lines) => {
                for e in lines.by_ref() {
                    if tx.blocking_send(hot.rekey(e)).is_err() {
                        break;
                    }
                }
                lines.finish()
            }
            // Keys as recorded.
            ReplayInput::Recording(mut recs) => {
                for r in recs.by_ref() {
                    if tx.blocking_send(put_entry(r)).is_err() {
                        break;
                    }
                }
                recs.finish().map(|()| 0)
            }
        }
    });
    let keep_keys = HotPosts::new(std::iter::empty(), 1);
    let stats = put_as_they_come(stream, &keep_keys, rx, cfg.rate, &|n| pb.inc(n), stop).await?;
    // Stopped by a signal (or failed, above), the reader may wait on a line that never comes:
    // it is left to end with the process.
    let blank = if stop.load(std::sync::atomic::Ordering::Relaxed) {
        0
    } else {
        reader.await??
    };
    Ok(Replayed { stats, blank })
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
