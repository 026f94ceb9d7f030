//! The input contracts: what a stream record is, per application (`[input]` in the settings).
//!
//! - `events` (the default): contract v1, one like or unlike event per record ([`crate::event`]).
//! - `dynamodb`: a record of Kinesis Data Streams for DynamoDB — a table's change to one item,
//!   `{"eventID", "eventName": INSERT | MODIFY | REMOVE, "dynamodb": {"Keys", "NewImage",
//!   "OldImage", "ApproximateCreationDateTime"}}` — read as the state of a (post, user) like
//!   item: INSERT and MODIFY leave the user liking the post (unless the item is marked withdrawn,
//!   a soft delete), REMOVE leaves them not liking it. The item's time is the record's
//!   `ApproximateCreationDateTime`; the `eventID` breaks ties. Counted as likers (each edge's
//!   latest state decides), a copy of a record or a record arriving late changes nothing, which
//!   is why such a stream — whose records AWS says may come more than once and out of order —
//!   is exact to count. Items that are not likes (a post's metadata, its comments, in a
//!   single-table design) are [`Decoded::Skipped`]; a like item that does not fit is a
//!   [`DecodeError`], dead-lettered like a malformed event.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::{check_id, decode_ref, Action, DecodeError, EventRef, MAX_CREATED_AT};

/// The longest `eventID` read (AWS's are 32 hex digits): with microseconds, three digits are put
/// before it and the result stays within the events' 64.
pub const MAX_EVENT_ID: usize = crate::event::MAX_EVENT_ID - 3;

/// What a stream's records are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Like and unlike events, contract v1.
    #[default]
    Events,
    /// A DynamoDB table's item changes, as Kinesis Data Streams for DynamoDB writes them.
    Dynamodb,
}

/// The unit of `ApproximateCreationDateTime`, as the table's streaming destination is set
/// (`ApproximateCreationDateTimePrecision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Milliseconds since the epoch (DynamoDB's default).
    #[default]
    Millisecond,
    /// Microseconds since the epoch.
    Microsecond,
}

/// `[input]`: what the stream's records are and, for a table's change stream, where a like's
/// post and user are in an item and which items are likes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputConfig {
    /// `events` (contract v1) or `dynamodb` (Kinesis Data Streams for DynamoDB records).
    pub format: Format,
    /// The attribute holding the post (looked up in the record's `Keys`, then in the item).
    pub post_attribute: String,
    /// What the post attribute's value begins with; stripped (empty: nothing).
    pub post_prefix: String,
    /// The attribute holding the user.
    pub user_attribute: String,
    /// What the user attribute's value begins with; stripped (empty: nothing).
    pub user_prefix: String,
    /// The attribute that tells like items from the table's other items (empty: every item is
    /// a like)…
    pub like_attribute: String,
    /// …by beginning with this. Other items are skipped and counted as skipped.
    pub like_prefix: String,
    /// An attribute that, present and not NULL in an item's new image, marks the like as
    /// withdrawn (a soft delete: the item stays, the user no longer likes the post). Empty:
    /// none.
    pub withdrawn_attribute: String,
    /// The unit of `ApproximateCreationDateTime`: `millisecond` or `microsecond`.
    pub time_precision: Precision,
}

impl Default for InputConfig {
    /// Events; for a change stream, the single-table design (`PK = POST#<post>`,
    /// `SK = LIKE#<user>`).
    fn default() -> Self {
        InputConfig {
            format: Format::Events,
            post_attribute: "PK".into(),
            post_prefix: "POST#".into(),
            user_attribute: "SK".into(),
            user_prefix: "LIKE#".into(),
            like_attribute: "SK".into(),
            like_prefix: "LIKE#".into(),
            withdrawn_attribute: String::new(),
            time_precision: Precision::Millisecond,
        }
    }
}

/// What a record is, read by its input contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A like or an unlike of a post by a user.
    Event(EventRef<'a>),
    /// A change to an item that is not a like: read, skipped, counted as skipped.
    Skipped,
}

/// What a stream's records are, decided once from `[input]`: like events (contract v1), or a
/// table's change records read by a mapping — and, with several regions, which of them this
/// region counts. The counter's windows, analytics and verify each hold one and read every record
/// by it ([`Input::decode`]); "events" is `Input::default()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Input {
    records: Records,
    /// Several regions: a record of a post homed in another region reads as skipped (its home
    /// counts it, from what the routers put to its stream).
    homes: Option<std::sync::Arc<crate::regions::Homes>>,
}

/// How a record's bytes are read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Records {
    /// Like and unlike events, contract v1.
    #[default]
    Events,
    /// A table's change records, read by this mapping (its format is `dynamodb`).
    Changes(std::sync::Arc<InputConfig>),
}

impl Input {
    /// The input `[input]` says.
    pub fn of(cfg: &InputConfig) -> Input {
        let records = match cfg.format {
            Format::Events => Records::Events,
            Format::Dynamodb => Records::Changes(std::sync::Arc::new(cfg.clone())),
        };
        Input {
            records,
            homes: None,
        }
    }

    /// The same input, counting only the posts homed in this region.
    pub fn homed(self, homes: Option<crate::regions::Homes>) -> Input {
        Input {
            homes: homes.map(std::sync::Arc::new),
            ..self
        }
    }

    /// Whether it counts only the posts homed in this region (`[regions]`).
    pub fn is_homed(&self) -> bool {
        self.homes.is_some()
    }

    /// Whether this region counts `post` (every post, but with `[regions]`): a change of the
    /// edges of a post homed elsewhere — its home's edges replicated here — is its home's.
    pub fn counts_post(&self, post: &str) -> bool {
        self.homes.as_ref().is_none_or(|h| h.is_here(post))
    }

    /// Reads one user record by this input's contract; a record of a post homed in another
    /// region is skipped.
    pub fn decode<'a>(&self, data: &'a [u8]) -> Result<Decoded<'a>, DecodeError> {
        let decoded = match &self.records {
            Records::Events => decode_ref(data).map(Decoded::Event)?,
            Records::Changes(mapping) => mapping.decode(data)?,
        };
        match (&self.homes, &decoded) {
            (Some(h), Decoded::Event(e)) if !h.is_here(&e.post_id) => Ok(Decoded::Skipped),
            _ => Ok(decoded),
        }
    }
}

impl InputConfig {
    /// The attributes a change stream's mapping needs (keys without the section).
    pub fn validate(&self) -> Result<(), crate::config::Invalid> {
        if self.format == Format::Events {
            return Ok(());
        }
        for (key, v) in [
            ("post_attribute", &self.post_attribute),
            ("user_attribute", &self.user_attribute),
        ] {
            if v.is_empty() {
                return Err(crate::config::Invalid::new(
                    key,
                    "an attribute name",
                    "an empty string",
                ));
            }
        }
        if self.like_attribute.is_empty() != self.like_prefix.is_empty() {
            return Err(crate::config::Invalid::new(
                "like_prefix",
                "set with `like_attribute` (both empty: every item is a like)",
                format!(
                    "{:?} with like_attribute {:?}",
                    self.like_prefix, self.like_attribute
                ),
            ));
        }
        Ok(())
    }

    /// Reads one user record.
    pub fn decode<'a>(&self, data: &'a [u8]) -> Result<Decoded<'a>, DecodeError> {
        match self.format {
            Format::Events => decode_ref(data).map(Decoded::Event),
            Format::Dynamodb => self.decode_change(data),
        }
    }

    /// A change record: the item's state after it, as an edge event.
    fn decode_change<'a>(&self, data: &'a [u8]) -> Result<Decoded<'a>, DecodeError> {
        let raw: Change = serde_json::from_slice(data)
            .map_err(|e| DecodeError::NotJson(format!("not a DynamoDB change record: {e}")))?;
        let body = raw.dynamodb.ok_or_else(|| missing("dynamodb"))?;
        let name = raw.event_name.ok_or_else(|| missing("eventName"))?;
        let kind = match name.as_ref() {
            "INSERT" => Kind::Insert,
            "MODIFY" => Kind::Modify,
            "REMOVE" => Kind::Remove,
            other => {
                return Err(field(
                    "eventName",
                    format!("expected INSERT, MODIFY or REMOVE, got {other:?}"),
                ))
            }
        };
        let item = Item {
            keys: body.keys.as_ref(),
            image: match kind {
                Kind::Remove => body.old_image.as_ref(),
                Kind::Insert | Kind::Modify => body.new_image.as_ref(),
            },
        };
        if !self.like_attribute.is_empty() {
            let is_like = match item.get(&self.like_attribute) {
                Some(v) => matches!(scalar(v), Ok(s) if s.starts_with(&self.like_prefix)),
                None => false,
            };
            if !is_like {
                return Ok(Decoded::Skipped);
            }
        }
        let event_id = raw.event_id.ok_or_else(|| missing("eventID"))?;
        let post_id = self.id(&item, "post_id", &self.post_attribute, &self.post_prefix)?;
        let user_id = self.id(&item, "user_id", &self.user_attribute, &self.user_prefix)?;
        let action = match kind {
            Kind::Remove => Action::Unlike,
            Kind::Insert | Kind::Modify if self.withdrawn_attribute.is_empty() => Action::Like,
            Kind::Insert | Kind::Modify => {
                let image = body.new_image.as_ref().ok_or_else(|| {
                    field(
                        "dynamodb.NewImage",
                        format!(
                            "missing: `{}` marks withdrawn likes, which only the new image shows",
                            self.withdrawn_attribute
                        ),
                    )
                })?;
                match image.get(self.withdrawn_attribute.as_str()) {
                    Some(v) if !is_null(v) => Action::Unlike,
                    _ => Action::Like,
                }
            }
        };
        let n = event_id.chars().count();
        if n == 0 || n > MAX_EVENT_ID {
            return Err(field(
                "eventID",
                format!("expected 1–{MAX_EVENT_ID} characters, got {n}"),
            ));
        }
        let (created_at, sub_ms) = self.time(body.created)?;
        // Within a millisecond, the microseconds order first, then the eventID.
        let event_id = match sub_ms {
            Some(us) => Cow::Owned(format!("{us:03}{event_id}")),
            None => event_id,
        };
        Ok(Decoded::Event(EventRef {
            event_id,
            post_id,
            user_id,
            action,
            created_at,
        }))
    }

    /// A post or user id: the attribute's S or N value, its prefix stripped, within the id
    /// rules.
    fn id<'a>(
        &self,
        item: &Item<'_, 'a>,
        what: &'static str,
        attribute: &str,
        prefix: &str,
    ) -> Result<Cow<'a, str>, DecodeError> {
        let at = || format!("attribute `{attribute}` ({what})");
        let v = item.get(attribute).ok_or_else(|| DecodeError::Field {
            field: "dynamodb",
            problem: format!("{}: missing from Keys and the item", at()),
        })?;
        let value = scalar(v).map_err(|problem| DecodeError::Field {
            field: "dynamodb",
            problem: format!("{}: {problem}", at()),
        })?;
        let Some(rest) = strip(value.clone(), prefix) else {
            return Err(DecodeError::Field {
                field: "dynamodb",
                problem: format!(
                    "{}: expected a value beginning with {prefix:?}, got {value:?}",
                    at()
                ),
            });
        };
        check_id(what, &rest).map_err(|e| DecodeError::Field {
            field: "dynamodb",
            problem: format!("{}: {e}", at()),
        })?;
        Ok(rest)
    }

    /// The record's time in milliseconds, and its microseconds within that millisecond when the
    /// precision is microseconds.
    fn time(&self, created: Option<&RawValue>) -> Result<(i64, Option<i64>), DecodeError> {
        const KEY: &str = "dynamodb.ApproximateCreationDateTime";
        let text = created.ok_or_else(|| missing(KEY))?.get();
        let unit = match self.time_precision {
            Precision::Millisecond => "milliseconds",
            Precision::Microsecond => "microseconds",
        };
        let v: i64 = text.parse().map_err(|_| {
            field(
                KEY,
                format!(
                    "expected an integer ({unit} since the epoch), got {}",
                    cut(text)
                ),
            )
        })?;
        let (ms, us) = match self.time_precision {
            Precision::Millisecond => (v, None),
            Precision::Microsecond => (v.div_euclid(1_000), Some(v.rem_euclid(1_000))),
        };
        if !(0..=MAX_CREATED_AT).contains(&ms) {
            return Err(field(
                KEY,
                format!(
                    "expected {unit} since the epoch up to 9999-12-31, got {}",
                    cut(text)
                ),
            ));
        }
        Ok((ms, us))
    }
}

/// A change record's fields this reads, borrowed where they have no escapes.
#[derive(Deserialize)]
struct Change<'a> {
    #[serde(rename = "eventID", borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(rename = "eventName", borrow, default)]
    event_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    dynamodb: Option<Body<'a>>,
}

/// An attribute map: name → its typed value (`{"S": "…"}`), kept as JSON until read.
type Image<'a> = HashMap<Cow<'a, str>, &'a RawValue>;

#[derive(Deserialize)]
struct Body<'a> {
    #[serde(rename = "ApproximateCreationDateTime", borrow, default)]
    created: Option<&'a RawValue>,
    #[serde(rename = "Keys", borrow, default)]
    keys: Option<Image<'a>>,
    #[serde(rename = "NewImage", borrow, default)]
    new_image: Option<Image<'a>>,
    #[serde(rename = "OldImage", borrow, default)]
    old_image: Option<Image<'a>>,
}

#[derive(Clone, Copy)]
enum Kind {
    Insert,
    Modify,
    Remove,
}

/// The item a record is about: its keys, and its image (new for INSERT and MODIFY, old for
/// REMOVE).
struct Item<'r, 'a> {
    keys: Option<&'r Image<'a>>,
    image: Option<&'r Image<'a>>,
}

impl<'a> Item<'_, 'a> {
    fn get(&self, attribute: &str) -> Option<&'a RawValue> {
        self.keys
            .and_then(|k| k.get(attribute))
            .or_else(|| self.image.and_then(|i| i.get(attribute)))
            .copied()
    }
}

/// A typed attribute value: its one type and the JSON of its value.
#[derive(Deserialize)]
struct Typed<'a>(#[serde(borrow)] HashMap<Cow<'a, str>, &'a RawValue>);

/// An S or N attribute's text.
fn scalar<'a>(v: &'a RawValue) -> Result<Cow<'a, str>, String> {
    let typed: Typed<'a> = serde_json::from_str(v.get()).map_err(|_| {
        format!(
            "expected a typed value such as {{\"S\": \"…\"}}, got {}",
            cut(v.get())
        )
    })?;
    let mut entries = typed.0.into_iter();
    match (entries.next(), entries.next()) {
        (Some((t, value)), None) if t == "S" || t == "N" => {
            serde_json::from_str::<Cow<'a, str>>(value.get())
                .map_err(|_| format!("expected a string in {t}, got {}", cut(value.get())))
        }
        (Some((t, _)), None) => Err(format!("expected type S or N, got {t}")),
        _ => Err(format!("expected one type, got {}", cut(v.get()))),
    }
}

/// Whether a typed value is `{"NULL": true}`.
fn is_null(v: &RawValue) -> bool {
    serde_json::from_str::<Typed>(v.get())
        .map(|t| t.0.len() == 1 && t.0.contains_key("NULL"))
        .unwrap_or(false)
}

fn strip<'a>(value: Cow<'a, str>, prefix: &str) -> Option<Cow<'a, str>> {
    match value {
        Cow::Borrowed(s) => s.strip_prefix(prefix).map(Cow::Borrowed),
        Cow::Owned(s) => s.strip_prefix(prefix).map(|r| Cow::Owned(r.to_owned())),
    }
}

fn cut(s: &str) -> String {
    crate::dead_letter::truncate_utf8(s, 64)
}

fn missing(field_name: &'static str) -> DecodeError {
    field(field_name, "missing")
}

fn field(field: &'static str, problem: impl Into<String>) -> DecodeError {
    DecodeError::Field {
        field,
        problem: problem.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> InputConfig {
        InputConfig {
            format: Format::Dynamodb,
            ..InputConfig::default()
        }
    }

    fn record(name: &str, sk: &str, new_image_extra: &str, time: i64) -> String {
        let keys = format!(r#"{{"PK":{{"S":"POST#p1"}},"SK":{{"S":"{sk}"}}}}"#);
        let image = format!(r#"{{"PK":{{"S":"POST#p1"}},"SK":{{"S":"{sk}"}}{new_image_extra}}}"#);
        let images = match name {
            "REMOVE" => format!(r#""OldImage":{image}"#),
            _ => format!(r#""NewImage":{image}"#),
        };
        format!(
            r#"{{"awsRegion":"us-east-1","eventID":"e1","eventName":"{name}","tableName":"app","dynamodb":{{"ApproximateCreationDateTime":{time},"Keys":{keys},{images},"SizeBytes":40}},"eventSource":"aws:dynamodb"}}"#
        )
    }

    fn event(d: Decoded<'_>) -> (String, String, Action, i64, String) {
        match d {
            Decoded::Event(e) => (
                e.post_id.into_owned(),
                e.user_id.into_owned(),
                e.action,
                e.created_at,
                e.event_id.into_owned(),
            ),
            Decoded::Skipped => panic!("skipped"),
        }
    }

    #[test]
    fn insert_modify_and_remove_are_the_item_s_state() {
        let t = table();
        let like = event(
            t.decode(record("INSERT", "LIKE#u9", "", 1_700).as_bytes())
                .unwrap(),
        );
        assert_eq!(
            like,
            ("p1".into(), "u9".into(), Action::Like, 1_700, "e1".into())
        );
        let again = event(
            t.decode(record("MODIFY", "LIKE#u9", "", 1_800).as_bytes())
                .unwrap(),
        );
        assert_eq!(again.2, Action::Like);
        let gone = event(
            t.decode(record("REMOVE", "LIKE#u9", "", 1_900).as_bytes())
                .unwrap(),
        );
        assert_eq!((gone.2, gone.3), (Action::Unlike, 1_900));
    }

    #[test]
    fn a_soft_delete_withdraws_the_like_and_null_does_not() {
        let t = InputConfig {
            withdrawn_attribute: "deleted_at".into(),
            ..table()
        };
        let r = record("MODIFY", "LIKE#u9", r#","deleted_at":{"N":"1700"}"#, 1_800);
        assert_eq!(event(t.decode(r.as_bytes()).unwrap()).2, Action::Unlike);
        let r = record("MODIFY", "LIKE#u9", r#","deleted_at":{"NULL":true}"#, 1_800);
        assert_eq!(event(t.decode(r.as_bytes()).unwrap()).2, Action::Like);
    }

    #[test]
    fn other_items_are_skipped_and_like_items_that_do_not_fit_are_errors() {
        let t = table();
        for sk in ["METADATA", "COMMENT#c1"] {
            let r = record("INSERT", sk, "", 1_700);
            assert_eq!(t.decode(r.as_bytes()).unwrap(), Decoded::Skipped, "{sk}");
        }
        let e = t
            .decode(record("INSERT", "LIKE#u 9", "", 1_700).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("attribute `SK` (user_id)") && e.contains("' '"),
            "{e}"
        );
        let no_post = record("INSERT", "LIKE#u9", "", 1_700).replace("POST#p1", "USER#p1");
        let e = t.decode(no_post.as_bytes()).unwrap_err().to_string();
        assert!(e.contains(r#"beginning with "POST#""#), "{e}");
        let e = t
            .decode(record("UPSERT", "LIKE#u9", "", 1_700).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("eventName"), "{e}");
        let e = t.decode(b"{\"eventID\":\"e\"}").unwrap_err().to_string();
        assert!(e.contains("`dynamodb`: missing"), "{e}");
    }

    #[test]
    fn a_likes_table_keyed_by_post_and_user_and_numbers_as_ids() {
        let t = InputConfig {
            format: Format::Dynamodb,
            post_attribute: "post".into(),
            post_prefix: String::new(),
            user_attribute: "user".into(),
            user_prefix: String::new(),
            like_attribute: String::new(),
            like_prefix: String::new(),
            ..InputConfig::default()
        };
        let r = r#"{"eventID":"x","eventName":"INSERT","dynamodb":{"ApproximateCreationDateTime":5,"Keys":{"post":{"N":"42"},"user":{"S":"u1"}},"NewImage":{"post":{"N":"42"},"user":{"S":"u1"},"at":{"N":"1"}}}}"#;
        let e = event(t.decode(r.as_bytes()).unwrap());
        assert_eq!((e.0.as_str(), e.1.as_str()), ("42", "u1"));
        let bad = r.replace(r#""user":{"S":"u1"}"#, r#""user":{"BOOL":true}"#);
        let msg = t.decode(bad.as_bytes()).unwrap_err().to_string();
        assert!(msg.contains("expected type S or N, got BOOL"), "{msg}");
    }

    #[test]
    fn microseconds_order_within_a_millisecond_before_the_event_id() {
        let t = InputConfig {
            time_precision: Precision::Microsecond,
            ..table()
        };
        let early = event(
            t.decode(record("INSERT", "LIKE#u9", "", 1_700_002).as_bytes())
                .unwrap(),
        );
        let late = event(
            t.decode(record("REMOVE", "LIKE#u9", "", 1_700_010).as_bytes())
                .unwrap(),
        );
        assert_eq!((early.3, late.3), (1_700, 1_700));
        assert!(early.4 < late.4, "{early:?} {late:?}");
    }
}
