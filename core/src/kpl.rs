//! Records written by the Kinesis Producer Library's aggregation: one Kinesis record holding many
//! user records. The format: 4 magic bytes, a protobuf `AggregatedRecord`, and the MD5 of the
//! protobuf bytes. A record without the magic bytes is one user record, as written.
//!
//! A user record's place in its aggregate is its sub-sequence number (from 0): the counter's
//! windows, and so its checkpoints, may end between two user records of one Kinesis record
//! ([`crate::seq::Position`]).

use std::ops::Range;

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

impl UserRecords<'_> {
    /// How many user records.
    pub fn len(&self) -> usize {
        match self {
            UserRecords::One(_) => 1,
            UserRecords::Aggregated(v) => v.len(),
        }
    }

    /// Whether there are none (an aggregate of no records).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The user records' bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// User record `i`'s bytes.
    pub fn get(&self, i: usize) -> &[u8] {
        match self {
            UserRecords::One(d) => d,
            UserRecords::Aggregated(v) => &v[i],
        }
    }

    /// The user records from index `from` on, at most `max` of them (at least one): their
    /// indexes, and how much of the record that takes. A window that took part of an aggregate
    /// goes on from the next index in the next window.
    pub fn part(&self, from: u32, max: usize) -> (Range<usize>, Took) {
        let n = self.len();
        let start = (from as usize).min(n);
        let stop = start.saturating_add(max.max(1)).min(n);
        let took = match self {
            UserRecords::Aggregated(_) if stop < n => Took::Through(stop as u32 - 1),
            _ => Took::Whole,
        };
        (start..stop, took)
    }
}

/// How much of a Kinesis record a window took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Took {
    /// The record, to its last user record.
    Whole,
    /// Its user records through this sub-sequence number; the next window goes on after it.
    Through(u32),
}

impl Took {
    /// The sub-sequence number of a position ending here (`None`: the whole record).
    pub fn sub(self) -> Option<u32> {
        match self {
            Took::Whole => None,
            Took::Through(k) => Some(k),
        }
    }
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

/// An aggregate of `user_records`, each with partition key `key`, for tests and benchmarks
/// (tally's producer puts one event per record; the end-to-end tests use AWS's own aggregator).
pub fn aggregate(key: &str, user_records: &[&[u8]]) -> Vec<u8> {
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
        let one = user_records(b"{}").unwrap();
        assert_eq!(one, UserRecords::One(&b"{}"[..]));
        assert_eq!(one.part(0, 5), (0..1, Took::Whole));
        assert_eq!(one.part(1, 5), (1..1, Took::Whole), "nothing left of it");
    }

    #[test]
    fn parts_of_an_aggregate() {
        let a = aggregate("p", &[b"0", b"1", b"2", b"3", b"4"]);
        let users = user_records(&a).unwrap();
        assert_eq!(users.part(0, 2), (0..2, Took::Through(1)));
        assert_eq!(users.part(2, 2), (2..4, Took::Through(3)));
        assert_eq!(users.part(4, 2), (4..5, Took::Whole));
        assert_eq!(users.part(0, 5), (0..5, Took::Whole));
        assert_eq!(users.part(3, 0), (3..4, Took::Through(3)), "at least one");
        assert_eq!(users.get(3), b"3");
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
