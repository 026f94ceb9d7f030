//! What a window's write of an edge does: [`resolve`] decides it on the stored edge,
//! [`apply_state`] (typed) and [`apply`] (an item) are the reference both stores follow, and
//! [`written_state`] is the edge it leaves.

use crate::item::Attrs;

use super::state::{EdgeState, EdgeWrite, EDGE_HISTORY, EDGE_LOST};
use super::{edge_sk, EdgeEvent, Transition};

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
