//! Dead letters: what a consumer could not count, kept with where it came from — a malformed
//! record (its shard and position, its first bytes, why), or a **gap**: records the stream no
//! longer had when an application came to apply them (its retention trimmed them), given up on
//! record instead of stalling the shard.
//!
//! Each letter has its own identity in the store ([`DeadLetter::key`]), so no letter ever takes
//! another's place: a malformed record is keyed by its position (written again by a retried
//! window, it is the same item), a gap by the application and the range it gave up — the
//! checkpoint it starts after and the position it ends at — which no other gap of that
//! application and shard shares, since each moves the checkpoint past its range.

use crate::seq::Position;

/// The longest prefix of a malformed record's bytes that is kept in its dead letter.
pub const DEAD_LETTER_MAX_BYTES: usize = 4096;
/// The longest reason kept in a dead letter (a decode error may quote the offending value).
pub const DEAD_LETTER_MAX_REASON: usize = 512;

/// Separates a gap's key from a record's: a position never holds it.
const GAP_KEY: &str = "/gap/";
/// A gap that runs to the shard's end, in its key.
const TO_THE_END: &str = "end";

/// A record that could not be counted, or a range of records that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The shard it was read from.
    pub shard_id: String,
    /// A malformed record's sequence number, with the user record's sub-sequence number inside a
    /// KPL aggregate; for a gap, the checkpoint the lost records come after (`0`: the shard's
    /// start).
    pub seq: Position,
    /// Its arrival time in the stream (a gap: when it was recorded).
    pub arrival_ms: i64,
    /// Why it was rejected (a gap's starts with `gap:`).
    pub reason: String,
    /// Its first [`DEAD_LETTER_MAX_BYTES`] bytes.
    pub data: Vec<u8>,
    /// Its full size in bytes: `data` and `reason` are cut so that a record of any size Kinesis
    /// accepts (up to 10 MiB) fits one store item (DynamoDB: 400 KB), and this says how much was.
    pub size: u64,
    /// Set when the letter records a gap rather than a record.
    pub gap: Option<Gap>,
}

/// The records a gap gave up: those after the letter's `seq` through `through`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The application that lost them (each has its own checkpoints, so each its own gaps).
    pub app: String,
    /// The last position given up, where the checkpoint moved to (`None`: to the shard's end —
    /// the shard is finished with the gap).
    pub through: Option<Position>,
}

impl DeadLetter {
    /// A gap's letter: `app` gave up the records after `after` (`None`: the shard's start)
    /// through `through` (`None`: the shard's end), for `why`.
    pub fn gap(
        shard_id: &str,
        app: &str,
        after: Option<&Position>,
        through: Option<&Position>,
        at_ms: i64,
        why: &str,
    ) -> DeadLetter {
        DeadLetter {
            shard_id: shard_id.to_owned(),
            seq: after.cloned().unwrap_or_else(Position::start),
            arrival_ms: at_ms,
            reason: truncate_utf8(&format!("gap: {why}"), DEAD_LETTER_MAX_REASON),
            data: Vec::new(),
            size: 0,
            gap: Some(Gap {
                app: app.to_owned(),
                through: through.cloned(),
            }),
        }
    }

    /// Its identity within its shard, as the store keys it (the sort key on DynamoDB): a
    /// record's position, or for a gap `<after>/gap/<app>/<through|end>`.
    pub fn key(&self) -> String {
        match &self.gap {
            None => self.seq.to_string(),
            Some(g) => format!(
                "{}{GAP_KEY}{}/{}",
                self.seq,
                g.app,
                g.through
                    .as_ref()
                    .map_or_else(|| TO_THE_END.to_owned(), Position::to_string)
            ),
        }
    }

    /// The position and gap a stored key names (`None`: not a key of [`DeadLetter::key`]'s).
    pub fn parse_key(key: &str) -> Option<(Position, Option<Gap>)> {
        let Some((after, rest)) = key.split_once(GAP_KEY) else {
            return Some((Position::parse(key)?, None));
        };
        let (app, through) = rest.rsplit_once('/')?;
        let through = match through {
            TO_THE_END => None,
            t => Some(Position::parse(t)?),
        };
        let gap = Gap {
            app: app.to_owned(),
            through,
        };
        Some((Position::parse(after)?, Some(gap)))
    }
}

/// `s` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
pub fn truncate_utf8(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut cut = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(s: &str) -> Position {
        Position::parse(s).unwrap()
    }

    fn record(seq: &str, n: usize) -> DeadLetter {
        DeadLetter {
            shard_id: "s".into(),
            seq: pos(seq),
            arrival_ms: 0,
            reason: "r".into(),
            data: vec![0; n],
            size: n as u64,
            gap: None,
        }
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate_utf8("abc", 3), "abc");
        assert_eq!(truncate_utf8("abcdef", 5), "ab…");
        let t = truncate_utf8(&"é".repeat(100), 10);
        assert!(t.len() <= 10 && t.ends_with('…'), "{t}");
    }

    /// A gap never shares a key with the malformed record at its checkpoint, nor with another
    /// gap of the shard (another range, or another application), and every key reads back.
    #[test]
    fn every_letter_has_its_own_key() {
        let c = pos("17");
        let letters = [
            record("17", 3),
            DeadLetter {
                seq: pos("17:4"),
                ..record("17", 3)
            },
            DeadLetter::gap("s", "counter", Some(&c), Some(&pos("40")), 0, "trimmed"),
            DeadLetter::gap("s", "counter", Some(&c), None, 0, "gone"),
            DeadLetter::gap("s", "analytics", Some(&c), Some(&pos("40")), 0, "trimmed"),
            DeadLetter::gap("s", "counter", Some(&pos("40")), Some(&pos("41:2")), 0, "x"),
            DeadLetter::gap("s", "counter", None, Some(&pos("9")), 0, "x"),
        ];
        let keys: std::collections::BTreeSet<String> = letters.iter().map(|d| d.key()).collect();
        assert_eq!(keys.len(), letters.len(), "{keys:?}");
        for d in &letters {
            assert_eq!(
                DeadLetter::parse_key(&d.key()),
                Some((d.seq.clone(), d.gap.clone())),
                "{}",
                d.key()
            );
        }
        assert_eq!(
            letters[0].key(),
            "17",
            "a record's key is its position, as before"
        );
        assert_eq!(letters[6].seq, Position::start());
        assert!(letters[2].reason.starts_with("gap: "));
        assert_eq!(DeadLetter::parse_key("17/gap/counter/x"), None);
    }
}
