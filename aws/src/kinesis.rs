//! The stream port on Kinesis.

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_kinesis::primitives::{Blob, DateTime};
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, StreamDescriptionSummary};
use aws_sdk_kinesis::Client;
use tally_core::ports::{
    PortError, PortResult, PutEntry, PutOutcome, ShardInfo, ShardReader, StartPosition, Stream,
    StreamRecord,
};
use tally_core::SeqNo;

use crate::errors::{map, CallError, ServiceError, Target};
use crate::reader::{IteratorReader, Page, Refused, ShardIterators};
use crate::AwsSettings;

/// A Kinesis data stream.
#[derive(Clone)]
pub struct KinesisStream {
    client: Client,
    /// The stream's name.
    name: String,
    /// For messages.
    target: Target,
}

impl KinesisStream {
    /// A client for the configured stream.
    pub fn new(sdk: &SdkConfig, s: &AwsSettings) -> KinesisStream {
        let mut b = aws_sdk_kinesis::config::Builder::from(sdk)
            .retry_partition(crate::retry_partition("tally-kinesis"));
        if let Some(url) = &s.kinesis_endpoint_url {
            b = b.endpoint_url(url);
        }
        KinesisStream {
            client: Client::from_conf(b.build()),
            name: s.stream.clone(),
            target: Target::new("Kinesis", "kinesis", s.kinesis_endpoint_url.as_ref(), sdk),
        }
    }

    /// The stream as a store records what it is counted from: `kinesis:<region>:<name>` (the
    /// region the SDK resolved; two regions' streams of one name are two streams).
    pub fn identity(&self) -> String {
        let region = self.client.config().region().map_or("", |r| r.as_ref());
        format!("kinesis:{region}:{}", self.name)
    }

    /// The SDK client (setup and resharding).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn resource(&self) -> String {
        format!("stream {}", self.name)
    }

    /// An error of `call` on the stream.
    pub(crate) fn err<E: ServiceError>(&self, call: &str, e: CallError<E>) -> PortError {
        self.err_on(call, &self.resource(), e)
    }

    /// An error of `call` on another resource than the stream (a consumer, a shard).
    pub(crate) fn err_on<E: ServiceError>(
        &self,
        call: &str,
        resource: &str,
        e: CallError<E>,
    ) -> PortError {
        map(&self.target, call, resource, e)
    }

    /// The stream's summary (`DescribeStreamSummary`); `NotFound` when it does not exist.
    pub(crate) async fn summary(&self) -> PortResult<StreamDescriptionSummary> {
        let d = self
            .client
            .describe_stream_summary()
            .stream_name(&self.name)
            .send()
            .await
            .map_err(|e| self.err("DescribeStreamSummary", e))?;
        d.stream_description_summary.ok_or_else(|| {
            PortError::Other(format!(
                "DescribeStreamSummary on {} returned no description",
                self.resource()
            ))
        })
    }

    /// The stream's ARN (enhanced fan-out registers consumers by it).
    pub async fn arn(&self) -> PortResult<String> {
        Ok(self.summary().await?.stream_arn)
    }

    /// Checks that the stream exists and the endpoint answers.
    pub async fn check(&self) -> PortResult<()> {
        self.arn().await.map(|_| ())
    }
}

pub(crate) fn seq(s: &str) -> PortResult<SeqNo> {
    SeqNo::parse(s).ok_or_else(|| {
        PortError::Invalid(format!(
            "Kinesis returned a sequence number that is not decimal: {s:?}"
        ))
    })
}

#[async_trait]
impl Stream for KinesisStream {
    async fn list_shards(&self) -> PortResult<Vec<ShardInfo>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            // The first page names the stream; later pages only carry the token.
            let req = match &token {
                None => self.client.list_shards().stream_name(&self.name),
                Some(t) => self.client.list_shards().next_token(t),
            };
            let resp = req.send().await.map_err(|e| self.err("ListShards", e))?;
            for s in resp.shards() {
                let parents = [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                    .into_iter()
                    .flatten()
                    .map(str::to_owned)
                    .collect();
                let closed = s
                    .sequence_number_range()
                    .and_then(|r| r.ending_sequence_number())
                    .is_some();
                out.push(ShardInfo {
                    shard_id: s.shard_id().to_owned(),
                    parents,
                    closed,
                });
            }
            match resp.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn open(&self, shard_id: &str, from: StartPosition) -> PortResult<Box<dyn ShardReader>> {
        let shard = KinesisShard {
            stream: self.clone(),
            shard_id: shard_id.to_owned(),
        };
        IteratorReader::open(shard, from).await
    }

    async fn put_records(&self, entries: &[PutEntry]) -> PortResult<Vec<PutOutcome>> {
        let mut req = self.client.put_records().stream_name(&self.name);
        for e in entries {
            let entry = PutRecordsRequestEntry::builder()
                .data(Blob::new(e.data.clone()))
                .partition_key(&e.partition_key)
                .build()
                .map_err(|err| PortError::Invalid(format!("PutRecords entry: {err}")))?;
            req = req.records(entry);
        }
        let resp = req.send().await.map_err(|e| self.err("PutRecords", e))?;
        resp.records()
            .iter()
            .map(
                |r| match (r.error_code(), r.shard_id(), r.sequence_number()) {
                    (Some(code), _, _) => Ok(PutOutcome::Failed {
                        code: code.to_owned(),
                        message: r.error_message().unwrap_or_default().to_owned(),
                    }),
                    (None, Some(shard), Some(s)) => Ok(PutOutcome::Ok {
                        shard_id: shard.to_owned(),
                        seq: seq(s)?,
                    }),
                    _ => Ok(PutOutcome::Failed {
                        code: "Unknown".into(),
                        message: "PutRecords answered with neither a sequence number nor an error"
                            .into(),
                    }),
                },
            )
            .collect()
    }
}

/// One shard of a Kinesis stream, read by iterators ([`IteratorReader`]).
struct KinesisShard {
    stream: KinesisStream,
    shard_id: String,
}

#[async_trait]
impl ShardIterators for KinesisShard {
    const MAX_RECORDS: usize = 10_000;

    async fn iterator(&self, from: &StartPosition) -> PortResult<String> {
        let (kind, seq, at) = iterator_start(from);
        let resp = self
            .stream
            .client
            .get_shard_iterator()
            .stream_name(&self.stream.name)
            .shard_id(&self.shard_id)
            .shard_iterator_type(kind)
            .set_starting_sequence_number(seq)
            .set_timestamp(at)
            .send()
            .await
            .map_err(|e| self.stream.err("GetShardIterator", e))?;
        resp.shard_iterator().map(str::to_owned).ok_or_else(|| {
            PortError::Other(format!(
                "GetShardIterator on {} returned no iterator",
                self.shard_id
            ))
        })
    }

    async fn read(&self, iterator: &str, limit: i32) -> Result<Page, Refused> {
        let resp = self
            .stream
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await
            .map_err(|e| Refused::Port(self.stream.err("GetRecords", e)))?;
        let records = resp.records().iter().map(record).collect::<PortResult<_>>();
        Ok(Page {
            records: records.map_err(Refused::Port)?,
            next: resp.next_shard_iterator().map(str::to_owned),
            millis_behind_latest: resp.millis_behind_latest(),
            child_shards: resp
                .child_shards()
                .iter()
                .map(|c| c.shard_id().to_owned())
                .collect(),
        })
    }
}

/// A Kinesis record as the ports see it (polling and fan-out alike).
pub(crate) fn record(r: &aws_sdk_kinesis::types::Record) -> PortResult<StreamRecord> {
    Ok(StreamRecord {
        seq: seq(r.sequence_number())?,
        arrival_ms: r
            .approximate_arrival_timestamp()
            .and_then(|t| t.to_millis().ok())
            .unwrap_or(0),
        partition_key: r.partition_key().unwrap_or_default().to_owned(),
        data: r.data().as_ref().to_vec(),
    })
}

/// A start position as Kinesis and DynamoDB Streams take it (GetShardIterator, SubscribeToShard):
/// the iterator type (`T`, either SDK's, by its wire name), and its sequence number or time.
pub(crate) fn iterator_start<T: for<'a> From<&'a str>>(
    p: &StartPosition,
) -> (T, Option<String>, Option<DateTime>) {
    let seq = |s: &tally_core::seq::SeqNo| Some(s.as_str().to_owned());
    let (kind, seq, at) = match p {
        StartPosition::TrimHorizon => ("TRIM_HORIZON", None, None),
        StartPosition::Latest => ("LATEST", None, None),
        StartPosition::AtTimestamp(ms) => ("AT_TIMESTAMP", None, Some(DateTime::from_millis(*ms))),
        StartPosition::AfterSequence(s) => ("AFTER_SEQUENCE_NUMBER", seq(s), None),
        StartPosition::AtSequence(s) => ("AT_SEQUENCE_NUMBER", seq(s), None),
    };
    (T::from(kind), seq, at)
}

#[cfg(test)]
mod tests {
    use tally_core::ports::StartPosition;
    use tally_core::seq::SeqNo;

    use super::iterator_start;

    /// Every start position names an iterator type both SDKs know (a misspelt wire name would
    /// be one neither knows, refused by the service).
    #[test]
    fn every_start_position_is_an_iterator_type_both_sdks_know() {
        let seq = SeqNo::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
        for p in [
            StartPosition::TrimHorizon,
            StartPosition::Latest,
            StartPosition::AtTimestamp(1_700_000_000_000),
            StartPosition::AfterSequence(seq.clone()),
            StartPosition::AtSequence(seq),
        ] {
            use aws_sdk_dynamodbstreams::types::ShardIteratorType as Changes;
            use aws_sdk_kinesis::types::ShardIteratorType as Kinesis;
            let (k, _, _) = iterator_start::<Kinesis>(&p);
            let (c, _, _) = iterator_start::<Changes>(&p);
            assert!(Kinesis::values().contains(&k.as_str()), "{p:?}");
            assert!(Changes::values().contains(&c.as_str()), "{p:?}");
            assert_eq!(k.as_str(), c.as_str());
        }
    }
}
