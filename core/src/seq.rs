//! Kinesis sequence numbers, and positions in a shard.
//!
//! A sequence number is a decimal string of up to 129 digits, never parsed into an integer: two
//! compare by length first, then by bytes, which is numeric order for decimal strings without
//! leading zeros. A [`Position`] is a sequence number, or one user record inside the KPL
//! aggregate at that sequence number (its sub-sequence number): checkpoints and window ends are
//! positions, so that they can fall between two user records of one Kinesis record.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

/// A sequence number as the stream gave it, ordered numerically. Held inline up to 23 digits
/// (the embedded stream's numbers: making or copying one allocates nothing, and a reader makes
/// one per record); a longer one (Kinesis's 56) is shared, so a copy is a count, not a copy of
/// its digits.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqNo(SmolStr);

impl SeqNo {
    /// Wraps a decimal string. Returns `None` unless it is 1–129 ASCII digits.
    pub fn parse(s: &str) -> Option<SeqNo> {
        let ok = !s.is_empty() && s.len() <= 129 && s.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| SeqNo(SmolStr::new(s)))
    }

    /// The sequence number `n` (a number the embedded stream gives): no string made and parsed.
    pub fn of_number(n: u64) -> SeqNo {
        SeqNo(smol_str::format_smolstr!("{n}"))
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

/// A place in a shard, up to which records are covered: a whole Kinesis record (`sub: None`), or
/// the user records `0..=k` of the KPL aggregate at `seq` (`sub: Some(k)`, its sub-sequence
/// number), the rest of that aggregate not yet. Ordered as the shard is read: by sequence number,
/// then sub-sequence number, a whole record after every part of it.
///
/// Stored and shown as `seq` or `seq:k` (its `Display` and [`Position::parse`]), so that a
/// position written by a tally that knew only whole records reads back as the same position.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Position {
    /// The Kinesis record.
    pub seq: SeqNo,
    /// The user record inside a KPL aggregate (`None`: the whole record).
    pub sub: Option<u32>,
}

impl Position {
    /// Before every record of a shard (`0`: no Kinesis or embedded sequence number is that low),
    /// where a gap that starts at the shard's start is said to come after.
    pub fn start() -> Position {
        Position::whole(SeqNo(SmolStr::new_static("0")))
    }

    /// The whole record `seq`.
    pub fn whole(seq: SeqNo) -> Position {
        Position { seq, sub: None }
    }

    /// Parses `seq` or `seq:k`.
    pub fn parse(s: &str) -> Option<Position> {
        match s.split_once(':') {
            None => SeqNo::parse(s).map(Position::whole),
            Some((seq, sub)) => {
                let sub = sub
                    .parse()
                    .ok()
                    .filter(|_| sub.bytes().all(|b| b.is_ascii_digit()))?;
                Some(Position {
                    seq: SeqNo::parse(seq)?,
                    sub: Some(sub),
                })
            }
        }
    }

    /// The first user record of `seq` not covered by this position, when it covers part of that
    /// record: where reading the record resumes (0: the record is not covered at all).
    pub fn resume_in(this: Option<&Position>, seq: &SeqNo) -> u32 {
        match this {
            Some(Position {
                seq: s,
                sub: Some(k),
            }) if s == seq => k + 1,
            _ => 0,
        }
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> Ordering {
        // `None` (the whole record) sorts after every `Some`.
        let rank = |p: &Position| (p.sub.is_none(), p.sub);
        self.seq
            .cmp(&other.seq)
            .then_with(|| rank(self).cmp(&rank(other)))
    }
}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sub {
            None => f.write_str(self.seq.as_str()),
            Some(k) => write!(f, "{}:{k}", self.seq.as_str()),
        }
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Position({self})")
    }
}

impl SeqNo {
    /// The decimal number one below, `""` for zero: what lets a position inside an aggregate have
    /// a marker below the whole record's (`summary::marker`).
    pub fn predecessor(&self) -> String {
        let mut digits = self.0.as_bytes().to_vec();
        for d in digits.iter_mut().rev() {
            if *d == b'0' {
                *d = b'9';
            } else {
                *d -= 1;
                break;
            }
        }
        if self.0.bytes().all(|b| b == b'0') {
            return String::new();
        }
        // Only a leading 1 that became 0 can be a leading zero (10…0 → 09…9).
        let start = usize::from(digits.len() > 1 && digits[0] == b'0');
        String::from_utf8(digits[start..].to_vec()).unwrap_or_default()
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

    #[test]
    fn positions_round_trip_and_order_as_read() {
        for s in ["7", "7:0", "7:12", &"9".repeat(129)] {
            assert_eq!(Position::parse(s).unwrap().to_string(), s);
        }
        for bad in ["", "7:", ":1", "7:x", "7:-1", "7:+1", "7:1:2", "a:1"] {
            assert!(Position::parse(bad).is_none(), "{bad:?}");
        }
        let p = |s: &str| Position::parse(s).unwrap();
        let read_order = ["6", "7:0", "7:1", "7:10", "7", "8:0", "8", "10:3"];
        for w in read_order.windows(2) {
            assert!(p(w[0]) < p(w[1]), "{} < {}", w[0], w[1]);
        }
        let seven = SeqNo::parse("7").unwrap();
        assert_eq!(Position::resume_in(Some(&p("7:3")), &seven), 4);
        assert_eq!(Position::resume_in(Some(&p("7")), &seven), 0);
        assert_eq!(Position::resume_in(Some(&p("6:3")), &seven), 0);
        assert_eq!(Position::resume_in(None, &seven), 0);
    }

    #[test]
    fn predecessors() {
        let pred = |s: &str| SeqNo::parse(s).unwrap().predecessor();
        assert_eq!(pred("0"), "");
        assert_eq!(pred("1"), "0");
        assert_eq!(pred("10"), "9");
        assert_eq!(pred("1000"), "999");
        assert_eq!(
            pred("49590338271490256608559692538361571095921575989136588900"),
            "49590338271490256608559692538361571095921575989136588899"
        );
    }

    proptest! {
        #[test]
        fn agrees_with_integer_order(a in 0u128.., b in 0u128..) {
            let (sa, sb) = (SeqNo::parse(&a.to_string()).unwrap(), SeqNo::parse(&b.to_string()).unwrap());
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
        }

        #[test]
        fn predecessor_is_one_below(a in 1u128..) {
            prop_assert_eq!(SeqNo::parse(&a.to_string()).unwrap().predecessor(), (a - 1).to_string());
        }
    }
}
