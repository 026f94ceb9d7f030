//! Event contract v1: one JSON object per stream record.
//!
//! `{"event_id":"01J9…","post_id":"p123","user_id":"u9","action":"like","created_at":1764480000123}`.
//! Unknown extra fields are ignored; anything else that does not fit is a malformed record, which
//! the consumers dead-letter with the reason given by [`DecodeError`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Whether an event adds or removes a like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The user likes the post.
    Like,
    /// The user takes a like back.
    Unlike,
}

impl Action {
    /// The signed contribution of one distinct event of this action to a post's count.
    pub fn delta(self) -> i64 {
        match self {
            Action::Like => 1,
            Action::Unlike => -1,
        }
    }
}

/// A validated like or unlike event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikeEvent {
    /// Identity of the event: a producer retry carries the same id and must count once.
    pub event_id: String,
    /// The post liked; also the stream's partition key.
    pub post_id: String,
    /// Who liked it.
    pub user_id: String,
    /// Like or unlike.
    pub action: Action,
    /// Creation time in milliseconds since the epoch; decides the summary buckets.
    pub created_at: i64,
}

/// The latest `created_at` of contract v1: 9999-12-31T23:59:59.999Z. Summary items key hours and
/// days as `YYYYMMDDHH` and `YYYYMMDD`, whose string order is time order only for four-digit years;
/// a later time is dead-lettered with this bound in its reason, never counted out of reach of
/// "since T".
pub const MAX_CREATED_AT: i64 = 253_402_300_799_999;

/// Why a record is malformed. The message is what lands in the dead-letter store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record is not a JSON object (the parser's words).
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// A field is missing or not what the contract says.
    #[error("field `{field}`: {problem}")]
    Field {
        /// The field (`post_id`, `created_at`, …).
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// A record's fields as the JSON text they were written in, borrowed from the record: nothing is
/// allocated or converted until a field is checked.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(borrow)]
    event_id: Option<&'a RawValue>,
    #[serde(borrow)]
    post_id: Option<&'a RawValue>,
    #[serde(borrow)]
    user_id: Option<&'a RawValue>,
    #[serde(borrow)]
    action: Option<&'a RawValue>,
    #[serde(borrow)]
    created_at: Option<&'a RawValue>,
}

/// A validated event borrowed from its record's bytes (a string with escapes is the only thing
/// copied): what the counter's fold reads, without allocating per record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// The producer's id of the event: a retry carries the same.
    pub event_id: Cow<'a, str>,
    /// The post liked or unliked.
    pub post_id: Cow<'a, str>,
    /// The user who did it.
    pub user_id: Cow<'a, str>,
    /// Like or unlike.
    pub action: Action,
    /// When the user did it, by the producer's clock (ms since the epoch).
    pub created_at: i64,
}

impl EventRef<'_> {
    /// The owned event.
    pub fn into_owned(self) -> LikeEvent {
        LikeEvent {
            event_id: self.event_id.into_owned(),
            post_id: self.post_id.into_owned(),
            user_id: self.user_id.into_owned(),
            action: self.action,
            created_at: self.created_at,
        }
    }
}

/// The longest an `event_id` may be.
pub const MAX_EVENT_ID: usize = 64;
/// The longest a `post_id` or `user_id` may be.
pub const MAX_ID: usize = 128;

fn field_err(field: &'static str, problem: impl Into<String>) -> DecodeError {
    DecodeError::Field {
        field,
        problem: problem.into(),
    }
}

fn string_field<'a>(
    field: &'static str,
    v: Option<&'a RawValue>,
) -> Result<Cow<'a, str>, DecodeError> {
    let text = v.ok_or_else(|| field_err(field, "missing"))?.get();
    match text.as_bytes() {
        // The usual case: a string without escapes is its text between the quotes.
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => {
            Ok(Cow::Borrowed(&text[1..text.len() - 1]))
        }
        [b'"', ..] => serde_json::from_str::<String>(text)
            .map(Cow::Owned)
            .map_err(|e| field_err(field, e.to_string())),
        _ => Err(field_err(field, format!("expected a string, got {text}"))),
    }
}

fn id_field<'a>(field: &'static str, v: Option<&'a RawValue>) -> Result<Cow<'a, str>, DecodeError> {
    let s = string_field(field, v)?;
    check_id(field, &s)?;
    Ok(s)
}

/// Checks a `post_id` or `user_id` against the contract: 1–128 characters of `[A-Za-z0-9_.:-]`.
pub fn check_id(field: &'static str, s: &str) -> Result<(), DecodeError> {
    if s.is_empty() || s.len() > MAX_ID {
        return Err(field_err(
            field,
            format!("expected 1–{MAX_ID} characters, got {}", s.len()),
        ));
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-');
    // Every allowed character is ASCII: a byte scan decides, the message names the character.
    if s.bytes().all(allowed) {
        return Ok(());
    }
    if let Some(c) = s.chars().find(|c| !(c.is_ascii() && allowed(*c as u8))) {
        return Err(field_err(
            field,
            format!("character {c:?} is not one of [A-Za-z0-9_.:-]"),
        ));
    }
    Ok(())
}

/// What kind of JSON value the bytes start with, by the first byte that is not white space.
fn json_kind(data: &[u8]) -> Option<&'static str> {
    Some(match data.iter().find(|b| !b.is_ascii_whitespace())? {
        b'{' => "an object",
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "a number",
        _ => return None,
    })
}

/// Decodes and validates one record's bytes against contract v1.
pub fn decode(data: &[u8]) -> Result<LikeEvent, DecodeError> {
    decode_ref(data).map(EventRef::into_owned)
}

/// [`decode`], borrowing the event's strings from `data`.
pub fn decode_ref(data: &[u8]) -> Result<EventRef<'_>, DecodeError> {
    // serde would also read a struct from an array: say what the record is instead.
    if let Some(kind) = json_kind(data).filter(|k| *k != "an object") {
        if serde_json::from_slice::<serde::de::IgnoredAny>(data).is_ok() {
            return Err(DecodeError::NotJson(format!("got {kind}")));
        }
    }
    let raw: Raw = serde_json::from_slice(data).map_err(|e| DecodeError::NotJson(e.to_string()))?;
    let event_id = string_field("event_id", raw.event_id)?;
    let n = if event_id.is_ascii() {
        event_id.len()
    } else {
        event_id.chars().count()
    };
    if n == 0 || n > MAX_EVENT_ID {
        return Err(field_err(
            "event_id",
            format!("expected 1–{MAX_EVENT_ID} characters, got {n}"),
        ));
    }
    let post_id = id_field("post_id", raw.post_id)?;
    let user_id = id_field("user_id", raw.user_id)?;
    let action = match string_field("action", raw.action)?.as_ref() {
        "like" => Action::Like,
        "unlike" => Action::Unlike,
        other => {
            return Err(field_err(
                "action",
                format!(
                    "expected \"like\" or \"unlike\", got {:?} ({} bytes)",
                    crate::dead_letter::truncate_utf8(other, 64),
                    other.len()
                ),
            ))
        }
    };
    let created_at = match raw.created_at.map(RawValue::get) {
        None => return Err(field_err("created_at", "missing")),
        Some(t) if t.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
            match t.parse::<i64>() {
                Ok(v) if (0..=MAX_CREATED_AT).contains(&v) => v,
                _ => {
                    return Err(field_err(
                        "created_at",
                        format!(
                            "expected milliseconds since the epoch from 0 to {MAX_CREATED_AT} \
                             (9999-12-31T23:59:59.999Z), got {}",
                            crate::dead_letter::truncate_utf8(t, 64)
                        ),
                    ))
                }
            }
        }
        Some(t) => {
            return Err(field_err(
                "created_at",
                format!("expected an integer, got {t}"),
            ))
        }
    };
    Ok(EventRef {
        event_id,
        post_id,
        user_id,
        action,
        created_at,
    })
}

/// Encodes an event as its contract-v1 JSON bytes.
pub fn encode(event: &LikeEvent) -> Vec<u8> {
    // Serializing a struct of strings and integers cannot fail.
    serde_json::to_vec(event).unwrap_or_default()
}

/// The partition key of a raw record: its `post_id` when it has one that is a string; for a
/// DynamoDB change record (`crate::input`), its item's key (`dynamodb.Keys`, as canonical JSON),
/// so that every change of one item goes to one shard, as DynamoDB itself keys them — one writer
/// per edge.
pub fn partition_key_of(data: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Key {
        post_id: Option<serde_json::Value>,
        dynamodb: Option<Change>,
    }
    #[derive(Deserialize)]
    struct Change {
        #[serde(rename = "Keys")]
        keys: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let k = serde_json::from_slice::<Key>(data).ok()?;
    match (k.post_id, k.dynamodb.and_then(|d| d.keys)) {
        (Some(serde_json::Value::String(s)), _) if !s.is_empty() && s.len() <= 256 => Some(s),
        (None, Some(keys)) => change_key(&keys),
        _ => None,
    }
}

/// The partition key of a DynamoDB change record whose item's key is `keys` (its `Keys`): the
/// key as canonical JSON, at most 256 characters as Kinesis allows — every change of one item
/// on one shard, as DynamoDB keys its own records (one writer per edge). The one rule: the
/// generator, `tally backfill` and `tally replay` all key change records by it. `None` for an
/// empty key.
pub fn change_key(keys: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    if keys.is_empty() {
        return None;
    }
    // serde_json's map is ordered by key: the same item, the same text.
    let text = serde_json::Value::Object(keys.clone()).to_string();
    Some(text.chars().take(256).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<(), &str>) {
        let got = decode(input.as_bytes());
        match (got, expected) {
            (Ok(_), Ok(())) => {}
            (Err(e), Err(msg)) => assert!(
                e.to_string().contains(msg),
                "{input}: {e} does not mention {msg}"
            ),
            (got, expected) => panic!("{input}: got {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn contract_v1() {
        let ok = r#"{"event_id":"01J9","post_id":"p1","user_id":"u9","action":"like","created_at":1764480000123}"#;
        check(ok, Ok(()));
        check(
            r#"{"event_id":"e","post_id":"p.1:a-b_c","user_id":"u","action":"unlike","created_at":0,"extra":{"x":1}}"#,
            Ok(()),
        );
        check(
            "not json",
            Err("not a JSON object: expected ident at line 1 column 2"),
        );
        check("[1,2]", Err("not a JSON object: got an array"));
        check("[1,2,3,4,5]", Err("not a JSON object: got an array"));
        check("42", Err("not a JSON object: got a number"));
        check(" \"x\"", Err("not a JSON object: got a string"));
        check(
            r#"{"post_id":"p","user_id":"u","action":"like","created_at":1}"#,
            Err("`event_id`: missing"),
        );
        check(
            &format!(
                r#"{{"event_id":"{}","post_id":"p","user_id":"u","action":"like","created_at":1}}"#,
                "e".repeat(65)
            ),
            Err("1–64"),
        );
        check(
            r#"{"event_id":"","post_id":"p","user_id":"u","action":"like","created_at":1}"#,
            Err("`event_id`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p 1","user_id":"u","action":"like","created_at":1}"#,
            Err("`post_id`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p","user_id":"","action":"like","created_at":1}"#,
            Err("`user_id`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p","user_id":"u","action":"love","created_at":1}"#,
            Err("`action`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p","user_id":"u","action":"like","created_at":1.5}"#,
            Err("`created_at`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p","user_id":"u","action":"like","created_at":"1"}"#,
            Err("`created_at`"),
        );
        check(
            r#"{"event_id":"e","post_id":"p","user_id":"u","action":"like","created_at":-1}"#,
            Err("`created_at`"),
        );
        // The bounds of `created_at`: the epoch and the last millisecond of year 9999.
        let at = |t: &str| {
            format!(
                r#"{{"event_id":"e","post_id":"p","user_id":"u","action":"like","created_at":{t}}}"#
            )
        };
        check(&at("253402300799999"), Ok(()));
        check(&at("253402300800000"), Err("from 0 to 253402300799999"));
        check(&at("9223372036854775807"), Err("from 0 to 253402300799999"));
        check(&at("99999999999999999999999"), Err("`created_at`"));
        check(
            r#"{"event_id":7,"post_id":"p","user_id":"u","action":"like","created_at":1}"#,
            Err("`event_id`"),
        );
    }

    #[test]
    fn round_trips() {
        let e = LikeEvent {
            event_id: "e1".into(),
            post_id: "p".into(),
            user_id: "u".into(),
            action: Action::Unlike,
            created_at: 42,
        };
        assert_eq!(decode(&encode(&e)).unwrap(), e);
    }

    #[test]
    fn partition_key() {
        assert_eq!(
            partition_key_of(br#"{"post_id":"p7","junk":1}"#).as_deref(),
            Some("p7")
        );
        assert_eq!(partition_key_of(b"garbage"), None);
        let change = |sk: &str, extra: &str| {
            format!(
                r#"{{"eventID":"e","dynamodb":{{"Keys":{{"SK":{{"S":"{sk}"}},"PK":{{"S":"POST#p1"}}}}{extra}}}}}"#
            )
        };
        let a = partition_key_of(change("LIKE#u1", "").as_bytes()).unwrap();
        let b = partition_key_of(change("LIKE#u1", r#","NewImage":{}"#).as_bytes()).unwrap();
        assert_eq!(a, b, "one item, one key");
        assert_ne!(
            a,
            partition_key_of(change("LIKE#u2", "").as_bytes()).unwrap()
        );
        assert_eq!(partition_key_of(br#"{"post_id":3}"#), None);
    }
}
