//! A window's transitions as counts: per-post deltas by minute and the global total, parted into
//! what the window counts at once and the removals it holds.

use std::collections::BTreeMap;

use smol_str::SmolStr;

use crate::buckets::PostDelta;

use super::Transition;

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
