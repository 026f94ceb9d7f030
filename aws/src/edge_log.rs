//! The edges' change log on AWS: DynamoDB Streams on the edges table (`NEW_AND_OLD_IMAGES`), read
//! through the stream port — what the likers counter's second stage reads, as it reads the
//! embedded store's change rows.
//!
//! DynamoDB writes one stream record per change of an edge item, in the item's order, and none
//! for a refused conditional write; each is read as a [`StreamRecord`] whose data is the change's
//! [`EdgeChange`] encoding (the like before, from the old image, and after, from the new one),
//! keyed by its post. A record whose images are not an edge as tally writes it is not dropped:
//! its data says why, behind a byte that is no change's version ([`NOT_A_CHANGE`]), so the
//! counter dead-letters it with its shard and sequence number.
//!
//! The stream's shards are listed with `DescribeStream` (DynamoDB rolls them about every four
//! hours, a new one with the last as its parent), read with `GetShardIterator` and `GetRecords`.
//! Nothing is put to it: edge writes make its records. Its ARN is the edges table's
//! `LatestStreamArn`, looked up on first use.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{StreamViewType as TableStreamView, TableDescription};
use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use tally_core::clock::now_ms;
use tally_core::edge::{EdgeChange, EdgeState, EDGE_PREFIX};
use tally_core::item::{Attrs, Val};
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ShardInfo, ShardReader, StartPosition, Stream,
    StreamRecord,
};
use tally_core::SeqNo;

use crate::errors::{map, CallError, ServiceError, Target};
use crate::reader::{IteratorReader, Page, Refused, ShardIterators};
use crate::AwsSettings;

/// The first byte of a record that is no edge change: not [`tally_core::edge::CHANGE_V1`] (nor
/// any version), so `EdgeChange::decode` refuses it and the counter dead-letters the record; the
/// rest is why, in UTF-8.
pub const NOT_A_CHANGE: u8 = 0;

/// The most records one `GetRecords` returns.
const MAX_RECORDS_PER_READ: usize = 1_000;

/// DynamoDB Streams on one table set's edges table.
#[derive(Clone)]
pub struct EdgeLog {
    /// The DynamoDB Streams client.
    streams: Client,
    /// The tables' client: the stream's ARN is the edges table's description.
    tables: aws_sdk_dynamodb::Client,
    /// The edges table's full name.
    table: String,
    /// Where the streams calls go, for messages.
    target: Target,
    /// Where the tables calls go, for messages.
    tables_target: Target,
    /// The stream's ARN once looked up, shared by the clones: a failed look-up is not kept, so
    /// that a table set up meanwhile is found at the next call.
    arn: Arc<tokio::sync::OnceCell<String>>,
}

impl EdgeLog {
    /// The change log of the edges table `table`, whose tables are reached by `tables` (at
    /// `tables_target`). DynamoDB Streams answers at DynamoDB's endpoint setting: DynamoDB Local
    /// serves both APIs on one port.
    pub(crate) fn new(
        sdk: &SdkConfig,
        s: &AwsSettings,
        tables: aws_sdk_dynamodb::Client,
        tables_target: Target,
        table: String,
    ) -> EdgeLog {
        let mut b = aws_sdk_dynamodbstreams::config::Builder::from(sdk)
            .retry_partition(crate::retry_partition("tally-dynamodbstreams"));
        if let Some(url) = &s.dynamodb_endpoint_url {
            b = b.endpoint_url(url);
        }
        EdgeLog {
            streams: Client::from_conf(b.build()),
            tables,
            table,
            target: Target::new(
                "DynamoDB Streams",
                "streams.dynamodb",
                s.dynamodb_endpoint_url.as_ref(),
                sdk,
            ),
            tables_target,
            arn: Arc::default(),
        }
    }

    /// The stream's ARN, looked up once.
    async fn arn(&self) -> PortResult<String> {
        self.arn
            .get_or_try_init(|| self.stream_of_table())
            .await
            .cloned()
    }

    /// The edges table's stream, by `DescribeTable`: its ARN, if it is on ([`change_stream`]);
    /// else an error saying what to do.
    async fn stream_of_table(&self) -> PortResult<String> {
        let d = self
            .tables
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| {
                let resource = format!("table {}", self.table);
                map(&self.tables_target, "DescribeTable", &resource, e)
            })?;
        change_stream(&self.table, d.table())?.ok_or_else(|| {
            PortError::Other(format!(
                "the edges table {} has no stream: run `tally setup`",
                self.table
            ))
        })
    }

    /// An error of `call` (an IAM action, `dynamodb:GetRecords`) on `resource`. Records trimmed
    /// before they were read are said as what they are: changes never counted.
    fn err<E: ServiceError>(&self, call: &str, resource: &str, e: CallError<E>) -> PortError {
        if e.as_service_error().and_then(|s| s.code()) == Some("TrimmedDataAccessException") {
            return PortError::Other(format!(
                "{call} on {resource}: DynamoDB Streams no longer holds the changes after the \
                 reader's position (it keeps them 24 hours), so they were never counted: rebuild \
                 the counts from the edges (`tally rebuild`)"
            ));
        }
        map(&self.target, call, resource, e)
    }
}

/// The change log's stream of the edges table `name` as described (`t`): its ARN, `None` when
/// it has no stream on. One that carries other images than both (a change's like before and
/// after) is an error: DynamoDB cannot change a stream's images while it is on.
pub(crate) fn change_stream(
    name: &str,
    t: Option<&TableDescription>,
) -> PortResult<Option<String>> {
    let Some(spec) = t
        .and_then(|t| t.stream_specification())
        .filter(|s| s.stream_enabled())
    else {
        return Ok(None);
    };
    if spec.stream_view_type() != Some(&TableStreamView::NewAndOldImages) {
        return Err(PortError::Other(format!(
            "the stream of the edges table {name} carries {}, where the change log needs \
             NEW_AND_OLD_IMAGES: turn it off (UpdateTable) and run `tally setup`",
            spec.stream_view_type().map_or("no images", |v| v.as_str())
        )));
    }
    t.and_then(|t| t.latest_stream_arn())
        .map(|arn| Some(arn.to_owned()))
        .ok_or_else(|| {
            PortError::Other(format!(
                "DescribeTable of {name} says its stream is on and names no stream ARN"
            ))
        })
}

#[async_trait]
impl Stream for EdgeLog {
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
        let arn = self.arn().await?;
        let resource = format!("stream {arn}");
        let mut out = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let resp = self
                .streams
                .describe_stream()
                .stream_arn(&arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| self.err("dynamodb:DescribeStream", &resource, e))?;
            let d = resp.stream_description().ok_or_else(|| {
                PortError::Other(format!(
                    "DescribeStream on {resource} answered no description"
                ))
            })?;
            for s in d.shards() {
                let shard_id = s.shard_id().ok_or_else(|| {
                    PortError::Other(format!(
                        "DescribeStream on {resource} listed a shard without an id"
                    ))
                })?;
                out.push(ShardInfo {
                    shard_id: shard_id.to_owned(),
                    parents: s.parent_shard_id().map(str::to_owned).into_iter().collect(),
                    closed: s
                        .sequence_number_range()
                        .and_then(|r| r.ending_sequence_number())
                        .is_some(),
                });
            }
            match d.last_evaluated_shard_id() {
                Some(id) if !id.is_empty() => start = Some(id.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let arn = self.arn().await?;
        let shard = ChangeShard {
            resource: format!("shard {shard_id} of stream {arn}"),
            log: self.clone(),
            arn,
            shard_id: shard_id.to_owned(),
        };
        IteratorReader::open(shard, from).await
    }

    async fn put_records(&self, _entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        Err(PortError::Other(
            "the edges' change log is written by edge writes, not put to".into(),
        ))
    }
}

/// One shard of the log's stream, read by iterators ([`IteratorReader`]; DynamoDB Streams'
/// iterators last 15 minutes).
struct ChangeShard {
    /// The log's clients and messages.
    log: EdgeLog,
    /// The stream's ARN, as its iterators are asked for.
    arn: String,
    /// The shard read.
    shard_id: String,
    /// The shard, named in messages.
    resource: String,
}

#[async_trait]
impl ShardIterators for ChangeShard {
    const MAX_RECORDS: usize = MAX_RECORDS_PER_READ;

    async fn iterator(&self, from: &StartPosition) -> PortResult<String> {
        let (kind, seq, at) = crate::kinesis::iterator_start::<ShardIteratorType>(from);
        let resp = self
            .log
            .streams
            .get_shard_iterator()
            .stream_arn(&self.arn)
            .shard_id(&self.shard_id)
            .shard_iterator_type(kind)
            .set_sequence_number(seq)
            .set_timestamp(at)
            .send()
            .await
            .map_err(|e| self.log.err("dynamodb:GetShardIterator", &self.resource, e))?;
        resp.shard_iterator().map(str::to_owned).ok_or_else(|| {
            PortError::Other(format!(
                "GetShardIterator on {} answered no iterator",
                self.resource
            ))
        })
    }

    async fn read(&self, iterator: &str, limit: i32) -> Result<Page, Refused> {
        let call = self.log.streams.get_records().shard_iterator(iterator);
        let resp = call.limit(limit).send().await.map_err(|e| {
            let trimmed =
                e.as_service_error().and_then(|s| s.code()) == Some("TrimmedDataAccessException");
            let e = self.log.err("dynamodb:GetRecords", &self.resource, e);
            if trimmed {
                Refused::Trimmed(e)
            } else {
                Refused::Port(e)
            }
        })?;
        let records: Vec<StreamRecord> = resp
            .records()
            .iter()
            .map(|r| change_record(r, &self.resource))
            .collect::<PortResult<_>>()
            .map_err(Refused::Port)?;
        Ok(Page {
            millis_behind_latest: behind(&records, now_ms()),
            records,
            next: resp.next_shard_iterator().map(str::to_owned),
            // The runtime finds a closed shard's children by listing the shards again.
            child_shards: Vec::new(),
        })
    }
}

/// How far a read of `records` at `now` is behind the shard's tip: the last record's age (never
/// below zero; its time is DynamoDB's, rounded down to the second — by DynamoDB Local to the
/// minute). An empty read does not say: AWS documents that `GetRecords` may answer an empty list
/// with records further on in the shard, so it is idle, never the tip that gives records up
/// ([`ReadBatch::is_at_tip`](tally_core::ports::ReadBatch::is_at_tip)).
///
/// **Unshown, an opinion:** on an open shard such an answer still ends a `--until-idle` run or
/// verify's read of the log, as any idle read does (a closed shard is read to its end:
/// `tally_recording::reading::read_to_tip`); DynamoDB Local never answered so here.
fn behind(records: &[StreamRecord], now: i64) -> Option<i64> {
    records.last().map(|r| (now - r.arrival_ms).max(0))
}

/// A DynamoDB Streams record of `shard` (named in messages) as the stream port sees it: its
/// change's encoding, or why it is none ([`NOT_A_CHANGE`]). A record without a sequence number
/// cannot be placed in the shard at all: that is an error of the read.
fn change_record(r: &Record, shard: &str) -> PortResult<StreamRecord> {
    let d = r.dynamodb();
    let seq = d.and_then(|d| d.sequence_number()).ok_or_else(|| {
        PortError::Other(format!(
            "GetRecords on {shard} answered a record without a sequence number"
        ))
    })?;
    let seq = SeqNo::parse(seq).ok_or_else(|| {
        PortError::Invalid(format!(
            "DynamoDB Streams answered a sequence number that is not decimal on {shard}: {seq:?}"
        ))
    })?;
    let arrival_ms = d
        .and_then(|d| d.approximate_creation_date_time())
        .and_then(|t| t.to_millis().ok())
        .unwrap_or(0);
    let (partition_key, data) = match change_of(r) {
        Ok(c) => (c.post_id.to_string(), c.encode()),
        Err(why) => {
            tracing::warn!(%shard, seq = %seq, %why, "a change log record that is no edge change");
            let post = key(r, "pk").unwrap_or_default().to_owned();
            let mut data = vec![NOT_A_CHANGE];
            data.extend_from_slice(format!("not an edge change: {why}").as_bytes());
            (post, data)
        }
    };
    Ok(StreamRecord {
        seq,
        arrival_ms,
        partition_key,
        data,
    })
}

/// The string key attribute `k` of a record's item.
fn key<'a>(r: &'a Record, k: &str) -> Option<&'a str> {
    r.dynamodb()
        .and_then(|d| d.keys())
        .and_then(|keys| keys.get(k))
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// The change a record says: its edge (post `pk`, user from `sk`), the like before (the old
/// image's) and after (the new image's); an image that is not an edge, or one missing where
/// the change has one, is said.
fn change_of(r: &Record) -> Result<EdgeChange, String> {
    let post = key(r, "pk")
        .filter(|p| !p.is_empty())
        .ok_or("its key has no post (`pk`)")?;
    let sk = key(r, "sk").ok_or("its key has no sort key (`sk`)")?;
    let user = sk
        .strip_prefix(EDGE_PREFIX)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| format!("its sort key `{sk}` is not an edge's (`{EDGE_PREFIX}<user>`)"))?;
    let what = r.event_name();
    let d = r.dynamodb();
    let old = d.and_then(|d| d.old_image());
    let new = d.and_then(|d| d.new_image());
    Ok(EdgeChange {
        post_id: post.into(),
        user_id: user.into(),
        before: like_in(old, "old", what == Some(&OperationType::Insert))?,
        after: like_in(new, "new", what == Some(&OperationType::Remove))?,
    })
}

/// The like an image holds (`None`: an edge not liked); no image is no like where `may_lack`
/// it (an insert has no old image, a removal no new one), else an error: a stream without both
/// images cannot say what changed.
fn like_in(
    image: Option<&HashMap<String, AttributeValue>>,
    which: &str,
    may_lack: bool,
) -> Result<Option<i64>, String> {
    match image.filter(|i| !i.is_empty()) {
        Some(i) => image_attrs(i)
            .and_then(|a| EdgeState::from_attrs(&a))
            .map(|s| s.like())
            .map_err(|e| format!("its {which} image is not an edge: {e}")),
        None if may_lack => Ok(None),
        None => Err(format!("it has no {which} image")),
    }
}

/// An image's attributes as the core reads them (the key apart): numbers and strings. Another
/// type, or a number that is not a whole one, is not what tally writes.
fn image_attrs(image: &HashMap<String, AttributeValue>) -> Result<Attrs, String> {
    image
        .iter()
        .filter(|(k, _)| k.as_str() != "pk" && k.as_str() != "sk")
        .map(|(k, v)| {
            let v = match v {
                AttributeValue::N(n) => {
                    Val::N(n.parse().map_err(|_| format!("`{k}` is the number {n}"))?)
                }
                AttributeValue::S(s) => Val::S(s.clone()),
                other => return Err(format!("`{k}` is {other:?}")),
            };
            Ok((k.clone(), v))
        })
        .collect()
}

#[cfg(test)]
mod decode_tests {
    use aws_sdk_dynamodbstreams::types::StreamRecord as Change;

    use super::*;

    type Image = Vec<(&'static str, AttributeValue)>;

    fn edge(liked: bool, at: i64) -> Image {
        let mut i = vec![
            ("pk", AttributeValue::S("p".into())),
            ("sk", AttributeValue::S("E#u".into())),
            ("l", AttributeValue::N(u8::from(liked).to_string())),
            ("t", AttributeValue::N(at.to_string())),
            ("e", AttributeValue::S("e1".into())),
        ];
        if liked {
            i.push(("lt", AttributeValue::N(at.to_string())));
        }
        i
    }

    fn record(what: OperationType, sk: &str, old: Option<Image>, new: Option<Image>) -> Record {
        let mut c = Change::builder()
            .sequence_number("000000000000000000042")
            .approximate_creation_date_time(
                aws_sdk_dynamodbstreams::primitives::DateTime::from_secs(1_796_000_000),
            )
            .keys("pk", AttributeValue::S("p".into()))
            .keys("sk", AttributeValue::S(sk.into()));
        for (k, v) in old.into_iter().flatten() {
            c = c.old_image(k, v);
        }
        for (k, v) in new.into_iter().flatten() {
            c = c.new_image(k, v);
        }
        Record::builder()
            .event_name(what)
            .dynamodb(c.build())
            .build()
    }

    /// `r` read as a change (its likes before and after), or why it is none.
    fn check(r: Record, expected: Result<(Option<i64>, Option<i64>), &str>) {
        let got = change_record(&r, "shard s").unwrap();
        assert_eq!(got.seq.as_str(), "000000000000000000042");
        assert_eq!(
            (got.arrival_ms, got.partition_key.as_str()),
            (1_796_000_000_000, "p")
        );
        match (EdgeChange::decode(&got.data), expected) {
            (Ok(c), Ok(likes)) => {
                assert_eq!((c.post_id.as_str(), c.user_id.as_str()), ("p", "u"));
                assert_eq!((c.before, c.after), likes);
            }
            (Err(_), Err(why)) => {
                assert_eq!(got.data[0], NOT_A_CHANGE);
                let text = String::from_utf8_lossy(&got.data[1..]);
                assert!(text.contains(why), "{text}");
            }
            (got, expected) => panic!("{got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn a_record_is_its_edge_s_likes_before_and_after_or_why_it_is_no_change() {
        use OperationType::{Insert, Modify, Remove};
        check(
            record(Insert, "E#u", None, Some(edge(true, 5))),
            Ok((None, Some(5))),
        );
        check(
            record(Insert, "E#u", None, Some(edge(false, 5))),
            Ok((None, None)),
        );
        let (liked, unliked) = (Some(edge(true, 5)), Some(edge(false, 7)));
        check(
            record(Modify, "E#u", liked.clone(), unliked),
            Ok((Some(5), None)),
        );
        check(
            record(Modify, "E#u", liked.clone(), Some(edge(true, 9))),
            Ok((Some(5), Some(9))),
        );
        check(
            record(Remove, "E#u", liked.clone(), None),
            Ok((Some(5), None)),
        );
        check(
            record(Modify, "E#u", None, liked.clone()),
            Err("it has no old image"),
        );
        check(
            record(Modify, "E#u", liked.clone(), None),
            Err("it has no new image"),
        );
        check(
            record(Insert, "X#u", None, liked),
            Err("sort key `X#u` is not an edge's"),
        );
        let mut odd = edge(true, 5);
        odd[2].1 = AttributeValue::N("2".into());
        check(
            record(Insert, "E#u", None, Some(odd)),
            Err("new image is not an edge: `l` is 2"),
        );
        let mut odd = edge(true, 5);
        odd[3].1 = AttributeValue::N("1.5".into());
        check(
            record(Insert, "E#u", None, Some(odd)),
            Err("`t` is the number 1.5"),
        );
        let mut odd = edge(true, 5);
        odd[4].1 = AttributeValue::Bool(true);
        check(
            record(Insert, "E#u", None, Some(odd)),
            Err("`e` is Bool(true)"),
        );
        let no_seq = Record::builder()
            .dynamodb(Change::builder().build())
            .build();
        assert!(change_record(&no_seq, "shard s").is_err());
    }

    #[test]
    fn a_read_is_behind_by_its_last_record_s_age_and_an_empty_one_does_not_say() {
        let at = |arrival_ms| StreamRecord {
            seq: SeqNo::of_number(1),
            arrival_ms,
            partition_key: "p".into(),
            data: Vec::new(),
        };
        assert_eq!(behind(&[], 10_000), None, "an empty read does not say");
        assert_eq!(behind(&[at(1_000), at(4_000)], 10_000), Some(6_000));
        assert_eq!(behind(&[at(12_000)], 10_000), Some(0), "never below zero");
    }
}
