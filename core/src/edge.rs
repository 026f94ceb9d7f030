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
//! **Exactly once without a transaction.** A window holds each touched edge's latest event. It
//! writes each edge with one conditional write — only if the stored event is older (or there is
//! none) — that also keeps the state it replaced (`pl`, `pt`) and the window that wrote it (`w`).
//! The transition a write made is read from the item itself (`before` → `after`), so a window
//! applied again after a crash between its edge writes and its count writes finds, for each edge
//! it wrote, the same transition on the item (its `w` is the window's), and for each edge it did
//! not write, the same refusal. The counts are then written as in events mode, guarded by the
//! summary items' markers. This needs **one writer per edge at a time**: a pair's events always go
//! to one shard (the partition key is the post, or for a hot post fanned out, the user — never the
//! event id), a shard has one lease holder, and a child shard starts after its parents finished.
//! [`apply`] is the reference both stores follow.

use std::collections::BTreeMap;

use crate::buckets::PostDelta;
use crate::summary::{Attrs, Val};

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

/// The latest event of one edge in a window: what the window writes to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeEvent {
    /// The post.
    pub post_id: String,
    /// The user.
    pub user_id: String,
    /// Whether the event is a like (else an unlike).
    pub liked: bool,
    /// The time it orders by ([`ordering_time`]), ms.
    pub at_ms: i64,
    /// The event's id: the tie-break between events of one time.
    pub event_id: String,
}

impl EdgeEvent {
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

/// What one window's write did to an edge: the like it replaced and the like it is now (each the
/// time of the like, `None` for not liked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The post whose count it moves.
    pub post_id: String,
    /// When the like it replaced was made (ms; `None`: the user did not like the post).
    pub before: Option<i64>,
    /// When the like it is now was made (ms; `None`: the user does not like the post).
    pub after: Option<i64>,
}

/// An edge as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeState {
    /// Whether the user likes the post.
    pub liked: bool,
    /// The ordering time of the event that set it (ms).
    pub at_ms: i64,
    /// That event's id.
    pub event_id: String,
    /// The window that wrote it.
    pub window: String,
    /// The state it replaced: liked at this time, or `None`.
    pub before: Option<i64>,
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

impl EdgeState {
    /// Reads an edge item; `None` if it is not one.
    pub fn from_attrs(a: &Attrs) -> Option<EdgeState> {
        let liked = num(a, "l")? == 1;
        let was = num(a, "pl").unwrap_or(0) == 1;
        Some(EdgeState {
            liked,
            at_ms: num(a, "t")?,
            event_id: text(a, "e")?.to_owned(),
            window: text(a, "w")?.to_owned(),
            before: if was { Some(num(a, "pt")?) } else { None },
        })
    }

    /// The transition the window that wrote it made.
    pub fn transition(&self, post_id: &str) -> Transition {
        Transition {
            post_id: post_id.to_owned(),
            before: self.before,
            after: self.liked.then_some(self.at_ms),
        }
    }
}

/// The attributes a window's write sets: the event, the window, and the state it replaces
/// (`old`: the stored item's `l` and `t`; absent, not liked).
pub fn written(e: &EdgeEvent, window: &str, old: Option<&EdgeState>) -> Attrs {
    let (pl, pt) = old.map_or((0, 0), |o| (i64::from(o.liked), o.at_ms));
    Attrs::from([
        ("l".to_owned(), Val::N(i64::from(e.liked))),
        ("t".to_owned(), Val::N(e.at_ms)),
        ("e".to_owned(), Val::S(e.event_id.clone())),
        ("w".to_owned(), Val::S(window.to_owned())),
        ("pl".to_owned(), Val::N(pl)),
        ("pt".to_owned(), Val::N(pt)),
    ])
}

/// What a window's write of an edge does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeOutcome {
    /// Written: the new item, and the transition it made.
    Wrote(Attrs, Transition),
    /// Refused, and the stored event is this window's: written by an earlier attempt of the same
    /// window, whose transition is on the item.
    Mine(Transition),
    /// Refused: the stored event is newer (or the same, written by another window). Nothing
    /// changes.
    Superseded,
}

/// What a window's write of `e` does to the stored edge `old` (`None`: absent), without writing
/// it: written only if the edge is absent or its event is before `e`; a refused write whose edge
/// carries `window` is that window's own earlier write. [`apply`] writes by it, and the counter's
/// open windows are read by it before they are written (`counter::board`).
pub fn resolve(old: Option<&EdgeState>, e: &EdgeEvent, window: &str) -> Resolved {
    match old {
        Some(o) if !e.is_after(o.at_ms, &o.event_id) => {
            if o.window == window {
                Resolved::Mine(o.transition(&e.post_id))
            } else {
                Resolved::Superseded
            }
        }
        _ => Resolved::Writes(Transition {
            post_id: e.post_id.clone(),
            before: old.and_then(|o| o.liked.then_some(o.at_ms)),
            after: e.liked.then_some(e.at_ms),
        }),
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
}

impl Resolved {
    /// The transition the window makes (or made), if any.
    pub fn transition(self) -> Option<Transition> {
        match self {
            Resolved::Writes(t) | Resolved::Mine(t) => Some(t),
            Resolved::Superseded => None,
        }
    }
}

/// Applies a window's write of an edge to the stored item (`None`: absent), as every store must
/// ([`resolve`] decides).
pub fn apply(item: Option<&Attrs>, e: &EdgeEvent, window: &str) -> Result<EdgeOutcome, String> {
    let old =
        match item {
            None => None,
            Some(a) => Some(EdgeState::from_attrs(a).ok_or_else(|| {
                format!("a corrupt edge item {}/{}", e.post_id, edge_sk(&e.user_id))
            })?),
        };
    Ok(match resolve(old.as_ref(), e, window) {
        Resolved::Writes(t) => EdgeOutcome::Wrote(written(e, window, old.as_ref()), t),
        Resolved::Mine(t) => EdgeOutcome::Mine(t),
        Resolved::Superseded => EdgeOutcome::Superseded,
    })
}

/// The per-post deltas (by minute) and the global-total delta of a window's transitions: one
/// out of the old like's minute, one into the new like's; posts whose changes cancel out are
/// dropped. Sorted by post, as a window's posts are.
pub fn deltas(transitions: &[Transition]) -> (Vec<(String, PostDelta)>, i64) {
    let mut posts: BTreeMap<&str, PostDelta> = BTreeMap::new();
    let mut total = 0;
    for t in transitions {
        if t.before == t.after {
            continue;
        }
        let d = posts.entry(t.post_id.as_str()).or_default();
        if let Some(at) = t.before {
            d.add(at, -1);
            total -= 1;
        }
        if let Some(at) = t.after {
            d.add(at, 1);
            total += 1;
        }
    }
    let posts = posts
        .into_iter()
        .filter_map(|(p, mut d)| {
            d.by_minute.retain(|_, n| *n != 0);
            (!d.by_minute.is_empty()).then(|| (p.to_owned(), d))
        })
        .collect();
    (posts, total)
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
        }
    }

    /// Applies `e` as window `w` to a one-edge store; returns the transition, if any.
    fn write(item: &mut Option<Attrs>, e: &EdgeEvent, w: &str) -> Option<Transition> {
        match apply(item.as_ref(), e, w).unwrap() {
            EdgeOutcome::Wrote(a, t) => {
                *item = Some(a);
                Some(t)
            }
            EdgeOutcome::Mine(t) => Some(t),
            EdgeOutcome::Superseded => None,
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
            Transition {
                post_id: "p".into(),
                before: None,
                after: Some(60_000),
            },
            Transition {
                post_id: "p".into(),
                before: Some(60_000),
                after: Some(180_000),
            },
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
}
