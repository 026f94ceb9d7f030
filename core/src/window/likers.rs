//! The likers counter's first stage: a window keeps each (post, user) edge's latest event —
//! ordered by `created_at`, then the event id — which is what it writes to the edge. It counts
//! nothing itself: the edge store logs each change its writes make, and the second stage counts
//! those ([`super::changes`]). No duplicate filter is needed: a copy is never newer than itself.

use hashbrown::HashTable;
use smol_str::SmolStr;

use crate::edge::{EdgeEvent, EventId};
use crate::event::{Action, EventRef};

use super::{key_order, WindowStats};

/// An edge's latest event in the window, with its hash ([`Likers::hash`]).
#[derive(Debug)]
struct Kept {
    event: EdgeEvent,
    hash: u64,
}

/// What a likers window folds.
#[derive(Debug, Default)]
pub(super) struct Likers {
    /// The latest event of each (post, user) edge, in the order the window met them: a record
    /// of an edge the window holds already allocates nothing.
    kept: Vec<Kept>,
    /// Where each edge is in `kept`, found by its post and user (hashed by [`Likers::hash`]).
    edges: HashTable<u32>,
    hasher: ahash::RandomState,
}

impl Likers {
    /// Room for `edges` edges at once (the window's last of the shard held about as many): a
    /// busy shard's window does not grow its edges a doubling at a time.
    pub(super) fn reserve(&mut self, edges: usize) {
        let kept = &self.kept;
        self.edges.reserve(edges, |i| kept[*i as usize].hash);
        self.kept.reserve(edges);
    }

    /// Each touched edge's latest event, by post and user: the order of the store's keys
    /// ([`key_order::sorted`]).
    pub(super) fn close(self) -> Vec<EdgeEvent> {
        key_order::sorted(self.kept.into_iter().map(|k| k.event))
    }

    fn hash(hasher: &ahash::RandomState, post: &str, user: &str) -> u64 {
        hasher.hash_one((post, user))
    }

    /// Keeps the event if it is its edge's latest in the window. A post new to the window is
    /// added to `posts_met`.
    pub(super) fn fold(&mut self, ev: EventRef<'_>, stats: &mut WindowStats) {
        let at_ms = ev.created_at;
        stats.latest_created_ms = stats.latest_created_ms.max(at_ms);
        stats.counted += 1;
        let liked = ev.action == Action::Like;
        let hash = Likers::hash(&self.hasher, &ev.post_id, &ev.user_id);
        let kept = &mut self.kept;
        let found = self.edges.find(hash, |i| {
            let k = &kept[*i as usize].event;
            *k.post_id == *ev.post_id && *k.user_id == *ev.user_id
        });
        match found.map(|i| &mut kept[*i as usize].event) {
            // A copy of the event the window holds: counted as a duplicate.
            Some(k) if (k.at_ms, k.event_id.as_str()) == (at_ms, ev.event_id.as_ref()) => {
                stats.counted -= 1;
                stats.duplicates += 1;
            }
            Some(k) if !k.is_after(at_ms, &ev.event_id) => {
                k.liked = liked;
                k.at_ms = at_ms;
                k.event_id = EventId::from_str(&ev.event_id);
            }
            // Older than the event the window holds: it changes nothing.
            Some(_) => {}
            None => {
                let event = EdgeEvent {
                    post_id: SmolStr::new(&*ev.post_id),
                    user_id: SmolStr::new(&*ev.user_id),
                    liked,
                    at_ms,
                    event_id: EventId::from_str(&ev.event_id),
                };
                let i = kept.len() as u32;
                kept.push(Kept { event, hash });
                self.edges
                    .insert_unique(hash, i, |i| kept[*i as usize].hash);
            }
        }
    }
}
