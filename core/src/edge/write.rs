//! What a write of an edge does: [`apply`], the reference both stores follow.

use super::{EdgeChange, EdgeEvent, EdgeState};

/// Applies `e` to the stored edge `old` (`None`: absent), as every store must: the edge is
/// written only if it is absent or its event orders before `e` (by `created_at`, then event
/// id), and then the store logs the change it made. `None`: refused, nothing changes and nothing
/// is logged (a copy, or an older event).
pub fn apply(old: Option<&EdgeState>, e: &EdgeEvent) -> Option<(EdgeState, EdgeChange)> {
    if old.is_some_and(|o| !e.is_after(o.at_ms, &o.event_id)) {
        return None;
    }
    let new = EdgeState {
        liked: e.liked,
        at_ms: e.at_ms,
        event_id: e.event_id.as_str().to_owned(),
    };
    let change = EdgeChange::between(&e.post_id, &e.user_id, old, &new);
    Some((new, change))
}
