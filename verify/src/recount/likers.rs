//! Counting likers: each (post, user)'s latest action by `created_at`, then the event id, decides
//! (the event's content alone, as the edge store orders it); a post's count is its users whose
//! latest action is a like, and "since T" those of them whose like was created at or after T's
//! minute. Copies change nothing, so no horizon leaves a count open; each event's copies are
//! tallied.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use tally_core::event::{Action, LikeEvent};
use tally_core::seq::Position;

use super::{partition, size, Beyond, Counting, FirstCopies, Latest, PostRecount, Seen, Tally};

/// What counting likers keeps: each event's copies (for the tally), each post's users' latest
/// applied action, and — once read — each post's count.
#[derive(Default)]
pub(super) struct Likers {
    first_seen: FirstCopies,
    edges: HashMap<String, HashMap<String, Latest>>,
    posts: HashMap<String, PostRecount>,
}

impl Counting for Likers {
    fn key(&self, ev: &LikeEvent) -> u64 {
        // All it keeps of one edge (its latest action, its events' first arrivals) shares a key.
        partition::key(&ev.post_id, Some(&ev.user_id))
    }

    /// Every copy is read: a copy changes nothing, wherever it lands.
    fn take(
        &mut self,
        ev: LikeEvent,
        key: u64,
        _: usize,
        arrival_ms: i64,
        beyond: Option<(&str, Position)>,
    ) -> (usize, Option<Beyond>) {
        let mut bytes = 0;
        // Each event's copies, tallied (a copy changes nothing).
        match self.first_seen.0.entry((0, ev.event_id.clone())) {
            Entry::Occupied(mut o) => o.get_mut().copies += 1,
            Entry::Vacant(v) => {
                bytes += size::seen(&v.key().1);
                v.insert(Seen::first(arrival_ms, key));
            }
        }
        let at_ms = ev.created_at;
        let latest = Latest {
            at_ms,
            event_id: ev.event_id,
            liked: ev.action == Action::Like,
        };
        if let Some((shard, at)) = beyond {
            let b = Beyond {
                key,
                shard_id: shard.to_owned(),
                at,
                post_id: ev.post_id,
                minute: at_ms.div_euclid(60_000),
                delta: 0,
                late: false,
                action: Some((ev.user_id, latest)),
            };
            return (bytes, Some(b));
        }
        let users = match self.edges.get_mut(&ev.post_id) {
            Some(u) => u,
            None => {
                bytes += size::post(&ev.post_id);
                self.edges.entry(ev.post_id).or_default()
            }
        };
        match users.get_mut(&ev.user_id) {
            Some(e) => e.merge(&latest),
            None => {
                bytes += size::edge(&ev.user_id, &latest.event_id);
                users.insert(ev.user_id, latest);
            }
        }
        (bytes, None)
    }

    fn finish(&mut self, tally: &mut Tally) {
        self.first_seen.tally(tally);
        for (post, users) in &self.edges {
            self.posts.insert(post.clone(), count_of(users.values()));
        }
    }

    fn posts(&self) -> &HashMap<String, PostRecount> {
        &self.posts
    }

    /// The held records merged into the post's users' latest actions.
    fn with_held<'a>(&self, post: &str, held: Vec<&'a Beyond>) -> (PostRecount, Vec<&'a Beyond>) {
        let mut users = self.edges.get(post).cloned().unwrap_or_default();
        for b in held {
            if let Some((user, l)) = &b.action {
                users
                    .entry(user.clone())
                    .and_modify(|e| e.merge(l))
                    .or_insert_with(|| l.clone());
            }
        }
        (count_of(users.values()), Vec::new())
    }

    /// Up to `n` applied edges — (post, user, liked) — of posts not `moving` (a window may be
    /// writing those), spread over the posts, in a fixed order.
    fn sample_edges(
        &self,
        n: usize,
        moving: &HashSet<&str>,
    ) -> Option<Vec<(String, String, bool)>> {
        let mut posts: Vec<&String> = self
            .edges
            .keys()
            .filter(|p| !moving.contains(p.as_str()))
            .collect();
        posts.sort_unstable();
        let mut out = Vec::new();
        // One edge of each post per round, so a few hot posts do not fill the sample.
        let mut users: Vec<Vec<(&String, &Latest)>> = posts
            .iter()
            .map(|p| {
                let mut u: Vec<(&String, &Latest)> = self.edges[*p].iter().collect();
                u.sort_unstable_by(|a, b| b.0.cmp(a.0));
                u
            })
            .collect();
        while out.len() < n && users.iter().any(|u| !u.is_empty()) {
            for (p, u) in posts.iter().zip(users.iter_mut()) {
                if let Some((user, l)) = u.pop() {
                    out.push(((*p).clone(), user.clone(), l.liked));
                    if out.len() == n {
                        break;
                    }
                }
            }
        }
        Some(out)
    }

    fn keys(&self, out: &mut Vec<u64>) {
        self.first_seen.keys(out);
        for (post, users) in &self.edges {
            out.extend(users.keys().map(|u| partition::key(post, Some(u))));
        }
    }

    fn retain_below(&mut self, hi: u64) {
        self.first_seen.retain_below(hi);
        self.edges.retain(|post, users| {
            users.retain(|u, _| partition::key(post, Some(u)) < hi);
            !users.is_empty()
        });
        self.edges.shrink_to_fit();
    }

    fn held_bytes(&self) -> usize {
        let seen = self.first_seen.held_bytes();
        let edges: usize = self
            .edges
            .iter()
            .map(|(p, users)| {
                size::post(p)
                    + users
                        .iter()
                        .map(|(u, l)| size::edge(u, &l.event_id))
                        .sum::<usize>()
            })
            .sum();
        seen + edges
    }
}

/// A post's count from its users' latest actions: those that like it, by the minute they did.
fn count_of<'a>(users: impl Iterator<Item = &'a Latest>) -> PostRecount {
    let mut p = PostRecount::default();
    for l in users.filter(|l| l.liked) {
        p.add(l.at_ms.div_euclid(60_000), 1);
    }
    p
}
