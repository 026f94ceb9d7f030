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
//! A window's deltas are known as it folds — counting events, each event's; counting likers, the
//! second stage's windows over the edges' change log, each change's (the first stage's windows
//! write edges and count nothing: their workers show no window) — so an answer is the windows'
//! deltas for the posts asked about, nothing read.
//!
//! Of the held shards, an answer asks only those whose windows hold a post asked about, and only
//! about those posts (`crate::holders`). The others say how far their windows reach
//! ([`Board::pending`]), or, asked as the read side asks ([`Listed::Holding`]: the digest of the
//! shards it lists this worker as holding, and it holds just those), are not listed at all.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use smol_str::SmolStr;
use tally_core::buckets::PostDelta;
use tally_core::summary::marker;
use tally_core::Position;

use crate::holders::Holders;

mod windows;

pub use tally_core::open::{shards_digest, OpenWindow, ShardOpen};
pub use windows::ShardWindows;

/// Every held shard's windows of one worker.
#[derive(Default)]
pub struct Board {
    shards: Mutex<Held>,
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
    pub fn pending(&self, posts: &[String]) -> Vec<ShardOpen> {
        self.answer(posts, Listed::Every).shards
    }

    /// What the held shards `listed` names have read but not written for these posts (as
    /// [`Board::pending`]): with [`Listed::Holding`] and the worker's shards as the read side
    /// listed them, only the shards whose windows hold a post asked about, and those named — so
    /// that an answer's work follows the windows that hold the page, not the held shards.
    pub fn answer(&self, posts: &[String], listed: Listed<'_>) -> Answered {
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
        for (shard_id, w) in held {
            let page = Page {
                all: &wanted,
                noted,
                held: holding.remove(shard_id.as_str()).unwrap_or_default(),
            };
            let windows = lock(&w);
            let narrow = page.narrow(&windows);
            out.push(Self::shard_answer(&windows, shard_id, page.wanted(narrow)));
        }
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

    /// A shard's answer from its windows as they stand: the window being applied, then the
    /// open one, each with its deltas for the wanted posts.
    fn shard_answer(w: &ShardWindows, shard_id: String, wanted: &HashSet<&str>) -> ShardOpen {
        let mut windows = Vec::new();
        if let Some(c) = &w.applying {
            windows.push(window(c.start_after.as_ref(), wanted, &c.posts));
        }
        if let Some(b) = w.open.as_ref().filter(|b| !b.is_empty()) {
            windows.push(window(b.start_after(), wanted, &b.deltas_of(wanted)));
        }
        windows.retain(|w| !w.posts.is_empty());
        ShardOpen {
            shard_id,
            windows,
            through: w.through(),
        }
    }
}

/// A window after `after` as answered: the deltas (sorted by post) of the posts asked about.
fn window(
    after: Option<&Position>,
    posts: &HashSet<&str>,
    deltas: &[(String, PostDelta)],
) -> OpenWindow {
    let delta = |p: &str| {
        let i = deltas.binary_search_by(|(id, _)| id.as_str().cmp(p)).ok()?;
        Some((p.to_owned(), deltas[i].1.by_minute.clone()))
    };
    OpenWindow {
        after: after.map(marker),
        posts: posts.iter().filter_map(|p| delta(p)).collect(),
    }
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
