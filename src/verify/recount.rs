//! The reference `tally verify` compares the store with: a deliberately plain recount of the
//! records, written apart from the counter. It shares only the event contract with it (the
//! decoder, the KPL record format, positions): no windows, no summary items, no dedup filter.
//!
//! The rule it counts by is the documented one (ARCHITECTURE, "Dedup"): a post's count is its
//! distinct `event_id`s with `like` minus those with `unlike`, where a copy of an id is the same
//! event when it arrives in the same shard lineage within the dedup horizon of the first copy. A
//! copy later than the horizon may or may not be recognised by the counter (its filter forgets a
//! whole window at a time), so it widens the post's expected count into a range instead of
//! moving it.
//!
//! A store that counts likers is recounted by that rule instead: each (post, user)'s latest action
//! by `created_at` (taken as the arrival when it is further past it than the allowed clock skew),
//! then the event id, decides; a post's count is its users whose latest action is a like, and
//! "since T" those of them whose like was created at or after T's minute. Copies change nothing,
//! so no horizon leaves a count open.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tally_core::kpl::{user_records, UserRecords};
use tally_core::ports::ShardInfo;
use tally_core::seq::{Position, SeqNo};

use super::partition::{self, size, Part};

/// A minute since the epoch.
pub type Minute = i64;

/// What the recount holds for one post: the records the counter has applied (at or before its
/// checkpoint) and the copies whose counting the dedup horizon leaves open.
#[derive(Clone, Debug, Default)]
pub struct PostRecount {
    pub total: i64,
    /// Net likes by the minute they were created in.
    pub minutes: BTreeMap<Minute, i64>,
    /// Late copies' deltas: each may have been counted once more, or not.
    pub late: Vec<(Minute, i64)>,
}

impl PostRecount {
    fn add(&mut self, minute: Minute, delta: i64) {
        self.total += delta;
        *self.minutes.entry(minute).or_insert(0) += delta;
    }

    /// Net likes created at or after `from`.
    pub fn since(&self, from: Minute) -> i64 {
        self.minutes.range(from..).map(|(_, n)| n).sum()
    }
}

/// What the counter's lease row says of a shard.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub checkpoint: Option<Position>,
    pub finished: bool,
}

/// How much of a shard the counter has applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    Nothing,
    Through(Position),
    All,
}

/// Each shard's applied records, from the counter's lease `rows`. A finished shard's are all
/// applied. So are those of a shard without a row whose child has one that shows progress (or
/// is itself all applied): a child is read only once its parents are finished, and a finished
/// shard's row is deleted once its children have moved on (the worker's clean-up), while the
/// store keeps what it applied. Any other shard without a row has nothing applied.
pub fn applied(shards: &[ShardInfo], rows: &HashMap<String, Row>) -> HashMap<String, Applied> {
    let mut out: HashMap<String, Applied> = shards
        .iter()
        .map(|s| {
            let a = match rows.get(&s.shard_id) {
                Some(Row { finished: true, .. }) => Applied::All,
                Some(Row {
                    checkpoint: Some(c),
                    ..
                }) => Applied::Through(c.clone()),
                _ => Applied::Nothing,
            };
            (s.shard_id.clone(), a)
        })
        .collect();
    // Up the parent links until nothing changes (a lineage is a few generations deep).
    loop {
        let mut changed = false;
        for s in shards {
            let child_moved = matches!(
                out.get(&s.shard_id),
                Some(Applied::All | Applied::Through(_))
            );
            if !child_moved {
                continue;
            }
            for p in &s.parents {
                if !rows.contains_key(p) && out.get(p) == Some(&Applied::Nothing) {
                    out.insert(p.clone(), Applied::All);
                    changed = true;
                }
            }
        }
        if !changed {
            return out;
        }
    }
}

/// A counted user record after its shard's checkpoint: the counter may be applying it while the
/// check runs, and a post's summary says whether it holds it yet.
#[derive(Clone, Debug)]
pub struct Beyond {
    /// Its place in the key space ([`partition::key`]).
    pub key: u64,
    pub shard_id: String,
    pub at: Position,
    pub post_id: String,
    pub minute: Minute,
    pub delta: i64,
    /// A late copy (see the module's rule).
    pub late: bool,
    /// Likers: the action on its edge.
    pub action: Option<(String, Latest)>,
}

/// Likers: a user's latest action on a post — its time (ms), event id, and whether it likes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latest {
    pub at_ms: i64,
    pub event_id: String,
    pub liked: bool,
}

impl Latest {
    /// Keeps `other` if it comes later (by time, then event id).
    fn merge(&mut self, other: &Latest) {
        if (other.at_ms, &other.event_id) > (self.at_ms, &self.event_id) {
            *self = other.clone();
        }
    }
}

/// How many of each the recount met. Records, user records, malformed and skipped ones are of
/// the whole stream (every pass reads it); the rest, of the pass's keys.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Tally {
    /// Kinesis records read.
    pub records: u64,
    /// User records (a KPL aggregate holds several).
    pub user_records: u64,
    pub counted: u64,
    pub duplicates: u64,
    /// Copies later than the horizon (each leaves its post's count a range).
    pub late_copies: u64,
    pub malformed: u64,
    /// Change records of items that are no likes (read and skipped).
    pub skipped: u64,
    /// Records after their shard's checkpoint.
    pub beyond_checkpoint: u64,
}

/// The recount of a stream up to the counter's checkpoints.
pub struct Recount {
    horizon_ms: i64,
    /// Counting likers, with this clock skew allowed (ms); `None`: events.
    likers: Option<i64>,
    /// What the records are (`None`: like events).
    input: Option<std::sync::Arc<tally_core::input::InputConfig>>,
    /// Likers: each post's users' latest applied action.
    edges: HashMap<String, HashMap<String, Latest>>,
    applied: HashMap<String, Applied>,
    lineage: HashMap<String, usize>,
    /// First arrival of each event id, per lineage.
    first_seen: HashMap<(usize, String), Seen>,
    /// The keys this pass holds; what it holds past which it gives up half of them.
    part: Part,
    /// What it may hold by [`partition::size`]'s estimate.
    budget: usize,
    /// What it holds ([`partition::size`]), and past which it next tries to give some up.
    bytes: usize,
    next_shrink: usize,
    /// Whether it keeps the malformed records (one pass does).
    keeps_letters: bool,
    /// It holds more than the budget on a key it cannot give up.
    pub over_budget: bool,
    pub posts: HashMap<String, PostRecount>,
    pub beyond: Vec<Beyond>,
    /// Malformed user records at or before their shard's checkpoint: each must be a dead letter.
    pub malformed: BTreeSet<(String, Position)>,
    /// The last position read per shard, and the first (what an unexpected letter is looked for
    /// between).
    pub read: HashMap<String, (Position, Position)>,
    pub tally: Tally,
}

impl Recount {
    /// A recount of `shards` (their lineages share a duplicate scope) against the counter's
    /// lease `rows` (see [`applied`]).
    pub fn new(horizon_ms: i64, shards: &[ShardInfo], rows: &HashMap<String, Row>) -> Recount {
        Recount {
            horizon_ms,
            likers: None,
            input: None,
            edges: HashMap::new(),
            applied: applied(shards, rows),
            lineage: lineages(shards),
            first_seen: HashMap::new(),
            part: Part::ALL,
            budget: usize::MAX,
            bytes: 0,
            next_shrink: usize::MAX,
            keeps_letters: true,
            over_budget: false,
            posts: HashMap::new(),
            beyond: Vec::new(),
            malformed: BTreeSet::new(),
            read: HashMap::new(),
            tally: Tally::default(),
        }
    }

    /// Holds only the keys of `part` (and of it, less when what it holds passes `budget` bytes);
    /// keeps the malformed records if `keeps_letters`.
    pub fn within(mut self, part: Part, budget: usize, keeps_letters: bool) -> Recount {
        self.part = part;
        self.budget = size::held_within(budget);
        self.next_shrink = self.budget;
        self.keeps_letters = keeps_letters;
        self
    }

    /// What it holds by [`partition::size`]'s estimate, in bytes.
    pub fn held(&self) -> usize {
        self.bytes
    }

    /// The keys this pass held to its end (the next pass starts where it stops).
    pub fn part(&self) -> Part {
        self.part
    }

    /// Reads the records by `input`'s contract (a table's change records, whose other items are
    /// skipped).
    pub fn input(
        mut self,
        input: Option<std::sync::Arc<tally_core::input::InputConfig>>,
    ) -> Recount {
        self.input = input;
        self
    }

    /// Recounts likers, a `created_at` further than `skew_ms` past its arrival taken as the
    /// arrival.
    pub fn likers(mut self, skew_ms: i64) -> Recount {
        self.likers = Some(skew_ms);
        self
    }

    /// Whether it recounts likers.
    pub fn counts_likers(&self) -> bool {
        self.likers.is_some()
    }

    /// Once every record is read: the posts' applied counts (likers) and what the pass met.
    pub fn finish(&mut self) {
        self.tally.counted = self.first_seen.len() as u64;
        self.tally.duplicates = self.first_seen.values().map(|s| s.copies).sum();
        self.tally.late_copies = self.first_seen.values().map(|s| s.late).sum();
        self.tally.beyond_checkpoint = self.beyond.len() as u64;
        if self.likers.is_none() {
            return;
        }
        for (post, users) in &self.edges {
            self.posts.insert(post.clone(), count_of(users.values()));
        }
    }

    /// Likers: a post's count with the records after their checkpoints in `held` (which its
    /// summary shows applied) merged into its users' latest actions.
    pub fn likers_with(&self, post: &str, held: &[&Beyond]) -> PostRecount {
        let mut users = self.edges.get(post).cloned().unwrap_or_default();
        for b in held {
            if let Some((user, l)) = &b.action {
                users
                    .entry(user.clone())
                    .and_modify(|e| e.merge(l))
                    .or_insert_with(|| l.clone());
            }
        }
        count_of(users.values())
    }

    /// Likers: up to `n` applied edges — (post, user, liked) — of posts with no record after a
    /// checkpoint (a window may be writing those), spread over the posts, in a fixed order.
    pub fn sample_edges(&self, n: usize) -> Vec<(String, String, bool)> {
        let moving: std::collections::HashSet<&str> =
            self.beyond.iter().map(|b| b.post_id.as_str()).collect();
        let mut posts: Vec<&String> = self
            .edges
            .keys()
            .filter(|p| !moving.contains(p.as_str()))
            .collect();
        posts.sort_unstable();
        let mut out = Vec::new();
        // One edge of each post per round, so a few hot posts do not fill the sample.
        let mut users: Vec<Vec<(&String, &Latest)>> = posts
            .iter()
            .map(|p| {
                let mut u: Vec<(&String, &Latest)> = self.edges[*p].iter().collect();
                u.sort_unstable_by(|a, b| b.0.cmp(a.0));
                u
            })
            .collect();
        while out.len() < n && users.iter().any(|u| !u.is_empty()) {
            for (p, u) in posts.iter().zip(users.iter_mut()) {
                if let Some((user, l)) = u.pop() {
                    out.push(((*p).clone(), user.clone(), l.liked));
                    if out.len() == n {
                        break;
                    }
                }
            }
        }
        out
    }

    /// Counts one Kinesis record of `shard_id`, in the shard's order.
    pub fn record(&mut self, shard_id: &str, seq: &SeqNo, arrival_ms: i64, data: &[u8]) {
        self.tally.records += 1;
        match user_records(data) {
            Ok(UserRecords::One(d)) => {
                self.user_record(shard_id, Position::whole(seq.clone()), arrival_ms, d)
            }
            Ok(UserRecords::Aggregated(users)) => {
                for (i, d) in users.iter().enumerate() {
                    let at = Position {
                        seq: seq.clone(),
                        sub: Some(i as u32),
                    };
                    self.user_record(shard_id, at, arrival_ms, d);
                }
            }
            Err(_) => {
                self.tally.user_records += 1;
                self.malformed_at(shard_id, Position::whole(seq.clone()));
            }
        }
        let whole = Position::whole(seq.clone());
        self.read
            .entry(shard_id.to_owned())
            .and_modify(|(_, last)| *last = whole.clone())
            .or_insert_with(|| (whole.clone(), whole));
    }

    /// Whether the counter has applied the user record at `at` of `shard_id`.
    pub fn applied(&self, shard_id: &str, at: &Position) -> bool {
        match self.applied.get(shard_id) {
            Some(Applied::All) => true,
            Some(Applied::Through(c)) => at <= c,
            Some(Applied::Nothing) | None => false,
        }
    }

    fn malformed_at(&mut self, shard_id: &str, at: Position) {
        self.tally.malformed += 1;
        if self.keeps_letters && self.applied(shard_id, &at) {
            self.malformed.insert((shard_id.to_owned(), at));
        }
    }

    fn user_record(&mut self, shard_id: &str, at: Position, arrival_ms: i64, data: &[u8]) {
        self.tally.user_records += 1;
        let ev = match tally_core::input::decode(self.input.as_deref(), data) {
            Ok(tally_core::input::Decoded::Event(ev)) => ev.into_owned(),
            Ok(tally_core::input::Decoded::Skipped) => {
                self.tally.skipped += 1;
                return;
            }
            Err(_) => {
                self.malformed_at(shard_id, at);
                return;
            }
        };
        if let Some(skew) = self.likers {
            return self.user_action(shard_id, at, arrival_ms, ev, skew);
        }
        let key = partition::key(&ev.post_id, None);
        if !self.part.contains(key) {
            return;
        }
        let scope = self.lineage.get(shard_id).copied().unwrap_or(usize::MAX);
        let late = match self.first_seen.get_mut(&(scope, ev.event_id.clone())) {
            None => {
                self.bytes += size::seen(&ev.event_id);
                self.first_seen
                    .insert((scope, ev.event_id), Seen::first(arrival_ms, key));
                false
            }
            Some(first) if (arrival_ms - first.arrival_ms).abs() <= self.horizon_ms => {
                first.copies += 1;
                return self.keep_within_budget();
            }
            Some(first) => {
                first.late += 1;
                true
            }
        };
        let minute = ev.created_at.div_euclid(60_000);
        let delta = ev.action.delta();
        if self.applied(shard_id, &at) {
            let p = match self.posts.get_mut(&ev.post_id) {
                Some(p) => p,
                None => {
                    self.bytes += size::post(&ev.post_id);
                    self.posts.entry(ev.post_id).or_default()
                }
            };
            if late {
                self.bytes += size::LATE;
                p.late.push((minute, delta));
            } else {
                if !p.minutes.contains_key(&minute) {
                    self.bytes += size::MINUTE;
                }
                p.add(minute, delta);
            }
        } else {
            self.beyond_checkpoint(Beyond {
                key,
                shard_id: shard_id.to_owned(),
                at,
                post_id: ev.post_id,
                minute,
                delta,
                late,
                action: None,
            });
        }
        self.keep_within_budget();
    }

    /// Likers: one user's action, kept if it is the latest of its edge (every copy is read: a
    /// copy changes nothing, wherever it lands).
    fn user_action(
        &mut self,
        shard_id: &str,
        at: Position,
        arrival_ms: i64,
        ev: tally_core::event::LikeEvent,
        skew_ms: i64,
    ) {
        let key = partition::key(&ev.post_id, Some(&ev.user_id));
        if !self.part.contains(key) {
            return;
        }
        // The event's first copy decides its clamp: a copy that arrives later orders as it did.
        let first_arrival = match self.first_seen.entry((0, ev.event_id.clone())) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                o.get_mut().copies += 1;
                o.get().arrival_ms
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                self.bytes += size::seen(v.key().1.as_str());
                v.insert(Seen::first(arrival_ms, key)).arrival_ms
            }
        };
        // The clock-skew rule, as documented (README, "counter.max_clock_skew_secs").
        let at_ms = if ev.created_at > first_arrival.saturating_add(skew_ms) {
            first_arrival
        } else {
            ev.created_at
        };
        let latest = Latest {
            at_ms,
            event_id: ev.event_id,
            liked: ev.action == tally_core::event::Action::Like,
        };
        if self.applied(shard_id, &at) {
            let users = match self.edges.get_mut(&ev.post_id) {
                Some(u) => u,
                None => {
                    self.bytes += size::post(&ev.post_id);
                    self.edges.entry(ev.post_id).or_default()
                }
            };
            match users.get_mut(&ev.user_id) {
                Some(e) => e.merge(&latest),
                None => {
                    self.bytes += size::edge(&ev.user_id, &latest.event_id);
                    users.insert(ev.user_id, latest);
                }
            }
        } else {
            self.beyond_checkpoint(Beyond {
                key,
                shard_id: shard_id.to_owned(),
                at,
                post_id: ev.post_id,
                minute: at_ms.div_euclid(60_000),
                delta: 0,
                late: false,
                action: Some((ev.user_id, latest)),
            });
        }
        self.keep_within_budget();
    }

    /// Keeps a record after its shard's checkpoint, for the posts' comparisons.
    fn beyond_checkpoint(&mut self, b: Beyond) {
        self.bytes += beyond_size(&b);
        self.beyond.push(b);
    }

    /// Past the budget, gives up the upper half of the keys it holds (and what it kept of them)
    /// to a later pass. A part it cannot split further (everything on one key) is let grow, and
    /// tried again only once it has grown by a quarter, so no record pays for the attempt.
    fn keep_within_budget(&mut self) {
        if self.bytes <= self.next_shrink {
            return;
        }
        match partition::split_point(self.keys()) {
            Some(hi) => {
                self.part.hi = Some(hi);
                self.retain_below(hi);
                self.bytes = self.held_bytes();
            }
            None => self.over_budget = true,
        }
        self.next_shrink = self.budget.max(self.bytes.saturating_add(self.bytes / 4));
    }

    /// One key per item held.
    fn keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.first_seen.values().map(|s| s.key).collect();
        keys.extend(self.beyond.iter().map(|b| b.key));
        for (post, users) in &self.edges {
            keys.extend(users.keys().map(|u| partition::key(post, Some(u))));
        }
        if self.likers.is_none() {
            keys.extend(self.posts.keys().map(|p| partition::key(p, None)));
        }
        keys
    }

    fn retain_below(&mut self, hi: u64) {
        self.first_seen.retain(|_, s| s.key < hi);
        self.beyond.retain(|b| b.key < hi);
        self.edges.retain(|post, users| {
            users.retain(|u, _| partition::key(post, Some(u)) < hi);
            !users.is_empty()
        });
        if self.likers.is_none() {
            self.posts.retain(|p, _| partition::key(p, None) < hi);
        }
        // What was given up is given back.
        self.first_seen.shrink_to_fit();
        self.beyond.shrink_to_fit();
        self.edges.shrink_to_fit();
        self.posts.shrink_to_fit();
    }

    /// What it holds, by [`partition::size`].
    fn held_bytes(&self) -> usize {
        let seen: usize = self.first_seen.keys().map(|(_, e)| size::seen(e)).sum();
        let beyond: usize = self.beyond.iter().map(beyond_size).sum();
        let edges: usize = self
            .edges
            .iter()
            .map(|(p, users)| {
                size::post(p)
                    + users
                        .iter()
                        .map(|(u, l)| size::edge(u, &l.event_id))
                        .sum::<usize>()
            })
            .sum();
        let posts: usize = self
            .posts
            .iter()
            .map(|(p, r)| {
                size::post(p) + r.minutes.len() * size::MINUTE + r.late.len() * size::LATE
            })
            .sum();
        seen + beyond + edges + posts
    }

    /// The applied total of every post.
    pub fn total(&self) -> i64 {
        self.posts.values().map(|p| p.total).sum()
    }

    /// Whether any copy left a count open.
    pub fn has_late_copies(&self) -> bool {
        self.tally.late_copies > 0
    }
}

/// An event's first copy: when it arrived, its key, and how many copies followed (within the
/// horizon, and later).
#[derive(Clone, Debug)]
struct Seen {
    arrival_ms: i64,
    key: u64,
    copies: u64,
    late: u64,
}

impl Seen {
    fn first(arrival_ms: i64, key: u64) -> Seen {
        Seen {
            arrival_ms,
            key,
            copies: 0,
            late: 0,
        }
    }
}

fn beyond_size(b: &Beyond) -> usize {
    let (user, event) = match &b.action {
        Some((u, l)) => (Some(u.as_str()), Some(l.event_id.as_str())),
        None => (None, None),
    };
    size::beyond(&b.shard_id, &b.post_id, user, event)
}

/// A post's count from its users' latest actions: those that like it, by the minute they did.
fn count_of<'a>(users: impl Iterator<Item = &'a Latest>) -> PostRecount {
    let mut p = PostRecount::default();
    for l in users.filter(|l| l.liked) {
        p.add(l.at_ms.div_euclid(60_000), 1);
    }
    p
}

/// Each shard's lineage: shards joined by parent links share one (a split's children and their
/// parent, a merge's parents and their child).
fn lineages(shards: &[ShardInfo]) -> HashMap<String, usize> {
    let index: HashMap<&str, usize> = shards
        .iter()
        .enumerate()
        .map(|(i, s)| (s.shard_id.as_str(), i))
        .collect();
    let mut up: Vec<usize> = (0..shards.len()).collect();
    fn root(up: &mut [usize], mut i: usize) -> usize {
        while up[i] != i {
            up[i] = up[up[i]];
            i = up[i];
        }
        i
    }
    for (i, s) in shards.iter().enumerate() {
        for p in &s.parents {
            if let Some(&j) = index.get(p.as_str()) {
                let (a, b) = (root(&mut up, i), root(&mut up, j));
                up[a] = b;
            }
        }
    }
    shards
        .iter()
        .enumerate()
        .map(|(i, s)| (s.shard_id.clone(), root(&mut up, i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            shard_id: id.into(),
            parents: parents.iter().map(|p| (*p).to_owned()).collect(),
            closed: false,
        }
    }

    fn ev(id: &str, post: &str, action: &str, created_at: i64) -> Vec<u8> {
        format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"u","action":"{action}","created_at":{created_at}}}"#
        )
        .into_bytes()
    }

    fn seq(n: u64) -> SeqNo {
        SeqNo::parse(&n.to_string()).unwrap()
    }

    fn through(n: u64) -> Row {
        Row {
            checkpoint: Some(Position::whole(seq(n))),
            finished: false,
        }
    }

    #[test]
    fn a_cleaned_up_parent_is_all_applied() {
        // a split into b and c; b merged with d into e. a's and b's rows were cleaned up.
        let shards = [
            shard("a", &[]),
            shard("b", &["a"]),
            shard("c", &["a"]),
            shard("d", &[]),
            shard("e", &["b", "d"]),
            shard("f", &[]),
        ];
        let mut rows: HashMap<String, Row> = [("c", 5), ("e", 7)]
            .into_iter()
            .map(|(s, n)| (s.to_owned(), through(n)))
            .collect();
        rows.insert(
            "d".into(),
            Row {
                checkpoint: Some(Position::whole(seq(9))),
                finished: true,
            },
        );
        let a = applied(&shards, &rows);
        assert_eq!(a["a"], Applied::All);
        assert_eq!(a["b"], Applied::All);
        assert_eq!(a["d"], Applied::All);
        assert_eq!(a["e"], Applied::Through(Position::whole(seq(7))));
        assert_eq!(
            a["f"],
            Applied::Nothing,
            "no row, no child: nothing applied"
        );
        // A child whose row shows no progress says nothing of its parent.
        rows.insert("e".into(), Row::default());
        rows.remove("c");
        let a = applied(&shards, &rows);
        assert_eq!(a["b"], Applied::Nothing);
        assert_eq!(a["a"], Applied::Nothing);
    }

    #[test]
    fn copies_count_once_within_the_horizon_and_per_lineage() {
        let shards = [shard("a", &[]), shard("b", &["a"]), shard("c", &[])];
        let rows = [("a", 100), ("b", 100), ("c", 100)]
            .into_iter()
            .map(|(s, n)| (s.to_owned(), through(n)))
            .collect();
        let mut r = Recount::new(1_000, &shards, &rows);
        r.record("a", &seq(1), 0, &ev("e1", "p", "like", 60_000));
        r.record("a", &seq(2), 500, &ev("e1", "p", "like", 60_000)); // a retry: once
        r.record("b", &seq(3), 900, &ev("e1", "p", "like", 60_000)); // the child: same lineage
        r.record("c", &seq(4), 900, &ev("e1", "p", "like", 60_000)); // another key's shard: again
        r.record("a", &seq(5), 5_000, &ev("e1", "p", "like", 60_000)); // late: open
        r.record("a", &seq(6), 5_000, &ev("e2", "p", "unlike", 120_000));
        r.record("a", &seq(7), 5_000, b"not json");
        r.record("a", &seq(200), 5_000, &ev("e3", "p", "like", 120_000)); // after the checkpoint
        r.finish();
        let p = &r.posts["p"];
        assert_eq!((p.total, p.since(1), p.since(2)), (1, 1, -1));
        assert_eq!(p.late, vec![(1, 1)]);
        assert_eq!(r.tally.duplicates, 2);
        assert_eq!(r.malformed.len(), 1);
        assert_eq!(r.beyond.len(), 1);
        assert_eq!(r.beyond[0].post_id, "p");
    }

    fn act(id: &str, user: &str, action: &str, created_at: i64) -> Vec<u8> {
        format!(
            r#"{{"event_id":"{id}","post_id":"p","user_id":"{user}","action":"{action}","created_at":{created_at}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn likers_are_each_user_s_latest_action() {
        let shards = [shard("a", &[])];
        let rows = [("a".to_owned(), through(100))].into();
        // Every record arrives at T; u4's device clock is far ahead.
        const T: i64 = 1_000_000;
        let mut r = Recount::new(1_000, &shards, &rows).likers(60_000);
        r.record("a", &seq(1), T, &act("e1", "u1", "like", 60_000));
        r.record("a", &seq(2), T, &act("e2", "u1", "like", 120_000)); // a double tap
        r.record("a", &seq(3), T, &act("e3", "u2", "unlike", 60_000)); // of nothing
        r.record("a", &seq(4), T, &act("e5", "u3", "unlike", 180_000));
        r.record("a", &seq(5), T, &act("e4", "u3", "like", 60_000)); // older: out of order
        r.record("a", &seq(6), T, &act("e6", "u4", "like", 9_000_000)); // clock ahead: at its arrival
        r.record("a", &seq(7), T, &act("e7", "u4", "unlike", T + 30_000));
        r.record("a", &seq(200), T, &act("e8", "u2", "like", 240_000)); // beyond
        r.finish();
        let p = &r.posts["p"];
        assert_eq!((p.total, p.since(2), p.since(3)), (1, 1, 0));
        let held: Vec<&Beyond> = r.beyond.iter().collect();
        let with = r.likers_with("p", &held);
        assert_eq!((with.total, with.since(4)), (2, 1));
    }

    /// Each post's total and count by minute.
    type Counts = BTreeMap<String, (i64, BTreeMap<Minute, i64>)>;

    /// Each post's recount over passes, summed over the passes that held its keys; how many
    /// passes there were, and the events counted.
    fn in_passes(
        records: &[(String, u64, i64, Vec<u8>)],
        likers: bool,
        budget: usize,
    ) -> (Counts, usize, u64) {
        let shards = [shard("a", &[]), shard("b", &[])];
        let rows: HashMap<String, Row> = [
            ("a".to_owned(), through(1_000_000)),
            ("b".to_owned(), through(1_000_000)),
        ]
        .into();
        let mut out = Counts::new();
        let (mut part, mut passes, mut counted) = (Part::ALL, 0, 0);
        loop {
            let mut r = Recount::new(60_000, &shards, &rows).within(part, budget, passes == 0);
            if likers {
                r = r.likers(300_000);
            }
            for (shard, s, arrival, data) in records {
                r.record(shard, &seq(*s), *arrival, data);
            }
            r.finish();
            passes += 1;
            counted += r.tally.counted;
            for (post, p) in &r.posts {
                let o = out.entry(post.clone()).or_default();
                o.0 += p.total;
                for (m, n) in &p.minutes {
                    *o.1.entry(*m).or_insert(0) += n;
                }
            }
            match r.part().next() {
                Some(next) => part = next,
                None => return (out, passes, counted),
            }
        }
    }

    #[test]
    fn passes_over_a_partition_recount_what_one_pass_does() {
        use rand::{Rng, SeedableRng};
        for seed in 0..6u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // A viral post (whose likers outgrow the budget alone) and a long tail; copies.
            let mut records: Vec<(String, u64, i64, Vec<u8>)> = Vec::new();
            for i in 0..3_000u64 {
                let shard = if rng.gen_bool(0.5) { "a" } else { "b" };
                if i > 0 && rng.gen_bool(0.05) {
                    // A copy of an earlier event, arriving again (later than the horizon too).
                    let (_, _, arrival, data) = records[rng.gen_range(0..records.len())].clone();
                    let later = arrival + rng.gen_range(0..120_000);
                    records.push((shard.to_owned(), i + 1, later, data));
                    continue;
                }
                let post = if rng.gen_bool(0.4) {
                    "viral".to_owned()
                } else {
                    format!("p{}", rng.gen_range(0..300))
                };
                let user = format!("u{}", rng.gen_range(0..400));
                let action = if rng.gen_bool(0.7) { "like" } else { "unlike" };
                // Some clocks ahead of the arrival by more than the allowed skew.
                let created = rng.gen_range(0..600_000);
                let arrival = created - rng.gen_range(-60_000..400_000);
                let data = format!(
                    r#"{{"event_id":"e{i}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{created}}}"#
                );
                records.push((shard.to_owned(), i + 1, arrival, data.into_bytes()));
            }
            for likers in [true, false] {
                let (one, passes, counted) = in_passes(&records, likers, usize::MAX);
                assert_eq!(passes, 1);
                let (many, passes, counted_in_passes) = in_passes(&records, likers, 20_000);
                assert!(passes > 4, "seed {seed}: {passes} passes");
                assert_eq!(counted_in_passes, counted, "seed {seed}, likers {likers}");
                assert_eq!(many, one, "seed {seed}, likers {likers}");
            }
        }
    }
}
