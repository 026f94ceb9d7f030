//! Trending posts: top-K by an exponentially decayed like count, in bounded memory.
//!
//! A weighted Space-Saving sketch (Metwally et al.) over forward-decayed weights (Cormode et
//! al.): a like created at `t` weighs `2^((t − L) / half_life)` against a landmark `L`, so
//! decaying every score to a common time is one multiplication and never changes the order. The
//! sketch keeps at most `capacity` posts whatever the number of distinct posts; a post's score is
//! over-estimated by at most its `error`, and any post whose true decayed count exceeds
//! `total / capacity` is in the sketch.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

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
    /// Post → (weight, error). A post's id is allocated once, when it enters the sketch, and
    /// shared with `order`: a like of a kept post allocates nothing.
    entries: HashMap<Arc<str>, (f64, f64), ahash::RandomState>,
    /// (weight, post) in ascending order, to find the minimum in O(log n); ties by post id, so
    /// that the sketch's choices depend on its contents alone (a restored sketch evicts as the
    /// original would).
    order: BTreeSet<(Score, Arc<str>)>,
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
            entries: HashMap::default(),
            order: BTreeSet::new(),
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
            let post: Arc<str> = Arc::from(e.post_id.as_str());
            t.entries.insert(post.clone(), (e.score, e.error));
            t.order.insert((Score(e.score), post));
        }
        t
    }

    fn rescale(&mut self, new_landmark: i64) {
        let f = (-(new_landmark - self.landmark_ms) as f64 * self.lambda).exp();
        self.landmark_ms = new_landmark;
        self.order.clear();
        for (post, (w, e)) in self.entries.iter_mut() {
            *w *= f;
            *e *= f;
            self.order.insert((Score(*w), post.clone()));
        }
    }

    /// Adds one like created at `t_ms`.
    pub fn add(&mut self, post_id: &str, t_ms: i64) {
        if self.entries.is_empty() && self.now_ms == i64::MIN {
            self.landmark_ms = t_ms;
        }
        self.now_ms = self.now_ms.max(t_ms);
        if (t_ms - self.landmark_ms) as f64 * self.lambda > 300.0 {
            self.rescale(t_ms);
        }
        let w = ((t_ms - self.landmark_ms) as f64 * self.lambda).exp();
        if let Some((post, &(old, error))) = self.entries.get_key_value(post_id) {
            // A post already kept: its weight grows, and its place in the order moves.
            let post = post.clone();
            self.order.remove(&(Score(old), post.clone()));
            self.order.insert((Score(old + w), post.clone()));
            self.entries.insert(post, (old + w, error));
        } else if self.entries.len() < self.capacity {
            let post: Arc<str> = Arc::from(post_id);
            self.entries.insert(post.clone(), (w, 0.0));
            self.order.insert((Score(w), post));
        } else if let Some((min, victim)) = self.order.pop_first() {
            // Space-Saving: the newcomer takes the least post's place and weight, which bounds
            // its over-estimate (its error).
            self.entries.remove(&victim);
            let post: Arc<str> = Arc::from(post_id);
            self.entries.insert(post.clone(), (min.0 + w, min.0));
            self.order.insert((Score(min.0 + w), post));
        }
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
        self.order
            .iter()
            .rev()
            .map(|(s, post)| TrendingEntry {
                post_id: post.to_string(),
                score: s.0 * f,
                error: self.entries.get(post.as_ref()).map_or(0.0, |e| e.1 * f),
            })
            .collect()
    }

    /// The `k` highest.
    pub fn top(&self, k: usize) -> Vec<TrendingEntry> {
        let mut e = self.entries();
        e.truncate(k);
        e
    }

    /// How many posts are kept (never more than the capacity).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no post is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
        let top = t.top(1);
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
        assert_eq!(t.len(), 50);
        assert_eq!(t.top(1)[0].post_id, "viral");
        // Exactly 25,000 likes of "viral", decayed; its error is 0 because it was never evicted.
        let top = &t.top(1)[0];
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
    fn rescaling_keeps_scores() {
        let mut t = Trending::new(10, 1);
        t.add("a", 0);
        t.add("a", 1_000); // forces a rescale (1000 half-lives)
        assert!(close(t.top(1)[0].score, 1.0));
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
