//! Partition keys to shards, as Kinesis does it: the MD5 of the key as a 128-bit integer, which
//! falls into exactly one open shard's hash-key range.

use md5::{Digest, Md5};

/// The 128-bit hash key of a partition key.
pub fn hash_key(partition_key: &str) -> u128 {
    u128::from_be_bytes(Md5::digest(partition_key.as_bytes()).into())
}

/// `n` equal, contiguous ranges covering the whole 128-bit space.
pub fn even_ranges(n: usize) -> Vec<(u128, u128)> {
    let n = n.max(1) as u128;
    let step = u128::MAX / n;
    (0..n)
        .map(|i| {
            (
                i * step,
                if i == n - 1 {
                    u128::MAX
                } else {
                    (i + 1) * step - 1
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_everything_once() {
        let r = even_ranges(3);
        assert_eq!(r[0].0, 0);
        assert_eq!(r[2].1, u128::MAX);
        assert_eq!(r[0].1 + 1, r[1].0);
        assert_eq!(r[1].1 + 1, r[2].0);
        // Known MD5: "p1".
        assert_eq!(
            hash_key("p1"),
            u128::from_str_radix("ec6ef230f1828039ee794566b9c58adc", 16).unwrap()
        );
    }
}
