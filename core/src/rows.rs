//! Stored rows read back, one codec each for both backends: an adapter hands over what it read
//! as a [`Row`] — its attributes or columns as they are, nothing decoded — and the row is decoded
//! here, **strictly**: a field that is absent takes its documented default (a row written before
//! the field existed), but a field that is there and is not what it should be is an error that
//! names the item and the field ([`PortError::Corrupt`]), never a default. A corrupt `parents`
//! read as none would break parents-before-children; a corrupt `max_arrival` read as the start of
//! time would clean up dedup records still needed.

use std::collections::BTreeMap;

use crate::cost::Purpose;
use crate::edge::EdgeState;
use crate::lease::Lease;
use crate::ports::{Pending, PortError, PortResult, ReadProgress, ShardState, ShardTally};
use crate::seq::{Position, SeqNo};

/// One stored value, as the backend holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A number (DynamoDB `N`, SQLite `INTEGER`).
    N(i64),
    /// A string (`S`, `TEXT`).
    S(String),
    /// A boolean (`BOOL`).
    B(bool),
    /// A list of strings (`L` of `S`).
    L(Vec<String>),
    /// Something no field of tally's is (another DynamoDB type, a number that is no `i64`, a
    /// blob): what it was, for the error.
    Other(String),
}

/// A stored row: its fields by name (an absent or null one is not in it).
pub type Row = BTreeMap<String, Field>;

/// Reads fields of one row, naming the row in every error.
struct Fields<'a> {
    row: &'a Row,
    item: &'a str,
}

impl<'a> Fields<'a> {
    fn corrupt(&self, field: &str, detail: String) -> PortError {
        PortError::Corrupt {
            item: self.item.to_owned(),
            detail: format!("`{field}` {detail}"),
        }
    }

    fn num(&self, field: &str) -> PortResult<Option<i64>> {
        match self.row.get(field) {
            None => Ok(None),
            Some(Field::N(n)) => Ok(Some(*n)),
            Some(other) => Err(self.corrupt(field, format!("is not a number: {other:?}"))),
        }
    }

    fn text(&self, field: &str) -> PortResult<Option<&'a str>> {
        match self.row.get(field) {
            None => Ok(None),
            Some(Field::S(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(self.corrupt(field, format!("is not a string: {other:?}"))),
        }
    }

    fn required_text(&self, field: &str) -> PortResult<&'a str> {
        self.text(field)?
            .ok_or_else(|| self.corrupt(field, "is missing".into()))
    }

    fn position(&self, field: &str) -> PortResult<Option<Position>> {
        self.text(field)?
            .map(|s| {
                Position::parse(s)
                    .ok_or_else(|| self.corrupt(field, format!("is not a position: `{s}`")))
            })
            .transpose()
    }

    fn flag(&self, field: &str) -> PortResult<bool> {
        match self.row.get(field) {
            None => Ok(false),
            Some(Field::B(b)) => Ok(*b),
            Some(Field::N(0)) => Ok(false),
            Some(Field::N(1)) => Ok(true),
            Some(other) => Err(self.corrupt(field, format!("is not a flag: {other:?}"))),
        }
    }

    /// A list of strings: a list, or (the embedded store's column) a JSON array of strings.
    fn list(&self, field: &str) -> PortResult<Vec<String>> {
        match self.row.get(field) {
            None => Ok(Vec::new()),
            Some(Field::L(l)) => Ok(l.clone()),
            Some(Field::S(s)) => serde_json::from_str(s)
                .map_err(|e| self.corrupt(field, format!("is not a list of strings: `{s}`: {e}"))),
            Some(other) => Err(self.corrupt(field, format!("is not a list: {other:?}"))),
        }
    }
}

/// A lease row, decoded: the shard's lease, its pending window, what the counter spent on it and
/// its holder's progress. `item` names the row in errors (`leases counter/shardId-…`).
pub fn shard_state(row: &Row, item: &str) -> PortResult<ShardState> {
    let f = Fields { row, item };
    let epoch = f.num("epoch")?.unwrap_or(0);
    let lease = Lease {
        app: f.required_text("app")?.to_owned(),
        shard_id: f.required_text("shard_id")?.to_owned(),
        owner: f.text("owner")?.map(str::to_owned),
        epoch: u64::try_from(epoch)
            .map_err(|_| f.corrupt("epoch", format!("is negative: {epoch}")))?,
        expires_ms: f.num("expires_ms")?.unwrap_or(0),
        checkpoint: f.position("checkpoint")?,
        finished: f.flag("finished")?,
        parents: f.list("parents")?,
        max_arrival: f.num("max_arrival")?.unwrap_or(i64::MIN),
    };
    let pending = match f.position("pending_end")? {
        None => None,
        Some(end) => Some(Pending {
            end,
            first: f
                .text("pending_first")?
                .map(|s| {
                    SeqNo::parse(s).ok_or_else(|| {
                        f.corrupt("pending_first", format!("is not a sequence number: `{s}`"))
                    })
                })
                .transpose()?,
            horizon_ms: f.num("pending_horizon_ms")?,
            skew_ms: f.num("pending_skew_ms")?,
        }),
    };
    let progress = match (f.num("behind_ms")?, f.num("behind_at_ms")?) {
        (Some(behind_ms), Some(at_ms)) => Some(ReadProgress { at_ms, behind_ms }),
        _ => None,
    };
    Ok(ShardState {
        lease,
        pending,
        spent: spent(&f)?,
        progress,
        holder_addr: f.text("holder_addr")?.map(str::to_owned),
    })
}

/// What the counter spent on the shard: the embedded store's `spent` (a JSON object of write
/// units by purpose name, `counted`, `latest_created_ms`), or DynamoDB's fields (`wu_<purpose>`,
/// `counted`, `latest_created`).
fn spent(f: &Fields<'_>) -> PortResult<ShardTally> {
    let count = |field: &str, n: i64| {
        u64::try_from(n).map_err(|_| f.corrupt(field, format!("is negative: {n}")))
    };
    let mut sp = ShardTally::default();
    if let Some(json) = f.text("spent")? {
        let v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)
            .map_err(|e| f.corrupt("spent", format!("is not a JSON object: {e}")))?;
        let get = |k: &str| -> PortResult<Option<i64>> {
            match v.get(k) {
                None => Ok(None),
                Some(x) => x
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| f.corrupt("spent", format!("`{k}` is not a number: {x}"))),
            }
        };
        sp.counted = count("spent", get("counted")?.unwrap_or(0))?;
        sp.latest_created_ms = get("latest_created_ms")?.unwrap_or(0);
        for p in Purpose::ALL {
            sp.units
                .add(p, count("spent", get(p.name())?.unwrap_or(0))?);
        }
        return Ok(sp);
    }
    sp.counted = count("counted", f.num("counted")?.unwrap_or(0))?;
    sp.latest_created_ms = f.num("latest_created")?.unwrap_or(0);
    for p in Purpose::ALL {
        let field = format!("wu_{}", p.name());
        sp.units.add(p, count(&field, f.num(&field)?.unwrap_or(0))?);
    }
    Ok(sp)
}

/// An edge item (`pk` the post, `sk` the user's `E#…`), decoded: an item that is not an edge as
/// tally writes it (`crate::edge::EdgeState::from_attrs`) is an error naming it, never "absent"
/// or "not liked".
pub fn edge_state(a: &crate::item::Attrs, post: &str, user: &str) -> PortResult<EdgeState> {
    EdgeState::from_attrs(a).ok_or_else(|| PortError::Corrupt {
        item: format!("{post}/{}", crate::edge::edge_sk(user)),
        detail: "is not an edge (its state, time, event or writes are missing or mistyped)".into(),
    })
}

/// A window's dedup record as stored: the window's end (`end`, a position as
/// [`Position::parse`] reads it), its arrival clock (`max_arrival`) and its first-seen ids (`ids`,
/// [`crate::dedup::DedupRecord::encode_ids`]), decoded. Missing or not what tally writes is an
/// error naming the item and the field: a record read as empty would let a retry count twice.
pub fn dedup_row(
    item: &str,
    end: Option<&str>,
    max_arrival: Option<i64>,
    ids: Option<&[u8]>,
) -> PortResult<(Position, crate::dedup::DedupRecord)> {
    let corrupt = |detail: &str| PortError::Corrupt {
        item: item.to_owned(),
        detail: detail.to_owned(),
    };
    let end = end
        .and_then(Position::parse)
        .ok_or_else(|| corrupt("its window end is missing or not a sequence position"))?;
    let max_arrival = max_arrival.ok_or_else(|| corrupt("`max_arrival` is missing"))?;
    let ids = ids
        .and_then(crate::dedup::DedupRecord::decode_ids)
        .ok_or_else(|| corrupt("`ids` is missing or not whole 16-byte ids"))?;
    Ok((end, crate::dedup::DedupRecord { max_arrival, ids }))
}

/// The time a latency snapshot's sort key starts with (13 digits, ms: `<taken_at>#<shard>#<seq>`
/// on DynamoDB), or an error naming the item.
pub fn snapshot_time(sk: &str, item: &str) -> PortResult<i64> {
    sk.get(..13)
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| PortError::Corrupt {
            item: item.to_owned(),
            detail: format!("its sort key `{sk}` does not start with a 13-digit time"),
        })
}

/// A shard's trending sketch as stored (`entries`, [`crate::ports::TrendingEntry::encode_all`];
/// `at_ms`, when it was taken), decoded: either missing or not what tally writes is an error
/// naming the item, never an empty sketch or a sketch taken at the epoch.
pub fn trending_row(row: &Row, item: &str) -> PortResult<(Vec<crate::ports::TrendingEntry>, i64)> {
    let f = Fields { row, item };
    let text = f.required_text("entries")?;
    let at = f
        .num("at_ms")?
        .ok_or_else(|| f.corrupt("at_ms", "is missing".into()))?;
    let entries = crate::ports::TrendingEntry::decode_all(text, item).map_err(|_| {
        f.corrupt(
            "entries",
            "is not [post_id, score, error] rows: delete the item and the shard's next snapshot writes it again".into(),
        )
    })?;
    Ok((entries, at))
}

/// An edge as a store that keeps edges typed holds it (the embedded store's `edges` table): its
/// state in columns — whether the user likes the post, the ordering time and id of the event
/// that set it, the window that wrote it — and the rest of what it remembers (the event that
/// write replaced, the older writes, the clamped events that took no effect, the window pushed
/// out of the history) in `history`, [`edge_history_into`]'s encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeRow {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: String,
    /// The window that wrote it ([`crate::edge::window_id`]).
    pub window: String,
    /// The rest, [`edge_history_into`].
    pub history: Vec<u8>,
}

/// The version byte [`edge_history_into`] starts with.
const HISTORY_V1: u8 = 1;

/// An [`EdgeRow`]'s columns but `history`, borrowed from the edge: what a store writing an
/// edge binds, with its history from [`edge_history_into`] (one buffer for many edges, nothing
/// else copied per edge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeColumns<'a> {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: &'a str,
    /// The window that wrote it.
    pub window: &'a str,
}

/// The edge's columns ([`EdgeColumns`]).
///
/// # Panics
/// If the edge has no write (an [`EdgeState`] always has one: its state was written).
pub fn edge_columns(s: &EdgeState) -> EdgeColumns<'_> {
    EdgeColumns {
        liked: s.liked,
        at_ms: s.at_ms,
        event_id: &s.event_id,
        window: &s.writes[0].window,
    }
}

/// The encoding of what an edge remembers beside its columns: a version byte (1); the first
/// write's `before`; the count of older writes, each its window and `before`; the count of lost
/// clamped events, each an id; the dropped window or none. A `before` is a tag (0 absent, 1 an
/// unlike, 2 a like), then for 1 and 2 its time (8 bytes, little-endian) and id; a string is
/// its length (2 bytes, little-endian) and its UTF-8 bytes; "none" is an empty string.
///
/// Written into `out`, cleared first: a writer of many edges keeps one buffer.
pub fn edge_history_into(s: &EdgeState, out: &mut Vec<u8>) {
    fn text(out: &mut Vec<u8>, t: &str) {
        let n = u16::try_from(t.len()).expect("ids and windows are shorter than 64 KiB");
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(t.as_bytes());
    }
    fn stamp(out: &mut Vec<u8>, b: Option<&crate::edge::Stamp>) {
        match b {
            None => out.push(0),
            Some(b) => {
                out.push(1 + u8::from(b.liked));
                out.extend_from_slice(&b.at_ms.to_le_bytes());
                text(out, &b.event_id);
            }
        }
    }
    out.clear();
    out.push(HISTORY_V1);
    stamp(out, s.writes[0].before.as_ref());
    out.push(s.writes.len() as u8 - 1);
    for w in &s.writes[1..] {
        text(out, &w.window);
        stamp(out, w.before.as_ref());
    }
    out.push(s.lost.len() as u8);
    for id in &s.lost {
        text(out, id);
    }
    text(out, s.dropped.as_deref().unwrap_or_default());
}

/// A typed edge row of `post` for `user`, decoded: a history that does not decode, or more
/// writes or lost events than an edge keeps, is an error naming the edge.
pub fn edge_from_row(post: &str, user: &str, row: EdgeRow) -> PortResult<EdgeState> {
    use crate::edge::{EdgeWrite, Stamp, EDGE_HISTORY, EDGE_LOST};
    let corrupt = |detail: String| PortError::Corrupt {
        item: format!("edges {post}/{user}"),
        detail,
    };
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8], String> {
            if self.0.len() < n {
                return Err(format!("its history ends {} bytes early", n - self.0.len()));
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }
        fn byte(&mut self) -> Result<u8, String> {
            Ok(self.take(1)?[0])
        }
        fn text(&mut self) -> Result<String, String> {
            let n = u16::from_le_bytes(self.take(2)?.try_into().expect("two bytes"));
            String::from_utf8(self.take(n as usize)?.to_vec())
                .map_err(|_| "its history holds a string that is not UTF-8".to_owned())
        }
        fn stamp(&mut self) -> Result<Option<Stamp>, String> {
            let tag = self.byte()?;
            if tag == 0 {
                return Ok(None);
            }
            if tag > 2 {
                return Err(format!(
                    "its history holds an event tagged {tag} (0, 1 or 2)"
                ));
            }
            let at_ms = i64::from_le_bytes(self.take(8)?.try_into().expect("eight bytes"));
            Ok(Some(Stamp {
                liked: tag == 2,
                at_ms,
                event_id: self.text()?,
            }))
        }
    }
    let mut r = Reader(&row.history);
    let decode = |r: &mut Reader<'_>| -> Result<EdgeState, String> {
        match r.byte()? {
            HISTORY_V1 => {}
            v => return Err(format!("its history is version {v}, not {HISTORY_V1}")),
        }
        if row.window.is_empty() {
            return Err("it names no window that wrote it".into());
        }
        let mut writes = vec![EdgeWrite {
            window: row.window.clone(),
            before: r.stamp()?,
        }];
        let older = r.byte()? as usize;
        if older >= EDGE_HISTORY {
            return Err(format!(
                "it remembers {} writes (at most {EDGE_HISTORY})",
                older + 1
            ));
        }
        for _ in 0..older {
            let window = r.text()?;
            writes.push(EdgeWrite {
                window,
                before: r.stamp()?,
            });
        }
        let lost_n = r.byte()? as usize;
        if lost_n > EDGE_LOST {
            return Err(format!(
                "it remembers {lost_n} lost events (at most {EDGE_LOST})"
            ));
        }
        let lost = (0..lost_n).map(|_| r.text()).collect::<Result<_, _>>()?;
        let dropped = Some(r.text()?).filter(|w| !w.is_empty());
        if !r.0.is_empty() {
            return Err(format!("its history has {} bytes past its end", r.0.len()));
        }
        Ok(EdgeState {
            liked: row.liked,
            at_ms: row.at_ms,
            event_id: row.event_id.clone(),
            writes,
            lost,
            dropped,
        })
    };
    decode(&mut r).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(fields: &[(&str, Field)]) -> Row {
        fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn base() -> Vec<(&'static str, Field)> {
        vec![
            ("app", Field::S("counter".into())),
            ("shard_id", Field::S("s0".into())),
        ]
    }

    #[test]
    fn a_fresh_row_takes_the_defaults() {
        let st = shard_state(&row(&base()), "leases counter/s0").unwrap();
        assert_eq!(st.lease.parents, Vec::<String>::new());
        assert_eq!(st.lease.max_arrival, i64::MIN);
        assert!(st.pending.is_none() && !st.lease.finished);
    }

    #[test]
    fn each_layout_of_a_row_reads_the_same() {
        let mut dynamo = base();
        dynamo.extend([
            ("parents", Field::L(vec!["p0".into()])),
            ("finished", Field::B(true)),
            ("counted", Field::N(7)),
            ("wu_counts", Field::N(3)),
        ]);
        let mut sqlite = base();
        sqlite.extend([
            ("parents", Field::S(r#"["p0"]"#.into())),
            ("finished", Field::N(1)),
            ("spent", Field::S(r#"{"counted":7,"counts":3}"#.into())),
        ]);
        let (a, b) = (
            shard_state(&row(&dynamo), "a").unwrap(),
            shard_state(&row(&sqlite), "b").unwrap(),
        );
        assert_eq!(a.lease, b.lease);
        assert_eq!(a.spent, b.spent);
        assert_eq!(a.spent.counted, 7);
    }

    #[test]
    fn a_corrupt_field_is_named_never_defaulted() {
        for (field, bad) in [
            ("parents", Field::S("not json".into())),
            ("parents", Field::N(3)),
            ("max_arrival", Field::S("soon".into())),
            ("checkpoint", Field::S("x".into())),
            ("pending_end", Field::S("-1".into())),
            ("epoch", Field::N(-1)),
            ("finished", Field::N(2)),
            ("spent", Field::S("{".into())),
            ("wu_counts", Field::Other("a binary value".into())),
        ] {
            let mut r = base();
            r.push((field, bad));
            let e = shard_state(&row(&r), "leases counter/s0").unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("leases counter/s0") && text.contains(&format!("`{field}`")),
                "{field}: {text}"
            );
        }
        let e = shard_state(&Row::new(), "leases x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`app` is missing"), "{e}");
    }

    #[test]
    fn a_typed_edge_row_reads_back_and_a_bad_history_is_named() {
        use crate::edge::{written_state, EdgeEvent};
        let e = |liked, at, id: &str, lost: &[&str]| EdgeEvent {
            post_id: "p".into(),
            user_id: "u".into(),
            liked,
            at_ms: at,
            event_id: id.into(),
            clamped: false,
            lost: lost.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut s = written_state(&e(true, 1, "a", &[]), "m1@s0", None);
        for (i, w) in ["m2@s1", "m3@s0", "m4@s1"].iter().enumerate() {
            s = written_state(&e(i % 2 == 1, 10 + i as i64, "b", &["x", "y"]), w, Some(&s));
        }
        assert_eq!(s.writes.len(), 3);
        assert!(s.dropped.is_some() && !s.lost.is_empty());
        // The row as a store writes it: the columns borrowed from the state, the history
        // encoded into a buffer that held another edge's.
        let c = edge_columns(&s);
        let mut history = vec![7; 300];
        edge_history_into(&s, &mut history);
        let row = EdgeRow {
            liked: c.liked,
            at_ms: c.at_ms,
            event_id: c.event_id.to_owned(),
            window: c.window.to_owned(),
            history,
        };
        assert_eq!(edge_from_row("p", "u", row.clone()).unwrap(), s);
        for cut in 0..row.history.len() {
            let mut bad = row.clone();
            bad.history.truncate(cut);
            let err = edge_from_row("p", "u", bad).unwrap_err().to_string();
            assert!(err.contains("edges p/u"), "{err}");
        }
        let mut bad = row.clone();
        bad.history[0] = 9;
        let err = edge_from_row("p", "u", bad).unwrap_err().to_string();
        assert!(err.contains("version 9"), "{err}");
        let mut bad = row;
        bad.history.push(0);
        assert!(edge_from_row("p", "u", bad).is_err());
    }
}
