//! The embedded stream's batch (a row of its `batches`: one put's records for one shard): how
//! its records are laid out in the row's `records` — each record's partition key, then its
//! data, each prefixed by its length (u32, little-endian) — and read back strictly: a batch
//! that does not decode is an error naming it, never records skipped.

use crate::ports::{PortError, PortResult};

/// Appends one record.
pub fn push(out: &mut Vec<u8>, partition_key: &str, data: &[u8]) {
    for part in [partition_key.as_bytes(), data] {
        // A record is at most 1 MiB (checked at the put): its length fits in a u32.
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(part);
    }
}

/// The records of a batch, in order: (partition key, data), borrowed from it (a reader copies
/// only the records it takes). `item` names the batch in errors (`batches <shard>/<last_seq>`).
pub fn records<'a>(mut blob: &'a [u8], item: &str) -> PortResult<Vec<(&'a str, &'a [u8])>> {
    fn part<'a>(blob: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = blob.split_first_chunk::<4>()?;
        let (v, rest) = rest.split_at_checked(u32::from_le_bytes(*len) as usize)?;
        *blob = rest;
        Some(v)
    }
    let corrupt = |what: &str| PortError::Corrupt {
        item: item.to_owned(),
        detail: format!("`records` {what}"),
    };
    let mut out = Vec::new();
    while !blob.is_empty() {
        let (key, data) = part(&mut blob)
            .zip(part(&mut blob))
            .ok_or_else(|| corrupt("end inside a record"))?;
        let key = std::str::from_utf8(key)
            .map_err(|_| corrupt("hold a partition key that is not UTF-8"))?;
        out.push((key, data));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reads_back_and_a_cut_one_is_named() {
        let mut blob = Vec::new();
        push(&mut blob, "p1", b"one");
        push(&mut blob, "p2", b"");
        assert_eq!(
            records(&blob, "b").unwrap(),
            [("p1", &b"one"[..]), ("p2", &b""[..])]
        );
        for bad in [
            &blob[..blob.len() - 1],
            &blob[..3],
            &[1, 0, 0, 0, 0xff, 0, 0, 0, 0],
        ] {
            let e = records(bad, "batches s/9").unwrap_err().to_string();
            assert!(e.contains("batches s/9") && e.contains("`records`"), "{e}");
        }
    }
}
