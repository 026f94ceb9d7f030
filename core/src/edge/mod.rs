//! Likers: a like is a user's state, not an event.
//!
//! Each (post, user) pair is one **edge**, a last-writer-wins register: its state is the user's
//! latest action, ordered by `created_at` and then by `event_id` (the tie-break) — the event's
//! content alone, never when a copy of it arrived. A post's count is the number of users whose
//! latest action is `like`, so a repeated like, an unlike of nothing, a duplicate, a replay or a
//! late copy changes nothing, and the events of one pair end in the same state whatever order
//! they arrive in, whichever shard or worker writes them.
//!
//! **Counts come from the edges' change log.** The counter's first stage writes each edge only if
//! the event is newer than the stored one ([`apply`] is the reference both stores follow) and
//! decides nothing else. The edge store records each change it makes — exactly once, in the
//! edge's order, with the state before and after ([`EdgeChange`]; DynamoDB Streams on the edges
//! table, or a change row written in the edge write's own SQLite transaction) — and the
//! counter's second stage folds those changes into per-post deltas through the exactly-once
//! window protocol. A change moves a user between minute buckets ([`moves`]): unliked → liked adds
//! one at the like's minute, liked → unliked takes one from the old like's minute, a newer like of
//! a liked edge moves the user from the old minute to the new one. So "likes since T" — the users
//! who like the post now and whose latest action, that like, was created at or after T — is a
//! function of the edges' states, as the total is.
//!
//! Its parts: `mode` (the count modes and the store's meta items), `state` (an edge as stored),
//! `write` (what a write of an edge does: [`apply`]), `change` (a change as the log holds it),
//! `counts` (changes as per-post deltas) and `recent` (the index of liked edges by time).

mod change;
mod counts;
mod mode;
mod recent;
mod state;
mod write;

pub use change::{EdgeChange, CHANGE_V1};
pub use counts::moves;
pub use mode::{CountMode, MetaItem, MODE_PK};
pub use recent::{recent_entry_size, recent_index_units, RECENT_INDEX};
pub use state::{EdgeState, LIKED_AT_ATTR};
pub use write::apply;

use smol_str::SmolStr;

/// An event's id as an edge event holds it: inline up to 36 bytes (a UUID's 36 characters, the
/// demo's 27), so that a window's copy of its edges for the writer carries the ids with it
/// rather than pointing at them across the heap.
pub type EventId = smallstr::SmallString<[u8; 36]>;

/// The latest event of one edge in a window: what the window writes to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeEvent {
    /// The post.
    pub post_id: SmolStr,
    /// The user.
    pub user_id: SmolStr,
    /// Whether the event is a like (else an unlike).
    pub liked: bool,
    /// Its `created_at` (ms): the time it orders by.
    pub at_ms: i64,
    /// The event's id: the tie-break between events of one time.
    pub event_id: EventId,
}

impl EdgeEvent {
    /// Whether this event comes after one at (`at_ms`, `event_id`).
    pub fn is_after(&self, at_ms: i64, event_id: &str) -> bool {
        (self.at_ms, self.event_id.as_str()) > (at_ms, event_id)
    }
}

/// The sort-key prefix of a post's edges (partition: the post id).
pub const EDGE_PREFIX: &str = "E#";

/// The sort key of the edge of `user` (in the post's partition).
pub fn edge_sk(user: &str) -> String {
    format!("{EDGE_PREFIX}{user}")
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

    /// Applies `e` to a one-edge store; returns the change, if any.
    fn write(item: &mut Option<EdgeState>, e: &EdgeEvent) -> Option<EdgeChange> {
        let (state, change) = apply(item.as_ref(), e)?;
        *item = Some(state);
        Some(change)
    }

    fn total(changes: &[Option<EdgeChange>]) -> i64 {
        changes
            .iter()
            .flatten()
            .flat_map(|c| moves(c.before, c.after).map(|(_, n)| n))
            .sum()
    }

    #[test]
    fn a_like_is_a_state_a_double_tap_counts_once_and_an_unlike_of_nothing_nothing() {
        let mut item = None;
        let a = write(&mut item, &ev("u", true, 1_000, "a"));
        let b = write(&mut item, &ev("u", true, 2_000, "b"));
        assert_eq!(total(&[a, b]), 1, "liked twice is one liker");
        let mut other = None;
        let u = write(&mut other, &ev("v", false, 1_000, "c"));
        assert_eq!(
            total(std::slice::from_ref(&u)),
            0,
            "an unlike of nothing changes nothing"
        );
        assert!(
            u.is_some(),
            "but it is stored: an older like must lose to it"
        );
        // A late copy of the first like, and the first like again: nothing.
        assert_eq!(write(&mut item, &ev("u", true, 1_000, "a")), None);
        assert_eq!(write(&mut item, &ev("u", true, 2_000, "b")), None);
    }

    #[test]
    fn events_end_in_the_same_state_in_any_order_and_ties_go_to_the_larger_id() {
        let events = [
            ev("u", true, 1_000, "a"),
            ev("u", false, 2_000, "b"),
            ev("u", true, 2_000, "c"),
            ev("u", false, 1_500, "d"),
        ];
        let mut orders = vec![vec![0, 1, 2, 3], vec![3, 2, 1, 0], vec![2, 0, 3, 1]];
        orders.push(vec![1, 3, 0, 2]);
        for order in orders {
            let mut item = None;
            let mut changes = Vec::new();
            for i in order {
                changes.push(write(&mut item, &events[i]));
            }
            let s = item.unwrap();
            assert_eq!((s.liked, s.at_ms, s.event_id.as_str()), (true, 2_000, "c"));
            assert_eq!(total(&changes), 1, "the changes add up to the state");
        }
    }
}
