//! A stream on file. [`reading`] reads a stream whole, parents first, and opens the files
//! records come from; [`record`] writes a stream as a recording; [`replay`] puts a file back into
//! a stream.
//!
//! The recording format, the file `tally record` writes and `tally replay` and `tally verify --from` read: one header
//! line naming the shards, then one line per Kinesis record with everything the stream said about
//! it — shard, sequence number, partition key, arrival time, and its bytes (as a JSON string when
//! they are UTF-8, else base64, as a KPL aggregate is).
//!
//! A file whose first line is not this header is plain NDJSON: each line is one record's data
//! (what `tally replay` has always put).
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod reading;
pub mod replay;

use std::io::{BufRead, Write};

use anyhow::{Context, Result};
use base64::Engine;
use serde::{Deserialize, Serialize};
use tally_core::clock::now_ms;
use tally_core::ports::{ShardInfo, StartPosition, Stream};

use crate::reading::{parents_first, read_to_tip};

/// Epoch milliseconds as an RFC 3339 time, to the second (a time before 1970 shows as 1970).
pub fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// What [`record`] wrote.
#[derive(Clone, Copy, Debug)]
pub struct Written {
    pub records: u64,
    pub shards: usize,
}

/// Writes every record of the stream to `file` as a recording (`-`: standard output; `.gz`:
/// gzip): a header naming the shards, then each record with its shard, sequence number, key and
/// arrival time, parents before children. `each` is called once per record written.
pub async fn record(
    stream: &dyn Stream,
    file: &std::path::Path,
    each: &(dyn Fn() + Sync),
) -> Result<Written> {
    let shards = parents_first(stream.list_shards().await?)?;
    let file: Box<dyn Write> = if file.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        let f =
            std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
        if file.extension().is_some_and(|e| e == "gz") {
            Box::new(flate2::write::GzEncoder::new(
                f,
                flate2::Compression::default(),
            ))
        } else {
            Box::new(f)
        }
    };
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &Header::new(now_ms(), &shards))?;
    out.write_all(b"\n")?;
    let mut records = 0u64;
    for s in &shards {
        read_to_tip(stream, s, StartPosition::TrimHorizon, 1_000, |batch| {
            for r in batch.records {
                Recorded {
                    shard_id: s.shard_id.clone(),
                    seq: r.seq.as_str().to_owned(),
                    partition_key: r.partition_key,
                    arrival_ms: r.arrival_ms,
                    data: r.data,
                }
                .write(&mut out)?;
                records += 1;
                each();
            }
            Ok(())
        })
        .await?;
    }
    out.into_inner().map_err(|e| e.into_error())?.flush()?;
    Ok(Written {
        records,
        shards: shards.len(),
    })
}

/// The format's version, in the header's `tally_recording` field.
pub const VERSION: u32 = 1;

/// How a recording starts: its header's first field.
const HEADER_START: &[u8] = b"{\"tally_recording\":";

/// The first line of a recording.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Header {
    pub tally_recording: u32,
    /// When the recording was made (ms since the epoch).
    pub recorded_at_ms: i64,
    /// Every shard recorded, parents before children.
    pub shards: Vec<ShardLine>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardLine {
    pub shard_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

impl Header {
    pub fn new(recorded_at_ms: i64, shards: &[ShardInfo]) -> Header {
        Header {
            tally_recording: VERSION,
            recorded_at_ms,
            shards: shards
                .iter()
                .map(|s| ShardLine {
                    shard_id: s.shard_id.clone(),
                    parents: s.parents.clone(),
                })
                .collect(),
        }
    }

    /// The header a first line holds, if it is one (`Err`: a header of a version this tally does
    /// not read).
    pub fn parse(line: &[u8]) -> Result<Option<Header>> {
        #[derive(Deserialize)]
        struct Probe {
            tally_recording: Option<serde_json::Value>,
        }
        let Ok(Probe {
            tally_recording: Some(v),
        }) = serde_json::from_slice::<Probe>(line)
        else {
            return Ok(None);
        };
        if v.as_u64() != Some(u64::from(VERSION)) {
            anyhow::bail!(
                "a tally recording of version {v}: this tally reads version {VERSION} (re-record it, or upgrade tally)"
            );
        }
        let h: Header =
            serde_json::from_slice(line).context("reading the recording's header line")?;
        Ok(Some(h))
    }

    pub fn shard_infos(&self) -> Vec<ShardInfo> {
        self.shards
            .iter()
            .map(|s| ShardInfo {
                shard_id: s.shard_id.clone(),
                parents: s.parents.clone(),
                closed: false,
            })
            .collect()
    }
}

/// One recorded Kinesis record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub shard_id: String,
    pub seq: String,
    pub partition_key: String,
    pub arrival_ms: i64,
    pub data: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Line<'a> {
    shard: std::borrow::Cow<'a, str>,
    seq: std::borrow::Cow<'a, str>,
    key: std::borrow::Cow<'a, str>,
    arrival_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data_b64: Option<String>,
}

impl Recorded {
    /// Writes the record as one line.
    pub fn write(&self, out: &mut dyn Write) -> Result<()> {
        let (data, data_b64) = match std::str::from_utf8(&self.data) {
            Ok(s) => (Some(s.into()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&self.data)),
            ),
        };
        let line = Line {
            shard: self.shard_id.as_str().into(),
            seq: self.seq.as_str().into(),
            key: self.partition_key.as_str().into(),
            arrival_ms: self.arrival_ms,
            data,
            data_b64,
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
        Ok(())
    }

    /// Reads a record line of a recording (`line_no` for the error).
    pub fn parse(line: &[u8], line_no: u64) -> Result<Recorded> {
        let l: Line = serde_json::from_slice(line).with_context(|| {
            format!("line {line_no} of the recording is not a recorded record (shard, seq, key, arrival_ms, data)")
        })?;
        let data = match (l.data, l.data_b64) {
            (Some(d), None) => d.into_owned().into_bytes(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .with_context(|| {
                    format!("line {line_no} of the recording: data_b64 is not base64")
                })?,
            _ => {
                anyhow::bail!("line {line_no} of the recording: expected one of data and data_b64")
            }
        };
        Ok(Recorded {
            shard_id: l.shard.into_owned(),
            seq: l.seq.into_owned(),
            partition_key: l.key.into_owned(),
            arrival_ms: l.arrival_ms,
            data,
        })
    }
}

/// Reads a recording: its header, then its records in file order.
pub struct Reader {
    pub header: Header,
    input: Box<dyn BufRead>,
    line_no: u64,
}

impl Reader {
    /// A recording's reader, or the input given back when it does not start with a recording's
    /// header (`{"tally_recording":`, as `tally record` writes it first).
    pub fn open(
        mut input: Box<dyn BufRead>,
    ) -> Result<std::result::Result<Reader, Box<dyn BufRead>>> {
        if !input.fill_buf()?.starts_with(HEADER_START) {
            return Ok(Err(input));
        }
        let mut line = Vec::new();
        input.read_until(b'\n', &mut line)?;
        match Header::parse(trim_line(&line))? {
            Some(header) => Ok(Ok(Reader {
                header,
                input,
                line_no: 1,
            })),
            None => anyhow::bail!("the first line starts as a recording's header but is not one"),
        }
    }

    /// The next record (`None`: the end).
    pub fn next_record(&mut self) -> Result<Option<Recorded>> {
        loop {
            let mut line = Vec::new();
            if self.input.read_until(b'\n', &mut line)? == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            let l = trim_line(&line);
            if l.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Recorded::parse(l, self.line_no).map(Some);
        }
    }
}

fn trim_line(l: &[u8]) -> &[u8] {
    let l = l.strip_suffix(b"\n").unwrap_or(l);
    l.strip_suffix(b"\r").unwrap_or(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_round_trips_every_byte_and_field() {
        let shards = vec![
            ShardInfo {
                shard_id: "shardId-000000000000".into(),
                parents: vec![],
                closed: true,
            },
            ShardInfo {
                shard_id: "shardId-000000000001".into(),
                parents: vec!["shardId-000000000000".into()],
                closed: false,
            },
        ];
        let records = vec![
            Recorded {
                shard_id: shards[0].shard_id.clone(),
                seq: "49590338271490256608559692538361571095921575989136588801".into(),
                partition_key: "p1".into(),
                arrival_ms: 1_700_000_000_123,
                data: br#"{"event_id":"e1","post_id":"p1"}"#.to_vec(),
            },
            Recorded {
                shard_id: shards[1].shard_id.clone(),
                seq: "7".into(),
                partition_key: "k\"2\n".into(),
                arrival_ms: 1_700_000_000_124,
                // Not UTF-8, with a newline: a KPL aggregate's bytes.
                data: vec![0xF3, 0x89, b'\n', 0x00, 0xff],
            },
        ];
        let mut out = Vec::new();
        serde_json::to_writer(&mut out, &Header::new(5, &shards)).unwrap();
        out.push(b'\n');
        for r in &records {
            r.write(&mut out).unwrap();
        }
        let mut r = match Reader::open(Box::new(std::io::Cursor::new(out))).unwrap() {
            Ok(r) => r,
            Err(_) => panic!("not read as a recording"),
        };
        assert_eq!(r.header.shards.len(), 2);
        assert_eq!(r.header.shards[1].parents, vec!["shardId-000000000000"]);
        assert_eq!(r.next_record().unwrap().as_ref(), Some(&records[0]));
        assert_eq!(r.next_record().unwrap().as_ref(), Some(&records[1]));
        assert_eq!(r.next_record().unwrap(), None);
    }

    #[test]
    fn plain_ndjson_is_not_a_recording() {
        let plain = b"{\"event_id\":\"e1\",\"post_id\":\"p1\"}\n".to_vec();
        assert!(Reader::open(Box::new(std::io::Cursor::new(plain)))
            .unwrap()
            .is_err());
        let empty: Vec<u8> = Vec::new();
        assert!(Reader::open(Box::new(std::io::Cursor::new(empty)))
            .unwrap()
            .is_err());
        let newer = b"{\"tally_recording\":2,\"recorded_at_ms\":0,\"shards\":[]}\n".to_vec();
        let e = Reader::open(Box::new(std::io::Cursor::new(newer)))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("version 2"), "{e}");
    }
}
