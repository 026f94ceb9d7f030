//! The per-record work of analytics, without I/O: decode, dedup, latency, trending. The shard
//! processor feeds it and stores what it holds each window; the benchmark measures it alone.

use std::collections::HashMap;

use smol_str::SmolStr;
use tally_core::boundary::{self, Extent, UserRecord};
use tally_core::dedup::{id_hash, Dedup};
use tally_core::event::Action;
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
    /// Counting likers: the (post, user) pairs whose like trended within the horizon (kept in
    /// memory only, sealed with each window and evicted by arrival like the ids).
    pairs: Option<Dedup>,
    /// What the records are.
    input: tally_core::input::Input,
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
            pairs: None,
            input: tally_core::input::Input::default(),
        }
    }

    /// Reads the records by `input`'s contract (like events unless told); items that are no
    /// likes are passed over.
    pub fn input(mut self, input: tally_core::input::Input) -> Fold {
        self.input = input;
        self
    }

    /// Counts likers: within the dedup horizon a user's likes of a post are one like in the
    /// sketches (a double tap or a toggle storm does not make a post trend); latency still
    /// records every distinct action. The pairs are remembered in memory only (a restart forgets
    /// them: at most one more like of a pair in a decayed, approximate ranking), so a window's
    /// stored first-seen ids stay the events' and one store item.
    pub fn likers(mut self) -> Fold {
        self.pairs = Some(Dedup::new(self.dedup.horizon_ms()));
        self
    }

    /// Adds the window's gathered likes to the sketches, posts in id order (so that the same
    /// records always make the same sketch).
    pub fn settle(&mut self) {
        if let Some(pairs) = &mut self.pairs {
            // The window's pairs become one sealed window of the pair filter, evicted by arrival.
            pairs.seal();
        }
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
        let Ok(tally_core::input::Decoded::Event(ev)) = self.input.decode(data) else {
            // Malformed (the counter dead-letters it) or an item that is no like.
            return false;
        };
        if !self.dedup.observe(id_hash(&ev.event_id), arrival_ms) {
            return false;
        }
        self.latency.record_event(ev.created_at, arrival_ms, now);
        if ev.action != Action::Like {
            return false;
        }
        if let Some(pairs) = &mut self.pairs {
            if !pairs.observe(pair_hash(&ev.post_id, &ev.user_id), arrival_ms) {
                return false;
            }
        }
        self.gather(&ev.post_id, ev.created_at);
        true
    }
}

/// The filter's id of a (post, user) pair: apart from every event id (a separator no id holds).
fn pair_hash(post: &str, user: &str) -> u128 {
    id_hash(&format!("{post}\u{1}{user}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn like(id: &str, user: &str) -> Vec<u8> {
        format!(
            r#"{{"event_id":"{id}","post_id":"p1","user_id":"{user}","action":"like","created_at":1000}}"#
        )
        .into_bytes()
    }

    #[test]
    fn counting_likers_a_double_tap_trends_once() {
        let taps = [
            like("a", "u1"),
            like("b", "u1"),
            like("c", "u1"),
            like("d", "u2"),
            like("d", "u2"),
        ];
        let counted = |mut f: Fold| {
            taps.iter()
                .filter(|t| f.fold_event(t, 1_000, 1_000))
                .count()
        };
        assert_eq!(
            counted(Fold::new(10, 300_000, i64::MAX, 600_000).likers()),
            2
        );
        // Counting events, each distinct event is a like (the copy of "d" is not).
        assert_eq!(counted(Fold::new(10, 300_000, i64::MAX, 600_000)), 4);
    }
}
