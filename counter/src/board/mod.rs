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
//! about those posts (`crate::holders`). The others say how far their windows reach
//! ([`Board::pending`]), or, asked as the read side asks ([`Listed::Holding`]: the digest of the
//! shards it lists this worker as holding, and it holds just those), are not listed at all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smol_str::SmolStr;
use tally_core::buckets::PostDelta;
use tally_core::ports::{Consistency, CounterStore};
use tally_core::summary::marker;
use tally_core::window::ClosedWindow;

use crate::holders::Holders;

mod answer;
mod windows;

pub use answer::{shards_digest, Also, OpenWindow, ShardOpen};
pub use windows::ShardWindows;
use windows::{Edges, Unwritten};

/// Reads of stored edges one answer makes before it gives up the open window (each read is of
/// the edges asked about that the last one did not cover: new records folded meanwhile).
const RESOLVE_ATTEMPTS: usize = 3;

/// Every held shard's windows of one worker.
#[derive(Default)]
pub struct Board {
    shards: Mutex<Held>,
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

/// The shards on a board, and the digest of their ids ([`shards_digest`]).
#[derive(Default)]
struct Held {
    windows: HashMap<String, Arc<Mutex<ShardWindows>>>,
    digest: u64,
}

/// Which held shards an answer lists.
#[derive(Clone, Copy, Debug, Default)]
pub enum Listed<'a> {
    /// Every held shard.
    #[default]
    Every,
    /// If the worker holds exactly the shards whose digest ([`shards_digest`]) is `held` (the
    /// ones the read side's lease listing gives it): only those whose windows hold a post asked
    /// about, and those `named` (whose earlier answers the read side remembers) — every other
    /// holds nothing of the posts. Else every held shard.
    Holding {
        /// The digest of the shards the read side lists the worker as holding.
        held: u64,
        /// Shards to list whatever their windows hold.
        named: &'a HashSet<String>,
    },
}

/// A worker's answer: its listed shards' windows for the posts asked about.
#[derive(Debug, Default)]
pub struct Answered {
    /// The shards listed, in id order.
    pub shards: Vec<ShardOpen>,
    /// Whether only the shards that hold a post asked about (and those named) are listed
    /// ([`Listed::Holding`], its digest matched): every other shard the worker holds holds
    /// nothing of them.
    pub holding_only: bool,
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
        if shards
            .windows
            .insert(shard_id.to_owned(), w.clone())
            .is_none()
        {
            shards.digest ^= shards_digest([shard_id]);
        }
        self.held.store(shards.windows.len(), Ordering::Relaxed);
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
        if shards
            .windows
            .get(shard_id)
            .is_some_and(|e| Arc::ptr_eq(e, w))
        {
            shards.windows.remove(shard_id);
            shards.digest ^= shards_digest([shard_id]);
            self.held.store(shards.windows.len(), Ordering::Relaxed);
        }
    }

    fn entries(&self) -> MutexGuard<'_, Held> {
        self.shards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What each held shard has read but not written for these posts: shards in id order, each
    /// with its closed window (if its writes are under way) and then its open one.
    /// With a viewer, each window also says whether the viewer likes each post once it is
    /// written, where it holds an event of the viewer's ([`OpenWindow::viewer`]); with a likers
    /// page, the users whose state it changes ([`OpenWindow::likers`]).
    pub async fn pending(&self, posts: &[String], also: Also<'_>) -> Vec<ShardOpen> {
        self.answer(posts, also, Listed::Every).await.shards
    }

    /// What the held shards `listed` names have read but not written for these posts (as
    /// [`Board::pending`]): with [`Listed::Holding`] and the worker's shards as the read side
    /// listed them, only the shards whose windows hold a post asked about, and those named — so
    /// that an answer's work follows the windows that hold the page, not the held shards.
    pub async fn answer(&self, posts: &[String], also: Also<'_>, listed: Listed<'_>) -> Answered {
        let wanted: HashSet<&str> = posts.iter().map(String::as_str).collect();
        // The shards whose windows hold a post asked about are asked; the others answer how far
        // they reach and nothing else (`Holders`), unless their windows met a post since.
        let (noted, mut holding) = self.holders.of(wanted.iter().copied());
        let (held, holding_only) = {
            let shards = self.entries();
            let entry = |id: &str| Some((id.to_owned(), shards.windows.get(id)?.clone()));
            match listed {
                Listed::Holding { held, named } if held == shards.digest => {
                    // A shard whose windows met a post of the page after the index was read
                    // answers as it was when read: it is not listed, so nothing is said of how
                    // far it reaches.
                    let ids: HashSet<&str> = holding
                        .keys()
                        .map(SmolStr::as_str)
                        .chain(named.iter().map(String::as_str))
                        .collect();
                    (ids.into_iter().filter_map(entry).collect(), true)
                }
                _ => {
                    let all = shards.windows.iter();
                    (
                        all.map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>(),
                        false,
                    )
                }
            }
        };
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
        Answered {
            shards: out,
            holding_only,
        }
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
            .windows
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut live = HashSet::new();
        for (shard_id, w) in held {
            let shard = SmolStr::new(&shard_id);
            for post in lock(&w).posts_held() {
                live.insert((SmolStr::new(post), shard.clone()));
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
            return Some(Self::shard_answer(
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
    fn shard_answer(
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
