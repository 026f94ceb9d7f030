//! Where `tally verify` reads the records it recounts: the stream itself, or a recording of it
//! (`--from`), which must be of the stream the counter read: a replay gives records new sequence
//! numbers, so the counter's checkpoints on a stack a recording was replayed into name other
//! records than the recording's. Either is read once per pass ([`super::partition`]); a
//! recording on standard input is first copied to a temporary file, so it can be read again.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tally_core::input::{Decoded, Input};
use tally_core::kpl::user_records;
use tally_core::ports::{ShardInfo, StartPosition, Stream};
use tally_core::progress::Progress;
use tally_core::seq::{Position, SeqNo};

use super::recount::{Recount, Row};
use super::{Pass, Rule};

/// A recording `tally verify --from` reads, as often as it has passes.
pub struct Recording {
    /// The name it was given.
    pub name: PathBuf,
    path: PathBuf,
    /// Standard input's copy, deleted when done.
    _spool: Option<tempfile::TempPath>,
}

impl Recording {
    pub fn open(name: &Path) -> Result<Recording> {
        if name != Path::new("-") {
            return Ok(Recording {
                name: name.to_owned(),
                path: name.to_owned(),
                _spool: None,
            });
        }
        let mut spool = tempfile::Builder::new()
            .prefix("tally-verify-")
            .tempfile()
            .context("creating a temporary file for the recording on standard input")?;
        std::io::copy(&mut std::io::stdin().lock(), spool.as_file_mut())
            .context("copying the recording on standard input to a temporary file")?;
        let spool = spool.into_temp_path();
        Ok(Recording {
            name: name.to_owned(),
            path: spool.to_path_buf(),
            _spool: Some(spool),
        })
    }
}

/// Reads every shard from its oldest retained record to its tip, parents first.
pub async fn read_stream(
    stream: &dyn Stream,
    rule: &Rule,
    pass: Pass,
    rows: &HashMap<String, Row>,
    pb: &dyn Progress,
) -> Result<(Recount, Vec<String>)> {
    let shards = tally_recording::reading::parents_first(stream.list_shards().await?)?;
    let mut r = rule.recount(&shards, rows, pass);
    let mut notes = Vec::new();
    for s in &shards {
        let from = StartPosition::TrimHorizon;
        tally_recording::reading::read_to_tip(stream, s, from, 10_000, |batch| {
            if let Some(t) = &batch.trimmed_through {
                notes.push(format!(
                    "{}: records through {t} are past the stream's retention; counts that include them cannot be recounted (a post the store holds more of is expected)",
                    s.shard_id
                ));
            }
            for rec in &batch.records {
                r.record(&s.shard_id, &rec.seq, rec.arrival_ms, &rec.data);
            }
            pb.inc(batch.records.len() as u64);
            Ok(())
        })
        .await?;
    }
    Ok((r, notes))
}

/// The first and last position read per shard.
pub type ReadRange = HashMap<String, (Position, Position)>;

/// How many records of each of `posts` lie after each shard's last record read (`read`; a shard
/// not read, from its oldest record) through `bounds` (per shard, the furthest the counter can
/// have applied): counting likers, each may have moved its post's count by one. Only the shards
/// the stream lists are read (a finished shard's row may outlive the shard).
pub async fn records_read_after(
    stream: &dyn Stream,
    input: &Input,
    (read, bounds): (&ReadRange, &HashMap<String, SeqNo>),
    posts: &HashSet<&str>,
) -> Result<HashMap<String, i64>> {
    let mut found = HashMap::new();
    for s in stream.list_shards().await? {
        let Some(bound) = bounds.get(&s.shard_id) else {
            continue;
        };
        let from = match read.get(&s.shard_id) {
            Some((_, last)) if last.seq >= *bound => continue,
            Some((_, last)) => StartPosition::AfterSequence(last.seq.clone()),
            None => StartPosition::TrimHorizon,
        };
        let mut reader = stream.open(&s.shard_id, from).await?;
        'shard: loop {
            let batch = tally_recording::reading::next_batch(reader.as_mut(), 10_000).await?;
            for rec in &batch.records {
                if rec.seq > *bound {
                    break 'shard;
                }
                let Ok(users) = user_records(&rec.data) else {
                    continue;
                };
                for d in users.iter() {
                    match input.decode(d) {
                        Ok(Decoded::Event(ev)) if posts.contains(ev.post_id.as_ref()) => {
                            *found.entry(ev.post_id.into_owned()).or_insert(0) += 1;
                        }
                        _ => {}
                    }
                }
            }
            if batch.shard_end || batch.is_caught_up() {
                break;
            }
        }
    }
    Ok(found)
}

/// Reads a recording (`tally record`), as written.
pub fn read_recording(
    recording: &Recording,
    rule: &Rule,
    pass: Pass,
    rows: &HashMap<String, Row>,
    pb: &dyn Progress,
) -> Result<(Recount, Anchors)> {
    let file = recording.name.as_path();
    let input = tally_recording::reading::open_input(&recording.path)?;
    let mut reader = match tally_recording::Reader::open(input)? {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "{} is not a recording (its first line is not the header `tally record` writes): plain NDJSON has no shards or sequence numbers to compare checkpoints with",
            file.display()
        ),
    };
    let shards: Vec<ShardInfo> = reader.header.shard_infos();
    let mut r = rule.recount(&shards, rows, pass);
    let mut anchors = Anchors::default();
    while let Some(rec) = reader.next_record()? {
        let seq = SeqNo::parse(&rec.seq)
            .with_context(|| format!("{}: sequence number {:?}", file.display(), rec.seq))?;
        r.record(&rec.shard_id, &seq, rec.arrival_ms, &rec.data);
        anchors.keep(rows, &rec.shard_id, &seq, rec.data);
        pb.inc(1);
    }
    Ok((r, anchors))
}

/// Records of a recording that the stream must still hold as recorded for the recording to be
/// of it: per shard, the one at the counter's checkpoint and the last one. Where each shard's
/// records start and end is the recount's (`Recount::read`); only their bytes are kept here.
#[derive(Default)]
pub struct Anchors {
    /// The recorded record at the checkpoint's sequence number.
    at_checkpoint: HashMap<String, (SeqNo, Vec<u8>)>,
    /// The bytes of each shard's last recorded record.
    last: HashMap<String, Vec<u8>>,
}

impl Anchors {
    fn keep(&mut self, rows: &HashMap<String, Row>, shard: &str, seq: &SeqNo, data: Vec<u8>) {
        let checkpoint = rows.get(shard).and_then(|r| r.checkpoint.as_ref());
        if checkpoint.is_some_and(|c| c.seq == *seq) {
            self.at_checkpoint
                .insert(shard.to_owned(), (seq.clone(), data.clone()));
        }
        match self.last.get_mut(shard) {
            Some(last) => *last = data,
            None => {
                self.last.insert(shard.to_owned(), data);
            }
        }
    }

    /// Refuses a recording of another stream than `stream`, with the reason: a checkpoint
    /// that falls between recorded records but on none of them, or a recorded record the
    /// stream holds otherwise (or not at all, where it cannot have been trimmed yet).
    pub async fn check(
        &self,
        file: &Path,
        stream: &dyn Stream,
        rows: &HashMap<String, Row>,
        read: &HashMap<String, (Position, Position)>,
    ) -> Result<()> {
        let refuse = |why: String| -> anyhow::Error {
            anyhow::anyhow!(
                "{} is not a recording of the stream the counter read: {why}. A replay gives records new sequence numbers, so a recording is compared only with the stack it was recorded from; to check a stack a recording was replayed into, run `tally verify` without --from (it reads that stack's stream)",
                file.display()
            )
        };
        let mut shared = 0;
        for (shard, row) in rows {
            let Some(c) = &row.checkpoint else { continue };
            let (Some((first, last)), Some(last_data)) = (read.get(shard), self.last.get(shard))
            else {
                continue;
            };
            shared += 1;
            let last = (last.seq.clone(), last_data.clone());
            let anchor = match self.at_checkpoint.get(shard) {
                Some(a) => a,
                None if c.seq < first.seq => continue,
                None if c.seq < last.0 => {
                    return Err(refuse(format!(
                        "the counter's checkpoint on {shard} ({c}) is not a record of the recording"
                    )))
                }
                None => &last,
            };
            let mut reader = stream
                .open(shard, StartPosition::AtSequence(anchor.0.clone()))
                .await
                .map_err(|e| refuse(format!("{shard} has no record {} ({e})", anchor.0)))?;
            let batch = tally_recording::reading::next_batch(reader.as_mut(), 1)
                .await
                .with_context(|| format!("reading {shard} at {}", anchor.0))?;
            if batch
                .trimmed_through
                .as_ref()
                .is_some_and(|t| *t >= anchor.0)
            {
                continue;
            }
            match batch.records.first() {
                Some(r) if r.seq == anchor.0 && r.data == anchor.1 => {}
                Some(r) if r.seq == anchor.0 => {
                    return Err(refuse(format!(
                        "{shard}'s record {} is not the recorded one",
                        anchor.0
                    )))
                }
                _ => {
                    return Err(refuse(format!(
                        "{shard} has no record {}, which the recording holds",
                        anchor.0
                    )))
                }
            }
        }
        let elsewhere = rows
            .iter()
            .filter(|(s, r)| r.checkpoint.is_some() && !self.last.contains_key(*s))
            .count();
        if shared == 0 && elsewhere > 0 {
            return Err(refuse(format!(
                "the counter has checkpoints on {elsewhere} shards, none of them with records in the recording"
            )));
        }
        Ok(())
    }
}
