//! The counter's summary items, and how a window's per-post delta is written to them exactly once
//! without a transaction.
//!
//! Layout, per post and per *writing shard* (no two shards ever write the same item):
//! - a **live** item (`L#<shard>`): the post's total on that shard `n`, the marker `w` of the last
//!   window applied to it, its hour `hk` (hours since the epoch: the latest hour of any event it
//!   holds), the minutes of that hour (`m00`–`m59`) and the hours of that hour's day (`h00`–`h23`);
//! - **archive** items, written when the live item moves on: an hour item (`H<YYYYMMDDHH>#<shard>`,
//!   its minutes) at most once per hour the post had likes, a day item (`D<YYYYMMDD>#<shard>`, its
//!   hours) at most once per day; and late events (created in an hour the live item has passed)
//!   are added to them.
//!
//! So a window writes about **one item per touched post**, each below 1 KB (one write unit), as a
//! plain conditional write: the live item only if its marker is below the window's end (and its
//! hour is the one the plan was made for), an archive add likewise, an archive's first write only
//! if it does not exist. A refused condition means "already applied": the window's identity is
//! fixed before any of its writes (its end is recorded as pending in the lease row), so whoever
//! applies it — the owner, a crashed owner's successor, a stale owner waking up — builds the same
//! deltas, and each item takes them once. Archive writes come before the live write that makes
//! them due, so a crash between them is mended by the replay. Until the live write lands, a
//! reader reads the post as before the window: an archive whose marker is above its shard's live
//! item's was written by a window the live item does not hold yet, so a rolled-out archive is
//! not read at all (the live item still holds its slots) and a late add is read without what it
//! added (its `ld`). Without this, "since" counted a roll's minutes twice between the two writes.
//!
//! Both backends store these items as attribute maps and apply [`Write`]s with the same meaning
//! ([`apply`] here is the reference the embedded store uses; the DynamoDB store translates a write
//! into an `UpdateItem`). A count reads the post's live items, plus for "since T" the hour
//! archives of T's hour and the day archives from T's day on: a few Queries, never a scan.

use std::collections::BTreeMap;

use crate::buckets::{day_key, hour_key, minute_of_hour, PostDelta, DAY_MS, HOUR_MS};
use crate::cost::{self, Purpose};
use crate::ports::{PortError, PortResult};
use crate::seq::Position;

mod read;
#[cfg(test)]
use crate::seq::SeqNo;
pub use read::{
    archive_ahead, pending_applies, post_count, query_units, read_units, since, since_reads, total,
    Items, Queried,
};

/// How many times a store plans a post's writes again when one was refused as stale (another
/// writer moved the live item's hour between the plan and the write) before the call fails: both
/// stores follow it.
pub const PLAN_ATTEMPTS: usize = 5;

pub use crate::item::{item_size, write_units, Attrs, Val};

/// The partition of the global totals (`#` cannot start a post id); one item per app and shard.
pub const GLOBAL_PK: &str = "#global";

/// A window's marker: its end in a form whose string order is the positions' order, so that a
/// store compares markers as strings. A whole record's is a fixed-width length, then the digits
/// (numeric order). A position inside the aggregate at `S` is marked as the number below `S`
/// followed by `.` and its sub-sequence number at fixed width: above every mark of a record
/// before `S` (it extends the mark of `S - 1`), below the whole of `S` (a smaller number), in
/// sub-sequence order among themselves — and a whole record keeps the mark it always had.
pub fn marker(end: &Position) -> String {
    let seq = end.seq.as_str();
    match end.sub {
        None => format!("{:03}{seq}", seq.len()),
        Some(k) => {
            let below = end.seq.predecessor();
            format!("{:03}{below}.{k:010}", below.len())
        }
    }
}

/// The marker a window's count writes carry: its end's.
pub fn marker_of(w: &crate::ports::WindowRef<'_>) -> String {
    marker(w.end)
}

/// The sort key of a post's live item on a shard.
pub fn live_sk(shard: &str) -> String {
    format!("L#{shard}")
}

/// The prefix every live item's sort key starts with.
pub const LIVE_PREFIX: &str = "L#";

/// The sort-key prefix of a post's hour archives of hour `hour` (hours since the epoch).
pub fn hour_prefix(hour: i64) -> String {
    format!("H{}#", hour_key(hour * HOUR_MS))
}

/// The sort-key prefix of a post's day archives of day `day` (days since the epoch).
pub fn day_prefix(day: i64) -> String {
    format!("D{}#", day_key(day * DAY_MS))
}

/// The sort key every day archive's key sorts below.
pub const DAY_KEYS_END: &str = "D99999999~";

fn day_of(hour: i64) -> i64 {
    hour.div_euclid(24)
}

fn hour_of_day(hour: i64) -> u8 {
    hour.rem_euclid(24) as u8
}

fn minute_attr(m: u8) -> String {
    format!("m{m:02}")
}

fn hour_attr(h: u8) -> String {
    format!("h{h:02}")
}

/// What a live item holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveState {
    /// The post's count on this shard's live item (attribute `n`).
    pub total: i64,
    /// The marker of the last window applied (attribute `w`).
    pub marker: String,
    /// Its hour (hours since the epoch).
    pub hour: i64,
    /// The minutes of `hour`.
    pub minutes: BTreeMap<u8, i64>,
    /// The hours of `hour`'s day.
    pub hours: BTreeMap<u8, i64>,
}

fn num(a: &Attrs, k: &str) -> Option<i64> {
    match a.get(k)? {
        Val::N(n) => Some(*n),
        Val::S(_) => None,
    }
}

fn slots(a: &Attrs, prefix: char) -> BTreeMap<u8, i64> {
    a.iter()
        .filter_map(|(k, v)| {
            let slot: u8 = k.strip_prefix(prefix)?.parse().ok()?;
            match v {
                Val::N(n) => Some((slot, *n)),
                Val::S(_) => None,
            }
        })
        .collect()
}

impl LiveState {
    /// Reads a live item; `None` if it is not one.
    pub fn from_attrs(a: &Attrs) -> Option<LiveState> {
        let marker = match a.get("w")? {
            Val::S(s) => s.clone(),
            Val::N(_) => return None,
        };
        Some(LiveState {
            total: num(a, "n")?,
            marker,
            hour: num(a, "hk")?,
            minutes: slots(a, 'm'),
            hours: slots(a, 'h'),
        })
    }
}

/// What the writer knows of a post's live item before writing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Nothing.
    Unknown,
    /// Only its hour, from the writer's own last write of it.
    Hour(i64),
    /// Read just now: there is none.
    Absent,
    /// Read just now.
    Item(LiveState),
}

/// The condition of one write; a refused condition means the write's effect is already there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cond {
    /// The item must not exist: an archive's first write (its content is fixed by the live item
    /// it moves out of, so a second writer would write the same).
    Absent,
    /// The item's marker must be below the window's (or the item absent): an archive add.
    MarkerBelow,
    /// The live item: marker below the window's and hour `hour`, or (`or_absent`) no item; with
    /// `hour` `None`, only no item.
    Live {
        /// The hour the item must be at (`None`: only an absent item will do).
        hour: Option<i64>,
        /// Whether an absent item will do too.
        or_absent: bool,
    },
}

/// One conditional write of one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The item's sort key (in the post's partition).
    pub sk: String,
    /// What the item must be for the write to apply.
    pub cond: Cond,
    /// Attributes set.
    pub set: Vec<(String, Val)>,
    /// Numbers added to (created at 0).
    pub add: Vec<(String, i64)>,
    /// Attributes removed.
    pub remove: Vec<String>,
    /// What it is charged to: the live item to counts, archives to buckets.
    pub purpose: Purpose,
}

/// What to do for one post in one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The window is applied to the post already (the live item's marker says so).
    Skip,
    /// The plan needs the live item's content: read it and plan again.
    NeedItem,
    /// These writes, in order (archives first, the live item last).
    Writes(Vec<Write>),
}

/// The window's events of one post, by hour, then minute.
fn by_hour(delta: &PostDelta) -> BTreeMap<i64, BTreeMap<u8, i64>> {
    let mut out: BTreeMap<i64, BTreeMap<u8, i64>> = BTreeMap::new();
    for (&minute_ms, &n) in &delta.by_minute {
        *out.entry(minute_ms.div_euclid(HOUR_MS))
            .or_default()
            .entry(minute_of_hour(minute_ms))
            .or_default() += n;
    }
    out
}

fn sum(m: &BTreeMap<u8, i64>) -> i64 {
    m.values().sum()
}

/// Plans the writes of one post's delta in the window ending at marker `end` on `shard`: what
/// the live item is assumed to be, where the window's events fall (the live hour and day, the
/// ones the live item rolls out of, late ones), then the archives' writes and the live item's.
pub fn plan(shard: &str, delta: &PostDelta, end: &str, known: &Known) -> Plan {
    let hours = by_hour(delta);
    let Some((&max_hour, _)) = hours.last_key_value() else {
        return Plan::Writes(vec![]);
    };
    let assumed = match assume(known, end, max_hour, hours.len()) {
        Ok(a) => a,
        Err(plan) => return plan,
    };
    let roll = Roll::new(assumed.hour, max_hour);
    let Ok(fall) = Fall::of(&hours, &roll, assumed.item) else {
        return Plan::NeedItem;
    };
    let mut writes = archive_writes(shard, end, &roll, &fall);
    writes.push(live_write(shard, delta, end, assumed, &roll, fall));
    Plan::Writes(writes)
}

/// The live item as a plan assumes it, and the condition that checks the assumption.
struct Assumed<'a> {
    /// Its hour (`None`: absent).
    hour: Option<i64>,
    /// Its content, when it was read.
    item: Option<&'a LiveState>,
    cond: Cond,
}

/// What the writer may assume of the live item (`Err`: the plan is already decided — skip, or
/// read the item first). Optimistic where it can be: a window within one hour leaves an item of
/// that hour, or none, as it is.
fn assume<'a>(
    known: &'a Known,
    end: &str,
    max_hour: i64,
    hours: usize,
) -> Result<Assumed<'a>, Plan> {
    let live = |hour: Option<i64>, item: Option<&'a LiveState>, or_absent: bool| Assumed {
        hour,
        item,
        cond: Cond::Live { hour, or_absent },
    };
    match known {
        Known::Item(s) if s.marker.as_str() >= end => Err(Plan::Skip),
        Known::Item(s) => Ok(live(Some(s.hour), Some(s), false)),
        Known::Absent => Ok(live(None, None, true)),
        Known::Unknown if hours == 1 => Ok(live(Some(max_hour), None, true)),
        Known::Unknown => Err(Plan::NeedItem),
        Known::Hour(h) if max_hour > *h => Err(Plan::NeedItem),
        Known::Hour(h) => Ok(live(Some(*h), None, false)),
    }
}

/// The live item's hour after the window, and the hour and day it rolls out of, if any.
struct Roll {
    new_hour: i64,
    from_hour: Option<i64>,
    from_day: Option<i64>,
}

impl Roll {
    fn new(prior_hour: Option<i64>, max_hour: i64) -> Roll {
        let new_hour = prior_hour.map_or(max_hour, |h| h.max(max_hour));
        let from_hour = prior_hour.filter(|&h| h < new_hour);
        let from_day = from_hour.map(day_of).filter(|&d| d < day_of(new_hour));
        Roll {
            new_hour,
            from_hour,
            from_day,
        }
    }
}

/// Where the window's events fall: the live item's minutes and hours, the archives it rolls out
/// into (the old item's slots plus this window's events of them), and late hours and days.
struct Fall {
    live_minutes: BTreeMap<u8, i64>,
    live_hours: BTreeMap<u8, i64>,
    hour_put: Option<BTreeMap<u8, i64>>,
    day_put: Option<BTreeMap<u8, i64>>,
    late_hours: BTreeMap<i64, BTreeMap<u8, i64>>,
    late_days: BTreeMap<i64, BTreeMap<u8, i64>>,
}

impl Fall {
    /// `Err`: the live item rolls, and its content was not read.
    fn of(
        hours: &BTreeMap<i64, BTreeMap<u8, i64>>,
        roll: &Roll,
        item: Option<&LiveState>,
    ) -> Result<Fall, ()> {
        let mut fall = Fall {
            live_minutes: BTreeMap::new(),
            live_hours: BTreeMap::new(),
            hour_put: None,
            day_put: None,
            late_hours: BTreeMap::new(),
            late_days: BTreeMap::new(),
        };
        // Rolling: the old hour (and day) move out to archives, with this window's events of them.
        if roll.from_hour.is_some() {
            let s = item.ok_or(())?;
            fall.hour_put = Some(s.minutes.clone());
            if roll.from_day.is_some() {
                fall.day_put = Some(s.hours.clone());
            }
        }
        for (&hour, minutes) in hours {
            let n = sum(minutes);
            // The hour's minutes.
            if hour == roll.new_hour {
                fall.live_minutes = minutes.clone();
            } else if Some(hour) == roll.from_hour {
                let put = fall.hour_put.get_or_insert_with(BTreeMap::new);
                for (m, v) in minutes {
                    *put.entry(*m).or_default() += v;
                }
            } else {
                fall.late_hours.insert(hour, minutes.clone());
            }
            // The day's hours.
            let day = day_of(hour);
            let slot = hour_of_day(hour);
            if day == day_of(roll.new_hour) {
                *fall.live_hours.entry(slot).or_default() += n;
            } else if Some(day) == roll.from_day {
                *fall
                    .day_put
                    .get_or_insert_with(BTreeMap::new)
                    .entry(slot)
                    .or_default() += n;
            } else {
                *fall
                    .late_days
                    .entry(day)
                    .or_default()
                    .entry(slot)
                    .or_default() += n;
            }
        }
        Ok(fall)
    }
}

/// The archives' writes: a put of each archive the live item rolls out into (its content is
/// fixed, so a second writer writes the same), then a marker-conditioned add to each late one.
fn archive_writes(shard: &str, end: &str, roll: &Roll, fall: &Fall) -> Vec<Write> {
    let sk = |prefix: String| format!("{prefix}{shard}");
    let archive_put = |key: String, slots: &BTreeMap<u8, i64>, attr: fn(u8) -> String| Write {
        sk: key,
        cond: Cond::Absent,
        set: std::iter::once(("n".to_owned(), Val::N(sum(slots))))
            .chain(std::iter::once(("w".to_owned(), Val::S(end.to_owned()))))
            .chain(slots.iter().map(|(s, v)| (attr(*s), Val::N(*v))))
            .collect(),
        add: vec![],
        remove: vec![],
        purpose: Purpose::Buckets,
    };
    let archive_add = |key: String, slots: &BTreeMap<u8, i64>, attr: fn(u8) -> String| {
        let add: Vec<(String, i64)> = std::iter::once(("n".to_owned(), sum(slots)))
            .chain(slots.iter().map(|(s, v)| (attr(*s), *v)))
            .collect();
        Write {
            sk: key,
            cond: Cond::MarkerBelow,
            set: vec![
                ("w".to_owned(), Val::S(end.to_owned())),
                (LAST_ADD.to_owned(), Val::S(last_add_text(&add))),
            ],
            add,
            remove: vec![],
            purpose: Purpose::Buckets,
        }
    };
    let mut writes = Vec::new();
    if let (Some(old), Some(put)) = (roll.from_hour, &fall.hour_put) {
        writes.push(archive_put(sk(hour_prefix(old)), put, minute_attr));
    }
    if let (Some(old_day), Some(put)) = (roll.from_day, &fall.day_put) {
        writes.push(archive_put(sk(day_prefix(old_day)), put, hour_attr));
    }
    for (hour, minutes) in &fall.late_hours {
        writes.push(archive_add(sk(hour_prefix(*hour)), minutes, minute_attr));
    }
    for (day, hs) in &fall.late_days {
        writes.push(archive_add(sk(day_prefix(*day)), hs, hour_attr));
    }
    writes
}

/// An archive add's own attribute: what the add added (`n:2,m05:3,m07:-1`), so that a reader
/// that finds the archive ahead of its shard's live item (the window's live write not landed yet)
/// can take the add back out. Only the last add is kept: a shard applies one window at a time,
/// so at most one is ahead.
pub const LAST_ADD: &str = "ld";

fn last_add_text(add: &[(String, i64)]) -> String {
    add.iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The live item's write: its marker and hour set, the delta added to its total; its minutes and
/// hours added to — or, where it rolls, replaced by the new hour's and day's (slots the old one
/// had and the new one has not removed).
fn live_write(
    shard: &str,
    delta: &PostDelta,
    end: &str,
    assumed: Assumed<'_>,
    roll: &Roll,
    fall: Fall,
) -> Write {
    let mut live = Write {
        sk: live_sk(shard),
        cond: assumed.cond,
        set: vec![
            ("w".to_owned(), Val::S(end.to_owned())),
            ("hk".to_owned(), Val::N(roll.new_hour)),
        ],
        add: vec![("n".to_owned(), delta.total())],
        remove: vec![],
        purpose: Purpose::Counts,
    };
    let mut slots = |new: &BTreeMap<u8, i64>,
                     old: Option<&BTreeMap<u8, i64>>,
                     attr: fn(u8) -> String| {
        match old {
            Some(old) => {
                live.set
                    .extend(new.iter().map(|(s, v)| (attr(*s), Val::N(*v))));
                live.remove.extend(
                    old.keys()
                        .filter(|s| !new.contains_key(s))
                        .map(|s| attr(*s)),
                );
            }
            None => live.add.extend(new.iter().map(|(s, v)| (attr(*s), *v))),
        }
    };
    let item = assumed.item;
    let old_minutes = roll.from_hour.and(item).map(|s| &s.minutes);
    slots(&fall.live_minutes, old_minutes, minute_attr);
    let old_hours = roll.from_day.and(item).map(|s| &s.hours);
    slots(&fall.live_hours, old_hours, hour_attr);
    live
}

/// Why a write was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its effect is there already (an archive written, a marker at or past the window's).
    Applied,
    /// The live item is not what the plan assumed: read it and plan again.
    Stale,
}

/// Applies one write to an item (`None`: absent), as every store must: the condition, then
/// `SET`, `ADD` and `REMOVE`. Returns the new item, or why the write was refused.
pub fn apply(item: Option<&Attrs>, w: &Write, end: &str) -> Result<Attrs, Refused> {
    let marker = item.and_then(|a| match a.get("w") {
        Some(Val::S(s)) => Some(s.as_str()),
        _ => None,
    });
    let before = marker.is_none_or(|m| m < end);
    match (&w.cond, item) {
        (Cond::Absent, Some(_)) => return Err(Refused::Applied),
        (Cond::MarkerBelow, Some(_)) if !before => return Err(Refused::Applied),
        (Cond::Live { or_absent, .. }, None) if !or_absent => return Err(Refused::Stale),
        (Cond::Live { hour, .. }, Some(a)) => {
            if !before {
                return Err(Refused::Applied);
            }
            if hour.is_none() || num(a, "hk") != *hour {
                return Err(Refused::Stale);
            }
        }
        _ => {}
    }
    let mut a = item.cloned().unwrap_or_default();
    for (k, v) in &w.set {
        a.insert(k.clone(), v.clone());
    }
    for (k, v) in &w.add {
        let cur = num(&a, k).unwrap_or(0);
        a.insert(k.clone(), Val::N(cur + v));
    }
    for k in &w.remove {
        a.remove(k);
    }
    Ok(a)
}

/// The sort key of an app's global-total item of a shard (partition [`GLOBAL_PK`]).
pub fn global_sk(app: &str, shard: &str) -> String {
    format!("{app}#{shard}")
}

/// A window's write of its shard's global total: a marker-conditioned add, like an archive's.
pub fn global_total_write(app: &str, shard: &str, delta: i64, end: &str) -> Write {
    Write {
        sk: global_sk(app, shard),
        cond: Cond::MarkerBelow,
        set: vec![("w".to_owned(), Val::S(end.to_owned()))],
        add: vec![("n".to_owned(), delta)],
        remove: vec![],
        purpose: Purpose::Counts,
    }
}

/// The sum of the items' `n`: the global total from its partition, read strictly
/// ([`check_items`]).
pub fn total_of(items: &Items) -> PortResult<i64> {
    check_items(GLOBAL_PK, items)?;
    Ok(items.iter().filter_map(|(_, a)| num(a, "n")).sum())
}

/// That these items of partition `pk` are summary items as tally writes them: each has its
/// total `n`, a number; a live item its marker `w`, a string, and its hour `hk`, a number; a
/// minute or hour slot (`m00`, `h23`) is a number; an archive's last add ([`LAST_ADD`]) reads
/// as one. Anything else is [`PortError::Corrupt`] naming the item and the attribute — never
/// read as 0 or as absent, which would show a count it later takes back.
pub fn check_items(pk: &str, items: &Items) -> PortResult<()> {
    items.iter().try_for_each(|(sk, a)| check_item(pk, sk, a))
}

fn check_item(pk: &str, sk: &str, a: &Attrs) -> PortResult<()> {
    let corrupt = |detail: String| PortError::Corrupt {
        item: format!("{pk}/{sk}"),
        detail,
    };
    let is_slot = |k: &str| {
        k.len() == 3
            && (k.starts_with('m') || k.starts_with('h'))
            && k[1..].bytes().all(|b| b.is_ascii_digit())
    };
    let live = sk.starts_with(LIVE_PREFIX);
    let mut needed: Vec<&str> = vec!["n"];
    if live {
        needed.extend(["w", "hk"]);
    }
    for k in needed {
        if !a.contains_key(k) {
            return Err(corrupt(format!("`{k}` is missing")));
        }
    }
    for (k, v) in a {
        let want_number = k == "n" || k == "hk" || is_slot(k);
        match (v, want_number) {
            (Val::S(_), true) => {
                return Err(corrupt(format!("`{k}` is a string where a number is kept")))
            }
            (Val::N(_), false) if k == "w" || k == LAST_ADD => {
                return Err(corrupt(format!("`{k}` is a number where a string is kept")))
            }
            (Val::S(t), false) if k == LAST_ADD && !last_add_reads(t) => {
                return Err(corrupt(format!("`{k}` is {t:?}, not `attr:delta,…`")))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A live item read for a plan, strictly ([`check_items`]): its state, or the error naming it.
pub fn live_state(pk: &str, sk: &str, a: &Attrs) -> PortResult<LiveState> {
    check_item(pk, sk, a)?;
    LiveState::from_attrs(a).ok_or_else(|| PortError::Corrupt {
        item: format!("{pk}/{sk}"),
        detail: "not a live item".into(),
    })
}

/// Whether an archive's last add reads as `attr:delta,…` ([`last_add_text`]).
fn last_add_reads(t: &str) -> bool {
    t.is_empty()
        || t.split(',').all(|part| {
            part.split_once(':')
                .is_some_and(|(_, v)| v.parse::<i64>().is_ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::MINUTE_MS;

    #[test]
    fn a_window_is_pending_for_a_post_until_its_live_item_carries_its_end() {
        let at = |s: &str| marker(&Position::whole(SeqNo::parse(s).unwrap()));
        let (w1, w2) = (at("100"), at("250"));
        // No item on the shard yet: every window of it is still to be applied.
        assert!(pending_applies(&[], "s0", None));
        assert!(pending_applies(&[], "s0", Some(&w1)));
        // The first window (after nothing) has written the item: applied.
        let marks = vec![("s0".to_owned(), w1.clone())];
        assert!(!pending_applies(&marks, "s0", None));
        // The window after it is not applied until the item carries its end…
        assert!(pending_applies(&marks, "s0", Some(&w1)));
        let marks = vec![("s0".to_owned(), w2.clone())];
        assert!(!pending_applies(&marks, "s0", Some(&w1)));
        // …and another shard's item says nothing of this shard's windows.
        assert!(pending_applies(&marks, "s1", Some(&w1)));
        // An item last written by a window before the checkpoint: still to be applied.
        let marks = vec![("s0".to_owned(), at("99"))];
        assert!(pending_applies(&marks, "s0", Some(&w1)));
    }

    const DAY0: i64 = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;

    /// A store of one post's items, writes applied as `apply` says.
    #[derive(Default, Debug)]
    struct Post(BTreeMap<String, Attrs>);

    impl Post {
        /// Applies a window's delta as a writer knowing `known` would, re-planning on a stale
        /// assumption; returns how many writes were refused.
        fn apply_window(
            &mut self,
            shard: &str,
            delta: &PostDelta,
            end: &str,
            mut known: Known,
        ) -> u32 {
            let mut refused = 0;
            for _ in 0..4 {
                match plan(shard, delta, end, &known) {
                    Plan::Skip => return refused,
                    Plan::NeedItem => known = self.read(shard),
                    Plan::Writes(ws) => {
                        let mut stale = false;
                        for w in &ws {
                            match apply(self.0.get(&w.sk), w, end) {
                                Ok(a) => {
                                    self.0.insert(w.sk.clone(), a);
                                }
                                Err(Refused::Applied) => refused += 1,
                                Err(Refused::Stale) => {
                                    refused += 1;
                                    stale = true;
                                }
                            }
                        }
                        if !stale {
                            return refused;
                        }
                        known = self.read(shard);
                    }
                }
            }
            panic!("no progress")
        }

        fn read(&self, shard: &str) -> Known {
            match self.0.get(&live_sk(shard)) {
                None => Known::Absent,
                Some(a) => Known::Item(LiveState::from_attrs(a).unwrap()),
            }
        }

        fn items(&self) -> Vec<(String, Attrs)> {
            self.0.clone().into_iter().collect()
        }
    }

    fn delta(events: &[(i64, i64)]) -> PostDelta {
        let mut d = PostDelta::default();
        for &(t, n) in events {
            d.add(t, n);
        }
        d
    }

    fn end(n: u64) -> String {
        marker(&Position::parse(&n.to_string()).unwrap())
    }

    #[test]
    fn markers_sort_as_sequence_numbers() {
        let s = |x: &str| marker(&Position::parse(x).unwrap());
        assert!(s("9") < s("10"));
        assert!(s("49590338271490256608559692538361571095921575989136588898") > s("99"));
        assert_eq!(
            s("10"),
            "00210",
            "a whole record's mark is the one it always had"
        );
        assert_eq!(s("10:3"), "0019.0000000003");
    }

    proptest::proptest! {
        /// Markers compare as strings exactly as their positions do, whole records and parts of
        /// aggregates mixed, neighbours and powers of ten included.
        #[test]
        fn markers_sort_as_positions(
            a in (0u64..40, proptest::option::of(0u32..12)),
            b in (0u64..40, proptest::option::of(0u32..12)),
            scale in proptest::sample::select(vec![1u64, 10, 1_000, 1 << 40]),
        ) {
            let pos = |(n, sub): (u64, Option<u32>)| Position {
                seq: SeqNo::parse(&(n * scale + n % 3).to_string()).unwrap(),
                sub,
            };
            let (pa, pb) = (pos(a), pos(b));
            proptest::prop_assert_eq!(marker(&pa).cmp(&marker(&pb)), pa.cmp(&pb), "{} vs {}", pa, pb);
        }
    }

    #[test]
    fn a_window_in_one_hour_writes_one_item() {
        let mut p = Post::default();
        let t = DAY0 + 10 * HOUR_MS + 5 * MINUTE_MS;
        let d = delta(&[(t, 1), (t + MINUTE_MS, 2)]);
        let Plan::Writes(ws) = plan("s1", &d, &end(5), &Known::Unknown) else {
            panic!()
        };
        assert_eq!(ws.len(), 1);
        assert_eq!(p.apply_window("s1", &d, &end(5), Known::Unknown), 0);
        // Applied again (a replay, a stale writer): refused, nothing changes.
        let before = p.items();
        assert_eq!(p.apply_window("s1", &d, &end(5), Known::Unknown), 1);
        assert_eq!(p.items(), before);
        assert_eq!(total(&p.items()), 3);
        assert_eq!(since(&p.items(), t + MINUTE_MS), 2);
    }

    #[test]
    fn rolling_hours_and_days_archive_once_and_late_events_find_their_bucket() {
        let mut p = Post::default();
        let h10 = DAY0 + 10 * HOUR_MS;
        p.apply_window(
            "s1",
            &delta(&[(h10 + 5 * MINUTE_MS, 3)]),
            &end(1),
            Known::Unknown,
        );
        // Hour 11 rolls hour 10 out; an event of 10:59 in the same window goes with it.
        p.apply_window(
            "s1",
            &delta(&[(h10 + 59 * MINUTE_MS, 1), (h10 + HOUR_MS, 2)]),
            &end(2),
            Known::Hour(h10 / HOUR_MS),
        );
        // Next day; then a late event of 10:30 the day before.
        p.apply_window("s1", &delta(&[(h10 + DAY_MS, 4)]), &end(3), Known::Unknown);
        p.apply_window(
            "s1",
            &delta(&[(h10 + 30 * MINUTE_MS, 5)]),
            &end(4),
            Known::Unknown,
        );
        let items = p.items();
        let keys: Vec<&str> = items.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys.len(), 4, "{keys:?}"); // day archive, two hour archives, live
        assert_eq!(total(&items), 15);
        assert_eq!(since(&items, DAY0), 15);
        assert_eq!(since(&items, h10 + 30 * MINUTE_MS), 1 + 2 + 4 + 5);
        assert_eq!(since(&items, h10 + 31 * MINUTE_MS), 1 + 2 + 4);
        assert_eq!(since(&items, h10 + HOUR_MS), 2 + 4);
        assert_eq!(since(&items, h10 + DAY_MS), 4);
        assert_eq!(since(&items, h10 + DAY_MS + MINUTE_MS), 0);
    }

    /// Live items read, then two windows land (a roll that archives the hour, a late like into
    /// that archive), then the archives read: taking back the one window an archive is ahead by
    /// still counts the hour twice — why such a read is read again ([`archive_ahead`]).
    #[test]
    fn archives_read_two_windows_after_their_live_item_are_read_again() {
        let mut p = Post::default();
        let h10 = DAY0 + 10 * HOUR_MS;
        let t = h10 + 5 * MINUTE_MS;
        p.apply_window("s1", &delta(&[(t, 10)]), &end(1), Known::Unknown);
        let live = p.items();
        p.apply_window("s1", &delta(&[(h10 + HOUR_MS, 2)]), &end(2), Known::Unknown);
        p.apply_window("s1", &delta(&[(t, 1)]), &end(3), Known::Unknown);
        let archives: Vec<(String, Attrs)> = p
            .items()
            .into_iter()
            .filter(|(sk, _)| !sk.starts_with(LIVE_PREFIX))
            .collect();
        let mut torn = live.clone();
        torn.extend(archives.clone());
        assert_eq!(since(&p.items(), t), 10 + 2 + 1);
        assert_eq!(
            since(&torn, t),
            10 + 10,
            "the torn read counts hour 10 twice: more than the post has ever had, taken back by the next read"
        );
        assert!(archive_ahead(&live, &archives));
        // Read again, live items first: consistent, and exact.
        let (live, archives): (Vec<_>, Vec<_>) = p
            .items()
            .into_iter()
            .partition(|(sk, _)| sk.starts_with(LIVE_PREFIX));
        assert!(!archive_ahead(&live, &archives));
        let mut read = live;
        read.extend(archives);
        assert_eq!(since(&read, t), 10 + 2 + 1);
    }

    /// The largest live item real traffic makes: the longest post id, a Kinesis sequence number
    /// (56 digits), every minute and hour slot taken with 8- and 10-digit counts (a post liked
    /// 100,000 times a second), a 13-digit total. Larger still would cost 2 units, not a miscount.
    #[test]
    fn the_largest_live_item_stays_below_one_write_unit() {
        let mut a = Attrs::new();
        a.insert("n".into(), Val::N(-1_234_567_890_123));
        a.insert("w".into(), Val::S(format!("056{}", "9".repeat(56))));
        a.insert("hk".into(), Val::N(1_000_000));
        for m in 0..60 {
            a.insert(minute_attr(m), Val::N(-12_345_678));
        }
        for h in 0..24 {
            a.insert(hour_attr(h), Val::N(-1_234_567_891));
        }
        let size = item_size(
            &"p".repeat(crate::event::MAX_ID),
            &live_sk("shardId-000000000000"),
            &a,
        );
        assert!(size <= 1024, "{size} bytes");
    }

    #[test]
    fn read_units_are_started_4kb() {
        assert_eq!(read_units([]), 1);
        assert_eq!(read_units([4096]), 1);
        assert_eq!(read_units([4000, 100]), 2);
    }
}
