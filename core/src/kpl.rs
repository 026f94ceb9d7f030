//! Records written by the Kinesis Producer Library's aggregation: one Kinesis record holding many
//! user records. The format: 4 magic bytes, a protobuf `AggregatedRecord`, and the MD5 of the
//! protobuf bytes. A record without the magic bytes is one user record, as written.
//!
//! The counter and analytics fold every user record of one Kinesis record into the same window,
//! so a window's end — and so a checkpoint — is always a whole Kinesis record: a crash can never
//! fall between two user records of one aggregate, and no sub-sequence number is needed.

use md5::{Digest, Md5};

/// The first bytes of an aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

#[derive(Clone, PartialEq, prost::Message)]
struct AggregatedRecord {
    #[prost(string, repeated, tag = "1")]
    partition_key_table: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    explicit_hash_key_table: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    records: Vec<Record>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Record {
    #[prost(uint64, required, tag = "1")]
    partition_key_index: u64,
    #[prost(uint64, optional, tag = "2")]
    explicit_hash_key_index: Option<u64>,
    #[prost(bytes = "vec", required, tag = "3")]
    data: Vec<u8>,
    #[prost(message, repeated, tag = "4")]
    tags: Vec<Tag>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Tag {
    #[prost(string, required, tag = "1")]
    key: String,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
}

/// A Kinesis record's user records.
#[derive(Debug, PartialEq, Eq)]
pub enum UserRecords<'a> {
    /// Not aggregated: the record is the one user record.
    One(&'a [u8]),
    /// The user records of an aggregate, in order.
    Aggregated(Vec<Vec<u8>>),
}

/// Splits a Kinesis record into its user records. An aggregate that is corrupt (bad digest,
/// undecodable protobuf, a partition-key index outside its table) is an error naming why: the
/// caller dead-letters the whole record.
pub fn user_records(data: &[u8]) -> Result<UserRecords<'_>, String> {
    let Some(rest) = data.strip_prefix(&MAGIC) else {
        return Ok(UserRecords::One(data));
    };
    if rest.len() < DIGEST_LEN {
        return Err("KPL aggregate: shorter than its MD5 digest".into());
    }
    let (body, digest) = rest.split_at(rest.len() - DIGEST_LEN);
    if Md5::digest(body).as_slice() != digest {
        return Err("KPL aggregate: MD5 digest does not match its contents".into());
    }
    let agg = <AggregatedRecord as prost::Message>::decode(body)
        .map_err(|e| format!("KPL aggregate: not a valid AggregatedRecord: {e}"))?;
    let keys = agg.partition_key_table.len() as u64;
    let mut out = Vec::with_capacity(agg.records.len());
    for (i, r) in agg.records.into_iter().enumerate() {
        if r.partition_key_index >= keys {
            return Err(format!(
                "KPL aggregate: user record {i} names partition key {} of {keys}",
                r.partition_key_index
            ));
        }
        out.push(r.data);
    }
    Ok(UserRecords::Aggregated(out))
}

/// An aggregate of `user_records`, each with partition key `key`, for the unit tests (the
/// end-to-end test uses AWS's own aggregator; tally's producer puts one event per record).
#[cfg(test)]
fn aggregate(key: &str, user_records: &[&[u8]]) -> Vec<u8> {
    let agg = AggregatedRecord {
        partition_key_table: vec![key.to_owned()],
        explicit_hash_key_table: Vec::new(),
        records: user_records
            .iter()
            .map(|d| Record {
                partition_key_index: 0,
                explicit_hash_key_index: None,
                data: d.to_vec(),
                tags: Vec::new(),
            })
            .collect(),
    };
    let body = prost::Message::encode_to_vec(&agg);
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&Md5::digest(&body));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_records_pass_through() {
        assert_eq!(user_records(b"{}"), Ok(UserRecords::One(&b"{}"[..])));
    }

    #[test]
    fn aggregates_round_trip_and_corruption_is_named() {
        let a = aggregate("p1", &[b"one", b"two", b""]);
        assert_eq!(
            user_records(&a),
            Ok(UserRecords::Aggregated(vec![
                b"one".to_vec(),
                b"two".to_vec(),
                Vec::new()
            ]))
        );
        let mut bad = a.clone();
        bad[6] ^= 1;
        assert!(user_records(&bad).unwrap_err().contains("MD5"));
        assert!(user_records(&MAGIC).unwrap_err().contains("shorter"));
        // A valid digest over bytes that are no AggregatedRecord.
        let body = [0xFFu8, 0xFF, 0xFF];
        let mut junk = MAGIC.to_vec();
        junk.extend_from_slice(&body);
        junk.extend_from_slice(&Md5::digest(body));
        assert!(user_records(&junk)
            .unwrap_err()
            .contains("not a valid AggregatedRecord"));
    }
}
