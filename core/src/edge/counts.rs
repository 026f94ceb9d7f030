//! Edge changes as counts: what a change moves, by when each like was made.

/// What a change from the like made at `before` to the like made at `after` (`None`: no like)
/// does to its post's count, by when each like was made: the one it replaces taken away, the one
/// it is added; nothing when they are the same.
pub fn moves(before: Option<i64>, after: Option<i64>) -> impl Iterator<Item = (i64, i64)> {
    let changes = before != after;
    let gone = before.filter(|_| changes).map(|at| (at, -1));
    let made = after.filter(|_| changes).map(|at| (at, 1));
    gone.into_iter().chain(made)
}
