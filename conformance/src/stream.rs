//! The `Stream` port: puts and reads, from every start position.

use std::collections::{BTreeMap, HashMap};

use tally_core::ports::{PutEntry, PutOutcome, StartPosition, Stream, StreamRecord};

async fn read_all(stream: &dyn Stream, shard: &str, from: StartPosition) -> Vec<StreamRecord> {
    let mut r = stream.open(shard, from).await.unwrap();
    let mut out = Vec::new();
    let mut empties = 0;
    loop {
        let b = r.next_batch(100).await.unwrap();
        if b.records.is_empty() {
            empties += 1;
            // Kinesis may answer empty while records are still ahead; a few empty reads in a row
            // at the tip mean caught up.
            if b.shard_end || (empties >= 3 && b.millis_behind_latest.unwrap_or(0) == 0) {
                return out;
            }
        } else {
            empties = 0;
            out.extend(b.records);
        }
    }
}

/// Stream: puts are routed by partition key, read back in order, from every start position.
pub async fn stream_put_and_read(stream: &dyn Stream) {
    let shards = stream.list_shards().await.unwrap();
    assert!(
        shards.len() >= 2,
        "the suite needs a stream of at least 2 shards"
    );
    let entries: Vec<PutEntry> = (0..120)
        .map(|i| PutEntry {
            partition_key: format!("post-{}", i % 30),
            data: format!("record {i}").into_bytes(),
        })
        .collect();
    let outcomes = stream.put_records(&entries).await.unwrap();
    assert_eq!(outcomes.len(), entries.len());
    let mut shard_of_key: HashMap<String, String> = HashMap::new();
    for (e, o) in entries.iter().zip(&outcomes) {
        let PutOutcome::Ok { shard_id, .. } = o else {
            panic!("put failed: {o:?}")
        };
        let prev = shard_of_key.insert(e.partition_key.clone(), shard_id.clone());
        assert!(prev.is_none_or(|p| &p == shard_id), "one key, one shard");
    }
    let mut seen = 0;
    for s in &shards {
        let recs = read_all(stream, &s.shard_id, StartPosition::TrimHorizon).await;
        for w in recs.windows(2) {
            assert!(
                w[0].seq < w[1].seq,
                "sequence numbers increase within a shard"
            );
        }
        for r in &recs {
            assert_eq!(shard_of_key[&r.partition_key], s.shard_id);
            assert!(r.arrival_ms > 0);
        }
        // Order within a key is the put order.
        let mut per_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for r in &recs {
            let i: usize = String::from_utf8_lossy(&r.data)
                .trim_start_matches("record ")
                .parse()
                .unwrap();
            per_key.entry(&r.partition_key).or_default().push(i);
        }
        for v in per_key.values() {
            assert!(v.windows(2).all(|w| w[0] < w[1]));
        }
        seen += recs.len();
        if recs.len() >= 2 {
            let mid = &recs[recs.len() / 2];
            let after = read_all(
                stream,
                &s.shard_id,
                StartPosition::AfterSequence(mid.seq.clone()),
            )
            .await;
            assert_eq!(
                after,
                recs[recs.len() / 2 + 1..].to_vec(),
                "AFTER_SEQUENCE_NUMBER resumes right after"
            );
            let at_seq = read_all(
                stream,
                &s.shard_id,
                StartPosition::AtSequence(mid.seq.clone()),
            )
            .await;
            assert_eq!(
                at_seq,
                recs[recs.len() / 2..].to_vec(),
                "AT_SEQUENCE_NUMBER resumes at the record (a checkpoint inside an aggregate)"
            );
            let at = read_all(
                stream,
                &s.shard_id,
                StartPosition::AtTimestamp(recs[0].arrival_ms),
            )
            .await;
            assert_eq!(
                at, recs,
                "AT_TIMESTAMP of the first arrival reads everything"
            );
        }
    }
    assert_eq!(seen, entries.len(), "every record is read exactly once");
    // LATEST sees only what comes after it.
    let s0 = &shards[0].shard_id;
    let mut latest = stream.open(s0, StartPosition::Latest).await.unwrap();
    let b = latest.next_batch(100).await.unwrap();
    assert!(b.records.is_empty());
    let key = shard_of_key
        .iter()
        .find(|(_, s)| *s == s0)
        .map(|(k, _)| k.clone())
        .unwrap();
    stream
        .put_records(&[PutEntry {
            partition_key: key,
            data: b"late".to_vec(),
        }])
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..20 {
        got.extend(latest.next_batch(100).await.unwrap().records);
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, b"late");
}
