//! The counter's open windows as the read side sees them: what a worker has read but not yet
//! written, per held shard, for provisional counts.
//!
//! Each held shard keeps its window in a [`ShardWindows`] shared with the worker's board: the
//! window being filled, and the closed one whose writes are under way (it stays on the board until
//! every write is done, so a reader never misses it between the two). A reader asks the worker
//! *first* and the store *second*, and adds a window's delta for a post only where the post's live
//! item shows that window is not applied yet (`summary::pending_applies`): a window that lands in
//! between is counted once, by the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tally_core::buckets::PostDelta;
use tally_core::summary::marker;
use tally_core::window::{ClosedWindow, WindowBuilder};

/// One shard's windows that are read but not written.
#[derive(Default)]
pub struct ShardWindows {
    /// The window being filled.
    pub open: Option<WindowBuilder>,
    /// A closed window whose writes are under way.
    pub applying: Option<Arc<ClosedWindow>>,
}

/// A window's deltas for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenWindow {
    /// The marker of the checkpoint the window follows (`None`: the shard's first window).
    pub after: Option<String>,
    /// Net change per post asked about that the window holds, by the start of the minute (ms)
    /// the events were created in.
    pub posts: BTreeMap<String, BTreeMap<i64, i64>>,
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
}

/// Locks a shard's windows; a panic elsewhere while one was held leaves them as they were.
pub fn lock(w: &Mutex<ShardWindows>) -> MutexGuard<'_, ShardWindows> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl Board {
    /// The windows of a shard this worker has just started to hold (a fresh, empty entry).
    pub fn hold(&self, shard_id: &str) -> Arc<Mutex<ShardWindows>> {
        let w = Arc::new(Mutex::new(ShardWindows::default()));
        self.entries().insert(shard_id.to_owned(), w.clone());
        w
    }

    /// Takes a shard off the board, if `w` is still its entry (a later hold of the same shard
    /// keeps its own).
    pub fn release(&self, shard_id: &str, w: &Arc<Mutex<ShardWindows>>) {
        let mut shards = self.entries();
        if shards.get(shard_id).is_some_and(|e| Arc::ptr_eq(e, w)) {
            shards.remove(shard_id);
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Arc<Mutex<ShardWindows>>>> {
        self.shards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What each held shard has read but not written for these posts: shards in id order, each
    /// with its closed window (if its writes are under way) and then its open one.
    pub fn pending(&self, posts: &[String]) -> Vec<ShardOpen> {
        let held: Vec<(String, Arc<Mutex<ShardWindows>>)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out: Vec<ShardOpen> = held
            .into_iter()
            .map(|(shard_id, w)| {
                let w = lock(&w);
                let mut windows = Vec::new();
                // Counting likers, an open window's deltas are not known yet: the answer holds
                // only the window being applied.
                let through = w
                    .open
                    .as_ref()
                    .filter(|b| !b.counts_likers())
                    .and_then(|b| b.end())
                    .or_else(|| w.applying.as_ref().and_then(|c| c.end.as_ref()))
                    .or_else(|| w.open.as_ref().and_then(|b| b.start_after()))
                    .map(marker);
                if let Some(c) = &w.applying {
                    windows.push(OpenWindow {
                        after: c.start_after.as_ref().map(marker),
                        posts: pick(posts, |p| {
                            c.posts
                                .binary_search_by(|(id, _)| id.as_str().cmp(p))
                                .ok()
                                .map(|i| &c.posts[i].1)
                        }),
                    });
                }
                if let Some(b) = w.open.as_ref().filter(|b| !b.is_empty()) {
                    windows.push(OpenWindow {
                        after: b.start_after().map(marker),
                        posts: pick(posts, |p| b.delta(p)),
                    });
                }
                windows.retain(|w| !w.posts.is_empty());
                ShardOpen {
                    shard_id,
                    windows,
                    through,
                }
            })
            .collect();
        out.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        out
    }
}

fn pick<'a>(
    posts: &[String],
    delta: impl Fn(&str) -> Option<&'a PostDelta>,
) -> BTreeMap<String, BTreeMap<i64, i64>> {
    posts
        .iter()
        .filter_map(|p| Some((p.clone(), delta(p)?.by_minute.clone())))
        .collect()
}
