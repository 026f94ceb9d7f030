//! The per-record work of analytics, without I/O: decode, dedup, latency, trending. The shard
//! processor feeds it and stores what it holds each window; the benchmark measures it alone.

use std::collections::HashMap;

use smol_str::SmolStr;
use tally_core::boundary::{self, Extent, UserRecord};
use tally_core::dedup::{id_hash, Dedup};
use tally_core::event::{decode_ref, Action};
use tally_core::kpl::Took;
use tally_core::latency::Latency;
use tally_core::ports::StreamRecord;
use tally_core::trending::{Trending, MAX_EXPONENT};

/// One shard's analytics state between snapshots.
#[derive(Debug)]
pub struct Fold {
    /// Decayed like rate per post (bounded).
    pub trending: Trending,
    /// All-time likes per post (the same sketch, never decayed).
    pub top_liked: Trending,
    /// Producer retries count once.
    pub dedup: Dedup,
    /// The open window's histograms.
    pub latency: Latency,
    /// The open window's likes per post, not yet in the sketches (which are read only when a
    /// window is stored, after [`Fold::settle`]): each post's weight for `trending` and for
    /// `top_liked` against a like at `gathered_at`. One map update per like, as the counter's
    /// per-post deltas; the sketches then take one step per post, not per like.
    gathered: HashMap<SmolStr, (f64, f64), ahash::RandomState>,
    gathered_at: i64,
    gathered_latest: i64,
}

impl Fold {
    /// An empty fold: `capacity` posts per sketch, the trending half-life, the dedup horizon.
    pub fn new(capacity: usize, half_life_ms: i64, all_time_ms: i64, horizon_ms: i64) -> Fold {
        Fold {
            trending: Trending::new(capacity, half_life_ms),
            top_liked: Trending::new(capacity, all_time_ms),
            dedup: Dedup::new(horizon_ms),
            latency: Latency::default(),
            gathered: HashMap::default(),
            gathered_at: 0,
            gathered_latest: i64::MIN,
        }
    }

    /// Adds the window's gathered likes to the sketches, posts in id order (so that the same
    /// records always make the same sketch).
    pub fn settle(&mut self) {
        if self.gathered.is_empty() {
            return;
        }
        let mut posts: Vec<(&SmolStr, &(f64, f64))> = self.gathered.iter().collect();
        posts.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let (at, latest) = (self.gathered_at, self.gathered_latest);
        self.trending
            .add_gathered(at, latest, posts.iter().map(|(p, w)| (p.as_str(), w.0)));
        self.top_liked
            .add_gathered(at, latest, posts.iter().map(|(p, w)| (p.as_str(), w.1)));
        self.gathered.clear();
        self.gathered_latest = i64::MIN;
    }

    /// Gathers one like of `post` created at `t`.
    fn gather(&mut self, post: &str, t: i64) {
        if self.gathered.is_empty() {
            self.gathered_at = t;
        } else if self.trending.exponent(self.gathered_at, t) > MAX_EXPONENT {
            // So far after the first that its weight would overflow: the sketches take what
            // came before, and gathering starts again from here.
            self.settle();
            self.gathered_at = t;
        }
        self.gathered_latest = self.gathered_latest.max(t);
        let w = (
            self.trending.weight_at(self.gathered_at, t),
            self.top_liked.weight_at(self.gathered_at, t),
        );
        match self.gathered.get_mut(post) {
            Some(sum) => {
                sum.0 += w.0;
                sum.1 += w.1;
            }
            None => {
                self.gathered.insert(SmolStr::new(post), w);
            }
        }
    }

    /// Folds the user records of `r` from index `from` on, at most `max` (at least one), into
    /// the window whose extent is `extent` (a window may end inside a KPL aggregate, as the
    /// counter's do); returns what that took and the likes seen for the first time.
    pub fn take(
        &mut self,
        extent: &mut Extent,
        r: &StreamRecord,
        from: u32,
        max: usize,
        now: i64,
    ) -> (Took, u64) {
        let mut at = At {
            fold: self,
            now,
            likes: 0,
        };
        let took = extent.take(&mut at, r, from, max);
        (took, at.likes)
    }

    fn fold_event(&mut self, data: &[u8], arrival_ms: i64, now: i64) -> bool {
        let Ok(ev) = decode_ref(data) else {
            return false;
        };
        if !self.dedup.observe(id_hash(&ev.event_id), arrival_ms) {
            return false;
        }
        self.latency.record_event(ev.created_at, arrival_ms, now);
        if ev.action != Action::Like {
            return false;
        }
        self.gather(&ev.post_id, ev.created_at);
        true
    }
}

/// A [`Fold`] at a processing time, as the window-boundary engine hands it user records; counts
/// the likes seen for the first time.
struct At<'a> {
    fold: &'a mut Fold,
    now: i64,
    likes: u64,
}

impl boundary::Fold for At<'_> {
    fn user_record(&mut self, r: &StreamRecord, user: UserRecord<'_>) {
        let first = self.fold.fold_event(user.data, r.arrival_ms, self.now);
        self.likes += u64::from(first);
    }

    /// Malformed records are the counter's to dead-letter: analytics skips them.
    fn corrupt(&mut self, _: &StreamRecord, _: String) {}
}
