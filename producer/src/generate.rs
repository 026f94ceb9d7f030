//! Synthetic like events with a known truth.
//!
//! The events are what users do to like buttons, kept consistent: a user likes a post they do
//! not like yet, and unlikes one they like (never an unlike of nothing, never a second like), in
//! time order, each action with its own event id (ordered by time, then by emission). So a post's
//! distinct likes minus distinct unlikes equal its likers, and the truth holds in both count
//! modes; producer retries (verbatim copies) and malformed records come on top.

use std::collections::{HashMap, VecDeque};

use ahash::{AHashMap, AHashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use tally_core::config::{range, Invalid};
use tally_core::event::{encode, Action, LikeEvent};
use tally_core::ports::PutEntry;

/// What to produce: the `[producer]` section of the settings, only what a user sets. A run adds
/// how many events and the share of no-op actions ([`Generation`]). The [`Generator`] reads what
/// to generate; `rate` and the hot posts are the putter's ([`crate::put::Pacer`],
/// [`crate::keys::HotPosts`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenConfig {
    /// Posts, drawn Zipf-distributed: post `p1` is the most liked.
    pub posts: u64,
    /// The Zipf exponent of the posts' popularity (1.0: the classic long tail).
    pub zipf_exponent: f64,
    /// Users, drawn uniformly.
    pub users: u64,
    /// Share of events that unlike a post that has likes: one of its likers takes the like back.
    pub unlike_ratio: f64,
    /// Share of extra records that resend a recent event verbatim (a producer retry).
    pub duplicate_ratio: f64,
    /// Share of extra records that are malformed.
    pub malformed_ratio: f64,
    /// The random seed: the same seed makes the same records.
    pub seed: u64,
    /// Records put per second (0: as fast as possible).
    pub rate: f64,
    /// Posts whose likes are fanned out over several partition keys (so over several shards).
    pub hot_posts: Vec<String>,
    /// Partition keys per hot post.
    pub hot_post_keys: u32,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            posts: 1_000,
            zipf_exponent: 1.1,
            users: 100_000,
            unlike_ratio: 0.1,
            duplicate_ratio: 0.0,
            malformed_ratio: 0.0,
            seed: 1,
            rate: 0.0,
            hot_posts: Vec::new(),
            hot_post_keys: 8,
        }
    }
}

impl GenConfig {
    /// The `[producer]` section's ranges (keys without the section).
    pub fn validate(&self) -> Result<(), Invalid> {
        range("posts", self.posts, 1, u64::MAX)?;
        range("users", self.users, 1, u64::MAX)?;
        range("zipf_exponent", self.zipf_exponent, 0.01, 10.0)?;
        range("unlike_ratio", self.unlike_ratio, 0.0, 1.0)?;
        range("duplicate_ratio", self.duplicate_ratio, 0.0, 0.5)?;
        range("malformed_ratio", self.malformed_ratio, 0.0, 0.5)?;
        range("rate", self.rate, 0.0, 1e9)?;
        range("hot_post_keys", self.hot_post_keys, 1, 1_024)
    }
}

/// One run of the generator: the settings, and what the run sets beside them.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The `[producer]` settings.
    pub config: GenConfig,
    /// Distinct events (duplicates and malformed records come on top).
    pub events: u64,
    /// Share of events that change no liker: a liker taps like again, or a user unlikes a post
    /// they do not like (each its own event id). Only for counting likers: counted as events,
    /// they would change the counts.
    pub no_op_ratio: f64,
}

impl Generation {
    /// `events` events of `config`, each changing a liker.
    pub fn of(config: GenConfig, events: u64) -> Generation {
        Generation {
            config,
            events,
            no_op_ratio: 0.0,
        }
    }
}

/// What kind of record was generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A new event.
    Event,
    /// A verbatim copy of a recent record (a producer retry).
    Duplicate,
    /// A record that is no event.
    Malformed,
    /// A change stream's record of an item that is no like (`crate::change`).
    Other,
}

/// The generator; an iterator of records to put.
pub struct Generator {
    cfg: GenConfig,
    events: u64,
    no_op_ratio: f64,
    rng: StdRng,
    zipf: Zipf<f64>,
    /// Exact expected count per post, by post number.
    truth: AHashMap<u64, i64>,
    /// Each post's current likers (post and user numbers), and the same as a set.
    likers: AHashMap<u64, Vec<u64>>,
    liked: AHashSet<(u64, u64)>,
    /// Recent records, for duplicates.
    recent: VecDeque<PutEntry>,
    /// Distinct events emitted so far.
    emitted: u64,
    duplicates: u64,
    malformed: u64,
    /// Clock for `created_at` (ms); `None`: the wall clock.
    clock: Option<Box<dyn FnMut() -> i64 + Send>>,
}

/// Generation statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Truth {
    /// Distinct events generated.
    pub events: u64,
    /// Copies generated.
    pub duplicates: u64,
    /// Malformed records generated.
    pub malformed: u64,
    /// Expected count per post.
    pub counts: HashMap<String, i64>,
}

impl Truth {
    /// The expected global total.
    pub fn total(&self) -> i64 {
        self.counts.values().sum()
    }
}

impl Generator {
    /// A generator.
    ///
    /// # Panics
    /// If `posts` is 0 or the exponent is not positive (config validation rejects both).
    pub fn new(run: Generation) -> Generator {
        let Generation {
            config: cfg,
            events,
            no_op_ratio,
        } = run;
        let zipf = Zipf::new(cfg.posts.max(1), cfg.zipf_exponent.max(f64::MIN_POSITIVE))
            .unwrap_or_else(|_| unreachable!("validated"));
        Generator {
            events,
            no_op_ratio,
            rng: StdRng::seed_from_u64(cfg.seed),
            zipf,
            truth: AHashMap::new(),
            likers: AHashMap::new(),
            liked: AHashSet::new(),
            recent: VecDeque::new(),
            emitted: 0,
            duplicates: 0,
            malformed: 0,
            clock: None,
            cfg,
        }
    }

    /// Uses `clock` for `created_at` instead of the wall clock (for reproducible tests).
    pub fn with_clock(mut self, clock: impl FnMut() -> i64 + Send + 'static) -> Generator {
        self.clock = Some(Box::new(clock));
        self
    }

    fn now(&mut self) -> i64 {
        match &mut self.clock {
            Some(c) => c(),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }

    /// What has been generated so far.
    pub fn truth(&self) -> Truth {
        Truth {
            events: self.emitted,
            duplicates: self.duplicates,
            malformed: self.malformed,
            counts: self
                .truth
                .iter()
                .map(|(post, n)| (format!("p{post}"), *n))
                .collect(),
        }
    }

    /// Who does what to `post`: at the no-op ratio, an action that changes no liker (a liker's
    /// second tap, or an unlike by a user who does not like it); else one of its likers takes the
    /// like back (at the unlike ratio), or a user who does not like it yet likes it (a post every
    /// drawn user likes already gets an unlike instead).
    /// The third value says whether the action changes the post's likers.
    fn action_on(&mut self, post: u64) -> (u64, Action, bool) {
        if self.no_op_ratio > 0.0 && self.rng.gen::<f64>() < self.no_op_ratio {
            let likers = self.likers.entry(post).or_default();
            if !likers.is_empty() && self.rng.gen::<bool>() {
                return (
                    likers[self.rng.gen_range(0..likers.len())],
                    Action::Like,
                    false,
                );
            }
            let user = self.rng.gen_range(1..=self.cfg.users.max(1));
            if !self.liked.contains(&(post, user)) {
                return (user, Action::Unlike, false);
            }
        }
        let likers = self.likers.entry(post).or_default();
        let unlike = !likers.is_empty() && self.rng.gen::<f64>() < self.cfg.unlike_ratio;
        if !unlike {
            for _ in 0..32 {
                let user = self.rng.gen_range(1..=self.cfg.users.max(1));
                if self.liked.insert((post, user)) {
                    likers.push(user);
                    return (user, Action::Like, true);
                }
            }
        }
        // Unliking, or every user drawn likes it already (so it has likers).
        let i = self.rng.gen_range(0..likers.len());
        let user = likers.swap_remove(i);
        self.liked.remove(&(post, user));
        (user, Action::Unlike, true)
    }

    fn malformed_record(&mut self) -> PutEntry {
        let post = format!("p{}", self.zipf.sample(&mut self.rng) as u64);
        let id = self.rng.gen::<u64>();
        let data = match self.rng.gen_range(0..5) {
            0 => format!("{{\"event_id\":\"{id:x}\",\"post_id\":\"{post}\""),
            1 => format!(
                r#"{{"event_id":"{id:x}","post_id":"{post}","user_id":"u1","action":"love","created_at":1}}"#
            ),
            2 => format!(
                r#"{{"event_id":"{id:x}","post_id":"{post}","user_id":"u1","action":"like"}}"#
            ),
            3 => format!(
                r#"{{"event_id":"{}","post_id":"{post}","user_id":"u1","action":"like","created_at":1}}"#,
                "x".repeat(65)
            ),
            _ => "\u{0}\u{1}binary garbage".to_owned(),
        };
        PutEntry {
            partition_key: post,
            data: data.into_bytes(),
        }
    }
}

impl Iterator for Generator {
    type Item = (Kind, PutEntry);

    fn next(&mut self) -> Option<(Kind, PutEntry)> {
        if self.emitted >= self.events {
            return None;
        }
        let r: f64 = self.rng.gen();
        if r < self.cfg.malformed_ratio {
            self.malformed += 1;
            return Some((Kind::Malformed, self.malformed_record()));
        }
        if r < self.cfg.malformed_ratio + self.cfg.duplicate_ratio && !self.recent.is_empty() {
            let i = self.rng.gen_range(0..self.recent.len());
            self.duplicates += 1;
            return Some((Kind::Duplicate, self.recent[i].clone()));
        }
        let post = self.zipf.sample(&mut self.rng) as u64;
        let (user, action, changes) = self.action_on(post);
        let (post_id, user_id) = (format!("p{post}"), format!("u{user}"));
        let created_at = self.now();
        // Ordered by time, then by emission: a user's unlike sorts after their like even when
        // both were created in the same millisecond.
        let event_id = format!(
            "{created_at:011x}{:010x}{:06x}",
            self.emitted,
            self.rng.gen::<u32>() & 0xff_ffff
        );
        let delta = if changes { action.delta() } else { 0 };
        *self.truth.entry(post).or_default() += delta;
        self.emitted += 1;
        let entry = PutEntry {
            partition_key: post_id.clone(),
            data: encode(&LikeEvent {
                event_id,
                post_id,
                user_id,
                action,
                created_at,
            }),
        };
        if self.cfg.duplicate_ratio > 0.0 {
            if self.recent.len() >= 1_000 {
                self.recent.pop_front();
            }
            self.recent.push_back(entry.clone());
        }
        Some((Kind::Event, entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::event::decode;

    #[test]
    fn truth_matches_what_was_generated() {
        truth_matches(0.0);
        // With actions that change no liker: the likers are still the truth (the events' net
        // count is not, as it should not be).
        truth_matches(0.1);
    }

    fn truth_matches(no_op_ratio: f64) {
        let cfg = GenConfig {
            posts: 50,
            unlike_ratio: 0.2,
            duplicate_ratio: 0.05,
            malformed_ratio: 0.01,
            ..GenConfig::default()
        };
        let run = Generation {
            no_op_ratio,
            ..Generation::of(cfg, 5_000)
        };
        let mut g = Generator::new(run).with_clock(|| 1_700_000_000_000);
        let mut seen = std::collections::HashSet::new();
        let mut counts: HashMap<String, i64> = HashMap::new();
        // Each (post, user)'s latest action, by time and then event id: the likers.
        let mut latest: HashMap<(String, String), (i64, String, bool)> = HashMap::new();
        let (mut dups, mut bad) = (0, 0);
        for (kind, e) in g.by_ref() {
            match decode(&e.data) {
                Err(_) => {
                    assert_eq!(kind, Kind::Malformed);
                    bad += 1;
                }
                Ok(ev) => {
                    assert_eq!(e.partition_key, ev.post_id);
                    let key = (ev.post_id.clone(), ev.user_id.clone());
                    let l = latest
                        .entry(key)
                        .or_insert((i64::MIN, String::new(), false));
                    if (ev.created_at, &ev.event_id) > (l.0, &l.1) {
                        *l = (
                            ev.created_at,
                            ev.event_id.clone(),
                            ev.action == Action::Like,
                        );
                    }
                    if seen.insert(ev.event_id.clone()) {
                        assert_eq!(kind, Kind::Event);
                        *counts.entry(ev.post_id).or_default() += ev.action.delta();
                    } else {
                        assert_eq!(kind, Kind::Duplicate);
                        dups += 1;
                    }
                }
            }
        }
        let t = g.truth();
        assert_eq!((t.events, t.duplicates, t.malformed), (5_000, dups, bad));
        assert!(dups > 0 && bad > 0);
        counts.retain(|_, v| *v != 0);
        let mut truth = t.counts.clone();
        truth.retain(|_, v| *v != 0);
        assert_eq!(
            counts == truth,
            no_op_ratio == 0.0,
            "events count as likers only without no-ops"
        );
        let mut likers: HashMap<String, i64> = HashMap::new();
        for ((post, _), (_, _, liked)) in latest {
            if liked {
                *likers.entry(post).or_default() += 1;
            }
        }
        assert_eq!(likers, truth, "the events' likers are the truth");
        assert!(
            t.counts.values().all(|&v| v >= 0),
            "unlikes only hit liked posts"
        );
    }

    #[test]
    fn zipf_puts_most_likes_on_the_first_posts() {
        let mut g = Generator::new(Generation::of(
            GenConfig {
                posts: 1_000,
                unlike_ratio: 0.0,
                ..GenConfig::default()
            },
            20_000,
        ));
        g.by_ref().for_each(drop);
        let t = g.truth();
        assert!(t.counts["p1"] > t.counts.get("p100").copied().unwrap_or(0) * 10);
    }
}
