//! Trending posts: top-K by an exponentially decayed like count, in bounded memory.
//!
//! A weighted Space-Saving sketch (Metwally et al.) over forward-decayed weights (Cormode et
//! al.): a like created at `t` weighs `2^((t − L) / half_life)` against a landmark `L`, so
//! decaying every score to a common time is one multiplication and never changes the order. The
//! sketch keeps at most `capacity` posts whatever the number of distinct posts; a post's score is
//! over-estimated by at most its `error`, and any post whose true decayed count exceeds
//! `total / capacity` is in the sketch.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use smol_str::SmolStr;

use crate::ports::TrendingEntry;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The largest exponent a weight is computed with (`e^300` ≈ 1.9e130: sums of many stay finite);
/// past it the landmark moves up.
pub const MAX_EXPONENT: f64 = 300.0;

/// A kept post in `Trending::least`: its weight then its id, the id's first eight bytes compared
/// as an integer before the string itself (the same order, read without following the pointer:
/// an all-time sketch is all ties).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Least {
    weight: Score,
    prefix: u64,
    post: SmolStr,
}

impl Least {
    fn new(weight: f64, post: SmolStr) -> Least {
        let mut head = [0u8; 8];
        let n = post.len().min(8);
        head[..n].copy_from_slice(&post.as_bytes()[..n]);
        Least {
            weight: Score(weight),
            prefix: u64::from_be_bytes(head),
            post,
        }
    }
}

/// The sketch.
#[derive(Debug, Clone)]
pub struct Trending {
    /// Most posts kept.
    capacity: usize,
    /// ln 2 / half-life, per millisecond.
    lambda: f64,
    /// Event time the stored weights are relative to.
    landmark_ms: i64,
    /// Latest event time seen: scores are reported decayed to it.
    now_ms: i64,
    /// Post → (weight, error). A post's id is stored once, when it enters the sketch (inline up to
    /// 23 bytes, else one shared allocation), and shared with `least`: a like of a kept post
    /// copies nothing.
    entries: HashMap<SmolStr, (f64, f64), ahash::RandomState>,
    /// One (weight, post) per kept post, the least on top, ties by post id (so that the sketch's
    /// choices depend on its contents alone: a restored sketch evicts as the original would). A
    /// weight here may be stale — below the post's current one, as weights only grow between
    /// rescales — and is brought up to date when it reaches the top at an eviction. A like of a
    /// kept post is then one map update, O(1); an eviction pops stale entries (each paid for by a
    /// like since its last push) until a current one is on top, and that one is the least: every
    /// other post weighs at least its entry here.
    least: BinaryHeap<Reverse<Least>>,
}

impl Trending {
    /// An empty sketch.
    ///
    /// # Panics
    /// If `capacity` is 0 or `half_life_ms` is not positive (config validation rejects both).
    pub fn new(capacity: usize, half_life_ms: i64) -> Trending {
        assert!(
            capacity > 0 && half_life_ms > 0,
            "capacity and half-life must be positive"
        );
        Trending {
            capacity,
            lambda: std::f64::consts::LN_2 / half_life_ms as f64,
            landmark_ms: 0,
            now_ms: i64::MIN,
            entries: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            least: BinaryHeap::with_capacity(capacity),
        }
    }

    /// A sketch resumed from a snapshot taken at `at_ms`.
    pub fn restore(
        capacity: usize,
        half_life_ms: i64,
        entries: &[TrendingEntry],
        at_ms: i64,
    ) -> Trending {
        let mut t = Trending::new(capacity, half_life_ms);
        t.landmark_ms = at_ms;
        t.now_ms = at_ms;
        for e in entries.iter().take(capacity) {
            let post = SmolStr::new(&e.post_id);
            t.entries.insert(post.clone(), (e.score, e.error));
            t.least.push(Reverse(Least::new(e.score, post)));
        }
        t
    }

    fn rescale(&mut self, new_landmark: i64) {
        let f = (-(new_landmark - self.landmark_ms) as f64 * self.lambda).exp();
        self.landmark_ms = new_landmark;
        for (w, e) in self.entries.values_mut() {
            *w *= f;
            *e *= f;
        }
        self.least = self
            .entries
            .iter()
            .map(|(post, (w, _))| Reverse(Least::new(*w, post.clone())))
            .collect();
    }

    /// Removes the least-weighted post (ties: the least id) and returns its weight.
    fn evict_least(&mut self) -> Option<f64> {
        while let Some(Reverse(mut least)) = self.least.pop() {
            let Some(&(current, _)) = self.entries.get(&least.post) else {
                continue;
            };
            // The same bits as when pushed: current. Otherwise it grew since: back in its place.
            if current.to_bits() == least.weight.0.to_bits() {
                self.entries.remove(&least.post);
                return Some(current);
            }
            least.weight = Score(current);
            self.least.push(Reverse(least));
        }
        None
    }

    /// Moves the sketch's clock to `t_ms` (the first like sets the landmark; a landmark too far
    /// behind is moved up, so that weights stay finite).
    fn advance(&mut self, first_ms: i64, t_ms: i64) {
        if self.entries.is_empty() && self.now_ms == i64::MIN {
            self.landmark_ms = first_ms;
        }
        self.now_ms = self.now_ms.max(t_ms);
        if self.exponent(self.landmark_ms, t_ms) > MAX_EXPONENT {
            self.rescale(t_ms);
        }
    }

    /// `(t − at) · ln 2 / half-life`: a like at `t_ms` weighs `e` to that against one at `at_ms`.
    pub fn exponent(&self, at_ms: i64, t_ms: i64) -> f64 {
        (t_ms - at_ms) as f64 * self.lambda
    }

    /// What a like created at `t_ms` weighs against one at `at_ms`: `2^((t − at) / half-life)`.
    pub fn weight_at(&self, at_ms: i64, t_ms: i64) -> f64 {
        self.exponent(at_ms, t_ms).exp()
    }

    /// Adds one like created at `t_ms` — what [`Trending::add_gathered`] must equal; analytics
    /// itself gathers a window's likes first.
    #[cfg(test)]
    fn add(&mut self, post_id: &str, t_ms: i64) {
        self.advance(t_ms, t_ms);
        self.add_weight(post_id, self.weight_at(self.landmark_ms, t_ms));
    }

    /// Adds likes gathered apart from the sketch (a window's, per post) at once: each post's
    /// weight is `Σ 2^((t − at_ms) / half-life)` over its likes ([`Trending::weight_at`]), the
    /// latest created at `latest_ms`. The weights are those of adding the likes one by one; only
    /// the order of Space-Saving's steps among them differs (a post's likes enter together, posts
    /// in the order given).
    pub fn add_gathered<'a>(
        &mut self,
        at_ms: i64,
        latest_ms: i64,
        weights: impl IntoIterator<Item = (&'a str, f64)>,
    ) {
        self.advance(at_ms, latest_ms);
        let f = self.weight_at(self.landmark_ms, at_ms);
        for (post, w) in weights {
            self.add_weight(post, w * f);
        }
    }

    /// The Space-Saving step: `w` (relative to the landmark) more for `post_id`.
    fn add_weight(&mut self, post_id: &str, w: f64) {
        if let Some((weight, _)) = self.entries.get_mut(post_id) {
            // A post already kept: its weight grows (its entry in `least` catches up lazily).
            *weight += w;
            return;
        }
        let (weight, error) = if self.entries.len() < self.capacity {
            (w, 0.0)
        } else if let Some(min) = self.evict_least() {
            // Space-Saving: the newcomer takes the least post's place and weight, which bounds
            // its over-estimate (its error).
            (min + w, min)
        } else {
            return;
        };
        let post = SmolStr::new(post_id);
        self.entries.insert(post.clone(), (weight, error));
        self.least.push(Reverse(Least::new(weight, post)));
    }

    /// The event time scores are decayed to.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Every kept post, highest first, scores decayed to [`Trending::now_ms`].
    pub fn entries(&self) -> Vec<TrendingEntry> {
        let f = if self.now_ms == i64::MIN {
            1.0
        } else {
            (-(self.now_ms - self.landmark_ms) as f64 * self.lambda).exp()
        };
        let mut kept: Vec<(&SmolStr, &(f64, f64))> = self.entries.iter().collect();
        // Highest first; ties by post id, the greater first.
        kept.sort_unstable_by(|a, b| (Score(b.1 .0), b.0).cmp(&(Score(a.1 .0), a.0)));
        kept.into_iter()
            .map(|(post, (w, e))| TrendingEntry {
                post_id: post.to_string(),
                score: w * f,
                error: e * f,
            })
            .collect()
    }
}

/// Merges per-shard sketches (each `(entries, at_ms)`) into one top-`k`, decayed to the latest time.
pub fn merge(
    sketches: &[(Vec<TrendingEntry>, i64)],
    half_life_ms: i64,
    k: usize,
) -> Vec<TrendingEntry> {
    let lambda = std::f64::consts::LN_2 / half_life_ms as f64;
    let at = sketches.iter().map(|s| s.1).max().unwrap_or(0);
    let mut sum: HashMap<&str, (f64, f64)> = HashMap::new();
    for (entries, t) in sketches {
        let f = (-(at - t) as f64 * lambda).exp();
        for e in entries {
            let s = sum.entry(e.post_id.as_str()).or_default();
            s.0 += e.score * f;
            s.1 += e.error * f;
        }
    }
    let mut out: Vec<TrendingEntry> = sum
        .into_iter()
        .map(|(p, (score, error))| TrendingEntry {
            post_id: p.to_owned(),
            score,
            error,
        })
        .collect();
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.post_id.cmp(&b.post_id))
    });
    out.truncate(k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `k` highest.
    fn top(t: &Trending, k: usize) -> Vec<TrendingEntry> {
        let mut e = t.entries();
        e.truncate(k);
        e
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn decays_by_half_life() {
        let mut t = Trending::new(10, 1_000);
        t.add("a", 0);
        t.add("a", 0);
        t.add("b", 1_000);
        let e = t.entries();
        // At t = 1000: a = 2 × 1/2 = 1, b = 1; a tie, broken by post id descending order in the set.
        assert!(close(
            e.iter().find(|x| x.post_id == "a").unwrap().score,
            1.0
        ));
        assert!(close(
            e.iter().find(|x| x.post_id == "b").unwrap().score,
            1.0
        ));
        t.add("b", 2_000);
        let top = top(&t, 1);
        assert_eq!(top[0].post_id, "b");
        assert!(close(top[0].score, 1.5));
    }

    #[test]
    fn memory_is_bounded_and_heavy_hitters_survive() {
        let mut t = Trending::new(50, 3_600_000);
        for i in 0..100_000i64 {
            t.add(&format!("tail{i}"), i);
            if i % 4 == 0 {
                t.add("viral", i);
            }
        }
        assert_eq!(t.entries().len(), 50);
        assert_eq!(top(&t, 1)[0].post_id, "viral");
        // Exactly 25,000 likes of "viral", decayed; its error is 0 because it was never evicted.
        let top = &top(&t, 1)[0];
        assert_eq!(top.error, 0.0);
        let lambda = std::f64::consts::LN_2 / 3_600_000.0;
        let exact: f64 = (0..100_000i64)
            .step_by(4)
            .map(|i| (-(99_999 - i) as f64 * lambda).exp())
            .sum();
        assert!(close(top.score, exact), "{} vs {exact}", top.score);
    }

    /// The sketch makes the choices of the textbook Space-Saving (evict the least weight, ties
    /// by the least id), kept here as a sorted list: same posts, scores and errors after every
    /// step of a long, tie-heavy stream (equal creation times make equal weights).
    #[test]
    fn evicts_as_the_textbook_sketch() {
        let cap = 16;
        let mut t = Trending::new(cap, 60_000);
        // (weight, post, error), the least first.
        let mut reference: Vec<(f64, String, f64)> = Vec::new();
        let mut x: u64 = 12345;
        for step in 0..20_000i64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let post = format!("p{}", (x >> 33) % 97);
            // The first half at one creation time: whole-number weights, ties everywhere.
            let at = (step - 10_000).max(0) / 50 * 1_000;
            t.add(&post, at);
            // Weights as the design defines them, not read from the sketch: landmark 0 (the
            // first like), never rescaled (199 s is 3.3 half-lives).
            let w = (at as f64 * std::f64::consts::LN_2 / 60_000.0).exp();
            if let Some(e) = reference.iter_mut().find(|e| e.1 == post) {
                e.0 += w;
            } else if reference.len() < cap {
                reference.push((w, post, 0.0));
            } else {
                let min = reference.remove(0);
                reference.push((min.0 + w, post, min.0));
            }
            reference.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            if step % 997 == 0 || step == 19_999 {
                let mut got: Vec<(String, f64)> = t
                    .entries
                    .iter()
                    .map(|(p, (w, e))| (p.to_string(), w + e))
                    .collect();
                got.sort_by(|a, b| a.0.cmp(&b.0));
                let mut want: Vec<(String, f64)> = reference
                    .iter()
                    .map(|(w, p, e)| (p.clone(), w + e))
                    .collect();
                want.sort_by(|a, b| a.0.cmp(&b.0));
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.0, w.0, "step {step}");
                    assert!(close(g.1, w.1), "step {step}: {g:?} vs {w:?}");
                }
            }
        }
    }

    #[test]
    fn gathered_likes_weigh_as_likes_added_one_by_one() {
        let likes: Vec<(&str, i64)> = (0..2_000i64)
            .map(|i| (["a", "b", "c", "d"][(i * 7 % 4) as usize], 1_000 + i * 37))
            .collect();
        let mut one = Trending::new(10, 60_000);
        for (p, t) in &likes {
            one.add(p, *t);
        }
        let mut batch = Trending::new(10, 60_000);
        // Two windows gathered apart, the second's anchor later than the first's likes.
        for part in likes.chunks(1_200) {
            let at = part[0].1;
            let latest = part.iter().map(|l| l.1).max().unwrap();
            let mut sums: Vec<(&str, f64)> = Vec::new();
            for (p, t) in part {
                let w = batch.weight_at(at, *t);
                match sums.iter_mut().find(|s| s.0 == *p) {
                    Some(s) => s.1 += w,
                    None => sums.push((p, w)),
                }
            }
            batch.add_gathered(at, latest, sums);
        }
        assert_eq!(batch.now_ms(), one.now_ms());
        let (a, b) = (one.entries(), batch.entries());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.post_id, y.post_id);
            assert!(close(x.score, y.score), "{x:?} vs {y:?}");
        }
    }

    #[test]
    fn rescaling_keeps_scores() {
        let mut t = Trending::new(10, 1);
        t.add("a", 0);
        t.add("a", 1_000); // forces a rescale (1000 half-lives)
        assert!(close(top(&t, 1)[0].score, 1.0));
    }

    #[test]
    fn restore_and_merge() {
        let mut t = Trending::new(10, 1_000);
        t.add("a", 0);
        t.add("b", 500);
        let r = Trending::restore(10, 1_000, &t.entries(), t.now_ms());
        assert_eq!(r.entries(), t.entries());
        let m = merge(
            &[
                (
                    vec![TrendingEntry {
                        post_id: "x".into(),
                        score: 4.0,
                        error: 0.0,
                    }],
                    0,
                ),
                (t.entries(), 1_000),
            ],
            1_000,
            2,
        );
        assert_eq!(m[0].post_id, "x");
        assert!(close(m[0].score, 2.0));
    }
}
