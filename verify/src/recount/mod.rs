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
//! by `created_at`, then the event id, decides (a creation time is taken at its word, however
//! far from its arrival); a post's count is its users whose latest action is a like, and
//! "since T" those of them whose like was created at or after T's minute. Copies change nothing,
//! so no horizon leaves a count open.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tally_core::kpl::{user_records, UserRecords};
use tally_core::ports::ShardInfo;
use tally_core::seq::{Position, SeqNo};

use super::partition::{self, size, Part};

mod events;
mod likers;

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

/// How a count mode recounts ([`events`], [`likers`]): what it keeps of each event in the pass's
/// keys, and what a post's count is. Chosen once, when the recount is made; the rest of the
/// recount (which records are applied, the passes, the dead letters) does not ask which.
trait Counting: Send {
    /// The key [`partition`] holds the event under.
    fn key(&self, ev: &tally_core::event::LikeEvent) -> u64;
    /// Takes one event of the pass's keys from lineage `scope`; `beyond`: its shard and place
    /// when it is after its shard's checkpoint (else it is applied). The bytes its state grew
    /// by, and the record kept beyond the checkpoint.
    fn take(
        &mut self,
        ev: tally_core::event::LikeEvent,
        key: u64,
        scope: usize,
        arrival_ms: i64,
        beyond: Option<(&str, Position)>,
    ) -> (usize, Option<Beyond>);
    /// Once every record is read: the posts' counts, and the events counted, their copies and
    /// their late copies.
    fn finish(&mut self, tally: &mut Tally);
    /// Each post's applied count (after [`Counting::finish`]).
    fn posts(&self) -> &HashMap<String, PostRecount>;
    /// What one read of `post` should show given `held`, the records after their checkpoints the
    /// read's markers cover: the applied count with those merged in, and those still to add as
    /// deltas.
    fn with_held<'a>(&self, post: &str, held: Vec<&'a Beyond>) -> (PostRecount, Vec<&'a Beyond>);
    /// Up to `n` applied edges — (post, user, liked) — of posts not `moving`; `None` when the
    /// mode keeps no edges.
    fn sample_edges(&self, n: usize, moving: &HashSet<&str>)
        -> Option<Vec<(String, String, bool)>>;
    /// One key per item held.
    fn keys(&self, out: &mut Vec<u64>);
    /// Gives up every item whose key is `hi` or above.
    fn retain_below(&mut self, hi: u64);
    /// What it holds, by [`partition::size`].
    fn held_bytes(&self) -> usize;
}

/// The recount of a stream up to the counter's checkpoints.
pub struct Recount {
    /// How it counts.
    mode: Box<dyn Counting>,
    /// What the records are.
    input: tally_core::input::Input,
    applied: HashMap<String, Applied>,
    lineage: HashMap<String, usize>,
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
    pub beyond: Vec<Beyond>,
    /// Malformed user records at or before their shard's checkpoint: each must be a dead letter.
    pub malformed: BTreeSet<(String, Position)>,
    /// The last position read per shard, and the first (what an unexpected letter is looked for
    /// between).
    pub read: HashMap<String, (Position, Position)>,
    pub tally: Tally,
}

impl Recount {
    /// A recount of what a store counting `mode` counts (counting events, a copy recognised
    /// within `horizon_ms`; their lineages share a duplicate scope) of `shards`, against the
    /// counter's lease `rows` (see [`applied`]).
    pub fn of(
        mode: tally_core::edge::CountMode,
        horizon_ms: i64,
        shards: &[ShardInfo],
        rows: &HashMap<String, Row>,
    ) -> Recount {
        Recount {
            mode: match mode.keeps_edges() {
                true => Box::<likers::Likers>::default(),
                false => Box::new(events::Events::new(horizon_ms)),
            },
            input: tally_core::input::Input::default(),
            applied: applied(shards, rows),
            lineage: lineages(shards),
            part: Part::ALL,
            budget: usize::MAX,
            bytes: 0,
            next_shrink: usize::MAX,
            keeps_letters: true,
            over_budget: false,
            beyond: Vec::new(),
            malformed: BTreeSet::new(),
            read: HashMap::new(),
            tally: Tally::default(),
        }
    }

    /// Holds only the keys of `part` (and of it, less when what it holds nears `budget` bytes);
    /// keeps the malformed records if `keeps_letters`.
    pub fn within(mut self, part: Part, budget: usize, keeps_letters: bool) -> Recount {
        self.part = part;
        self.budget = size::held_within(budget);
        self.next_shrink = self.budget;
        self.keeps_letters = keeps_letters;
        self
    }

    /// The keys this pass held to its end (the next pass starts where it stops).
    pub fn part(&self) -> Part {
        self.part
    }

    /// Reads the records by `input`'s contract (a table's change records, whose other items are
    /// skipped).
    pub fn input(mut self, input: tally_core::input::Input) -> Recount {
        self.input = input;
        self
    }

    /// Once every record is read: the posts' applied counts and what the pass met.
    pub fn finish(&mut self) {
        self.mode.finish(&mut self.tally);
        self.tally.beyond_checkpoint = self.beyond.len() as u64;
    }

    /// Each post's applied count (once finished).
    pub fn posts(&self) -> &HashMap<String, PostRecount> {
        self.mode.posts()
    }

    /// What one read of `post` should show given `held` (see `Counting::with_held`).
    pub fn with_held<'a>(
        &self,
        post: &str,
        held: Vec<&'a Beyond>,
    ) -> (PostRecount, Vec<&'a Beyond>) {
        self.mode.with_held(post, held)
    }

    /// Up to `n` applied edges — (post, user, liked) — of posts with no record after a
    /// checkpoint (a window may be writing those), spread over the posts, in a fixed order;
    /// `None` counting events (no edges are kept).
    pub fn sample_edges(&self, n: usize) -> Option<Vec<(String, String, bool)>> {
        let moving: HashSet<&str> = self.beyond.iter().map(|b| b.post_id.as_str()).collect();
        self.mode.sample_edges(n, &moving)
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
        let ev = match self.input.decode(data) {
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
        let key = self.mode.key(&ev);
        if !self.part.contains(key) {
            return;
        }
        let scope = self.lineage.get(shard_id).copied().unwrap_or(usize::MAX);
        let beyond = (!self.applied(shard_id, &at)).then_some((shard_id, at));
        let (bytes, beyond) = self.mode.take(ev, key, scope, arrival_ms, beyond);
        self.bytes += bytes;
        if let Some(b) = beyond {
            self.bytes += beyond_size(&b);
            self.beyond.push(b);
        }
        self.keep_within_budget();
    }

    /// Past the budget, gives up the upper half of the keys it holds (and what it kept of them)
    /// to a later pass. A part it cannot split further (everything on one key) is let grow, and
    /// tried again only once it has grown by a quarter, so no record pays for the attempt.
    fn keep_within_budget(&mut self) {
        if self.bytes <= self.next_shrink {
            return;
        }
        let mut keys: Vec<u64> = self.beyond.iter().map(|b| b.key).collect();
        self.mode.keys(&mut keys);
        match partition::split_point(keys) {
            Some(hi) => {
                self.part.hi = Some(hi);
                self.mode.retain_below(hi);
                self.beyond.retain(|b| b.key < hi);
                self.beyond.shrink_to_fit();
                self.bytes =
                    self.mode.held_bytes() + self.beyond.iter().map(beyond_size).sum::<usize>();
            }
            None => self.over_budget = true,
        }
        self.next_shrink = self.budget.max(self.bytes.saturating_add(self.bytes / 4));
    }

    /// The applied total of every post.
    pub fn total(&self) -> i64 {
        self.posts().values().map(|p| p.total).sum()
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

/// Each event's first copy, by lineage (counting likers, one scope: copies change nothing
/// wherever they land) and id: what both modes keep of every event.
#[derive(Default)]
struct FirstCopies(HashMap<(usize, String), Seen>);

impl FirstCopies {
    /// The events counted, their copies within the horizon and their later copies.
    fn tally(&self, t: &mut Tally) {
        t.counted = self.0.len() as u64;
        t.duplicates = self.0.values().map(|s| s.copies).sum();
        t.late_copies = self.0.values().map(|s| s.late).sum();
    }

    fn keys(&self, out: &mut Vec<u64>) {
        out.extend(self.0.values().map(|s| s.key));
    }

    fn retain_below(&mut self, hi: u64) {
        self.0.retain(|_, s| s.key < hi);
        self.0.shrink_to_fit();
    }

    fn held_bytes(&self) -> usize {
        self.0.keys().map(|(_, e)| size::seen(e)).sum()
    }
}

fn beyond_size(b: &Beyond) -> usize {
    let (user, event) = match &b.action {
        Some((u, l)) => (Some(u.as_str()), Some(l.event_id.as_str())),
        None => (None, None),
    };
    size::beyond(&b.shard_id, &b.post_id, user, event)
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
    use tally_core::edge::CountMode;

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
        let mut r = Recount::of(CountMode::Events, 1_000, &shards, &rows);
        r.record("a", &seq(1), 0, &ev("e1", "p", "like", 60_000));
        r.record("a", &seq(2), 500, &ev("e1", "p", "like", 60_000)); // a retry: once
        r.record("b", &seq(3), 900, &ev("e1", "p", "like", 60_000)); // the child: same lineage
        r.record("c", &seq(4), 900, &ev("e1", "p", "like", 60_000)); // another key's shard: again
        r.record("a", &seq(5), 5_000, &ev("e1", "p", "like", 60_000)); // late: open
        r.record("a", &seq(6), 5_000, &ev("e2", "p", "unlike", 120_000));
        r.record("a", &seq(7), 5_000, b"not json");
        r.record("a", &seq(200), 5_000, &ev("e3", "p", "like", 120_000)); // after the checkpoint
        r.finish();
        let p = &r.posts()["p"];
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
        // Every record arrives at T; u4's device clock is far ahead, and its like is taken at
        // its word (an edge orders events by their content alone).
        const T: i64 = 1_000_000;
        let mut r = Recount::of(CountMode::Likers, 0, &shards, &rows);
        r.record("a", &seq(1), T, &act("e1", "u1", "like", 60_000));
        r.record("a", &seq(2), T, &act("e2", "u1", "like", 120_000)); // a double tap
        r.record("a", &seq(3), T, &act("e3", "u2", "unlike", 60_000)); // of nothing
        r.record("a", &seq(4), T, &act("e5", "u3", "unlike", 180_000));
        r.record("a", &seq(5), T, &act("e4", "u3", "like", 60_000)); // older: out of order
        r.record("a", &seq(6), T, &act("e6", "u4", "like", 9_000_000)); // clock ahead
        r.record("a", &seq(7), T, &act("e7", "u4", "unlike", T + 30_000)); // older than it
        r.record("a", &seq(200), T, &act("e8", "u2", "like", 240_000)); // beyond
        r.finish();
        let p = &r.posts()["p"];
        assert_eq!((p.total, p.since(2), p.since(3)), (2, 2, 1));
        let held: Vec<&Beyond> = r.beyond.iter().collect();
        let (with, _) = r.with_held("p", held);
        assert_eq!((with.total, with.since(4)), (3, 2));
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
            let r = if likers {
                Recount::of(CountMode::Likers, 0, &shards, &rows)
            } else {
                Recount::of(CountMode::Events, 60_000, &shards, &rows)
            };
            let mut r = r.within(part, budget, passes == 0);
            for (shard, s, arrival, data) in records {
                r.record(shard, &seq(*s), *arrival, data);
            }
            r.finish();
            passes += 1;
            counted += r.tally.counted;
            for (post, p) in r.posts() {
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
