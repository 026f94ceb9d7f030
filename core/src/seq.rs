//! Kinesis sequence numbers: decimal strings of up to 129 digits.
//!
//! They are never parsed into integers. Two sequence numbers compare by length first, then by
//! bytes, which is numeric order for decimal strings without leading zeros.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A sequence number as the stream gave it, ordered numerically.
#[derive(PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqNo(String);

impl Clone for SeqNo {
    fn clone(&self) -> SeqNo {
        SeqNo(self.0.clone())
    }

    /// Reuses the allocation: a window remembers its last record's number once per record.
    fn clone_from(&mut self, source: &SeqNo) {
        self.0.clone_from(&source.0);
    }
}

impl SeqNo {
    /// Wraps a decimal string. Returns `None` unless it is 1–129 ASCII digits.
    pub fn parse(s: &str) -> Option<SeqNo> {
        let ok = !s.is_empty() && s.len() <= 129 && s.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| SeqNo(s.to_owned()))
    }

    /// The decimal string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for SeqNo {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.as_bytes().cmp(other.0.as_bytes()))
    }
}

impl PartialOrd for SeqNo {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeqNo({})", self.0)
    }
}

impl fmt::Display for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(a: &str, b: &str, expected: Ordering) {
        let (a, b) = (SeqNo::parse(a).unwrap(), SeqNo::parse(b).unwrap());
        assert_eq!(a.cmp(&b), expected, "{a} vs {b}");
    }

    #[test]
    fn orders_by_length_then_bytes() {
        check("9", "10", Ordering::Less);
        check("10", "9", Ordering::Greater);
        check(
            "49590338271490256608559692538361571095921575989136588898",
            "49590338271490256608559692538361571095921575989136588899",
            Ordering::Less,
        );
        check("123", "123", Ordering::Equal);
        check(
            &"9".repeat(128),
            &format!("1{}", "0".repeat(128)),
            Ordering::Less,
        );
    }

    #[test]
    fn rejects_non_decimal() {
        for bad in ["", "12a", "-1", " 1", &"1".repeat(130)] {
            assert!(SeqNo::parse(bad).is_none(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn agrees_with_integer_order(a in 0u128.., b in 0u128..) {
            let (sa, sb) = (SeqNo::parse(&a.to_string()).unwrap(), SeqNo::parse(&b.to_string()).unwrap());
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
        }
    }
}
