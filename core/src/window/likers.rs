//! Counting likers: a window keeps each (post, user) edge's latest event — ordered by
//! [`edge::ordering_time`], then the event id — which is what it writes to the edge; its deltas
//! are known only once those writes say what they changed. No duplicate filter is needed: a copy
//! is never newer than itself.

use std::collections::HashMap;

use crate::edge::{self, EdgeEvent};
use crate::event::{Action, EventRef};

use super::WindowStats;

/// What a window counting likers folds.
#[derive(Debug)]
pub(super) struct Likers {
    /// The largest skew of `created_at` over the arrival taken as it is (ms).
    pub(super) max_skew_ms: i64,
    /// The latest event of each (post, user) edge.
    pub(super) edges: HashMap<(String, String), EdgeEvent, ahash::RandomState>,
    /// The ordering time of each event whose first copy here was clamped
    /// ([`edge::ordering_time`]): a later copy orders as the first did, although it arrived
    /// later (only a clamped event's copies can order differently; there are few).
    clamped: HashMap<String, i64, ahash::RandomState>,
}

impl Likers {
    pub(super) fn new(max_skew_ms: i64) -> Likers {
        Likers {
            max_skew_ms,
            edges: HashMap::default(),
            clamped: HashMap::default(),
        }
    }

    /// Each touched edge's latest event, by post and user.
    pub(super) fn close(self) -> Vec<EdgeEvent> {
        let mut edges: Vec<EdgeEvent> = self.edges.into_values().collect();
        edges.sort_unstable_by(|a, b| (&a.post_id, &a.user_id).cmp(&(&b.post_id, &b.user_id)));
        edges
    }

    /// Keeps the event if it is its edge's latest in the window.
    pub(super) fn fold(&mut self, ev: EventRef<'_>, arrival_ms: i64, stats: &mut WindowStats) {
        let at_ms = match self.clamped.get(ev.event_id.as_ref()) {
            Some(first) => *first,
            None => edge::ordering_time(ev.created_at, arrival_ms, self.max_skew_ms),
        };
        if at_ms != ev.created_at {
            self.clamped
                .entry(ev.event_id.clone().into_owned())
                .or_insert(at_ms);
        }
        stats.latest_created_ms = stats.latest_created_ms.max(at_ms);
        // Counted unless it is a copy of an action this window holds already (no filter
        // remembers ids across windows: a copy there is read, and changes nothing).
        stats.counted += 1;
        let liked = ev.action == Action::Like;
        let clamped = at_ms != ev.created_at;
        let key = (ev.post_id.into_owned(), ev.user_id.into_owned());
        match self.edges.get_mut(&key) {
            Some(kept) if !kept.is_after(at_ms, &ev.event_id) => {
                if (kept.at_ms, kept.event_id.as_str()) != (at_ms, ev.event_id.as_ref()) {
                    // A clamped event it replaces took no effect: the edge remembers it.
                    let mut lost = std::mem::take(&mut kept.lost);
                    if kept.clamped && !lost.contains(&kept.event_id) {
                        lost.push(std::mem::take(&mut kept.event_id));
                    }
                    *kept = EdgeEvent {
                        post_id: key.0,
                        user_id: key.1,
                        liked,
                        at_ms,
                        event_id: ev.event_id.into_owned(),
                        clamped,
                        lost,
                    };
                } else {
                    stats.counted -= 1;
                    stats.duplicates += 1;
                }
            }
            Some(kept) => {
                if clamped && !kept.lost.iter().any(|l| l == ev.event_id.as_ref()) {
                    kept.lost.push(ev.event_id.into_owned());
                }
            }
            None => {
                let e = EdgeEvent {
                    post_id: key.0.clone(),
                    user_id: key.1.clone(),
                    liked,
                    at_ms,
                    event_id: ev.event_id.into_owned(),
                    clamped,
                    lost: Vec::new(),
                };
                self.edges.insert(key, e);
            }
        }
    }
}
