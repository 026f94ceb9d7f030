//! Edge changes as counts: per-post deltas by minute and the global total.

use std::collections::BTreeMap;

use smol_str::SmolStr;

use crate::buckets::PostDelta;

use super::EdgeChange;

/// The per-post deltas (by minute) and the global-total delta of `changes`: one out of the old
/// like's minute, one into the new like's ([`moves`]); posts whose changes cancel out are
/// dropped. Sorted by post, as a window's posts are.
pub fn deltas<'a>(
    changes: impl IntoIterator<Item = &'a EdgeChange>,
) -> (Vec<(String, PostDelta)>, i64) {
    let mut posts: BTreeMap<SmolStr, PostDelta> = BTreeMap::new();
    let mut total = 0;
    for c in changes {
        for (at, n) in moves(c.before, c.after) {
            posts.entry(c.post_id.clone()).or_default().add(at, n);
            total += n;
        }
    }
    let posts = posts
        .into_iter()
        .filter_map(|(p, mut d)| {
            d.by_minute.retain(|_, n| *n != 0);
            (!d.by_minute.is_empty()).then(|| (p.into(), d))
        })
        .collect();
    (posts, total)
}

/// What a change from the like made at `before` to the like made at `after` (`None`: no like)
/// does to its post's count, by when each like was made: the one it replaces taken away, the one
/// it is added; nothing when they are the same.
pub fn moves(before: Option<i64>, after: Option<i64>) -> impl Iterator<Item = (i64, i64)> {
    let changes = before != after;
    let gone = before.filter(|_| changes).map(|at| (at, -1));
    let made = after.filter(|_| changes).map(|at| (at, 1));
    gone.into_iter().chain(made)
}
