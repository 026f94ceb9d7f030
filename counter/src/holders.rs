//! Which of a worker's held shards have windows that hold each post: what lets an answer of the
//! board ask only those shards about a page, so that its work follows the windows holding the
//! page's posts and not how many shards the worker holds.
//!
//! **Kept from the fold.** A shard's fold notes each post its open window meets for the first
//! time ([`Holders::met`], under the shard's lock, as the record is folded), and the shard
//! keeps the number that note was given. An answer takes the shards noted for its posts and the
//! number of the last note ([`Holders::of`]); a shard not among them whose last note came later
//! is asked as well (its windows may have met a post of the page since). So a shard left out
//! holds none of the page's posts at the moment it is answered for.
//!
//! **Bounded by the windows.** A post stays noted after its windows are written. Once as many
//! notes were added as the index held after its last tidy, [`Holders::forget`] drops those
//! made before the tidy began whose shard's windows no longer hold the post (a post met again
//! after that was noted again, with a later number, and stays).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use smol_str::SmolStr;

/// The index is tidied no sooner than after this many notes.
const TIDY_AFTER: usize = 4_096;

/// A post's shards, each with the number of its latest note.
type Noted = Vec<(SmolStr, u64)>;

/// A worker's index of the posts its held shards' windows hold.
#[derive(Default)]
pub struct Holders {
    index: Mutex<Index>,
    /// A tidy is under way (one at a time).
    tidying: AtomicBool,
}

#[derive(Default)]
struct Index {
    by_post: HashMap<SmolStr, Noted, ahash::RandomState>,
    /// Notes given so far: the number of the latest.
    notes: u64,
    /// Entries added since the last tidy, and how many were kept by it.
    added: usize,
    kept: usize,
}

impl Holders {
    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `shard`'s open window holds `posts` (each met for the first time): the
    /// number of this note.
    pub fn met(&self, shard: &str, posts: &[SmolStr]) -> u64 {
        let mut ix = self.index();
        ix.notes += 1;
        let n = ix.notes;
        let mut added = 0;
        for post in posts {
            let noted = ix.by_post.entry(post.clone()).or_default();
            match noted.iter_mut().find(|(s, _)| s == shard) {
                Some(entry) => entry.1 = n,
                None => {
                    noted.push((SmolStr::new(shard), n));
                    added += 1;
                }
            }
        }
        ix.added += added;
        n
    }

    /// The number of the latest note, and the shards noted as holding any of `posts`, each
    /// with those of `posts` it is noted for.
    pub fn of<'a>(
        &self,
        posts: impl IntoIterator<Item = &'a str>,
    ) -> (u64, HashMap<SmolStr, HashSet<&'a str>>) {
        let ix = self.index();
        let mut shards: HashMap<SmolStr, HashSet<&'a str>> = HashMap::new();
        for post in posts {
            for (shard, _) in ix.by_post.get(post).into_iter().flatten() {
                shards.entry(shard.clone()).or_default().insert(post);
            }
        }
        (ix.notes, shards)
    }

    /// Whether enough notes were added since the last tidy for one to be due; if so, it is
    /// started (the caller ends it with [`Holders::forget`]) and the number of the latest note
    /// is returned: notes after it are kept whatever the tidy finds.
    pub fn tidy_due(&self) -> Option<u64> {
        let notes = {
            let ix = self.index();
            if ix.added < TIDY_AFTER.max(ix.kept) {
                return None;
            }
            ix.notes
        };
        (!self.tidying.swap(true, Ordering::AcqRel)).then_some(notes)
    }

    /// Ends a tidy begun at note `before`: forgets each entry noted up to it whose (post, shard)
    /// is not in `live` (what the held shards' windows hold, read after the tidy began).
    pub fn forget(&self, before: u64, live: &HashSet<(SmolStr, SmolStr)>) {
        let mut ix = self.index();
        let mut entries = 0;
        ix.by_post.retain(|post, noted| {
            noted.retain(|(shard, n)| *n > before || live.contains(&(post.clone(), shard.clone())));
            entries += noted.len();
            !noted.is_empty()
        });
        ix.kept = entries;
        ix.added = 0;
        drop(ix);
        self.tidying.store(false, Ordering::Release);
    }

    /// (post, shard) entries held.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.index().by_post.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<SmolStr> {
        v.iter().copied().map(SmolStr::new).collect()
    }

    fn shards(h: &Holders, posts: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = h
            .of(posts.iter().copied())
            .1
            .into_keys()
            .map(String::from)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_answer_finds_the_shards_noted_for_its_posts() {
        let h = Holders::default();
        let n1 = h.met("s1", &ids(&["p1", "p2"]));
        let n2 = h.met("s2", &ids(&["p2"]));
        assert!(n2 > n1);
        assert_eq!(shards(&h, &["p1"]), ["s1"]);
        assert_eq!(shards(&h, &["p2", "p9"]), ["s1", "s2"]);
        let (_, of) = h.of(["p1", "p2", "p9"]);
        assert_eq!(
            of["s1"],
            HashSet::from(["p1", "p2"]),
            "each shard with its posts"
        );
        assert_eq!(of["s2"], HashSet::from(["p2"]));
        assert!(shards(&h, &["p9"]).is_empty());
        assert_eq!(h.of([]).0, n2, "the latest note's number");
        // A post noted again for the same shard is one entry.
        h.met("s1", &ids(&["p1"]));
        assert_eq!(h.entries(), 3);
    }

    #[test]
    fn a_tidy_forgets_only_what_no_window_holds_and_was_noted_before_it() {
        let h = Holders::default();
        let posts: Vec<String> = (0..TIDY_AFTER).map(|i| format!("p{i}")).collect();
        let refs: Vec<&str> = posts.iter().map(String::as_str).collect();
        h.met("s1", &ids(&refs));
        let before = h.tidy_due().expect("due after as many notes");
        assert!(h.tidy_due().is_none(), "one tidy at a time");
        // Noted after the tidy began (met again): kept whatever the live set says.
        h.met("s2", &ids(&["p1"]));
        let live: HashSet<(SmolStr, SmolStr)> = [(SmolStr::new("p0"), SmolStr::new("s1"))].into();
        h.forget(before, &live);
        assert_eq!(shards(&h, &["p0"]), ["s1"], "still held");
        assert_eq!(shards(&h, &["p1"]), ["s2"], "noted after the tidy began");
        assert!(shards(&h, &["p2"]).is_empty(), "forgotten");
        assert_eq!(h.entries(), 2);
        assert!(
            h.tidy_due().is_none(),
            "not due again until as many are added"
        );
    }
}
