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
//!
//! Its parts, one concern each: `mode` (the count modes and the store's meta items), `state`
//! (an edge as stored: its state and remembered writes, as an item and typed), `write` (what a
//! window's write of an edge does: `resolve`, `apply_state`, `apply`), `record` (a window's edge
//! record), `counts` (a window's transitions as per-post deltas, parted into what it counts at
//! once and what it holds) and `recent` (the index of liked edges by time). This file keeps
//! the words they share: an edge event, its ordering time, a window's identity and a transition.

mod counts;
mod mode;
mod recent;
mod record;
mod state;
mod write;

pub use counts::{deltas, moves, split, HeldCounts};
pub use mode::{skews_from_text, skews_to_text, CountMode, MODE_PK, MODE_SK, SKEWS_SK, STREAM_SK};
pub use recent::{recent_entry_size, recent_index_units, RECENT_INDEX};
pub use record::{decode_pairs, encode_pairs, WINDOW_EDGES_CHUNK_BYTES, WINDOW_EDGES_KEY_BYTES};
pub use state::{
    write_attrs, EdgeState, EdgeWrite, Stamp, DROPPED_ATTR, EDGE_HISTORY, EDGE_LOST, LIKED_AT_ATTR,
    LOST_ATTRS,
};
pub use write::{
    apply, apply_state, lost_to_remember, resolve, write_absent, written, written_state,
    written_state_into, EdgeOutcome, Resolved,
};

use smol_str::SmolStr;

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
/// demo's 27; smallvec's array sizes stop at 32, then 36), so that a window's copy of its edges
/// for the writer carries the ids with it rather than pointing at them across the heap
/// (BENCHMARKS: the likers counter's CPU −9 % against `SmolStr`, which holds 23 bytes inline and
/// shares a longer id).
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::buckets::PostDelta;
    use crate::item::{Attrs, Val};

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
