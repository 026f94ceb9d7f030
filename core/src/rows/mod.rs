//! Stored rows read back, one codec each for both backends: an adapter hands over what it read
//! as a [`Row`] — its attributes or columns as they are, nothing decoded — and the row is decoded
//! here, **strictly**: a field that is absent takes its documented default only where tally
//! writes the row without it (a lease row before its first window), but a field that is there
//! and is not what it should be is an error that names the item and the field
//! ([`PortError::Corrupt`]), never a default. A corrupt `parents` read as none would break
//! parents-before-children; a corrupt `max_arrival` read as the start of time would clean up
//! dedup records still needed.

pub mod batch;
mod edge_row;
pub mod field;
mod packed;

pub use edge_row::{edge_from_row, EdgeRow};
pub use field::{Field, Row};
pub use packed::{event_id_from, event_id_into};

use crate::cost::Purpose;
use crate::edge::{CountMode, EdgeState};
use crate::item::{Attrs, Val};
use crate::lease::Lease;
use crate::ports::{Pending, PortError, PortResult, ReadProgress, ShardState, ShardTally};
use crate::seq::{Position, SeqNo};

/// An item's attributes (the embedded store's `items`) as a stored row.
pub fn attrs_row(a: &Attrs) -> Row {
    let field = |v: &Val| match v {
        Val::N(n) => Field::N(*n),
        Val::S(s) => Field::S(s.clone()),
    };
    a.iter().map(|(k, v)| (k.clone(), field(v))).collect()
}

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

    fn required_num(&self, field: &str) -> PortResult<i64> {
        self.num(field)?
            .ok_or_else(|| self.corrupt(field, "is missing".into()))
    }

    /// Bytes (absent: none).
    fn bytes(&self, field: &str) -> PortResult<Vec<u8>> {
        match self.row.get(field) {
            None => Ok(Vec::new()),
            Some(Field::Bytes(b)) => Ok(b.clone()),
            Some(other) => Err(self.corrupt(field, format!("is not bytes: {other:?}"))),
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

/// A stream shard's row (the embedded stream's `shards`), decoded: its id, its parents (a
/// corrupt list is an error: read as none, the shard would be read before them) and whether it
/// is closed.
pub fn shard_info(row: &Row, item: &str) -> PortResult<crate::ports::ShardInfo> {
    let f = Fields { row, item };
    Ok(crate::ports::ShardInfo {
        shard_id: f.required_text("shard_id")?.to_owned(),
        parents: f.list("parents")?,
        closed: f.flag("closed")?,
    })
}

/// A key field's text, to name its row in errors (`?` when it is not text: the decoder says why).
fn key_text<'a>(row: &'a Row, field: &str) -> &'a str {
    match row.get(field) {
        Some(Field::S(s)) => s,
        _ => "?",
    }
}

/// Who asked for the lease of `fence`'s row (`wanted_by`, `LeaseStore::ask_handoff`), as a
/// renewal reads it back: `None` when no one has. Not a string is an error: read as no one, a
/// handoff asked for would be passed over. Errors name the row in its `table`.
pub fn handoff_ask(
    row: &Row,
    table: &str,
    fence: &crate::ports::Fence,
) -> PortResult<Option<String>> {
    let item = &format!("{table} {}/{}", fence.app, fence.shard_id);
    Ok(Fields { row, item }.text("wanted_by")?.map(str::to_owned))
}

/// A fleet row (`ports::fleet_app`), decoded: the worker (`shard_id`), until when it is live
/// (`expires_ms`) and the leases it asks for (`asks`, as `ports::asks_to_text` writes them).
/// Errors name the row (`<table> <fleet>/<worker>`). Asks that are not a list of asks are an
/// error, never none: read as none, a handoff asked for would be passed over for good.
pub fn fleet_member(
    row: &Row,
    table: &str,
    fleet: &str,
) -> PortResult<(crate::ports::Member, i64)> {
    let item = &format!("{table} {fleet}/{}", key_text(row, "shard_id"));
    let f = Fields { row, item };
    let asks = match f.text("asks")? {
        None => Vec::new(),
        Some(t) => serde_json::from_str(t)
            .map_err(|e| f.corrupt("asks", format!("is not a list of asks: `{t}`: {e}")))?,
    };
    let member = crate::ports::Member {
        worker: f.required_text("shard_id")?.to_owned(),
        asks,
    };
    Ok((member, f.num("expires_ms")?.unwrap_or(0)))
}

/// A dead-letter row, decoded: its shard, its key (the record's position, and the gap it
/// stands for, if one: `DeadLetter::key`), arrival, reason, the record's bytes kept and its
/// size. Errors name the row (`<table> <shard>/<key>`).
pub fn dead_letter(row: &Row, table: &str) -> PortResult<crate::dead_letter::DeadLetter> {
    let (shard, key) = (key_text(row, "shard_id"), key_text(row, "seq"));
    let item = &format!("{table} {shard}/{key}");
    let f = Fields { row, item };
    let key = f.required_text("seq")?;
    let (seq, gap) = crate::dead_letter::DeadLetter::parse_key(key)
        .ok_or_else(|| f.corrupt("seq", format!("is not a dead letter's key: `{key}`")))?;
    let data = f.bytes("data")?;
    let size = f.required_num("size")?;
    let size =
        u64::try_from(size).map_err(|_| f.corrupt("size", format!("is negative: {size}")))?;
    Ok(crate::dead_letter::DeadLetter {
        shard_id: f.required_text("shard_id")?.to_owned(),
        seq,
        gap,
        arrival_ms: f.required_num("arrival_ms")?,
        reason: f.required_text("reason")?.to_owned(),
        data,
        size,
    })
}

/// The store's count mode item (`#meta`, [`crate::edge::MetaItem::Mode`]), decoded: its `mode`.
/// `item` names it in errors. Missing or no mode is an error, never "no mode yet": read as
/// that, a claim would set the store to another mode than it was counted in.
pub fn count_mode(row: &Row, item: &str) -> PortResult<CountMode> {
    let f = Fields { row, item };
    let m = f.required_text("mode")?;
    CountMode::parse(m).ok_or_else(|| f.corrupt("mode", format!("is not a count mode: `{m}`")))
}

/// Another `#meta` item (the stream counted, [`crate::edge::MetaItem::Stream`]; the rebuild
/// under way, [`crate::edge::MetaItem::Rebuilding`]), decoded: its value `v`, which must be text.
pub fn meta_value(row: &Row, item: &str) -> PortResult<String> {
    Ok(Fields { row, item }.required_text("v")?.to_owned())
}

/// Why a store with counts and no count mode is refused: only a tally from before modes
/// counted into a store without claiming its mode first. `store` names the store.
pub fn counted_without_mode(store: &str) -> PortError {
    PortError::Other(format!(
        "{store} was made by an earlier build of tally: it holds counts and no count mode, \
         which this build does not read: count into a fresh store (put the events again with \
         `tally replay`), or keep using the build that made it"
    ))
}

/// A lease row, decoded: the shard's lease, its pending window, what the counter spent on it and
/// its holder's progress. Errors name the row in its `table` (`tally-leases counter/shardId-…`).
pub fn shard_state(row: &Row, table: &str) -> PortResult<ShardState> {
    let (app, shard) = (key_text(row, "app"), key_text(row, "shard_id"));
    let item = &format!("{table} {app}/{shard}");
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
    // A pending window an earlier build recorded has neither: that build applies it.
    let earlier = |field| {
        let why = "is missing: an earlier build of tally recorded this pending window; let it \
                   apply it (`tally count --until-idle`) before this build counts the shard";
        f.corrupt(field, why.into())
    };
    let pending = match f.position("pending_end")? {
        None => None,
        Some(end) => Some(Pending {
            end,
            first: {
                let s = f
                    .text("pending_first")?
                    .ok_or_else(|| earlier("pending_first"))?;
                SeqNo::parse(s).ok_or_else(|| {
                    f.corrupt("pending_first", format!("is not a sequence number: `{s}`"))
                })?
            },
            horizon_ms: f
                .num("pending_horizon_ms")?
                .ok_or_else(|| earlier("pending_horizon_ms"))?,
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
/// tally writes it ([`EdgeState::from_attrs`]) is an error naming it, never "absent" or "not
/// liked".
pub fn edge_state(a: &crate::item::Attrs, post: &str, user: &str) -> PortResult<EdgeState> {
    EdgeState::from_attrs(a).map_err(|detail| PortError::Corrupt {
        item: format!("{post}/{}", crate::edge::edge_sk(user)),
        detail,
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
        let st = shard_state(&row(&base()), "leases").unwrap();
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
            shard_state(&row(&dynamo), "leases").unwrap(),
            shard_state(&row(&sqlite), "leases").unwrap(),
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
            let e = shard_state(&row(&r), "tally-leases").unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("tally-leases counter/s0") && text.contains(&format!("`{field}`")),
                "{field}: {text}"
            );
        }
        let e = shard_state(&Row::new(), "leases").unwrap_err().to_string();
        assert!(e.contains("`app` is missing"), "{e}");
        let mut r = base();
        r.extend([
            ("pending_end", Field::S("12".into())),
            ("pending_horizon_ms", Field::N(600_000)),
        ]);
        let e = shard_state(&row(&r), "leases").unwrap_err().to_string();
        assert!(
            e.contains("`pending_first` is missing: an earlier build"),
            "{e}"
        );
    }
}
