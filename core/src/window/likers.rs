//! Counting likers: a window keeps each (post, user) edge's latest event — ordered by
//! [`edge::ordering_time`], then the event id — which is what it writes to the edge; its deltas
//! are known only once those writes say what they changed. No duplicate filter is needed: a copy
//! is never newer than itself.

use std::collections::{HashMap, HashSet};

use hashbrown::HashTable;
use smol_str::SmolStr;

use crate::edge::{self, EdgeEvent, EventId};
use crate::event::{Action, EventRef};

use super::{key_order, WindowStats};

/// A post's edges in a window: where each is kept (`Likers::kept`), in the order the window met
/// them, and each change the window made to one of them, as the edge's place in `edges` (how
/// many there were is the post's change count; those after a count are the edges changed since).
#[derive(Debug, Default)]
struct PostEdges {
    edges: Vec<u32>,
    log: Vec<u32>,
}

/// An edge's latest event in the window, with its hash ([`Likers::hash`]) and its place among
/// its post's edges (`PostEdges::edges`).
#[derive(Debug)]
struct Kept {
    event: EdgeEvent,
    hash: u64,
    at: u32,
}

/// What a window counting likers folds.
#[derive(Debug)]
pub(super) struct Likers {
    /// The largest skew of `created_at` over the arrival taken as it is (ms).
    pub(super) max_skew_ms: i64,
    /// The latest event of each (post, user) edge, in the order the window met them: a record
    /// of an edge the window holds already allocates nothing.
    kept: Vec<Kept>,
    /// Where each edge is in `kept`, found by its post and user (hashed by [`Likers::hash`]).
    /// Growing moves these indices, not the events (the table rehashed ~130-byte entries, a
    /// third of a window's fold: BENCHMARKS).
    edges: HashTable<u32>,
    hasher: ahash::RandomState,
    /// Each post's edges in the window, as places in `kept`: what finds a few posts' edges
    /// ([`Likers::edges_of`], the read side's open windows) without looking at the others'.
    by_post: HashMap<SmolStr, PostEdges, ahash::RandomState>,
    /// The ordering time of each event whose first copy here was clamped
    /// ([`edge::ordering_time`]): a later copy orders as the first did, although it arrived
    /// later (only a clamped event's copies can order differently; there are few).
    clamped: HashMap<String, i64, ahash::RandomState>,
}

impl Likers {
    pub(super) fn new(max_skew_ms: i64) -> Likers {
        Likers {
            max_skew_ms,
            kept: Vec::new(),
            edges: HashTable::new(),
            hasher: ahash::RandomState::new(),
            by_post: HashMap::default(),
            clamped: HashMap::default(),
        }
    }

    /// The window's edges of the posts `wanted` names: each post's found by its users, the
    /// other posts' not looked at (a read of a feed page costs its posts' edges, not the
    /// window's). Where those posts hold more than a quarter of the window's edges (a page of
    /// its most liked posts), one pass over the window in its table's order is cheaper than
    /// looking each up, and is what it takes (`cargo bench --bench open_windows`).
    pub(super) fn edges_of<'a>(
        &'a self,
        wanted: &'a HashSet<&str>,
    ) -> Box<dyn Iterator<Item = &'a EdgeEvent> + 'a> {
        let many = wanted
            .iter()
            .filter_map(|p| self.by_post.get(*p))
            .map(|of_post| of_post.edges.len())
            .sum::<usize>();
        if many > self.kept.len() / 4 {
            return Box::new(
                self.kept
                    .iter()
                    .map(|k| &k.event)
                    .filter(move |e| wanted.contains(e.post_id.as_str())),
            );
        }
        Box::new(self.users_edges_of(wanted, |_| true))
    }

    /// The window's edges of the posts `wanted` names and the users `users` says, each looked up
    /// by post and user: only the users' edges are looked up (a viewer's: one a post).
    pub(super) fn users_edges_of<'a>(
        &'a self,
        wanted: &'a HashSet<&str>,
        users: impl Fn(&str) -> bool + Copy + 'a,
    ) -> impl Iterator<Item = &'a EdgeEvent> + 'a {
        wanted
            .iter()
            .filter_map(|p| self.by_post.get(*p))
            .flat_map(move |of_post| {
                of_post
                    .edges
                    .iter()
                    .filter_map(|i| self.kept.get(*i as usize))
                    .map(|k| &k.event)
                    .filter(move |e| users(&e.user_id))
            })
    }

    /// The window's edges of the posts `wanted` names by `user`: each looked up at once.
    pub(super) fn user_edges_of<'a>(
        &'a self,
        wanted: &'a HashSet<&str>,
        user: &'a str,
    ) -> impl Iterator<Item = &'a EdgeEvent> + 'a {
        wanted
            .iter()
            .filter_map(move |p| self.edge(Likers::hash(&self.hasher, p, user), p, user))
    }

    /// How many times the window changed the post's edges (an edge met, or its latest event
    /// or the events it remembers replaced): what was resolved for the post stays true until
    /// this moves.
    pub(super) fn changes_of(&self, post: &str) -> u64 {
        self.by_post.get(post).map_or(0, |p| p.log.len() as u64)
    }

    /// The post's edges changed since its change count ([`Likers::changes_of`]) was `since`,
    /// each once, with its place among the post's edges: every edge of the post for 0.
    pub(super) fn changed_since(&self, post: &str, since: u64) -> Vec<(u32, &EdgeEvent)> {
        let Some(of_post) = self.by_post.get(post) else {
            return Vec::new();
        };
        let since = usize::try_from(since).unwrap_or(usize::MAX);
        let mut at: Vec<u32> = match since {
            0 => (0..of_post.edges.len() as u32).collect(),
            _ => of_post.log.get(since..).unwrap_or_default().to_vec(),
        };
        at.sort_unstable();
        at.dedup();
        at.into_iter()
            .filter_map(|i| {
                let kept = self.kept.get(*of_post.edges.get(i as usize)? as usize)?;
                Some((i, &kept.event))
            })
            .collect()
    }

    /// The edge of (`post`, `user`), whose hash is `hash`.
    fn edge(&self, hash: u64, post: &str, user: &str) -> Option<&EdgeEvent> {
        let kept = &self.kept;
        self.edges
            .find(hash, |i| {
                let e = &kept[*i as usize].event;
                e.post_id == post && e.user_id == user
            })
            .map(|i| &kept[*i as usize].event)
    }

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
    pub(super) fn fold(
        &mut self,
        ev: EventRef<'_>,
        arrival_ms: i64,
        stats: &mut WindowStats,
        posts_met: &mut Vec<SmolStr>,
    ) {
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
        let hash = Likers::hash(&self.hasher, &ev.post_id, &ev.user_id);
        let kept = &mut self.kept;
        let found = self.edges.find(hash, |i| {
            let k = &kept[*i as usize].event;
            *k.post_id == *ev.post_id && *k.user_id == *ev.user_id
        });
        match found
            .map(|i| &mut kept[*i as usize])
            .map(|k| (&mut k.event, k.at))
        {
            Some((kept, at)) if !kept.is_after(at_ms, &ev.event_id) => {
                if (kept.at_ms, kept.event_id.as_str()) != (at_ms, ev.event_id.as_ref()) {
                    // A clamped event it replaces took no effect: the edge remembers it.
                    if kept.clamped && !kept.lost.iter().any(|l| *l == *kept.event_id) {
                        kept.lost.push(kept.event_id.to_string());
                    }
                    kept.liked = liked;
                    kept.at_ms = at_ms;
                    kept.event_id = EventId::from_str(&ev.event_id);
                    kept.clamped = clamped;
                    changed(&mut self.by_post, &ev.post_id, at);
                } else {
                    stats.counted -= 1;
                    stats.duplicates += 1;
                }
            }
            Some((kept, at)) => {
                if clamped && !kept.lost.iter().any(|l| l == ev.event_id.as_ref()) {
                    kept.lost.push(ev.event_id.into_owned());
                    changed(&mut self.by_post, &ev.post_id, at);
                }
            }
            None => {
                let e = EdgeEvent {
                    post_id: SmolStr::new(&*ev.post_id),
                    user_id: SmolStr::new(&*ev.user_id),
                    liked,
                    at_ms,
                    event_id: EventId::from_str(&ev.event_id),
                    clamped,
                    lost: Vec::new(),
                };
                let i = kept.len() as u32;
                let at = match self.by_post.get_mut(e.post_id.as_str()) {
                    Some(of_post) => {
                        let at = of_post.edges.len() as u32;
                        of_post.edges.push(i);
                        of_post.log.push(at);
                        at
                    }
                    None => {
                        let of_post = PostEdges {
                            edges: vec![i],
                            log: vec![0],
                        };
                        posts_met.push(e.post_id.clone());
                        self.by_post.insert(e.post_id.clone(), of_post);
                        0
                    }
                };
                kept.push(Kept { event: e, hash, at });
                self.edges
                    .insert_unique(hash, i, |i| kept[*i as usize].hash);
            }
        }
    }
}

/// Records a change of the post's edge at `at` (the post has edges in the window already).
fn changed(by_post: &mut HashMap<SmolStr, PostEdges, ahash::RandomState>, post: &str, at: u32) {
    if let Some(p) = by_post.get_mut(post) {
        p.log.push(at);
    }
}
