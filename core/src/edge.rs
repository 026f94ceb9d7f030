//! Likers: a like is a user's state, not an event.
//!
//! Each (post, user) pair is one **edge**, a last-writer-wins register: its state is the user's
//! latest action, ordered by `created_at` and then by `event_id` (the tie-break). A post's count is
//! the number of users whose latest action is `like`, so a repeated like, an unlike of nothing, a
//! duplicate, a replay or a late copy changes nothing, and the events of one pair end in the same
//! state whatever order they arrive in.
//!
//! "Likes since T" is a function of the edges' final states too: **the users who like the post now
//! and whose latest action — that like — was created at or after T** (at minute granularity, as
//! every count here). So a transition moves a user out of the old like's minute bucket and into
//! the new like's: unliked → liked adds one at the like's minute, liked → unliked takes one from
//! the old like's minute, a newer like of a liked edge (a double tap a minute later) moves the user
//! from the old minute to the new one, and anything else changes nothing.
//!
//! **Exactly once without a transaction: a window's effect is decided once.** A window holds
//! each touched edge's latest event. It writes each edge with one conditional write — only if
//! the stored event is older (or there is none), is not the same event, and no write the item
//! remembers is this window's — that also keeps the event it replaced and the window that wrote
//! it, and shifts the item's remembered writes one older ([`EDGE_HISTORY`] of them: the write
//! that made the state and the two before it). The transition a write made is decided by that
//! write and read back from the item (`before` → `after`), never derived again: a window applied
//! again after a crash between its edge writes and its count writes — by the same worker or by
//! another after a lease expiry, under any settings — finds its own write among the remembered
//! ones (by its identity) and takes the transition recorded there, even after other shards'
//! windows wrote the edge since (a producer keying a pair's events by event id or at random, a
//! hot post's keys changed mid-run). A copy of an event the edge has held changes nothing,
//! whatever time it orders at (a clamp decided at another arrival). The counts are then written
//! as in events mode, guarded by the summary items' markers. Beyond the remembered writes an
//! edge cannot say whether an older window wrote it ([`Resolved::Forgotten`]): counted as no
//! change and reported, never silently.
//! [`apply`] is the reference both stores follow.

use std::collections::BTreeMap;

use smol_str::SmolStr;

use crate::buckets::PostDelta;
use crate::item::{Attrs, Val};

/// What a post's count is: the users who like it now, or the distinct like events minus the
/// distinct unlike events (for counters that really are events: claps, views).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CountMode {
    /// A post's count is its users whose latest action is a like (the default).
    #[default]
    Likers,
    /// A post's count is its distinct like events less its unlike events (claps, views).
    Events,
}

impl CountMode {
    /// Its name in settings and in the store (`likers`, `events`).
    pub fn as_str(self) -> &'static str {
        match self {
            CountMode::Likers => "likers",
            CountMode::Events => "events",
        }
    }

    /// The mode a name names, if any.
    pub fn parse(s: &str) -> Option<CountMode> {
        match s {
            "likers" => Some(CountMode::Likers),
            "events" => Some(CountMode::Events),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for CountMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        CountMode::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("expected one of `likers`, `events`, got `{name}`"))
        })
    }
}

impl std::fmt::Display for CountMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a store keeps the mode it counts in (the counts table, partition [`MODE_PK`]).
pub const MODE_PK: &str = "#meta";
/// The sort key of the mode item.
pub const MODE_SK: &str = "count";

/// The sort key of the item (beside the mode's) that names the one stream a store is counted
/// from (`v`: `kinesis:<region>:<stream>`, or `embedded:<stream>`): a store counted from two
/// streams — two regions' counters on one table set — would mix their per-shard items, whose
/// keys are shard ids every stream has (docs/REGIONS.md).
pub const STREAM_SK: &str = "stream";

/// The sort key of the item (beside the mode's) that lists the clock skews a likers store was
/// counted with (`counter.max_clock_skew_secs`, ms, in the order first used): what `tally
/// verify` recounts with.
pub const SKEWS_SK: &str = "skews";

/// The stored list of clock skews (`300000,5000`); an error names what is wrong.
pub fn skews_from_text(text: &str) -> Result<Vec<i64>, String> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| format!("a corrupt clock skew list `{text}`: `{s}` is no number"))
        })
        .collect()
}

/// The list as stored.
pub fn skews_to_text(skews: &[i64]) -> String {
    skews
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The default of `counter.max_clock_skew_secs`: a `created_at` later than the record's arrival
/// by more than this is taken as the arrival time, so a device clock far ahead cannot pin an edge
/// (every later action of that user on that post would be older, and ignored).
pub const DEFAULT_MAX_SKEW_MS: i64 = 5 * 60_000;

/// The time an event orders by in likers mode: its `created_at`, or its arrival when the event
/// claims to be created more than `max_skew_ms` after it arrived.
pub fn ordering_time(created_at: i64, arrival_ms: i64, max_skew_ms: i64) -> i64 {
    if created_at > arrival_ms.saturating_add(max_skew_ms) {
        arrival_ms
    } else {
        created_at
    }
}

/// An event's id as an edge event holds it: inline up to 36 bytes (a UUID's 36 characters, the
/// demo's 27; smallvec's array sizes stop at 32, then 36), so that a window's copy of its edges for the writer carries the ids with it rather
/// than pointing at them across the heap (BENCHMARKS: the likers counter's CPU −9 % against
/// `SmolStr`, which holds 23 bytes inline and shares a longer id).
pub type EventId = smallstr::SmallString<[u8; 36]>;

/// The latest event of one edge in a window: what the window writes to it. Its post and user
/// ids are `SmolStr`s: one of up to 23 bytes is held inline, a longer one shared; its event id
/// an [`EventId`]. A window holds one of these per edge it touched, and the writer takes a copy
/// of each batch (BENCHMARKS: the likers counter's CPU −5 % and peak RSS −10 % against
/// `String`s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeEvent {
    /// The post.
    pub post_id: SmolStr,
    /// The user.
    pub user_id: SmolStr,
    /// Whether the event is a like (else an unlike).
    pub liked: bool,
    /// The time it orders by ([`ordering_time`]), ms.
    pub at_ms: i64,
    /// The event's id: the tie-break between events of one time (held inline up to 36 bytes:
    /// a UUID's 36 characters, or the demo's 27, need no allocation of their own).
    pub event_id: EventId,
    /// Whether it orders at its first copy's arrival rather than its `created_at` (its clock was
    /// ahead by more than the allowed skew: [`ordering_time`]).
    pub clamped: bool,
    /// The ids of this edge's other clamped events the window read, which lost to a later one
    /// in it: the edge remembers them ([`EDGE_LOST`]), so that a copy arriving later — ordered
    /// at its own arrival, so later than the first copy — changes nothing where the first did
    /// not.
    pub lost: Vec<String>,
}

impl EdgeEvent {
    /// The ids the edge should remember as clamped events that took no effect, when this event
    /// is written (`wrote`) or refused.
    fn to_remember(&self, wrote: bool) -> impl DoubleEndedIterator<Item = &str> {
        let own = (self.clamped && !wrote).then_some(self.event_id.as_str());
        self.lost.iter().map(String::as_str).chain(own)
    }

    /// Whether this event comes after one at (`at_ms`, `event_id`).
    pub fn is_after(&self, at_ms: i64, event_id: &str) -> bool {
        (self.at_ms, self.event_id.as_str()) > (at_ms, event_id)
    }
}

/// The sort-key prefix of a post's edges (partition: the post id, beside its summary items).
pub const EDGE_PREFIX: &str = "E#";

/// The sort key of the edge of `user` (in the post's partition).
pub fn edge_sk(user: &str) -> String {
    format!("{EDGE_PREFIX}{user}")
}

/// The identity of a window in the edges it writes: its shard and its end's marker.
pub fn window_id(shard: &str, marker: &str) -> String {
    format!("{marker}@{shard}")
}

/// The shard a [`window_id`] names.
pub fn window_shard(window: &str) -> &str {
    window.rsplit_once('@').map_or("", |(_, shard)| shard)
}

/// The marker a [`window_id`] names (its end's).
pub fn window_marker(window: &str) -> &str {
    window.rsplit_once('@').map_or(window, |(marker, _)| marker)
}

/// What one window's write did to an edge: the like it replaced and the like it is now (each the
/// time of the like, `None` for not liked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The post whose count it moves (held inline up to 23 bytes: a window makes one
    /// transition per edge it writes).
    pub post_id: SmolStr,
    /// When the like it replaced was made (ms; `None`: the user did not like the post).
    pub before: Option<i64>,
    /// When the like it is now was made (ms; `None`: the user does not like the post).
    pub after: Option<i64>,
    /// The window whose write made the like it removes, when that is another shard's window
    /// (two shards writing one edge): the removal is **held** — counted only once that window's
    /// counts are written ([`HeldCounts`]), so that a count never goes below zero while the like
    /// it removes is still to be counted. `None`: nothing removed, or the like was made by an
    /// earlier window of the same shard (counted before: a shard's windows are written in order).
    pub held_for: Option<String>,
}

impl Transition {
    /// A transition of `post_id` from `before` to `after`, made over a write of `replaced_by`
    /// (`None`: the edge was absent, or its writer is not known) by `window`.
    pub fn over(
        post_id: &str,
        before: Option<i64>,
        after: Option<i64>,
        replaced_by: Option<&str>,
        window: &str,
    ) -> Transition {
        let held_for = replaced_by
            .filter(|w| before.is_some() && window_shard(w) != window_shard(window))
            .map(str::to_owned);
        Transition {
            post_id: post_id.into(),
            before,
            after,
            held_for,
        }
    }
}

/// How many writes an edge item remembers (the one that made its state and the two before it):
/// a window applied again finds its own write among them even after other shards' windows wrote
/// the edge since (a producer keying a pair's events by event id or at random, a hot post's keys
/// changed mid-run), and a copy of any event they hold is known as one whatever its ordering
/// time.
pub const EDGE_HISTORY: usize = 3;

/// How many clamped events that took no effect an edge item remembers (`c0`, `c1`, `c2`,
/// newest first): a copy of one arriving later orders at its own arrival, later than the first
/// copy did, and could win where the first lost; a copy of one the edge remembers changes
/// nothing. Past three on one edge, the oldest is forgotten (stated in ARCHITECTURE, "Likers").
pub const EDGE_LOST: usize = 3;

/// The attribute names of the remembered lost clamped events, newest first.
pub const LOST_ATTRS: [&str; EDGE_LOST] = ["c0", "c1", "c2"];

/// The attribute that keeps the window of the write pushed out of the remembered ones (past
/// [`EDGE_HISTORY`]): the writer of the oldest remembered write's `before`, so that the window
/// whose like a remembered write removed is always known ([`Transition::held_for`]).
pub const DROPPED_ATTR: &str = "w3";

/// The attribute a liked edge keeps its like's time in (a number; absent when not liked): the
/// sort key of the counts table's [`RECENT_INDEX`], which holds liked edges only.
pub const LIKED_AT_ATTR: &str = "lt";

/// The counts table's index of liked edges by post, most recent like first (DynamoDB: a global
/// secondary index, partition key `pk`, sort key [`LIKED_AT_ATTR`], keys only; the embedded
/// store: a partial index of `edges`). Likers most recent first read it.
pub const RECENT_INDEX: &str = "recent";

/// The read units of one eventually consistent Query of [`RECENT_INDEX`] that passed over
/// these entries (post, user, like time): half a unit per started 4 KB, at least one.
pub fn recent_index_units<'a>(passed: impl IntoIterator<Item = (&'a str, &'a str, i64)>) -> u64 {
    let bytes = passed
        .into_iter()
        .map(|(p, u, t)| recent_entry_size(p, u, t))
        .sum();
    crate::cost::read_units(bytes).div_ceil(2)
}

/// DynamoDB's size of a liked edge's entry in [`RECENT_INDEX`] (keys only: the table's keys and
/// the like's time): what reading it is charged.
pub fn recent_entry_size(post: &str, user: &str, at_ms: i64) -> usize {
    2 + post.len()
        + 2
        + EDGE_PREFIX.len()
        + user.len()
        + LIKED_AT_ATTR.len()
        + crate::item::number_size(at_ms)
}

/// An event as an edge keeps it: whether it liked, when it orders, its id (empty: written by a
/// tally that did not keep it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Whether the event was a like.
    pub liked: bool,
    /// Its ordering time (ms).
    pub at_ms: i64,
    /// Its id.
    pub event_id: String,
}

impl Stamp {
    /// Whether this event orders at or after (`at_ms`, `event_id`).
    fn is_at_or_after(&self, at_ms: i64, event_id: &str) -> bool {
        (self.at_ms, self.event_id.as_str()) >= (at_ms, event_id)
    }

    /// The like it is, if it is one.
    fn like(&self) -> Option<i64> {
        self.liked.then_some(self.at_ms)
    }
}

/// One write of an edge, as the item remembers it: the window that made it and the event it
/// replaced (what it replaced it with is the next newer write's `before`, or the edge's state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeWrite {
    /// The window that wrote it ([`window_id`]).
    pub window: String,
    /// The event it replaced (`None`: the edge was absent).
    pub before: Option<Stamp>,
}

/// An edge as stored. The default is no edge (no write yet): a buffer for
/// [`written_state_into`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgeState {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: String,
    /// The writes that made it, newest first (at most [`EDGE_HISTORY`]): the first made the
    /// state above.
    pub writes: Vec<EdgeWrite>,
    /// Clamped events that took no effect on it, newest first (at most [`EDGE_LOST`]).
    pub lost: Vec<String>,
    /// The window of the newest write no longer remembered ([`DROPPED_ATTR`]), if any.
    pub dropped: Option<String>,
}

fn num(a: &Attrs, k: &str) -> Option<i64> {
    match a.get(k)? {
        Val::N(n) => Some(*n),
        Val::S(_) => None,
    }
}

fn text<'a>(a: &'a Attrs, k: &str) -> Option<&'a str> {
    match a.get(k)? {
        Val::S(s) => Some(s),
        Val::N(_) => None,
    }
}

/// The attribute names of each remembered write, newest first (0: the one that made the state):
/// its window, and the event it replaced — liked, time, id.
const WRITE_ATTRS: [[&str; 4]; EDGE_HISTORY] = [
    ["w", "pl", "pt", "pe"],
    ["w1", "pl1", "pt1", "pe1"],
    ["w2", "pl2", "pt2", "pe2"],
];

/// The attribute names of the `g`-th newest write (0: the one that made the state): its window,
/// and the event it replaced — liked, time, id (`w`, `pl`, `pt`, `pe`; then `w1`, `pl1`, …).
///
/// # Panics
/// If `g` is not below [`EDGE_HISTORY`] (a caller's bug: there are no more).
pub fn write_attrs(g: usize) -> [&'static str; 4] {
    WRITE_ATTRS[g]
}

impl EdgeState {
    /// Reads an edge item; `None` if it is not one.
    pub fn from_attrs(a: &Attrs) -> Option<EdgeState> {
        let mut writes = Vec::new();
        for g in 0..EDGE_HISTORY {
            let [w, pl, pt, pe] = write_attrs(g);
            let Some(window) = text(a, w).filter(|w| !w.is_empty()) else {
                break;
            };
            let id = text(a, pe).unwrap_or_default();
            let (liked, at) = (num(a, pl).unwrap_or(0) == 1, num(a, pt).unwrap_or(0));
            // Absent before it: nothing liked, no time and no id (a tally that kept no ids wrote
            // 0 for an absent edge's time, and a real event's time is never 0).
            let before = (liked || at != 0 || !id.is_empty()).then(|| Stamp {
                liked,
                at_ms: at,
                event_id: id.to_owned(),
            });
            writes.push(EdgeWrite {
                window: window.to_owned(),
                before,
            });
        }
        if writes.is_empty() {
            return None;
        }
        let lost = LOST_ATTRS
            .iter()
            .filter_map(|k| text(a, k).filter(|id| !id.is_empty()))
            .map(str::to_owned)
            .collect();
        Some(EdgeState {
            liked: num(a, "l")? == 1,
            at_ms: num(a, "t")?,
            event_id: text(a, "e")?.to_owned(),
            writes,
            lost,
            dropped: text(a, DROPPED_ATTR)
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        })
    }

    /// The edge as an item's attributes: what [`EdgeState::from_attrs`] reads back.
    pub fn to_attrs(&self) -> Attrs {
        let mut a = Attrs::from([
            ("l".to_owned(), Val::N(i64::from(self.liked))),
            ("t".to_owned(), Val::N(self.at_ms)),
            ("e".to_owned(), Val::S(self.event_id.clone())),
        ]);
        if self.liked {
            a.insert(LIKED_AT_ATTR.to_owned(), Val::N(self.at_ms));
        }
        if let Some(w) = &self.dropped {
            a.insert(DROPPED_ATTR.to_owned(), Val::S(w.clone()));
        }
        for (g, w) in self.writes.iter().take(EDGE_HISTORY).enumerate() {
            let [wn, pl, pt, pe] = write_attrs(g);
            let b = w.before.as_ref();
            a.insert(wn.to_owned(), Val::S(w.window.clone()));
            a.insert(pl.to_owned(), Val::N(i64::from(b.is_some_and(|b| b.liked))));
            a.insert(pt.to_owned(), Val::N(b.map_or(0, |b| b.at_ms)));
            a.insert(
                pe.to_owned(),
                Val::S(b.map_or_else(String::new, |b| b.event_id.clone())),
            );
        }
        for (k, id) in LOST_ATTRS.iter().zip(&self.lost) {
            a.insert((*k).to_owned(), Val::S(id.clone()));
        }
        a
    }

    /// DynamoDB's size of the edge as an item of `post` for `user` (`crate::item::item_size`
    /// of [`EdgeState::to_attrs`], without building it): what a write of it is charged.
    pub fn item_size(&self, post: &str, user: &str) -> usize {
        use crate::item::number_size as n;
        let mut size = 2 + post.len() + 2 + EDGE_PREFIX.len() + user.len();
        size += 1 + n(i64::from(self.liked)) + 1 + n(self.at_ms) + 1 + self.event_id.len();
        if self.liked {
            size += LIKED_AT_ATTR.len() + n(self.at_ms);
        }
        if let Some(w) = &self.dropped {
            size += DROPPED_ATTR.len() + w.len();
        }
        for (g, w) in self.writes.iter().take(EDGE_HISTORY).enumerate() {
            let [wn, pl, pt, pe] = write_attrs(g);
            let b = w.before.as_ref();
            size += wn.len() + w.window.len();
            size += pl.len() + n(i64::from(b.is_some_and(|b| b.liked)));
            size += pt.len() + n(b.map_or(0, |b| b.at_ms));
            size += pe.len() + b.map_or(0, |b| b.event_id.len());
        }
        for (k, id) in LOST_ATTRS.iter().zip(&self.lost) {
            size += k.len() + id.len();
        }
        size
    }

    /// The state as a stamp.
    fn stamp(&self) -> Stamp {
        Stamp {
            liked: self.liked,
            at_ms: self.at_ms,
            event_id: self.event_id.clone(),
        }
    }

    /// The transition the `g`-th newest write made (0: the one that made the state).
    fn transition_of(&self, g: usize, post_id: &str) -> Transition {
        let after = match g {
            0 => self.liked.then_some(self.at_ms),
            _ => self.writes[g - 1].before.as_ref().and_then(Stamp::like),
        };
        // The window whose write `before` was: the next older remembered write's, or the one
        // pushed out of them.
        let replaced_by = match self.writes.get(g + 1) {
            Some(w) => Some(w.window.as_str()),
            None => self.dropped.as_deref(),
        };
        Transition::over(
            post_id,
            self.writes[g].before.as_ref().and_then(Stamp::like),
            after,
            replaced_by,
            &self.writes[g].window,
        )
    }

    /// The transition `window` made when it wrote this edge, if the edge remembers that write:
    /// what a window given up after its edge writes counts (`counter::gap`).
    pub fn written_by(&self, window: &str, post_id: &str) -> Option<Transition> {
        let g = self.writes.iter().position(|w| w.window == window)?;
        Some(self.transition_of(g, post_id))
    }

    /// Whether the item remembers every write the edge ever had (fewer than [`EDGE_HISTORY`], or
    /// back to the edge's first): a window whose write it does not hold did not write it.
    pub fn remembers_all(&self) -> bool {
        self.writes.len() < EDGE_HISTORY || self.writes.last().is_some_and(|w| w.before.is_none())
    }

    /// Whether its newest write replaced a write of another shard's window: two shards writing
    /// one edge (a producer keying a pair's events by event id or at random, a hot post's keys
    /// changed mid-run; a parent's edge written by its child after a reshard too). Exact within
    /// the writes an item remembers ([`EDGE_HISTORY`]), and reported.
    pub fn crossed(&self) -> bool {
        match (self.writes.first(), self.writes.get(1)) {
            (Some(new), Some(old)) => window_shard(&new.window) != window_shard(&old.window),
            _ => false,
        }
    }

    /// The transition the newest write made.
    pub fn transition(&self, post_id: &str) -> Transition {
        self.transition_of(0, post_id)
    }

    /// Whether the edge has held the event `event_id` (it is, or a remembered write replaced
    /// it), and if so whether the write that put it there is remembered too (`Some(false)`: it
    /// is the oldest remembered write's `before`, put there by a write the item no longer
    /// holds). A copy of an event it has held changes nothing, whatever time it orders at.
    fn held(&self, event_id: &str) -> Option<bool> {
        if event_id.is_empty() {
            return None;
        }
        if self.event_id == event_id || self.lost.iter().any(|l| l == event_id) {
            return Some(true);
        }
        let g = self
            .writes
            .iter()
            .position(|w| w.before.as_ref().is_some_and(|b| b.event_id == event_id))?;
        Some(g + 1 < self.writes.len())
    }

    /// The ids of `ids` the edge does not know yet (a lost clamped event it remembers, or an
    /// event it has held), each once.
    fn new_lost<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for id in ids {
            if self.held(id).is_none() && !out.iter().any(|o| o == id) {
                out.push(id.to_owned());
            }
        }
        out
    }

    /// Whether an event at (`at_ms`, `event_id`), older than the state, may have been written
    /// before the oldest write the item remembers: the edge has forgotten whether it held it.
    fn may_have_forgotten(&self, at_ms: i64, event_id: &str) -> bool {
        match self.writes.last().map(|w| w.before.as_ref()) {
            // The item remembers back to the edge's first write: nothing is forgotten.
            Some(None) | None => false,
            Some(Some(oldest)) => oldest.is_at_or_after(at_ms, event_id),
        }
    }
}

/// The edge a window's write leaves: the event, the window, the event it replaces (`old`'s
/// state; absent, nothing), the writes `old` remembers shifted one older (the oldest of
/// [`EDGE_HISTORY`] dropped), and the window's clamped events that took no effect ahead of those
/// `old` remembers ([`EDGE_LOST`]).
pub fn written_state(e: &EdgeEvent, window: &str, old: Option<&EdgeState>) -> EdgeState {
    let mut s = EdgeState::default();
    written_state_into(e, window, old, &mut s);
    s
}

/// [`written_state`] into `out`, whatever it held, reusing its buffers: a writer of many edges
/// keeps one, and a write over an absent edge then allocates nothing (but the list of lost
/// clamped events, when the window read some).
pub fn written_state_into(
    e: &EdgeEvent,
    window: &str,
    old: Option<&EdgeState>,
    out: &mut EdgeState,
) {
    out.writes.truncate(1);
    match out.writes.first_mut() {
        Some(w) => {
            w.window.clear();
            w.window.push_str(window);
            w.before = old.map(EdgeState::stamp);
        }
        None => out.writes.push(EdgeWrite {
            window: window.to_owned(),
            before: old.map(EdgeState::stamp),
        }),
    }
    out.writes
        .extend(old.iter().flat_map(|o| o.writes.iter().cloned()));
    // The window of the write pushed out now, else the one pushed out before.
    out.dropped = match out.writes.get(EDGE_HISTORY) {
        Some(w) => Some(w.window.clone()),
        None => old.and_then(|o| o.dropped.clone()),
    };
    out.writes.truncate(EDGE_HISTORY);
    // The window's lost clamped events, newest first, before those the edge kept (one
    // expression on DynamoDB: the ids are not compared with the item's there either).
    let new: Vec<String> = e.to_remember(true).rev().map(str::to_owned).collect();
    let kept = old.map(|o| o.lost.as_slice()).unwrap_or_default();
    out.lost = with_lost(&new, kept);
    out.liked = e.liked;
    out.at_ms = e.at_ms;
    out.event_id.clear();
    out.event_id.push_str(&e.event_id);
}

/// [`apply_state`] over an absent edge, which is always written: the state it leaves into `into`
/// ([`written_state_into`], reusing its buffers) and the transition it makes: what a store runs
/// for the edges new to it (most of a window's).
pub fn write_absent(e: &EdgeEvent, window: &str, into: &mut EdgeState) -> Transition {
    written_state_into(e, window, None, into);
    match resolve(None, e, window) {
        Resolved::Writes(t) => t,
        other => unreachable!("an absent edge is always written, not {other:?}"),
    }
}

/// The attributes a window's write sets ([`written_state`], as an item).
pub fn written(e: &EdgeEvent, window: &str, old: Option<&EdgeState>) -> Attrs {
    written_state(e, window, old).to_attrs()
}

/// The remembered lost clamped events: `new` (newest first), then those `kept` before, the
/// oldest past [`EDGE_LOST`] dropped.
fn with_lost(new: &[String], kept: &[String]) -> Vec<String> {
    new.iter().chain(kept).take(EDGE_LOST).cloned().collect()
}

/// The lost clamped events a refused write of `e` leaves the edge `old` to remember, newest
/// first (empty: nothing new, so nothing is written).
pub fn lost_to_remember(old: &EdgeState, e: &EdgeEvent) -> Vec<String> {
    old.new_lost(e.to_remember(false).rev())
}

/// What a window's write of an edge does; `I` is the edge as a store keeps it (an item's
/// attributes, or the typed [`EdgeState`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeOutcome<I = Attrs> {
    /// Written: the new item, and the transition it made.
    Wrote(I, Transition),
    /// Refused, and a write the edge remembers is this window's: made by an earlier attempt of
    /// the same window, whose transition is on the item.
    Mine(Transition),
    /// Refused: the stored event is newer, or the event is one the edge has held (a copy).
    /// Nothing changes; the item with clamped events that took no effect remembered, when
    /// there are new ones ([`EDGE_LOST`]).
    Superseded(Option<I>),
    /// Refused as [`EdgeOutcome::Superseded`], but the edge no longer remembers far enough back
    /// to say that this window did not write it (more than [`EDGE_HISTORY`] writes since):
    /// counted as no change, and reported.
    Forgotten(Option<I>),
}

impl<I> EdgeOutcome<I> {
    /// The same outcome with the edge as `f` makes it.
    pub fn map<J>(self, f: impl Fn(I) -> J) -> EdgeOutcome<J> {
        match self {
            EdgeOutcome::Wrote(i, t) => EdgeOutcome::Wrote(f(i), t),
            EdgeOutcome::Mine(t) => EdgeOutcome::Mine(t),
            EdgeOutcome::Superseded(i) => EdgeOutcome::Superseded(i.map(f)),
            EdgeOutcome::Forgotten(i) => EdgeOutcome::Forgotten(i.map(f)),
        }
    }
}

/// What a window's write of `e` does to the stored edge `old` (`None`: absent), without writing
/// it. A write the edge remembers made by `window` is that window's own earlier write: its
/// transition, as decided then, whatever `e` orders at now. Else a copy of an event the edge has
/// held changes nothing; else `e` is written only if the edge is absent or its event is before
/// `e`. [`apply`] writes by it, and the counter's open windows are read by it before they are
/// written (`counter::board`).
pub fn resolve(old: Option<&EdgeState>, e: &EdgeEvent, window: &str) -> Resolved {
    let Some(o) = old else {
        return Resolved::Writes(Transition::over(
            &e.post_id,
            None,
            e.liked.then_some(e.at_ms),
            None,
            window,
        ));
    };
    if let Some(g) = o.writes.iter().position(|w| w.window == window) {
        return Resolved::Mine(o.transition_of(g, &e.post_id));
    }
    match o.held(&e.event_id) {
        // Held, put there by another window (this one's write would be remembered as its).
        Some(true) => return Resolved::Superseded,
        // Held, by a write the item no longer remembers: this window's, or another's copy.
        Some(false) => return Resolved::Forgotten,
        None => {}
    }
    if e.is_after(o.at_ms, &o.event_id) {
        return Resolved::Writes(Transition::over(
            &e.post_id,
            o.liked.then_some(o.at_ms),
            e.liked.then_some(e.at_ms),
            o.writes.first().map(|w| w.window.as_str()),
            window,
        ));
    }
    if o.may_have_forgotten(e.at_ms, &e.event_id) {
        Resolved::Forgotten
    } else {
        Resolved::Superseded
    }
}

/// What [`resolve`] finds a window's write of an edge would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// It is written, making this transition.
    Writes(Transition),
    /// The window wrote it already: the transition it made.
    Mine(Transition),
    /// A newer (or the same) event is stored: nothing changes.
    Superseded,
    /// Nothing changes, but the edge no longer remembers whether this window wrote it
    /// ([`EdgeOutcome::Forgotten`]).
    Forgotten,
}

impl Resolved {
    /// The transition the window makes (or made), if any.
    pub fn transition(self) -> Option<Transition> {
        match self {
            Resolved::Writes(t) | Resolved::Mine(t) => Some(t),
            Resolved::Superseded | Resolved::Forgotten => None,
        }
    }
}

/// Applies a window's write of an edge to the stored edge (`None`: absent), as every store must
/// ([`resolve`] decides): the typed reference, for a store that keeps edges as [`EdgeState`]s.
pub fn apply_state(old: Option<&EdgeState>, e: &EdgeEvent, window: &str) -> EdgeOutcome<EdgeState> {
    // A refusal remembers the clamped events of `e` that took no effect.
    let remembered = || {
        let o = old?;
        let new = lost_to_remember(o, e);
        (!new.is_empty()).then(|| EdgeState {
            lost: with_lost(&new, &o.lost),
            ..o.clone()
        })
    };
    match resolve(old, e, window) {
        Resolved::Writes(t) => EdgeOutcome::Wrote(written_state(e, window, old), t),
        Resolved::Mine(t) => EdgeOutcome::Mine(t),
        Resolved::Superseded => EdgeOutcome::Superseded(remembered()),
        Resolved::Forgotten => EdgeOutcome::Forgotten(remembered()),
    }
}

/// [`apply_state`] on an item's attributes (`None`: absent).
pub fn apply(item: Option<&Attrs>, e: &EdgeEvent, window: &str) -> Result<EdgeOutcome, String> {
    let old =
        match item {
            None => None,
            Some(a) => Some(EdgeState::from_attrs(a).ok_or_else(|| {
                format!("a corrupt edge item {}/{}", e.post_id, edge_sk(&e.user_id))
            })?),
        };
    Ok(apply_state(old.as_ref(), e, window).map(|s| s.to_attrs()))
}

/// The most bytes of pairs one stored chunk of a window's edge record holds (DynamoDB: an item
/// stays below 400 KB with its keys).
pub const WINDOW_EDGES_CHUNK_BYTES: usize = 300 * 1024;

/// What a stored chunk of a window's edge record holds beside its pairs (keys, count, expiry),
/// bytes: for its write units.
pub const WINDOW_EDGES_KEY_BYTES: usize = 100;

/// A window's edge record: the (post, user) pairs it writes, stored before the first of its edge
/// writes, so that a window given up — its records trimmed from the stream while it was pending
/// — can still find the edges it wrote and count them ([`EdgeState::written_by`]). Encoded as
/// length-prefixed ids (u16, little-endian), cut into chunks of at most
/// [`WINDOW_EDGES_CHUNK_BYTES`].
pub fn encode_pairs<S: AsRef<str>>(pairs: &[(S, S)]) -> Vec<Vec<u8>> {
    let mut chunks = vec![Vec::new()];
    for (post, user) in pairs {
        let (post, user) = (post.as_ref(), user.as_ref());
        let need = 4 + post.len() + user.len();
        if chunks
            .last()
            .is_some_and(|c| !c.is_empty() && c.len() + need > WINDOW_EDGES_CHUNK_BYTES)
        {
            chunks.push(Vec::new());
        }
        let c = chunks.last_mut().expect("one chunk at least");
        for id in [post, user] {
            // Ids are at most a few hundred bytes (the event contract's limits).
            let len = u16::try_from(id.len()).unwrap_or(u16::MAX);
            c.extend_from_slice(&len.to_le_bytes());
            c.extend_from_slice(&id.as_bytes()[..usize::from(len)]);
        }
    }
    chunks
}

/// Decodes one chunk of [`encode_pairs`]; an error says what is wrong with it.
pub fn decode_pairs(mut b: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let take = |b: &mut &[u8]| -> Result<String, String> {
        let (len, rest) = b
            .split_first_chunk::<2>()
            .ok_or("a window's edge record ends inside a length")?;
        let len = usize::from(u16::from_le_bytes(*len));
        if rest.len() < len {
            return Err("a window's edge record ends inside an id".into());
        }
        let (id, rest) = rest.split_at(len);
        *b = rest;
        String::from_utf8(id.to_vec()).map_err(|e| format!("a window's edge record: {e}"))
    };
    while !b.is_empty() {
        let post = take(&mut b)?;
        let user = take(&mut b)?;
        out.push((post, user));
    }
    Ok(out)
}

/// The per-post deltas (by minute) and the global-total delta of a window's transitions: one
/// out of the old like's minute, one into the new like's ([`moves`]); posts whose changes cancel
/// out are dropped. Sorted by post, as a window's posts are. Every removal is in it, held ones
/// too: what the window does once all of it is written ([`split`] parts it).
pub fn deltas(transitions: &[Transition]) -> (Vec<(String, PostDelta)>, i64) {
    let mut posts: BTreeMap<SmolStr, PostDelta> = BTreeMap::new();
    let mut total = 0;
    for t in transitions {
        for (at, n) in moves(t.before, t.after) {
            posts.entry(t.post_id.clone()).or_default().add(at, n);
            total += n;
        }
    }
    (nonzero(posts), total)
}

/// A window's removals held until the windows whose likes they remove have written their
/// counts ([`Transition::held_for`]): written after the window's other counts, under the same
/// window's **held marker** (`summary::held_marker`), once each of `waits` is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeldCounts {
    /// Their per-post deltas (by minute), sorted by post.
    pub posts: Vec<(String, PostDelta)>,
    /// Their global-total delta.
    pub total_delta: i64,
    /// Each (post, window) whose counts of the post must be written first, each once.
    pub waits: Vec<(String, String)>,
}

impl HeldCounts {
    /// Whether the window holds nothing back.
    pub fn is_empty(&self) -> bool {
        self.posts.is_empty() && self.waits.is_empty()
    }
}

/// A window's transitions parted into the counts it writes at once ([`deltas`]' form) and the
/// removals it holds ([`HeldCounts`]). Neither part alone takes a post below zero: a removal
/// is in the first only when the like it removes was made by an earlier window of the same
/// shard — written before, as a shard's windows are written in order.
pub fn split(transitions: &[Transition]) -> ((Vec<(String, PostDelta)>, i64), HeldCounts) {
    // Keyed by the transitions' own ids (inline: no allocation per transition).
    let mut posts: BTreeMap<SmolStr, PostDelta> = BTreeMap::new();
    let mut held: BTreeMap<SmolStr, PostDelta> = BTreeMap::new();
    let mut waits = std::collections::BTreeSet::new();
    let (mut total, mut held_total) = (0, 0);
    for t in transitions {
        for (at, n) in moves(t.before, t.after) {
            match &t.held_for {
                // The like it removes, held.
                Some(w) if n < 0 => {
                    held.entry(t.post_id.clone()).or_default().add(at, n);
                    held_total += n;
                    waits.insert((t.post_id.clone(), w.clone()));
                }
                _ => {
                    posts.entry(t.post_id.clone()).or_default().add(at, n);
                    total += n;
                }
            }
        }
    }
    let held = HeldCounts {
        posts: nonzero(held),
        total_delta: held_total,
        waits: waits
            .into_iter()
            .map(|(p, w): (SmolStr, String)| (p.into(), w))
            .collect(),
    };
    ((nonzero(posts), total), held)
}

/// What a transition from the like made at `before` to the like made at `after` (`None`: no
/// like) does to its post's count, by when each like was made: the one it replaces taken away,
/// the one it is added; nothing when they are the same.
pub fn moves(before: Option<i64>, after: Option<i64>) -> impl Iterator<Item = (i64, i64)> {
    let changes = before != after;
    let gone = before.filter(|_| changes).map(|at| (at, -1));
    let made = after.filter(|_| changes).map(|at| (at, 1));
    gone.into_iter().chain(made)
}

/// The posts whose deltas do not cancel out, sorted by post.
fn nonzero(posts: BTreeMap<SmolStr, PostDelta>) -> Vec<(String, PostDelta)> {
    posts
        .into_iter()
        .filter_map(|(p, mut d)| {
            d.by_minute.retain(|_, n| *n != 0);
            (!d.by_minute.is_empty()).then(|| (p.into(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(user: &str, liked: bool, at: i64, id: &str) -> EdgeEvent {
        EdgeEvent {
            post_id: "p".into(),
            user_id: user.into(),
            liked,
            at_ms: at,
            event_id: id.into(),
            clamped: false,
            lost: Vec::new(),
        }
    }

    /// A window's transitions parted: a like added counts at once, a like removed that an
    /// earlier window of the same shard made counts at once, one another shard's window made is
    /// held until that window's counts are written, and a like again at the same time moves
    /// nothing. `deltas` sums both parts.
    #[test]
    fn a_window_s_transitions_are_parted_into_counts_and_held_removals() {
        const M0: i64 = 1_796_000_040_000;
        const M1: i64 = M0 + 60_000;
        let t = |post: &str, before, after, held: Option<&str>| Transition {
            post_id: post.into(),
            before,
            after,
            held_for: held.map(str::to_owned),
        };
        let transitions = [
            t("a", None, Some(M1), None),
            t("a", Some(M0), None, None),
            t("b", Some(M0), Some(M1), Some("other-shard-window")),
            t("c", Some(M0), Some(M0), Some("other-shard-window")),
        ];
        let ((posts, total), held) = split(&transitions);
        let minutes = |d: &PostDelta| d.by_minute.clone().into_iter().collect::<Vec<_>>();
        let posts: Vec<(&str, Vec<(i64, i64)>)> = posts
            .iter()
            .map(|(p, d)| (p.as_str(), minutes(d)))
            .collect();
        assert_eq!(
            posts,
            [("a", vec![(M0, -1), (M1, 1)]), ("b", vec![(M1, 1)])],
            "counted at once"
        );
        assert_eq!(total, 1);
        let held_posts: Vec<(&str, Vec<(i64, i64)>)> = held
            .posts
            .iter()
            .map(|(p, d)| (p.as_str(), minutes(d)))
            .collect();
        assert_eq!(held_posts, [("b", vec![(M0, -1)])], "held");
        assert_eq!(held.total_delta, -1);
        assert_eq!(
            held.waits,
            [("b".to_owned(), "other-shard-window".to_owned())]
        );
        let (all, total) = deltas(&transitions);
        assert_eq!(
            all.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(total, 0);
        assert_eq!(
            moves(Some(M0), Some(M0)).count(),
            0,
            "the same like moves nothing"
        );
    }

    /// Applies `e` as window `w` to a one-edge store; returns the transition, if any.
    fn write(item: &mut Option<Attrs>, e: &EdgeEvent, w: &str) -> Option<Transition> {
        match apply(item.as_ref(), e, w).unwrap() {
            EdgeOutcome::Wrote(a, t) => {
                *item = Some(a);
                Some(t)
            }
            EdgeOutcome::Mine(t) => Some(t),
            EdgeOutcome::Superseded(remember) | EdgeOutcome::Forgotten(remember) => {
                if let Some(a) = remember {
                    *item = Some(a);
                }
                None
            }
        }
    }

    #[test]
    fn a_like_is_a_state_a_double_tap_counts_once_and_an_unlike_of_nothing_nothing() {
        let mut item = None;
        let t =
            |ts: &[Option<Transition>]| deltas(&ts.iter().flatten().cloned().collect::<Vec<_>>()).1;
        let a = write(&mut item, &ev("u", true, 1_000, "a"), "w1");
        let b = write(&mut item, &ev("u", true, 2_000, "b"), "w2");
        assert_eq!(t(&[a.clone(), b]), 1, "liked twice is one liker");
        let mut other = None;
        let u = write(&mut other, &ev("v", false, 1_000, "c"), "w1");
        assert_eq!(t(&[u]), 0, "an unlike of nothing changes nothing");
        // A late copy of the first like, and the first like again: nothing.
        assert_eq!(write(&mut item, &ev("u", true, 1_000, "a"), "w3"), None);
    }

    #[test]
    fn a_window_applied_again_finds_its_own_transitions() {
        let mut item = None;
        write(&mut item, &ev("u", true, 1_000, "a"), "w1");
        let first = write(&mut item, &ev("u", false, 5_000, "b"), "w2").unwrap();
        assert_eq!(
            (first.before, first.after),
            (Some(1_000), None),
            "liked → unliked"
        );
        // The same window again (a crash before its counts): the same transition, from the item.
        let again = write(&mut item, &ev("u", false, 5_000, "b"), "w2").unwrap();
        assert_eq!(again, first);
        // Another window's copy of it: nothing.
        assert_eq!(write(&mut item, &ev("u", false, 5_000, "b"), "w3"), None);
    }

    #[test]
    fn a_window_finds_its_write_after_another_shard_wrote_over_it() {
        // Shard 0's window writes an older like and its owner dies before its counts; shard 1's
        // window writes the newer unlike (liked → unliked); shard 0's window, rebuilt, must find
        // its own unliked → liked, or the pair ends counted −1.
        let mut item = None;
        let like = ev("u", true, 1_000, "a");
        let first = write(&mut item, &like, "w1@s0").unwrap();
        assert_eq!((first.before, first.after), (None, Some(1_000)));
        let unlike = write(&mut item, &ev("u", false, 2_000, "b"), "w1@s1").unwrap();
        assert_eq!((unlike.before, unlike.after), (Some(1_000), None));
        assert_eq!(write(&mut item, &like, "w1@s0"), Some(first.clone()));
        // Two more writes later it is still remembered; a third pushes it out, and the edge says
        // it cannot tell instead of calling the event superseded.
        write(&mut item, &ev("u", true, 3_000, "c"), "w2@s1");
        assert_eq!(write(&mut item, &like, "w1@s0"), Some(first));
        write(&mut item, &ev("u", false, 4_000, "d"), "w3@s1");
        let state = EdgeState::from_attrs(item.as_ref().unwrap()).unwrap();
        assert_eq!(state.writes.len(), EDGE_HISTORY);
        assert_eq!(resolve(Some(&state), &like, "w1@s0"), Resolved::Forgotten);
        // An event the edge never held, older than all it remembers, is forgotten too; one
        // between remembered writes was never written, certainly.
        assert_eq!(
            resolve(Some(&state), &ev("u", true, 2_500, "x"), "w9@s2"),
            Resolved::Superseded
        );
    }

    #[test]
    fn the_first_copy_to_reach_the_edge_decides_a_clamped_event() {
        // A like whose clock is far ahead, clamped to its first copy's arrival (1_000), loses to
        // an unlike at 2_000; its producer's retry, clamped to its own later arrival (3_000),
        // changes nothing once the first copy reached the edge — in either shard.
        let clamped = |at| EdgeEvent {
            clamped: true,
            ..ev("u", true, at, "x")
        };
        let mut item = None;
        write(&mut item, &ev("u", false, 2_000, "n"), "w1@s0");
        assert_eq!(write(&mut item, &clamped(1_000), "w2@s0"), None);
        assert_eq!(write(&mut item, &clamped(3_000), "w1@s1"), None);
        assert!(!EdgeState::from_attrs(item.as_ref().unwrap()).unwrap().liked);
        // The counterexample ARCHITECTURE states (Likers, "Copies on two shards"): the retry
        // keyed to another shard, read first while the first copy's shard lags, decides at its
        // own arrival and wins; the first copy then changes nothing. Arrival order says unliked.
        let mut item = None;
        write(&mut item, &ev("u", false, 2_000, "n"), "w1@s0");
        assert!(write(&mut item, &clamped(3_000), "w1@s1").is_some());
        assert_eq!(write(&mut item, &clamped(1_000), "w2@s0"), None);
        assert!(EdgeState::from_attrs(item.as_ref().unwrap()).unwrap().liked);
    }

    #[test]
    fn a_copy_changes_nothing_whatever_time_it_orders_at() {
        // A like clamped to its first copy's arrival (1_000), an unlike after it, then a copy of
        // the like that orders at its own later time: the edge has held that event, so nothing.
        let mut item = None;
        write(&mut item, &ev("u", true, 1_000, "a"), "w1@s0");
        write(&mut item, &ev("u", false, 2_000, "b"), "w2@s0");
        assert_eq!(write(&mut item, &ev("u", true, 20_000, "a"), "w3@s0"), None);
        let state = EdgeState::from_attrs(item.as_ref().unwrap()).unwrap();
        assert!(!state.liked);
    }

    #[test]
    fn an_item_written_before_the_history_is_read() {
        // Written by a tally that kept one write and no event ids.
        let legacy = Attrs::from([
            ("l".to_owned(), Val::N(0)),
            ("t".to_owned(), Val::N(2_000)),
            ("e".to_owned(), Val::S("b".into())),
            ("w".to_owned(), Val::S("w1@s0".into())),
            ("pl".to_owned(), Val::N(1)),
            ("pt".to_owned(), Val::N(1_000)),
        ]);
        let st = EdgeState::from_attrs(&legacy).unwrap();
        assert_eq!(st.transition("p").before, Some(1_000));
        let mut item = Some(legacy);
        let t = write(&mut item, &ev("u", true, 3_000, "c"), "w2@s0").unwrap();
        assert_eq!((t.before, t.after), (None, Some(3_000)));
        let st = EdgeState::from_attrs(item.as_ref().unwrap()).unwrap();
        assert_eq!(st.writes.len(), 2);
        assert_eq!(st.writes[1].window, "w1@s0");
    }

    #[test]
    fn a_window_s_edge_record_reads_back_in_chunks() {
        let pairs: Vec<(String, String)> = (0..40_000)
            .map(|i| (format!("post-{}", i % 97), format!("user-{i}")))
            .collect();
        let chunks = encode_pairs(&pairs);
        assert!(chunks.len() > 1, "cut into chunks");
        assert!(chunks.iter().all(|c| c.len() <= WINDOW_EDGES_CHUNK_BYTES));
        let back: Vec<_> = chunks
            .iter()
            .flat_map(|c| decode_pairs(c).unwrap())
            .collect();
        assert_eq!(back, pairs);
        assert!(decode_pairs(&chunks[0][..chunks[0].len() - 1]).is_err());
        assert_eq!(encode_pairs::<&str>(&[]), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn ties_are_broken_by_the_event_id() {
        let mut item = None;
        write(&mut item, &ev("u", true, 1_000, "b"), "w1");
        assert_eq!(write(&mut item, &ev("u", false, 1_000, "a"), "w2"), None);
        let t = write(&mut item, &ev("u", false, 1_000, "c"), "w3").unwrap();
        assert_eq!((t.before, t.after), (Some(1_000), None));
    }

    #[test]
    fn a_newer_like_moves_the_user_to_its_minute() {
        let ts = vec![
            Transition::over("p", None, Some(60_000), None, "w1@s0"),
            Transition::over("p", Some(60_000), Some(180_000), Some("w1@s0"), "w2@s0"),
        ];
        let (posts, total) = deltas(&ts);
        assert_eq!(total, 1);
        assert_eq!(
            posts[0].1.by_minute,
            BTreeMap::from([(180_000, 1)]),
            "out of minute 1, into minute 3"
        );
    }

    #[test]
    fn a_clock_far_ahead_orders_by_the_arrival() {
        assert_eq!(ordering_time(1_000, 900, 200), 1_000);
        assert_eq!(ordering_time(1_200, 900, 200), 900);
    }

    /// One write of a generated run: whether it likes, its time (minutes), its event id, its
    /// window (of two shards), whether it was clamped, and how many lost events it carries.
    type Step = (bool, i64, u8, u8, bool, usize);

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        (
            proptest::bool::ANY,
            0i64..4,
            0u8..4,
            0u8..5,
            proptest::bool::ANY,
            0usize..3,
        )
    }

    /// The event and window of a generated write, on one edge of user-1.
    fn stepped((liked, t, id, w, clamped, lost): Step) -> (EdgeEvent, String) {
        let e = EdgeEvent {
            clamped,
            lost: (0..lost).map(|k| format!("lost{k}-{id}")).collect(),
            ..ev(
                "user-1",
                liked,
                1_796_000_000_000 + t * 60_000,
                &format!("id{id}"),
            )
        };
        (e, format!("00000{w}@shardId-00000000000{}", w % 2))
    }

    proptest::proptest! {
        /// Every edge a run of writes leaves reads back from its item as itself, and its typed
        /// size is its item's size: a store keeping edges typed is charged as DynamoDB charges
        /// the item, and the item form ([`apply`], built on [`apply_state`]) loses nothing.
        #[test]
        fn an_edge_round_trips_its_item_and_is_sized_as_it(
            steps in proptest::collection::vec(step(), 1..24)
        ) {
            let mut typed: Option<EdgeState> = None;
            for step in steps {
                let (e, window) = stepped(step);
                let new = match apply_state(typed.as_ref(), &e, &window) {
                    EdgeOutcome::Wrote(s, _) => Some(s),
                    EdgeOutcome::Superseded(s) | EdgeOutcome::Forgotten(s) => s,
                    EdgeOutcome::Mine(_) => None,
                };
                if let Some(s) = new {
                    let a = s.to_attrs();
                    proptest::prop_assert_eq!(EdgeState::from_attrs(&a), Some(s.clone()));
                    proptest::prop_assert_eq!(
                        s.item_size("post-7", "user-1"),
                        crate::item::item_size("post-7", &edge_sk("user-1"), &a)
                    );
                    typed = Some(s);
                }
            }
        }

        /// A state written into a buffer that held another edge (its writes, lost events and
        /// dropped window) is the state written afresh, and a write over an absent edge into it
        /// is what `apply_state` decides there: a store writing a window's new edges through
        /// one buffer leaves nothing of the edge before.
        #[test]
        fn a_state_written_into_a_used_buffer_is_the_state_written_afresh(
            steps in proptest::collection::vec(step(), 1..24)
        ) {
            let mut stored: Option<EdgeState> = None;
            let mut buffer = EdgeState::default();
            for step in steps {
                let (e, window) = stepped(step);
                let afresh = written_state(&e, &window, stored.as_ref());
                written_state_into(&e, &window, stored.as_ref(), &mut buffer);
                proptest::prop_assert_eq!(&buffer, &afresh);
                let t = write_absent(&e, &window, &mut buffer);
                proptest::prop_assert_eq!(
                    apply_state(None, &e, &window),
                    EdgeOutcome::Wrote(buffer.clone(), t)
                );
                // The buffer keeps the longest history the run has made, for the next step.
                written_state_into(&e, &window, stored.as_ref(), &mut buffer);
                if let EdgeOutcome::Wrote(s, _) = apply_state(stored.as_ref(), &e, &window) {
                    stored = Some(s);
                }
            }
        }
    }
}
