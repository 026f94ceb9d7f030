//! The Kinesis API's own shape for putting records (`PutRecord`, `PutRecords`, JSON 1.1 as the
//! AWS SDKs, boto3 and the AWS CLI speak it): the requests read and checked with Kinesis's
//! limits, and the answers and errors written as Kinesis writes them.

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use tally_core::ports::{PutEntry, PutOutcome};

/// The operations taken, by their `X-Amz-Target`.
pub const PUT_RECORD: &str = "Kinesis_20131202.PutRecord";
/// See [`PUT_RECORD`].
pub const PUT_RECORDS: &str = "Kinesis_20131202.PutRecords";

/// The one read taken: the stream's summary (its name, status and open shards), the first call a
/// producer's health check or `aws kinesis describe-stream-summary` makes.
pub const DESCRIBE_STREAM_SUMMARY: &str = "Kinesis_20131202.DescribeStreamSummary";

/// Most records in one `PutRecords` call.
pub const MAX_RECORDS: usize = 500;
/// Most bytes of one record: its data and its partition key.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// Most bytes of one `PutRecords` call: every record's data and partition key.
pub const MAX_REQUEST_BYTES: usize = 5 * 1024 * 1024;
/// Longest partition key, in characters.
pub const MAX_KEY_CHARS: usize = 256;

/// An error as Kinesis answers it: HTTP status, `__type` and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinesisError {
    /// HTTP status.
    pub status: u16,
    /// The error code (`ValidationException`, `ResourceNotFoundException`, …).
    pub code: &'static str,
    /// What is wrong, for a person.
    pub message: String,
}

impl KinesisError {
    /// A request Kinesis would refuse as invalid.
    pub fn validation(message: impl Into<String>) -> KinesisError {
        KinesisError {
            status: 400,
            code: "ValidationException",
            message: message.into(),
        }
    }

    /// The body Kinesis sends with it.
    pub fn body(&self) -> Value {
        json!({"__type": self.code, "message": self.message})
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Entry {
    data: Option<String>,
    partition_key: Option<String>,
    explicit_hash_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PutRecordRequest {
    stream_name: Option<String>,
    #[serde(rename = "StreamARN")]
    stream_arn: Option<String>,
    #[serde(flatten)]
    entry: Entry,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DescribeRequest {
    stream_name: Option<String>,
    #[serde(rename = "StreamARN")]
    stream_arn: Option<String>,
}

/// The stream a `DescribeStreamSummary` request names.
pub fn described(body: &[u8]) -> Result<String, KinesisError> {
    let r: DescribeRequest = serde_json::from_slice(body)
        .map_err(|e| KinesisError::validation(format!("the request is not JSON: {e}")))?;
    stream_of(r.stream_name, r.stream_arn)
}

/// `DescribeStreamSummary`'s answer for the embedded stream: active, `open_shards` open.
pub fn summary(stream: &str, open_shards: usize, retention_hours: u32) -> Value {
    json!({"StreamDescriptionSummary": {
        "StreamName": stream,
        "StreamARN": format!("arn:aws:kinesis:us-east-1:000000000000:stream/{stream}"),
        "StreamStatus": "ACTIVE",
        "StreamModeDetails": {"StreamMode": "PROVISIONED"},
        "RetentionPeriodHours": retention_hours,
        "StreamCreationTimestamp": 0,
        "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
        "EncryptionType": "NONE",
        "OpenShardCount": open_shards,
        "ConsumerCount": 0,
    }})
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PutRecordsRequest {
    stream_name: Option<String>,
    #[serde(rename = "StreamARN")]
    stream_arn: Option<String>,
    records: Option<Vec<Entry>>,
}

/// A put asked for: which stream, and the records, checked.
#[derive(Debug)]
pub struct Put {
    /// The stream named (by name, or the last part of its ARN).
    pub stream: String,
    /// The records, in order.
    pub entries: Vec<PutEntry>,
    /// `PutRecord` (one record, answered alone) rather than `PutRecords`.
    pub single: bool,
}

/// Reads and checks a request's body for `target`, with Kinesis's limits and its wording.
pub fn read(target: &str, body: &[u8]) -> Result<Put, KinesisError> {
    let bad_json =
        |e: serde_json::Error| KinesisError::validation(format!("the request is not JSON: {e}"));
    match target {
        PUT_RECORD => {
            let r: PutRecordRequest = serde_json::from_slice(body).map_err(bad_json)?;
            let entry = entry(r.entry, "")?;
            Ok(Put {
                stream: stream_of(r.stream_name, r.stream_arn)?,
                entries: vec![entry],
                single: true,
            })
        }
        PUT_RECORDS => {
            let r: PutRecordsRequest = serde_json::from_slice(body).map_err(bad_json)?;
            let records = r.records.unwrap_or_default();
            if records.is_empty() || records.len() > MAX_RECORDS {
                return Err(KinesisError::validation(format!(
                    "1 validation error detected: Value at 'records' failed to satisfy \
                     constraint: Member must have length between 1 and {MAX_RECORDS} (got {})",
                    records.len()
                )));
            }
            let entries = records
                .into_iter()
                .enumerate()
                .map(|(i, e)| entry(e, &format!("records.{}.member.", i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            let bytes: usize = entries
                .iter()
                .map(|e| e.data.len() + e.partition_key.len())
                .sum();
            if bytes > MAX_REQUEST_BYTES {
                return Err(KinesisError {
                    status: 400,
                    code: "InvalidArgumentException",
                    message: format!(
                        "Records size exceeds 5 MB limit: {bytes} bytes of data and partition \
                         keys in one PutRecords call"
                    ),
                });
            }
            Ok(Put {
                stream: stream_of(r.stream_name, r.stream_arn)?,
                entries,
                single: false,
            })
        }
        other => Err(KinesisError {
            status: 400,
            code: "UnknownOperationException",
            message: format!(
                "{other:?}: this endpoint takes {PUT_RECORD}, {PUT_RECORDS} and \
                 {DESCRIBE_STREAM_SUMMARY} (X-Amz-Target)"
            ),
        }),
    }
}

fn stream_of(name: Option<String>, arn: Option<String>) -> Result<String, KinesisError> {
    match (name, arn) {
        (Some(n), _) if !n.is_empty() => Ok(n),
        (_, Some(a)) => Ok(a.rsplit('/').next().unwrap_or_default().to_owned()),
        _ => Err(KinesisError::validation(
            "1 validation error detected: StreamName or StreamARN is required",
        )),
    }
}

fn entry(e: Entry, at: &str) -> Result<PutEntry, KinesisError> {
    let missing = |field: &str| {
        KinesisError::validation(format!(
            "1 validation error detected: Value null at '{at}{field}' failed to satisfy \
             constraint: Member must not be null"
        ))
    };
    let key = e.partition_key.ok_or_else(|| missing("partitionKey"))?;
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_KEY_CHARS {
        return Err(KinesisError::validation(format!(
            "1 validation error detected: Value at '{at}partitionKey' failed to satisfy \
             constraint: Member must have length between 1 and {MAX_KEY_CHARS} (got {chars})"
        )));
    }
    if e.explicit_hash_key.is_some() {
        return Err(KinesisError::validation(format!(
            "'{at}explicitHashKey': the embedded stream routes by the partition key only; \
             leave ExplicitHashKey out"
        )));
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(e.data.ok_or_else(|| missing("data"))?)
        .map_err(|err| {
            KinesisError::validation(format!(
                "'{at}data' is not base64 (the SDKs encode the blob; the AWS CLI version 2 \
                 needs --cli-binary-format raw-in-base64-out for raw text): {err}"
            ))
        })?;
    if data.len() + key.len() > MAX_RECORD_BYTES {
        return Err(KinesisError::validation(format!(
            "1 validation error detected: Value at '{at}data' failed to satisfy constraint: \
             Member must have length less than or equal to {MAX_RECORD_BYTES} (a record of {} \
             bytes with its partition key)",
            data.len() + key.len()
        )));
    }
    Ok(PutEntry {
        partition_key: key,
        data,
    })
}

/// The answer to a put: `PutRecord`'s shard and sequence number (or its error), or
/// `PutRecords`' one result per record with the failed ones counted.
pub fn answer(put: &Put, outcomes: &[PutOutcome]) -> Result<Value, KinesisError> {
    if put.single {
        return match outcomes.first() {
            Some(PutOutcome::Ok { shard_id, seq }) => {
                Ok(json!({"ShardId": shard_id, "SequenceNumber": seq.to_string()}))
            }
            Some(PutOutcome::Failed { code, message }) => Err(KinesisError {
                status: if code == "ProvisionedThroughputExceededException" {
                    400
                } else {
                    500
                },
                code: if code == "ProvisionedThroughputExceededException" {
                    "ProvisionedThroughputExceededException"
                } else {
                    "InternalFailure"
                },
                message: message.clone(),
            }),
            None => Err(KinesisError {
                status: 500,
                code: "InternalFailure",
                message: "the stream answered nothing".into(),
            }),
        };
    }
    let records: Vec<Value> = outcomes
        .iter()
        .map(|o| match o {
            PutOutcome::Ok { shard_id, seq } => {
                json!({"ShardId": shard_id, "SequenceNumber": seq.to_string()})
            }
            PutOutcome::Failed { code, message } => {
                json!({"ErrorCode": code, "ErrorMessage": message})
            }
        })
        .collect();
    let failed = outcomes
        .iter()
        .filter(|o| matches!(o, PutOutcome::Failed { .. }))
        .count();
    Ok(json!({"FailedRecordCount": failed, "Records": records}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_put_records_request_reads_as_its_entries() {
        let body = json!({"StreamName": "likes", "Records": [
            {"Data": b64("{\"a\":1}"), "PartitionKey": "p1"},
            {"Data": b64("x"), "PartitionKey": "p2"},
        ]});
        let put = read(PUT_RECORDS, body.to_string().as_bytes()).unwrap();
        assert_eq!(put.stream, "likes");
        assert!(!put.single);
        let got: Vec<(&str, &[u8])> = put
            .entries
            .iter()
            .map(|e| (e.partition_key.as_str(), e.data.as_slice()))
            .collect();
        assert_eq!(got, [("p1", &b"{\"a\":1}"[..]), ("p2", &b"x"[..])]);
    }

    #[test]
    fn kinesis_s_limits_are_refused_as_kinesis_refuses_them() {
        let many: Vec<Value> = (0..=MAX_RECORDS)
            .map(|i| json!({"Data": b64("x"), "PartitionKey": format!("p{i}")}))
            .collect();
        let e = read(
            PUT_RECORDS,
            json!({"StreamName": "s", "Records": many})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        assert_eq!((e.status, e.code), (400, "ValidationException"));
        assert!(e.message.contains("500"), "{e:?}");
        let long_key = "k".repeat(MAX_KEY_CHARS + 1);
        let e = read(
            PUT_RECORD,
            json!({"StreamName": "s", "Data": b64("x"), "PartitionKey": long_key})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        assert!(e.message.contains("partitionKey"), "{e:?}");
        let big = "x".repeat(MAX_RECORD_BYTES);
        let e = read(
            PUT_RECORD,
            json!({"StreamName": "s", "Data": b64(&big), "PartitionKey": "p"})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        assert!(
            e.message.contains("records") || e.message.contains("data"),
            "{e:?}"
        );
        let e = read(
            PUT_RECORD,
            json!({"StreamName": "s", "Data": "not base64!", "PartitionKey": "p"})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        assert!(e.message.contains("base64"), "{e:?}");
        let e = read("Kinesis_20131202.DeleteStream", b"{}").unwrap_err();
        assert_eq!(e.code, "UnknownOperationException");
    }

    #[test]
    fn a_partial_failure_is_answered_per_record() {
        let put = Put {
            stream: "s".into(),
            entries: vec![],
            single: false,
        };
        let outcomes = [
            PutOutcome::Ok {
                shard_id: "shardId-000000000000".into(),
                seq: tally_core::SeqNo::parse("42").unwrap(),
            },
            PutOutcome::Failed {
                code: "ProvisionedThroughputExceededException".into(),
                message: "Rate exceeded for shard".into(),
            },
        ];
        let v = answer(&put, &outcomes).unwrap();
        assert_eq!(v["FailedRecordCount"], 1);
        assert_eq!(v["Records"][0]["SequenceNumber"], "42");
        assert_eq!(
            v["Records"][1]["ErrorCode"],
            "ProvisionedThroughputExceededException"
        );
    }
}
