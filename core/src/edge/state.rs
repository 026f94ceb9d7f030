//! An edge as stored: its state, the writes it remembers and the clamped events it lost, as a
//! DynamoDB item's attributes and typed ([`EdgeState`]), and its size as DynamoDB charges it.

use crate::item::{Attrs, Val};

use super::{window_shard, Transition, EDGE_PREFIX};

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
/// sort key of the counts table's [`RECENT_INDEX`](super::RECENT_INDEX), which holds liked
/// edges only.
pub const LIKED_AT_ATTR: &str = "lt";

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
    /// The window that wrote it ([`window_id`](super::window_id)).
    pub window: String,
    /// The event it replaced (`None`: the edge was absent).
    pub before: Option<Stamp>,
}

/// An edge as stored. The default is no edge (no write yet): a buffer for
/// [`written_state_into`](super::written_state_into).
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
    pub(super) fn stamp(&self) -> Stamp {
        Stamp {
            liked: self.liked,
            at_ms: self.at_ms,
            event_id: self.event_id.clone(),
        }
    }

    /// The transition the `g`-th newest write made (0: the one that made the state).
    pub(super) fn transition_of(&self, g: usize, post_id: &str) -> Transition {
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
    pub(super) fn held(&self, event_id: &str) -> Option<bool> {
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
    pub(super) fn new_lost<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<String> {
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
    pub(super) fn may_have_forgotten(&self, at_ms: i64, event_id: &str) -> bool {
        match self.writes.last().map(|w| w.before.as_ref()) {
            // The item remembers back to the edge's first write: nothing is forgotten.
            Some(None) | None => false,
            Some(Some(oldest)) => oldest.is_at_or_after(at_ms, event_id),
        }
    }
}
