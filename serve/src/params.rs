//! The read API's parameters as its OpenAPI document (`openapi.json`) states them, and no wider
//! or narrower: every value the document admits is taken, every value it does not is a 400 naming
//! the parameter. Whole numbers (`integer`: also written `732.0`), times in ms since the epoch
//! within the document's bounds, durations of the document's grammar, and the dead letters'
//! page cursor.

use serde::de::{self, Deserializer, Visitor};

use super::{bad_request, ApiError};

/// The latest time the API takes (9999-12-31T23:59:59.999Z, in ms since the epoch).
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// Deserializes an optional whole number of a query string as JSON Schema's `integer` means it:
/// `732` or `732.0` (a query string's values are all text).
pub fn whole<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    whole_of(d, Whole { text: true })
}

/// The same in a JSON body, where a number is a JSON number: `732` or `732.0`, never the string
/// `"732"` (`null`: absent).
pub fn json_whole<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    whole_of(d, Whole { text: false })
}

/// What reads a whole number; `text`: also from a string.
#[derive(Clone, Copy)]
struct Whole {
    text: bool,
}

impl<'de> Visitor<'de> for Whole {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("{v} is too large")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // i64::MAX as f64 rounds up to 2^63, which is out of range: hence `<`.
        if v.fract() == 0.0 && v >= i64::MIN as f64 && v < i64::MAX as f64 {
            Ok(Some(v as i64))
        } else {
            Err(E::custom(format!("expected a whole number, got {v}")))
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if !self.text {
            return Err(E::custom(format!(
                "expected a whole number, got the string {v:?}"
            )));
        }
        if let Ok(n) = v.parse::<i64>() {
            return Ok(Some(n));
        }
        match v.parse::<f64>() {
            Ok(f) if f.is_finite() && !v.contains(['e', 'E', 'x']) => self.visit_f64(f),
            _ => Err(E::custom(format!("expected a whole number, got {v:?}"))),
        }
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
        d.deserialize_any(self)
    }
}

fn whole_of<'de, D, T>(d: D, w: Whole) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64>,
{
    match d.deserialize_option(w)? {
        None => Ok(None),
        Some(n) => T::try_from(n)
            .map(Some)
            .map_err(|_| de::Error::custom(format!("{n} is out of range"))),
    }
}

/// The ids of one counts call, checked: 1 to [`tally_core::ports::MAX_POSTS_PER_CALL`], each a valid post id (a
/// bad one is named, with its place in the list).
pub fn check_ids(ids: &[String]) -> std::result::Result<(), String> {
    use tally_core::ports::MAX_POSTS_PER_CALL;
    if ids.is_empty() {
        return Err("`ids`: give at least one post id".into());
    }
    if ids.len() > MAX_POSTS_PER_CALL {
        return Err(format!(
            "`ids`: at most {MAX_POSTS_PER_CALL} post ids per call, got {}",
            ids.len()
        ));
    }
    for (i, id) in ids.iter().enumerate() {
        tally_core::event::check_id("post_id", id).map_err(|e| match ids.len() {
            1 => format!("`ids`: {id:?} is not a post id: {e}"),
            n => format!("`ids`: {id:?} (id {} of {n}) is not a post id: {e}", i + 1),
        })?;
    }
    Ok(())
}

/// A time parameter in ms since the epoch, or a 400 naming it.
pub fn time_param(name: &str, v: Option<i64>) -> Result<Option<i64>, ApiError> {
    match v {
        Some(t) if !(0..=MAX_TIME_MS).contains(&t) => Err(bad_request(format!(
            "`{name}` must be a time in ms since the epoch, between 0 and {MAX_TIME_MS}, got {t}"
        ))),
        _ => Ok(v),
    }
}

/// A `since` duration (`15m`, `2h`, `7d`: as the document's pattern states it, a whole number of
/// 1 to 9 digits without a leading zero, and a unit) as the time it reaches back to, in
/// ms since the epoch (`now_ms` less the duration; a duration longer than the time since the
/// epoch reaches back to it: every like), or a 400 naming it. A point in time is `since_ms`.
pub fn since_param(name: &str, v: &str, now_ms: i64) -> Result<i64, ApiError> {
    let wrong = || {
        bad_request(format!(
            "`{name}` must be a duration: a whole number and a unit, s, m, h or d (15m, 2h, 7d), \
             got {v:?}; for a point in time, give `since_ms`"
        ))
    };
    if !v.is_ascii() {
        return Err(wrong());
    }
    let (digits, unit) = v.split_at(v.len().saturating_sub(1));
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(wrong()),
    };
    let fits = (1..=9).contains(&digits.len())
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit());
    if !fits {
        return Err(wrong());
    }
    let n: i64 = digits.parse().map_err(|_| wrong())?;
    Ok(now_ms.saturating_sub(n.saturating_mul(unit_ms)).max(0))
}

/// Encodes a page's position (the last letter's shard and key) as its `next` cursor.
pub fn encode_cursor(c: &tally_core::ports::LetterCursor) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}\n{}", c.shard_id, c.key))
}

/// The position a cursor names. Every string of the document's cursor pattern (the URL-safe
/// base64 alphabet, 1 to 1,024 characters) names one: a page's `next` decodes to the page's last
/// letter; any other string decodes (leniently: trailing bits and a dangling last character
/// ignored, bytes that are not UTF-8 replaced) to some position in key order — the shard before
/// its first newline, the key after it, an empty one the start — and the page starts after it.
/// `None`: not of the pattern.
pub fn decode_cursor(s: &str) -> Option<tally_core::ports::LetterCursor> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    let fits = (1..=1024).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !fits {
        return None;
    }
    let lenient = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    // A length of 4k + 1 holds a character no byte can be made of: it is left out.
    let whole = if s.len() % 4 == 1 {
        &s[..s.len() - 1]
    } else {
        s
    };
    let raw = lenient.decode(whole).ok()?;
    let text = String::from_utf8_lossy(&raw);
    let (shard_id, key) = text.split_once('\n').unwrap_or((&text, ""));
    // An empty part names the start: `-` sorts before every shard id and letter key (and a
    // store's key may not be empty).
    let part = |p: &str| {
        if p.is_empty() {
            "-".to_owned()
        } else {
            p.to_owned()
        }
    };
    Some(tally_core::ports::LetterCursor {
        shard_id: part(shard_id),
        key: part(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct P {
        #[serde(default, deserialize_with = "whole")]
        n: Option<i64>,
    }

    #[test]
    fn a_whole_number_may_be_written_with_a_zero_fraction() {
        let q = |s: &str| serde_urlencoded::from_str::<P>(s).map(|p| p.n);
        assert_eq!(q("n=732").unwrap(), Some(732));
        assert_eq!(q("n=732.0").unwrap(), Some(732));
        assert_eq!(q("").unwrap(), None);
        assert!(q("n=732.5").is_err());
        assert!(q("n=1e3").is_err());
        assert!(q("n=x").is_err());
        let j = |s: &str| serde_json::from_str::<P>(s).map(|p| p.n);
        assert_eq!(
            j(r#"{"n": 253402300799999.0}"#).unwrap(),
            Some(253_402_300_799_999)
        );
        assert_eq!(j(r#"{"n": null}"#).unwrap(), None);
        assert!(j(r#"{"n": 1.5}"#).is_err());
        #[derive(serde::Deserialize)]
        struct B {
            #[serde(default, deserialize_with = "json_whole")]
            n: Option<i64>,
        }
        let b = |s: &str| serde_json::from_str::<B>(s).map(|p| p.n);
        assert_eq!(b(r#"{"n": 732.0}"#).unwrap(), Some(732));
        assert!(b(r#"{"n": "732"}"#).is_err(), "a string in a JSON body");
    }

    #[test]
    fn since_takes_exactly_its_grammar() {
        let now = 1_796_000_000_000;
        assert_eq!(since_param("since", "15m", now).unwrap(), now - 900_000);
        assert_eq!(since_param("since", "999999999d", now).unwrap(), 0);
        for bad in [
            "0s",
            "15",
            "m",
            "",
            "\u{80}",
            "1\u{e9}",
            "1h30m",
            "15M",
            "0015m",
            "1234567890s",
            "2026-12-01T08:00:00Z",
        ] {
            assert!(since_param("since", bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_cursor_of_the_pattern_names_a_position() {
        let c = tally_core::ports::LetterCursor {
            shard_id: "shardId-000000000001".into(),
            key: "4959/gap/counter/end".into(),
        };
        assert_eq!(decode_cursor(&encode_cursor(&c)), Some(c));
        for any in ["0", "A", "AB", "ABC", "____", "-", "zzzzz"] {
            assert!(decode_cursor(any).is_some(), "{any}");
        }
        assert_eq!(decode_cursor("a b"), None);
        assert_eq!(decode_cursor(""), None);
    }
}
