//! Counting events: a post's count is its distinct `event_id`s with `like` minus those with
//! `unlike`, where a copy is the same event when it arrives in the same shard lineage within the
//! dedup horizon of the first copy; a later copy leaves its post's count a range.

use std::collections::{HashMap, HashSet};

use tally_core::event::LikeEvent;
use tally_core::seq::Position;

use super::{partition, size, Beyond, Counting, FirstCopies, PostRecount, Seen, Tally};

/// What counting events keeps: each event's first copy, and each post's applied count.
pub(super) struct Events {
    horizon_ms: i64,
    /// First arrival of each event id, per lineage.
    first_seen: FirstCopies,
    posts: HashMap<String, PostRecount>,
}

impl Events {
    pub(super) fn new(horizon_ms: i64) -> Events {
        Events {
            horizon_ms,
            first_seen: FirstCopies::default(),
            posts: HashMap::new(),
        }
    }
}

impl Counting for Events {
    fn key(&self, ev: &LikeEvent) -> u64 {
        // A post's events share its key: the dedup rule is by event id within its lineage.
        partition::key(&ev.post_id, None)
    }

    fn take(
        &mut self,
        ev: LikeEvent,
        key: u64,
        scope: usize,
        arrival_ms: i64,
        beyond: Option<(&str, Position)>,
    ) -> (usize, Option<Beyond>) {
        let mut bytes = 0;
        let late = match self.first_seen.0.get_mut(&(scope, ev.event_id.clone())) {
            None => {
                bytes += size::seen(&ev.event_id);
                self.first_seen
                    .0
                    .insert((scope, ev.event_id), Seen::first(arrival_ms, key));
                false
            }
            Some(first) if (arrival_ms - first.arrival_ms).abs() <= self.horizon_ms => {
                first.copies += 1;
                return (0, None);
            }
            Some(first) => {
                first.late += 1;
                true
            }
        };
        let minute = ev.created_at.div_euclid(60_000);
        let delta = ev.action.delta();
        if let Some((shard, at)) = beyond {
            let b = Beyond {
                key,
                shard_id: shard.to_owned(),
                at,
                post_id: ev.post_id,
                minute,
                delta,
                late,
                action: None,
            };
            return (bytes, Some(b));
        }
        let p = match self.posts.get_mut(&ev.post_id) {
            Some(p) => p,
            None => {
                bytes += size::post(&ev.post_id);
                self.posts.entry(ev.post_id).or_default()
            }
        };
        if late {
            bytes += size::LATE;
            p.late.push((minute, delta));
        } else {
            if !p.minutes.contains_key(&minute) {
                bytes += size::MINUTE;
            }
            p.add(minute, delta);
        }
        (bytes, None)
    }

    fn finish(&mut self, tally: &mut Tally) {
        self.first_seen.tally(tally);
    }

    fn posts(&self) -> &HashMap<String, PostRecount> {
        &self.posts
    }

    fn with_held<'a>(&self, post: &str, held: Vec<&'a Beyond>) -> (PostRecount, Vec<&'a Beyond>) {
        // Held records add as deltas (a late copy's as an open one).
        (self.posts.get(post).cloned().unwrap_or_default(), held)
    }

    fn sample_edges(&self, _: usize, _: &HashSet<&str>) -> Option<Vec<(String, String, bool)>> {
        None
    }

    fn keys(&self, out: &mut Vec<u64>) {
        self.first_seen.keys(out);
        out.extend(self.posts.keys().map(|p| partition::key(p, None)));
    }

    fn retain_below(&mut self, hi: u64) {
        self.first_seen.retain_below(hi);
        self.posts.retain(|p, _| partition::key(p, None) < hi);
        self.posts.shrink_to_fit();
    }

    fn held_bytes(&self) -> usize {
        let seen = self.first_seen.held_bytes();
        let posts: usize = self
            .posts
            .iter()
            .map(|(p, r)| {
                size::post(p) + r.minutes.len() * size::MINUTE + r.late.len() * size::LATE
            })
            .sum();
        seen + posts
    }
}
