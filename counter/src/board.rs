//! The counter's open windows as the read side sees them: what a worker has read but not yet
//! written, per held shard, for provisional counts.
//!
//! Each held shard keeps its window in a [`ShardWindows`] shared with the worker's board: the
//! window being filled, and the closed one whose writes are under way (it stays on the board until
//! every write is done, so a reader never misses it between the two). A reader asks the worker
//! *first* and the store *second*, and adds a window's delta for a post only where the post's live
//! item shows that window is not applied yet (`summary::pending_applies`): a window that lands in
//! between is counted once, by the store.
//!
//! Counting likers, an open window's change to a post depends on the stored edges it will write
//! over (a like of a user who liked already changes nothing). A board given the store
//! ([`Board::resolving`]) reads those edges when a post is asked about — each edge once per
//! window, strongly consistent — and resolves the window's events against them as its write
//! will (`edge::resolve`). They stay true while the window is open: only this shard's windows
//! write its posts' edges (a post's records are on one shard), one at a time, and the open one
//! writes nothing until it closes. An answer is given only if no window closed while the edges
//! were read (`ShardWindows::closed`); otherwise the open window is left out, as without a store.
//! Since those edges stay true, what each post resolved to is kept, edge by edge, with the
//! window's count of changes to that post's edges (`WindowBuilder::post_changes`): an answer
//! resolves again only the edges the window changed since (`WindowBuilder::post_edges_since`),
//! and looks for edges to read only among them.
//!
//! Of the held shards, an answer asks only those whose windows hold a post asked about, and only
//! about those posts (`crate::holders`); the others say how far their windows reach.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smol_str::SmolStr;
use tally_core::buckets::PostDelta;
use tally_core::edge::{self, EdgeEvent, EdgeState};
use tally_core::ports::{Consistency, CounterStore};
use tally_core::summary::marker;
use tally_core::window::{ClosedWindow, WindowBuilder};

use crate::holders::Holders;

/// Reads of stored edges one answer makes before it gives up the open window (each read is of
/// the edges asked about that the last one did not cover: new records folded meanwhile).
const RESOLVE_ATTEMPTS: usize = 3;

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
    closed: u64,
    /// Likers: the stored edges the open window's events are resolved against (`None`: absent),
    /// read while it was open.
    stored: HashMap<Pair, Option<EdgeState>>,
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
    /// worker's index ([`Board::note_met`]); the number of the shard's latest note; and the
    /// posts of the window being applied (its posts as it met them while open).
    met_cursor: usize,
    last_note: u64,
    applying_posts: Vec<SmolStr>,
}

impl ShardWindows {
    /// Takes the open window to close it: edges read for it are forgotten.
    pub fn close_open(&mut self) -> Option<WindowBuilder> {
        let open = self.open.take()?;
        self.applying_posts = open.posts_met_since(0).to_vec();
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
        self.applying_posts = Vec::new();
    }

    /// A new open window is made: none of its posts is noted yet.
    pub(crate) fn opening(&mut self) {
        self.met_cursor = 0;
    }

    /// The posts the shard's windows hold (some more than once).
    fn posts_held(&self) -> impl Iterator<Item = &SmolStr> {
        let open = self.open.iter().flat_map(|o| o.posts_met_since(0));
        let applying = self.applying.iter().flat_map(|_| &self.applying_posts);
        open.chain(applying)
    }

    /// The marker of the last record the windows hold, or of the checkpoint when they hold none
    /// (`ShardOpen::through`); `shows_open`: whether the answer shows the open window.
    fn through(&self, shows_open: bool) -> Option<String> {
        self.open
            .as_ref()
            .filter(|_| shows_open)
            .and_then(|b| b.end())
            .or_else(|| self.applying.as_ref().and_then(|c| c.end.as_ref()))
            .or_else(|| self.open.as_ref().and_then(|b| b.start_after()))
            .map(marker)
    }

    /// Whether the window being applied has edges still to write.
    fn unwritten(&self) -> bool {
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
    fn unread(&mut self, wanted: &HashSet<&str>) -> (Vec<Pair>, Vec<(SmolStr, u64)>) {
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
    fn read_through(&mut self, posts: Vec<(SmolStr, u64)>) {
        self.read_posts.extend(posts);
    }

    /// The open window's deltas for the wanted posts as its write will make them (likers: if
    /// every edge of theirs in it is read), resolved against the edges `view` holds for this
    /// answer alone, else against `stored` — where only the edges a post changed since its last
    /// answer are resolved again (`resolved_posts`).
    fn resolved(
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
    fn states(
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
        let states = open
            .states_as_written(wanted, asked, stored, window)
            .unwrap_or_default();
        also.split(states)
    }

    /// The (post, user) pairs of the wanted posts' edges in the window being applied while its
    /// edge writes are under way, then in the open window.
    fn unwritten_pairs(&self, wanted: &HashSet<&str>) -> Option<(Arc<ClosedWindow>, Vec<Pair>)> {
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
    /// Their sum, as `edge::deltas` sums a window's transitions (minutes at zero kept).
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

    fn add(&mut self, (before, after): (Option<i64>, Option<i64>), sign: i64) {
        if before == after {
            return;
        }
        if let Some(at) = before {
            self.delta.add(at, -sign);
        }
        if let Some(at) = after {
            self.delta.add(at, sign);
        }
    }

    /// The post's deltas as an answer shows them (`None`: they cancel out).
    fn shown(&self) -> Option<PostDelta> {
        let mut d = self.delta.clone();
        d.by_minute.retain(|_, n| *n != 0);
        (!d.by_minute.is_empty()).then_some(d)
    }
}

/// What a read side asks a worker about besides the posts' deltas.
#[derive(Clone, Copy, Debug, Default)]
pub struct Also<'a> {
    /// Whether this user likes each post once the open windows are written.
    pub viewer: Option<&'a str>,
    /// A likers page: each user after this one (`Some(None)`: every user) whose like or unlike
    /// of the post asked about an open window holds, and whether they like it once written.
    pub likers: Option<Option<&'a str>>,
}

impl Also<'_> {
    fn wants_liker(&self, user: &str) -> bool {
        self.likers
            .is_some_and(|after| after.is_none_or(|a| user > a))
    }

    /// (post, user, liked) states, as the viewer's by post and the likers' by user.
    fn split(
        &self,
        states: Vec<(String, String, bool)>,
    ) -> (BTreeMap<String, bool>, BTreeMap<String, bool>) {
        let (mut viewer, mut likers) = (BTreeMap::new(), BTreeMap::new());
        for (post, user, liked) in states {
            if self.viewer == Some(user.as_str()) {
                viewer.insert(post.clone(), liked);
            }
            if self.wants_liker(&user) {
                likers.insert(user, liked);
            }
        }
        (viewer, likers)
    }
}

/// Stored edges read for an answer, by (post, user) (`None`: absent).
type Edges = HashMap<Pair, Option<EdgeState>>;

/// A window being applied while its edge writes are under way, resolved for one answer against
/// edges read for it: its deltas, the viewer's and likers' states it leaves, and the edges as
/// it leaves them (what the open window writes over).
struct Unwritten {
    deltas: Vec<(String, PostDelta)>,
    viewer: BTreeMap<String, bool>,
    likers: BTreeMap<String, bool>,
    view: Edges,
}

impl Unwritten {
    /// Resolves `applying` (its wanted posts' edges) against `read` by the rule every store
    /// writes by: a write of its that landed is its own (`Resolved::Mine`), one still to come
    /// is what the write will do.
    fn resolve(
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

/// A window's deltas for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenWindow {
    /// The marker of the checkpoint the window follows (`None`: the shard's first window).
    pub after: Option<String>,
    /// Net change per post asked about that the window holds, by the start of the minute (ms)
    /// the events were created in.
    pub posts: BTreeMap<String, BTreeMap<i64, i64>>,
    /// Likers, when a viewer was asked: whether the viewer likes each post once the window is
    /// written, for the posts where the window holds an event of the viewer's (the same view as
    /// `posts`: a post's delta and the viewer's state there come from the same edge reads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub viewer: BTreeMap<String, bool>,
    /// Likers, when a likers page was asked: each user (after the page's start) whose like or
    /// unlike of the post the window holds, and whether they like it once it is written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub likers: BTreeMap<String, bool>,
}

/// A shard's windows, for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardOpen {
    /// The shard.
    pub shard_id: String,
    /// Its closed window being applied, if any, then its open one (for the posts asked about).
    pub windows: Vec<OpenWindow>,
    /// The marker of the last record the windows hold, or of the checkpoint when they hold none:
    /// every record of the shard after the checkpoint and up to it is in them (`None`: nothing
    /// read and nothing applied). What a read side compares answers by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
}

/// Every held shard's windows of one worker.
#[derive(Default)]
pub struct Board {
    shards: Mutex<HashMap<String, Arc<Mutex<ShardWindows>>>>,
    /// Where likers' open windows are resolved (`None`: they are shown once their edges are
    /// written, as the window being applied).
    store: Option<Arc<dyn CounterStore>>,
    /// Read units spent reading edges for open windows.
    read_units: AtomicU64,
    /// How many shards are on the board (read as each record is folded, so not under the lock).
    held: AtomicUsize,
    /// Which shards' windows hold each post: an answer asks only those about its posts.
    holders: Holders,
}

/// Locks a shard's windows; a panic elsewhere while one was held leaves them as they were.
pub fn lock(w: &Mutex<ShardWindows>) -> MutexGuard<'_, ShardWindows> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Board {
    /// A board that resolves likers' open windows against `store`'s edges.
    pub fn resolving(store: Arc<dyn CounterStore>) -> Board {
        Board {
            store: Some(store),
            ..Board::default()
        }
    }

    /// Whether open windows are shown whatever is counted (counting likers, only a resolving
    /// board shows them).
    pub fn shows_open_windows(&self) -> bool {
        self.store.is_some()
    }

    /// Read units spent reading stored edges for open windows.
    pub fn read_units(&self) -> u64 {
        self.read_units.load(Ordering::Relaxed)
    }

    /// The windows of a shard this worker has just started to hold (a fresh, empty entry).
    pub fn hold(&self, shard_id: &str) -> Arc<Mutex<ShardWindows>> {
        let w = Arc::new(Mutex::new(ShardWindows::default()));
        let mut shards = self.entries();
        shards.insert(shard_id.to_owned(), w.clone());
        self.held.store(shards.len(), Ordering::Relaxed);
        w
    }

    /// How many shards this worker holds (the windows' memory is shared among them:
    /// `CounterConfig::window_share`).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes a shard off the board, if `w` is still its entry (a later hold of the same shard
    /// keeps its own).
    pub fn release(&self, shard_id: &str, w: &Arc<Mutex<ShardWindows>>) {
        let mut shards = self.entries();
        if shards.get(shard_id).is_some_and(|e| Arc::ptr_eq(e, w)) {
            shards.remove(shard_id);
            self.held.store(shards.len(), Ordering::Relaxed);
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Arc<Mutex<ShardWindows>>>> {
        self.shards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What each held shard has read but not written for these posts: shards in id order, each
    /// with its closed window (if its writes are under way) and then its open one.
    /// With a viewer, each window also says whether the viewer likes each post once it is
    /// written, where it holds an event of the viewer's ([`OpenWindow::viewer`]); with a likers
    /// page, the users whose state it changes ([`OpenWindow::likers`]).
    pub async fn pending(&self, posts: &[String], also: Also<'_>) -> Vec<ShardOpen> {
        let held: Vec<(String, Arc<Mutex<ShardWindows>>)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let wanted: HashSet<&str> = posts.iter().map(String::as_str).collect();
        // The shards whose windows hold a post asked about are asked; the others answer how far
        // they reach and nothing else (`Holders`), unless their windows met a post since.
        let (noted, mut holding) = self.holders.of(wanted.iter().copied());
        let mut out = Vec::new();
        let mut pages = Vec::new();
        for (shard_id, w) in held {
            let page = Page {
                all: &wanted,
                noted,
                held: holding.remove(shard_id.as_str()).unwrap_or_default(),
            };
            if page.held.is_empty() {
                let windows = lock(&w);
                if page.narrow(&windows) {
                    out.push(ShardOpen {
                        through: windows.through(true),
                        shard_id,
                        windows: Vec::new(),
                    });
                    continue;
                }
            }
            pages.push((shard_id, w, page));
        }
        let asked = pages
            .iter()
            .map(|(shard_id, w, page)| self.shard_pending(shard_id, w, page, also));
        out.extend(
            futures_util::future::join_all(asked)
                .await
                .into_iter()
                .flatten(),
        );
        out.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        out
    }

    /// Notes in the worker's index the posts `shard_id`'s open window met since it was last
    /// noted (called as each record is folded, under the shard's lock).
    pub(crate) fn note_met(&self, shard_id: &str, w: &mut ShardWindows) {
        let Some(open) = &w.open else {
            return;
        };
        let new = open.posts_met_since(w.met_cursor);
        if new.is_empty() {
            return;
        }
        let n = new.len();
        w.last_note = self.holders.met(shard_id, new);
        w.met_cursor += n;
    }

    /// Tidies the worker's index of which shards hold each post when enough was noted since
    /// the last tidy (`Holders`): what the held shards' windows no longer hold is forgotten.
    /// Called with no shard's lock held.
    pub(crate) fn tidy(&self) {
        let Some(before) = self.holders.tidy_due() else {
            return;
        };
        let held: Vec<(String, Arc<Mutex<ShardWindows>>)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut live = HashSet::new();
        for (shard_id, w) in held {
            let shard = SmolStr::new(&shard_id);
            for post in lock(&w).posts_held() {
                live.insert((post.clone(), shard.clone()));
            }
        }
        self.holders.forget(before, &live);
    }

    /// One shard's answer: likers' open window resolved first (when this board can), then the
    /// windows as they stand. `None`: a window whose edge writes are under way could not be
    /// resolved for this answer (windows closed under each of its reads, or a read failed) — the
    /// shard is left out, and the read side names it unanswered and keeps what it last showed,
    /// rather than be shown without that window's likes (a count taken back).
    async fn shard_pending(
        &self,
        shard_id: &str,
        w: &Mutex<ShardWindows>,
        page: &Page<'_>,
        also: Also<'_>,
    ) -> Option<ShardOpen> {
        for _ in 0..RESOLVE_ATTEMPTS {
            let (read_narrow, fresh) = match &self.store {
                Some(store) => self.read_edges(store.as_ref(), w, page).await,
                None => (page.narrow(&lock(w)), None),
            };
            let mut w = lock(w);
            if page.narrow(&w) != read_narrow {
                // The window met a post since its edges were read for the page's posts it held
                // then: read again for every post asked about.
                continue;
            }
            let wanted = page.wanted(read_narrow);
            // A window whose edge writes were under way, resolved on edges read for this answer —
            // as it was when they were read: its writes may have ended since (its deltas are the
            // same).
            let unwritten = fresh
                .filter(|(closed, ..)| *closed == w.closed)
                .and_then(|(_, a, read)| Unwritten::resolve(shard_id, &a, wanted, &also, read));
            // A window closed after the reads began: read again for it.
            if self.store.is_some() && unwritten.is_none() && w.unwritten() {
                continue;
            }
            return Some(Self::answer(
                &mut w,
                shard_id.to_owned(),
                wanted,
                &also,
                unwritten,
            ));
        }
        None
    }

    /// A shard's answer from its windows as they stand, with a window being written resolved
    /// (`unwritten`) or, on a board that does not resolve, shown once its edges are written.
    fn answer(
        w: &mut ShardWindows,
        shard_id: String,
        wanted: &HashSet<&str>,
        also: &Also<'_>,
        unwritten: Option<Unwritten>,
    ) -> ShardOpen {
        // An open window is shown only once resolved (likers: its edges read).
        let has_open = w.open.as_ref().is_some_and(|b| !b.is_empty());
        let resolved = has_open.then(|| w.resolved(wanted, unwritten.as_ref().map(|u| &u.view)));
        let w = &*w;
        let view = unwritten.as_ref().map_or(&w.stored, |u| &u.view);
        let open = w.open.as_ref().filter(|b| !b.is_empty());
        let shows_open = !matches!(resolved, Some(None));
        let through = w.through(shows_open);
        let mut windows = Vec::new();
        if let Some(c) = &w.applying {
            // Its deltas once its edges are written (the stored edges then hold its states);
            // while they are being written, as resolved for this answer.
            let (deltas, viewer, likers) = match &unwritten {
                Some(u) => (&u.deltas, u.viewer.clone(), u.likers.clone()),
                None => (&c.posts, BTreeMap::new(), BTreeMap::new()),
            };
            windows.push(OpenWindow {
                after: c.start_after.as_ref().map(marker),
                posts: pick(wanted, |p| {
                    deltas
                        .binary_search_by(|(id, _)| id.as_str().cmp(p))
                        .ok()
                        .map(|i| &deltas[i].1)
                }),
                viewer,
                likers,
            });
            // Its held removals, once its other counts are written: a part of their own, after
            // the window's marker (its items marked with it hold all but these).
            if unwritten.is_none() && !c.held.posts.is_empty() {
                let held = &c.held.posts;
                windows.push(OpenWindow {
                    after: c.end.as_ref().map(marker),
                    posts: pick(wanted, |p| {
                        held.binary_search_by(|(id, _)| id.as_str().cmp(p))
                            .ok()
                            .map(|i| &held[i].1)
                    }),
                    viewer: BTreeMap::new(),
                    likers: BTreeMap::new(),
                });
            }
        }
        if let Some(b) = open.filter(|_| shows_open) {
            let after = b.start_after().map(marker);
            let deltas = resolved.flatten().unwrap_or_default();
            let posts = pick(wanted, |p| {
                deltas
                    .binary_search_by(|(id, _)| id.as_str().cmp(p))
                    .ok()
                    .map(|i| &deltas[i].1)
            });
            let (viewer, likers) = w.states(wanted, also, view);
            windows.push(OpenWindow {
                after,
                posts,
                viewer,
                likers,
            });
        }
        windows.retain(|w| !w.posts.is_empty() || !w.viewer.is_empty() || !w.likers.is_empty());
        ShardOpen {
            shard_id,
            windows,
            through,
        }
    }

    /// Likers: reads the stored edges the open window's events for the wanted posts will write
    /// over, keeping them only if no window closed meanwhile. While a closed window's edge
    /// writes are under way, reads its edges and the open window's afresh for this answer alone
    /// (returned, with the close count and the window as they were read): a cached read would miss what its
    /// writes still to land do. A failed read leaves the windows unresolved (the answer leaves
    /// them out).
    async fn read_edges(
        &self,
        store: &dyn CounterStore,
        w: &Mutex<ShardWindows>,
        page: &Page<'_>,
    ) -> (bool, Option<(u64, Arc<ClosedWindow>, Edges)>) {
        let mut narrow = false;
        for _ in 0..RESOLVE_ATTEMPTS {
            let (closed, (unread, after_read), unwritten) = {
                let mut w = lock(w);
                narrow = page.narrow(&w);
                let wanted = page.wanted(narrow);
                (w.closed, w.unread(wanted), w.unwritten_pairs(wanted))
            };
            let pairs = unwritten.as_ref().map_or(&unread, |(_, p)| p);
            if pairs.is_empty() {
                // Nothing to read: a window being written holds none of the posts asked about.
                return (
                    narrow,
                    unwritten.map(|(applying, _)| (closed, applying, Edges::new())),
                );
            }
            // The store's port reads owned ids: copied once per read, not per lookup.
            let asked: Vec<(String, String)> = pairs
                .iter()
                .map(|(p, u)| (p.to_string(), u.to_string()))
                .collect();
            let (states, units) = match store.edges(&asked, Consistency::Strong).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(error = %e, "reading an open window's edges failed: it is left out of this answer");
                    return (narrow, None);
                }
            };
            self.read_units.fetch_add(units, Ordering::Relaxed);
            if let Some((applying, pairs)) = unwritten {
                let read = pairs.into_iter().zip(states).collect();
                return (narrow, Some((closed, applying, read)));
            }
            let mut w = lock(w);
            if w.closed != closed || w.unwritten() {
                // The window closed while its edges were read: read its own now.
                continue;
            }
            w.stored.extend(unread.into_iter().zip(states));
            w.read_through(after_read);
        }
        (narrow, None)
    }
}

/// The deltas of the posts asked about that `delta` finds, by post.
fn pick<'a>(
    posts: &HashSet<&str>,
    delta: impl Fn(&str) -> Option<&'a PostDelta>,
) -> BTreeMap<String, BTreeMap<i64, i64>> {
    posts
        .iter()
        .filter_map(|p| Some(((*p).to_owned(), delta(p)?.by_minute.clone())))
        .collect()
}

/// The posts one shard is asked about: the page's posts the worker's index notes its windows
/// hold (`held`), while no note of the shard came after the index was read (`noted`); else
/// every post of the page.
struct Page<'a> {
    all: &'a HashSet<&'a str>,
    noted: u64,
    held: HashSet<&'a str>,
}

impl<'a> Page<'a> {
    /// Whether the shard's windows hold no post of the page but those in `held`: none of its
    /// notes came after the index was read.
    fn narrow(&self, w: &ShardWindows) -> bool {
        w.last_note <= self.noted
    }

    /// The posts to ask the shard about (`narrow`: as [`Page::narrow`] said).
    fn wanted(&self, narrow: bool) -> &HashSet<&'a str> {
        if narrow {
            &self.held
        } else {
            self.all
        }
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

    /// The board counts the shards it holds: a shard held again is one shard, and a release by
    /// an earlier hold of a shard held again does not take it off.
    #[test]
    fn the_board_counts_the_shards_it_holds() {
        let board = Board::default();
        let a = board.hold("a");
        let b = board.hold("b");
        assert_eq!(board.held(), 2);
        let a_again = board.hold("a");
        assert_eq!(board.held(), 2);
        board.release("a", &a);
        assert_eq!(board.held(), 2, "a's later hold keeps it");
        board.release("a", &a_again);
        board.release("b", &b);
        assert_eq!(board.held(), 0);
    }
}
