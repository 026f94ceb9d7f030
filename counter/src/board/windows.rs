//! One held shard's windows as the board keeps them: the open window, the closed one whose
//! writes are under way, and — counting likers — the stored edges read for the open one and
//! what each post asked about resolved to, edge by edge, so that an answer resolves again only
//! what changed since the last.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use smol_str::SmolStr;
use tally_core::buckets::PostDelta;
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::summary::marker;
use tally_core::window::{ClosedWindow, Users, WindowBuilder};

use super::answer::Also;

/// An edge: (post, user) — the window's own ids, shared (an answer's lookups allocate nothing).
type Pair = (SmolStr, SmolStr);

/// The edge an event is of.
fn pair(e: &EdgeEvent) -> Pair {
    (e.post_id.clone(), e.user_id.clone())
}

/// One shard's windows that are read but not written.
#[derive(Default)]
pub struct ShardWindows {
    /// The window being filled (taken only by [`ShardWindows::close_open`], which keeps
    /// `closed` true).
    pub(crate) open: Option<WindowBuilder>,
    /// A closed window whose writes are under way. While it has edges to write (likers: its
    /// deltas not known yet) an answer resolves it against the stored edges itself, and the open
    /// window against the edges as it leaves them, with reads kept for that answer only.
    pub(crate) applying: Option<Arc<ClosedWindow>>,
    /// Windows closed since the shard was held: edges read while this did not move are the
    /// ones the open window will write over.
    pub(super) closed: u64,
    /// Likers: the stored edges the open window's events are resolved against (`None`: absent),
    /// read while it was open.
    pub(super) stored: HashMap<Pair, Option<EdgeState>>,
    /// The id of the pending window the open one rebuilds, whose own edges it may meet
    /// (`edge::window_id`; none for a new window, which has written nothing).
    rebuilds: Option<String>,
    /// Likers: each post's deltas as the open window's write will make them, resolved against
    /// `stored` edge by edge, with the post's change count then (`WindowBuilder::post_changes`).
    /// What they were resolved from stays as it was until the window changes one of the post's
    /// edges (the edges read stay true while it is open), so an answer resolves again only the
    /// edges changed since: a page of the most liked posts costs its changes, not every edge of
    /// theirs, for each answer.
    resolved_posts: HashMap<SmolStr, PostResolved>,
    /// Likers: each post's change count when every edge of its in the open window was found in
    /// `stored`: an answer looks for edges to read only in posts changed since. Both maps hold
    /// only posts the open window holds.
    read_posts: HashMap<SmolStr, u64>,
    /// How many of the open window's posts (`WindowBuilder::posts_met_since`) are noted in the
    /// worker's index (`Board::note_met`), and the number of the shard's latest note.
    pub(super) met_cursor: usize,
    pub(super) last_note: u64,
}

impl ShardWindows {
    /// Takes the open window to close it: edges read for it are forgotten.
    pub fn close_open(&mut self) -> Option<WindowBuilder> {
        let open = self.open.take()?;
        self.closed += 1;
        self.stored.clear();
        self.resolved_posts.clear();
        self.read_posts.clear();
        self.rebuilds = None;
        Some(open)
    }

    /// The window being applied is done.
    pub(crate) fn applied(&mut self) {
        self.applying = None;
    }

    /// A new open window is made: none of its posts is noted yet.
    pub(crate) fn opening(&mut self) {
        self.met_cursor = 0;
    }

    /// The posts the shard's windows hold (some more than once).
    pub(super) fn posts_held(&self) -> impl Iterator<Item = &str> {
        let open = self.open.iter().flat_map(|o| o.posts_met_since(0));
        let applying = self.applying.iter().flat_map(|c| c.posts_held());
        open.map(SmolStr::as_str).chain(applying)
    }

    /// The marker of the last record the windows hold, or of the checkpoint when they hold none
    /// (`ShardOpen::through`); `shows_open`: whether the answer shows the open window.
    pub(super) fn through(&self, shows_open: bool) -> Option<String> {
        self.open
            .as_ref()
            .filter(|_| shows_open)
            .and_then(|b| b.end())
            .or_else(|| self.applying.as_ref().and_then(|c| c.end.as_ref()))
            .or_else(|| self.open.as_ref().and_then(|b| b.start_after()))
            .map(marker)
    }

    /// Whether the window being applied has edges still to write.
    pub(super) fn unwritten(&self) -> bool {
        self.applying
            .as_ref()
            .is_some_and(|a| a.has_edges_to_write())
    }

    /// Marks the open window as the rebuild of the pending window with this id.
    pub fn rebuilding(&mut self, window_id: String) {
        self.rebuilds = Some(window_id);
        self.resolved_posts.clear();
    }

    /// Likers: the open window's edges of the wanted posts whose stored state is not read yet,
    /// looked for only in posts changed since all theirs were read; and those posts' change
    /// counts, for [`ShardWindows::read_through`] once the edges are read. A post found read
    /// through is marked so here.
    pub(super) fn unread(&mut self, wanted: &HashSet<&str>) -> (Vec<Pair>, Vec<(SmolStr, u64)>) {
        let Some(open) = self.open.as_ref() else {
            return Default::default();
        };
        // Posts the window holds (no edge of the others is in it), changed since last read.
        let changed: HashSet<&str> = wanted
            .iter()
            .copied()
            .filter(|p| {
                let now = open.post_changes(p);
                now != Some(0) && now != self.read_posts.get(*p).copied()
            })
            .collect();
        // Of those, the edges changed since all the post's were read: the others are read.
        let pairs: Vec<Pair> = changed
            .iter()
            .flat_map(|p| {
                let since = self.read_posts.get(*p).copied().unwrap_or(0);
                open.post_edges_since(p, since)
            })
            .map(|(_, e)| pair(e))
            .filter(|k| !self.stored.contains_key(k))
            .collect();
        let reading: HashSet<&str> = pairs.iter().map(|(p, _)| p.as_str()).collect();
        let mut after_read = Vec::new();
        for p in changed {
            // Only posts the window holds are remembered: what is kept is bounded by the
            // window, however many posts are asked about.
            let Some(changes) = open.post_changes(p) else {
                continue;
            };
            if reading.contains(p) {
                after_read.push((SmolStr::new(p), changes));
            } else {
                self.read_posts.insert(SmolStr::new(p), changes);
            }
        }
        (pairs, after_read)
    }

    /// Marks posts whose every edge in the open window (as their change counts were) is now in
    /// `stored`.
    pub(super) fn read_through(&mut self, posts: Vec<(SmolStr, u64)>) {
        self.read_posts.extend(posts);
    }

    /// The open window's deltas for the wanted posts as its write will make them (likers: if
    /// every edge of theirs in it is read), resolved against the edges `view` holds for this
    /// answer alone, else against `stored` — where only the edges a post changed since its last
    /// answer are resolved again (`resolved_posts`).
    pub(super) fn resolved(
        &mut self,
        wanted: &HashSet<&str>,
        view: Option<&Edges>,
    ) -> Option<Vec<(String, PostDelta)>> {
        let open = self.open.as_ref()?;
        let window = self.rebuilds.as_deref().unwrap_or_default();
        if let Some(view) = view {
            let stored = |e: &EdgeEvent| view.get(&pair(e)).map(Option::as_ref);
            return open.deltas_as_written(wanted, stored, window);
        }
        let mut out = Vec::new();
        let mut events = HashSet::new();
        for p in wanted {
            let now = match open.post_changes(p) {
                // Counting events: the window's own deltas.
                None => {
                    events.insert(*p);
                    continue;
                }
                // Counting likers, a post the window holds no edge of has no delta in it.
                Some(0) => continue,
                Some(now) => now,
            };
            let post = self.resolved_posts.entry(SmolStr::new(p)).or_default();
            if post.changes != now {
                for (at, e) in open.post_edges_since(p, post.changes) {
                    // An edge not read yet: the window is not shown (as its write is not known).
                    let old = self.stored.get(&pair(e))?;
                    let t = edge::resolve(old.as_ref(), e, window).transition();
                    post.set(at, t.map(|t| (t.before, t.after)));
                }
                post.changes = now;
            }
            out.extend(post.shown().map(|d| ((*p).to_owned(), d)));
        }
        if !events.is_empty() {
            out.extend(open.deltas_as_written(&events, |_| None, window)?);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Some(out)
    }

    /// Likers: whether each user `also` asks about likes each wanted post once the open window
    /// is written, where it holds an event of that user's — from the same edge reads as
    /// [`ShardWindows::resolved`]: the viewer's state by post, and the likers' by user.
    pub(super) fn states(
        &self,
        wanted: &HashSet<&str>,
        also: &Also<'_>,
        view: &Edges,
    ) -> (BTreeMap<String, bool>, BTreeMap<String, bool>) {
        let Some(open) = self.open.as_ref() else {
            return Default::default();
        };
        if also.viewer.is_none() && also.likers.is_none() {
            return Default::default();
        }
        let window = self.rebuilds.as_deref().unwrap_or_default();
        let stored = |e: &EdgeEvent| view.get(&pair(e)).map(Option::as_ref);
        let asked = |u: &str| also.viewer == Some(u) || also.wants_liker(u);
        let users = match (also.viewer, also.likers) {
            (Some(viewer), None) => Users::One(viewer),
            _ => Users::Where(&asked),
        };
        let states = open
            .states_as_written(wanted, users, stored, window)
            .unwrap_or_default();
        also.split(states)
    }

    /// The (post, user) pairs of the wanted posts' edges in the window being applied while its
    /// edge writes are under way, then in the open window.
    pub(super) fn unwritten_pairs(
        &self,
        wanted: &HashSet<&str>,
    ) -> Option<(Arc<ClosedWindow>, Vec<Pair>)> {
        let applying = self.applying.clone().filter(|a| a.has_edges_to_write())?;
        let mut pairs: Vec<Pair> = applying.edges_of(wanted).map(pair).collect();
        if let Some(open) = &self.open {
            pairs.extend(open.edges_of(wanted).map(pair));
        }
        pairs.sort();
        pairs.dedup();
        Some((applying, pairs))
    }
}

/// One post's deltas in the open window as its write will make them, kept edge by edge
/// (`ShardWindows::resolved_posts`): a change to some of its edges is resolved for those alone.
#[derive(Default)]
struct PostResolved {
    /// The post's change count they were resolved at (`WindowBuilder::post_changes`).
    changes: u64,
    /// Each edge's transition (the like it replaces, the like it is: when each was made), by
    /// its place among the post's edges in the window (`None`: it changes nothing).
    edges: Vec<Option<(Option<i64>, Option<i64>)>>,
    /// Their sum (minutes at zero kept).
    delta: PostDelta,
}

impl PostResolved {
    /// The edge at `at` now makes transition `t`.
    fn set(&mut self, at: u32, t: Option<(Option<i64>, Option<i64>)>) {
        let at = at as usize;
        if self.edges.len() <= at {
            self.edges.resize(at + 1, None);
        }
        if let Some(old) = self.edges[at].take() {
            self.add(old, -1);
        }
        if let Some(new) = t {
            self.add(new, 1);
        }
        self.edges[at] = t;
    }

    /// Adds (`sign` 1) or takes away (-1) what an edge's transition does to the post's count
    /// (`edge::moves`, as `edge::deltas` sums a window's).
    fn add(&mut self, (before, after): (Option<i64>, Option<i64>), sign: i64) {
        for (at, n) in edge::moves(before, after) {
            self.delta.add(at, sign * n);
        }
    }

    /// The post's deltas as an answer shows them (`None`: they cancel out).
    fn shown(&self) -> Option<PostDelta> {
        let mut d = self.delta.clone();
        d.by_minute.retain(|_, n| *n != 0);
        (!d.by_minute.is_empty()).then_some(d)
    }
}

/// Stored edges read for an answer, by (post, user) (`None`: absent).
pub(super) type Edges = HashMap<Pair, Option<EdgeState>>;

/// A window being applied while its edge writes are under way, resolved for one answer against
/// edges read for it: its deltas, the viewer's and likers' states it leaves, and the edges as
/// it leaves them (what the open window writes over).
pub(super) struct Unwritten {
    pub(super) deltas: Vec<(String, PostDelta)>,
    pub(super) viewer: BTreeMap<String, bool>,
    pub(super) likers: BTreeMap<String, bool>,
    pub(super) view: Edges,
}

impl Unwritten {
    /// Resolves `applying` (its wanted posts' edges) against `read` by the rule every store
    /// writes by: a write of its that landed is its own (`Resolved::Mine`), one still to come
    /// is what the write will do.
    pub(super) fn resolve(
        shard_id: &str,
        applying: &ClosedWindow,
        wanted: &HashSet<&str>,
        also: &Also<'_>,
        mut read: Edges,
    ) -> Option<Unwritten> {
        let window = edge::window_id(shard_id, &marker(applying.end.as_ref()?));
        let mut transitions = Vec::new();
        let mut states = Vec::new();
        for e in applying.edges_of(wanted) {
            let key = pair(e);
            let old = read.get(&key)?.clone();
            let resolved = edge::resolve(old.as_ref(), e, &window);
            let after = match &resolved {
                edge::Resolved::Writes(_) => Some(edge::written_state(e, &window, old.as_ref())),
                _ => old,
            };
            if also.viewer == Some(e.user_id.as_str()) || also.wants_liker(&e.user_id) {
                let liked = after.as_ref().is_some_and(|s| s.liked);
                states.push((e.post_id.to_string(), e.user_id.to_string(), liked));
            }
            transitions.extend(resolved.transition());
            read.insert(key, after);
        }
        let (viewer, likers) = also.split(states);
        Some(Unwritten {
            deltas: edge::deltas(&transitions).0,
            viewer,
            likers,
            view: read,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tally_core::dedup::Dedup;
    use tally_core::ports::StreamRecord;
    use tally_core::seq::SeqNo;

    const POSTS: usize = 3;
    const USERS: usize = 6;
    const T0: i64 = 1_796_021_040_000;

    /// A like or unlike: (post, user, like?, created offset (s), arrival skew (s)).
    type Act = (usize, usize, bool, i64, i64);

    fn record(i: usize, (post, user, like, at, skew): Act) -> StreamRecord {
        let created = T0 + at * 1_000;
        let data = format!(
            r#"{{"event_id":"e{i}","post_id":"p{post}","user_id":"u{user}","action":"{}","created_at":{created}}}"#,
            if like { "like" } else { "unlike" }
        );
        StreamRecord {
            seq: SeqNo::parse(&(i + 1).to_string()).unwrap(),
            arrival_ms: created + skew * 1_000,
            partition_key: format!("p{post}"),
            data: data.into_bytes(),
        }
    }

    proptest! {
        /// An answer resolves a post again only for the edges the open window changed since it
        /// last did (`PostResolved`): after every record folded — a like, an unlike, a copy, a
        /// record clamped by its skew — each post's deltas are those of every edge of it
        /// resolved again (`WindowBuilder::deltas_as_written`), over stored edges some of which
        /// are likes already.
        #[test]
        fn an_answer_resolving_only_what_changed_is_every_edge_resolved(
            stored in proptest::collection::vec(proptest::option::of((any::<bool>(), 0i64..600)), POSTS * USERS),
            acts in proptest::collection::vec((0..POSTS, 0..USERS, any::<bool>(), 0i64..600, 0i64..400), 1..60),
            copies in proptest::collection::vec(any::<bool>(), 60),
        ) {
            let mut w = ShardWindows {
                open: Some(WindowBuilder::new(None, 0).likers(120_000)),
                ..ShardWindows::default()
            };
            for (k, s) in stored.iter().enumerate() {
                let key = (SmolStr::new(format!("p{}", k / USERS)), SmolStr::new(format!("u{}", k % USERS)));
                let state = s.map(|(liked, at)| EdgeState {
                    liked,
                    at_ms: T0 + at * 1_000,
                    event_id: format!("s{k}"),
                    writes: Vec::new(),
                    lost: Vec::new(),
                    dropped: None,
                });
                w.stored.insert(key, state);
            }
            let names: Vec<String> = (0..POSTS).map(|p| format!("p{p}")).collect();
            let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
            let mut dedup = Dedup::new(600_000);
            for (i, act) in acts.iter().enumerate() {
                let r = record(i, *act);
                w.open.as_mut().unwrap().push("s", &r, &mut dedup);
                if copies[i] {
                    // A producer's retry: the same record again.
                    w.open.as_mut().unwrap().push("s", &r, &mut dedup);
                }
                let got = w.resolved(&wanted, None).expect("every edge is read");
                let open = w.open.as_ref().unwrap();
                let stored = |e: &EdgeEvent| w.stored.get(&pair(e)).map(Option::as_ref);
                let want = open.deltas_as_written(&wanted, stored, "").unwrap();
                prop_assert_eq!(got, want, "after record {}", i);
            }
        }
    }
}
