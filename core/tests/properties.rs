//! Properties over generated input: arbitrary bytes never panic the decoder and always end as an
//! event or a dead letter within the store's limits; the same records after the same checkpoint
//! always make the same window — the same deltas — including when the consumer restarts with
//! other settings (ARCHITECTURE.md's invariant); and a window's summary writes, however they are
//! cut short, repeated and raced by a stale writer, leave exactly its counts (the summary items'
//! invariant).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use tally_core::boundary::Parts;
use tally_core::dedup::{Dedup, DedupRecord};
use tally_core::event::decode;

use tally_core::buckets::{PostDelta, DAY_MS, MINUTE_MS};
use tally_core::dead_letter::{DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON};
use tally_core::ports::StreamRecord;
use tally_core::summary::{self, Attrs, Known, LiveState, Plan, Refused};
use tally_core::window::{Bound, ClosedWindow, WindowBuilder};
use tally_core::{Position, SeqNo};

fn record(i: usize, arrival_ms: i64, data: Vec<u8>) -> StreamRecord {
    StreamRecord {
        // Kinesis-like: long decimal strings, compared by length then bytes.
        seq: SeqNo::parse(&format!("4960{:020}", i + 1)).unwrap(),
        arrival_ms,
        partition_key: "k".into(),
        data,
    }
}

/// Records that look like events more often than not: valid ones with repeated ids (producer
/// retries), broken ones of every kind, and raw bytes.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    let id = 0u32..40;
    let post = prop::sample::select(vec!["p1", "p2", "p3", "p 4", ""]);
    let action = prop::sample::select(vec!["like", "unlike", "love"]);
    let created = prop_oneof![
        Just("1796000000000".to_owned()),
        Just("-5".to_owned()),
        Just("\"x\"".to_owned()),
        (0i64..4_000_000_000_000).prop_map(|v| v.to_string())
    ];
    let event = (id, post, action, created).prop_map(|(id, post, action, created)| {
        format!(r#"{{"event_id":"e{id}","post_id":"{post}","user_id":"u","action":"{action}","created_at":{created}}}"#).into_bytes()
    });
    let single = prop_oneof![
        6 => event,
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => "\\PC{0,40}".prop_map(String::into_bytes),
    ];
    // KPL aggregates of such records (user records that windows and checkpoints may split), and
    // now and then a corrupt one.
    let aggregate = (
        prop::collection::vec(single.clone(), 1..9),
        any::<bool>(),
        0u8..10,
    )
        .prop_map(|(users, corrupt, at)| {
            let refs: Vec<&[u8]> = users.iter().map(Vec::as_slice).collect();
            let mut data = tally_core::kpl::aggregate("k", &refs);
            if corrupt && at == 0 {
                let mid = data.len() / 2;
                data[mid] ^= 0x55;
            }
            data
        });
    prop_oneof![4 => single, 1 => aggregate]
}

/// A stream: payloads with arrival times that mostly rise, sometimes jump, sometimes go back.
fn stream() -> impl Strategy<Value = Vec<StreamRecord>> {
    prop::collection::vec((payload(), -50i64..3_000), 1..120).prop_map(|v| {
        let mut t = 1_796_000_000_000i64;
        v.into_iter()
            .enumerate()
            .map(|(i, (data, step))| {
                t += step;
                record(i, t, data)
            })
            .collect()
    })
}

/// Windows of `size` user records as a counter builds them, each sealed dedup record stored.
struct Counter {
    size: usize,
    dedup: Dedup,
    open: WindowBuilder,
    checkpoint: Option<Position>,
    windows: Vec<ClosedWindow>,
    stored: Vec<DedupRecord>,
}

impl Counter {
    /// One record, part by part, as a counter's shard folds it.
    fn fold_record(&mut self, r: &StreamRecord) {
        let mut parts = Parts::of(r, self.checkpoint.as_ref());
        while let Some(from) = parts.next() {
            let bound = Bound::Size(self.size);
            let took = self
                .open
                .push_to("shard-0", r, from, bound, &mut self.dedup);
            if self.open.reached(bound) {
                self.close();
            }
            parts.took(took);
        }
    }

    fn close(&mut self) {
        let next = WindowBuilder::new(self.open.end().cloned(), 0);
        let closed = std::mem::replace(&mut self.open, next).close(&mut self.dedup);
        self.stored.push(closed.dedup.clone());
        self.checkpoint.clone_from(&closed.end);
        self.windows.push(closed);
    }
}

/// Folds `records` into windows of `size` user records with a filter of `horizon_ms`, through the
/// window-boundary engine every application uses (`tally_core::boundary`): a window may end
/// inside an aggregate. Returns the windows and the dedup records stored.
fn fold(
    records: &[StreamRecord],
    size: usize,
    dedup: Dedup,
) -> (Vec<ClosedWindow>, Vec<DedupRecord>) {
    let mut c = Counter {
        size,
        dedup,
        open: WindowBuilder::new(None, 0),
        checkpoint: None,
        windows: Vec::new(),
        stored: Vec::new(),
    };
    for r in records {
        c.fold_record(r);
    }
    if !c.open.is_empty() {
        c.close();
    }
    (c.windows, c.stored)
}

/// What a restart at a checkpoint restores: the stored records whose clock is within the
/// horizon of the checkpoint's clock (as both stores' `load_dedup` select them).
fn restore(horizon_ms: i64, stored: &[DedupRecord]) -> Dedup {
    let clock = stored.last().map_or(i64::MIN, |r| r.max_arrival);
    let min = Dedup::min_arrival_to_restore(horizon_ms, clock);
    let kept = stored
        .iter()
        .filter(|r| r.max_arrival >= min)
        .cloned()
        .collect();
    Dedup::restore(horizon_ms, clock, kept)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_and_end_as_an_event_or_a_dead_letter(
        data in prop::collection::vec(any::<u8>(), 0..2_000),
        records in stream(),
    ) {
        let _ = decode(&data);
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0);
        let mut all = records.clone();
        all.push(record(records.len(), 0, data));
        for r in &all {
            w.push("shard-0", r, &mut dedup);
        }
        let users = w.len() as u64;
        let closed = w.close(&mut dedup);
        let s = closed.stats;
        prop_assert_eq!(s.records, all.len() as u64);
        prop_assert_eq!(s.counted + s.duplicates + s.malformed, users);
        let dead: Vec<_> = closed.dead_letters.iter().collect();
        prop_assert_eq!(dead.len() as u64, s.malformed);
        // Each has its own identity (stored idempotently by it): none is lost to another.
        let places: std::collections::HashSet<_> = dead.iter().map(|d| &d.seq).collect();
        prop_assert_eq!(places.len(), dead.len());
        for d in dead {
            prop_assert!(d.data.len() <= DEAD_LETTER_MAX_BYTES);
            prop_assert!(d.reason.len() <= DEAD_LETTER_MAX_REASON);
            prop_assert!(d.data.len() as u64 <= d.size);
        }
        prop_assert_eq!(closed.dedup.ids.len() as u64, s.counted);
    }

    #[test]
    fn the_same_records_after_the_same_checkpoint_make_the_same_window(
        records in stream(),
        size in 1usize..40,
        horizon_ms in 1i64..20_000,
        crash_at in 0usize..8,
    ) {
        // The first run: every window.
        let (windows, stored) = fold(&records, size, Dedup::new(horizon_ms));
        let k = crash_at.min(windows.len() - 1);
        let pending = &windows[k];
        // The restart, whatever its settings now: it restores what was stored up to the checkpoint
        // before window k (not window k's own record, stored before its checkpoint moved) with the
        // window's recorded horizon, and rebuilds up to its recorded end (not to its own window
        // size).
        let mut dedup = restore(horizon_ms, &stored[..k]);
        let start = pending.start_after.clone();
        let mut w = WindowBuilder::new(start, 0);
        // The reader starts after the checkpoint's record, or at it when the checkpoint is
        // inside an aggregate, whose covered user records are skipped.
        let first = records
            .iter()
            .position(|r| pending.start_after.as_ref().is_none_or(|c| r.seq > c.seq || (r.seq == c.seq && c.sub.is_some())))
            .unwrap();
        let end = pending.end.clone().unwrap();
        for r in &records[first..] {
            let from = Position::resume_in(pending.start_after.as_ref(), &r.seq);
            w.push_to("shard-0", r, from, Bound::End(&end), &mut dedup);
            if w.reached(Bound::End(&end)) {
                break;
            }
        }
        let rebuilt = w.close(&mut dedup);
        prop_assert_eq!(&rebuilt.posts, &pending.posts);
        prop_assert_eq!(&rebuilt.dead_letters, &pending.dead_letters);
        prop_assert_eq!(rebuilt.total_delta, pending.total_delta);
        prop_assert_eq!(&rebuilt.dedup, &pending.dedup);
        // Nothing counted twice or lost across the restart.
        let counted_before: u64 = windows[..=k].iter().map(|w| w.stats.counted).sum();
        let counted_again: u64 = windows[..k].iter().map(|w| w.stats.counted).sum::<u64>()
            + rebuilt.stats.counted;
        prop_assert_eq!(counted_before, counted_again);
    }

    #[test]
    fn summary_writes_cut_short_repeated_and_raced_count_each_window_once(
        windows in prop::collection::vec(window_events(), 1..14),
        faults in prop::collection::vec((0u8..4, 0usize..6), 14),
        queries in prop::collection::vec(0i64..4 * 24 * 60, 6),
    ) {
        let mut store = Items::default();
        let mut truth: Vec<(i64, i64)> = Vec::new();
        // The owner's memory of its live items' hours (lost at a crash), per shard.
        let mut cache: BTreeMap<&str, Known> = BTreeMap::new();
        // What a stale writer will still send: the rest of a window's writes it had planned.
        let mut stale: Option<(Vec<summary::Write>, String)> = None;
        for (i, ((shard, events), (fault, cut))) in windows.iter().zip(&faults).enumerate() {
            let delta = delta_of(events);
            // Window ends as a shard's reader meets them: some inside aggregates.
            let end = summary::marker(&Position {
                seq: SeqNo::parse(&(100 + i / 3).to_string()).unwrap(),
                sub: (i % 3 != 2).then_some((i % 3) as u32),
            });
            let known = cache.get(shard).cloned().unwrap_or(Known::Unknown);
            match fault {
                // A crash after `cut` writes; the restarted owner knows nothing and applies it all.
                // A reader between the two (the archives written, the live item not yet) reads
                // "since" as before the window: never an archive and the live item both holding
                // a minute (a roll), nor a late add without its window.
                1 => {
                    store.run(shard, &delta, &end, known, Some(*cut));
                    let items: Vec<(String, Attrs)> = store.0.clone().into_iter().collect();
                    let landed = store.live(shard).marker == end;
                    let seen: Vec<(i64, i64)> = if landed {
                        truth.iter().chain(events.iter()).copied().collect()
                    } else {
                        truth.clone()
                    };
                    for q in &queries {
                        let t = BASE + q * MINUTE_MS + 17_000;
                        let want: i64 = seen.iter().filter(|(m, _)| *m >= t - t % MINUTE_MS).map(|(_, n)| n).sum();
                        prop_assert_eq!(summary::since(&items, t), want, "between writes, since minute {}", q);
                    }
                    let hour = store.run(shard, &delta, &end, Known::Unknown, None).0;
                    cache.insert(shard, hour);
                }
                // The owner stalls after `cut` writes and its lease moves on; it wakes later and
                // sends the rest of what it had planned.
                2 => {
                    let rest = store.run(shard, &delta, &end, known, Some(*cut)).1;
                    stale = Some((rest, end.clone()));
                    let hour = store.run(shard, &delta, &end, Known::Unknown, None).0;
                    cache.insert(shard, hour);
                }
                // An answer lost: the same window applied twice by its owner.
                3 => {
                    let hour = store.run(shard, &delta, &end, known, None).0;
                    store.run(shard, &delta, &end, hour.clone(), None);
                    cache.insert(shard, hour);
                }
                _ => {
                    let hour = store.run(shard, &delta, &end, known, None).0;
                    cache.insert(shard, hour);
                }
            }
            truth.extend(events.iter().map(|(m, n)| (*m, *n)));
            if i % 3 == 2 {
                if let Some((rest, e)) = stale.take() {
                    store.send(&rest, &e);
                }
            }
        }
        if let Some((rest, e)) = stale.take() {
            store.send(&rest, &e);
        }
        let items: Vec<(String, Attrs)> = store.0.clone().into_iter().collect();
        prop_assert_eq!(summary::total(&items), truth.iter().map(|(_, n)| n).sum::<i64>());
        for q in queries {
            let t = BASE + q * MINUTE_MS + 17_000;
            let want: i64 = truth.iter().filter(|(m, _)| *m >= t - t % MINUTE_MS).map(|(_, n)| n).sum();
            prop_assert_eq!(summary::since(&items, t), want, "since minute {}", q);
        }
        for (sk, a) in &items {
            prop_assert!(summary::item_size("post", sk, a) <= 1024);
        }
    }
}

/// The start of the days the summary property's events fall in.
const BASE: i64 = 1_796_000_000_000 - 1_796_000_000_000 % DAY_MS;

/// One window's events of one post on one of two shards: minutes over four days, mostly moving
/// forward, some late; likes and unlikes.
fn window_events() -> impl Strategy<Value = (&'static str, Vec<(i64, i64)>)> {
    (
        prop::sample::select(vec!["s1", "s2"]),
        prop::collection::vec(
            (
                0i64..4 * 24 * 60,
                prop::sample::select(vec![1i64, 1, 1, -1]),
            ),
            1..8,
        ),
    )
        .prop_map(|(shard, ev)| {
            (
                shard,
                ev.into_iter()
                    .map(|(m, n)| (BASE + m * MINUTE_MS + 1_000, n))
                    .collect(),
            )
        })
}

fn delta_of(events: &[(i64, i64)]) -> PostDelta {
    let mut d = PostDelta::default();
    for &(t, n) in events {
        d.add(t, n);
    }
    d
}

/// One post's items, written as every store must write them.
#[derive(Default)]
struct Items(BTreeMap<String, Attrs>);

impl Items {
    /// Applies a window's delta as a writer knowing `known` would — reading the live item when
    /// the plan needs it or an assumption was stale — stopping after `limit` writes if given.
    /// Returns what the writer knows of the live item's hour afterwards, and the planned writes
    /// it did not send.
    fn run(
        &mut self,
        shard: &str,
        delta: &PostDelta,
        end: &str,
        mut known: Known,
        limit: Option<usize>,
    ) -> (Known, Vec<summary::Write>) {
        let mut writes = 0;
        for _ in 0..6 {
            match summary::plan(shard, delta, end, &known) {
                Plan::Skip => return (Known::Unknown, vec![]),
                Plan::NeedItem => known = self.read(shard),
                Plan::Writes(ws) => {
                    let mut stale = false;
                    let mut hour = Known::Unknown;
                    for (i, w) in ws.iter().enumerate() {
                        if limit.is_some_and(|l| writes >= l) {
                            return (Known::Unknown, ws[i..].to_vec());
                        }
                        writes += 1;
                        match summary::apply(self.0.get(&w.sk), w, end) {
                            Ok(a) => {
                                if w.sk == summary::live_sk(shard) {
                                    hour = Known::Hour(LiveState::from_attrs(&a).unwrap().hour);
                                }
                                self.0.insert(w.sk.clone(), a);
                            }
                            Err(Refused::Applied) => {}
                            Err(Refused::Stale) => stale = true,
                        }
                    }
                    if !stale {
                        return (hour, vec![]);
                    }
                    known = self.read(shard);
                }
            }
        }
        panic!("no progress")
    }

    /// Sends planned writes, as a stale writer waking up does; what is refused is dropped (a
    /// stale live write would re-read and find the window applied).
    fn send(&mut self, writes: &[summary::Write], end: &str) {
        for w in writes {
            if let Ok(a) = summary::apply(self.0.get(&w.sk), w, end) {
                self.0.insert(w.sk.clone(), a);
            }
        }
    }

    fn read(&self, shard: &str) -> Known {
        match self.0.get(&summary::live_sk(shard)) {
            None => Known::Absent,
            Some(a) => Known::Item(LiveState::from_attrs(a).unwrap()),
        }
    }

    /// The shard's live item (a default one when it has none).
    fn live(&self, shard: &str) -> LiveState {
        match self.read(shard) {
            Known::Item(s) => s,
            _ => LiveState::default(),
        }
    }
}

// Likers: a like is a user's state. The same events in any order, with copies, in any windows of
// any shards, counted from the edges' change log, give the counts and "since" answers of each
// (post, user)'s latest action.

/// One event of the likers property: (post, user, like?, minute, event id).
type Action = (&'static str, &'static str, bool, i64, u32);

fn likers_events() -> impl Strategy<Value = Vec<Action>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["p1", "p2"]),
            prop::sample::select(vec!["u1", "u2", "u3", "u4"]),
            any::<bool>(),
            // Often the same minute: ties, broken by the event id.
            prop_oneof![0i64..3 * 24 * 60, 0i64..3],
            0u32..1_000,
        ),
        1..60,
    )
    // An event id names one event: two different actions drawn with the same minute and id
    // would be one id for two events, which no producer sends (the first is kept; a copy of an
    // event is made from it below, keeping its id).
    .prop_map(|events| {
        let mut seen = std::collections::BTreeSet::new();
        events
            .into_iter()
            .filter(|(_, _, _, minute, id)| seen.insert((*minute, *id)))
            .collect()
    })
}

fn likers_record(i: usize, (post, user, like, minute, id): &Action) -> StreamRecord {
    let created = BASE + minute * MINUTE_MS + 7_000;
    let action = if *like { "like" } else { "unlike" };
    // The event id is unique per action (a copy keeps it): the id names the minute too.
    let data = format!(
        r#"{{"event_id":"e{minute}-{id}","post_id":"{post}","user_id":"{user}","action":"{action}","created_at":{created}}}"#
    );
    record(i, created, data.into_bytes())
}

/// The answer every order must give: per post, the users whose latest action (by time, then
/// event id) is a like, with the time of that like.
fn likers_truth(events: &[Action]) -> BTreeMap<&'static str, Vec<i64>> {
    let mut latest: BTreeMap<(&str, &str), (i64, String, bool)> = BTreeMap::new();
    for (post, user, like, minute, id) in events {
        let key = (BASE + minute * MINUTE_MS + 7_000, format!("e{minute}-{id}"));
        let e = latest
            .entry((post, user))
            .or_insert((i64::MIN, String::new(), false));
        if (key.0, key.1.as_str()) > (e.0, e.1.as_str()) {
            *e = (key.0, key.1, *like);
        }
    }
    let mut out: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for ((post, _), (t, _, like)) in latest {
        if like {
            out.entry(post).or_default().push(t);
        }
    }
    out
}

/// A likers store as both stages see it: the edges, each part's change log (a post's edges are
/// all in one part, as on both stores), and each post's summary items, written as every store
/// must write them.
#[derive(Default)]
struct LikersStore {
    edges: BTreeMap<(String, String), tally_core::edge::EdgeState>,
    logs: [Vec<tally_core::edge::EdgeChange>; 2],
    posts: BTreeMap<String, Items>,
}

impl LikersStore {
    /// The first stage's write of a window's edges: each by `edge::apply`, each change logged.
    fn write_edges(&mut self, w: &ClosedWindow) {
        for e in &w.edges {
            let key = (e.post_id.to_string(), e.user_id.to_string());
            if let Some((state, change)) = tally_core::edge::apply(self.edges.get(&key), e) {
                self.edges.insert(key, state);
                let part = usize::from(e.post_id.as_str() == "p2");
                self.logs[part].push(change);
            }
        }
    }

    /// The second stage's window of part `part`'s log from `from` (its checkpoint) through
    /// `to`, applied with the window's marker (applied twice: a crash before its checkpoint).
    fn count(&mut self, part: usize, from: usize, to: usize, crash: bool) {
        let shard = format!("edges-{part}");
        let records: Vec<StreamRecord> = self.logs[part][from..to]
            .iter()
            .enumerate()
            .map(|(i, c)| record(from + i, 0, c.encode()))
            .collect();
        let mut w = WindowBuilder::new(None, 0).changes();
        let mut dedup = Dedup::new(600_000);
        for r in &records {
            w.push(&shard, r, &mut dedup);
        }
        let closed = w.close(&mut dedup);
        let end = summary::marker(closed.end.as_ref().unwrap());
        for _ in 0..=usize::from(crash) {
            for (post, delta) in &closed.posts {
                self.posts.entry(post.clone()).or_default().run(
                    &shard,
                    delta,
                    &end,
                    Known::Unknown,
                    None,
                );
            }
        }
    }

    fn total(&self, post: &str) -> (i64, Vec<(String, Attrs)>) {
        let items: Vec<(String, Attrs)> = self
            .posts
            .get(post)
            .map(|p| p.0.clone().into_iter().collect())
            .unwrap_or_default();
        (summary::total(&items), items)
    }
}

proptest! {
    /// Likers are exact whoever writes an edge and whenever a copy comes: the events shuffled,
    /// copies put anywhere, cut into windows each read by any of three shards (a producer keying
    /// at random), the shards' edge writes interleaved at random with the second stage's windows
    /// over the change log, windows crashed and applied again. After every step no post's count
    /// or "since" is below zero; at the end every count and "since" is that of each pair's latest
    /// action. Fails if a refused write is logged (a copy counted), without the event-id tie-break,
    /// or if a window of the log is counted twice.
    #[test]
    fn likers_counts_are_exact_whoever_writes_an_edge_and_whenever_copies_come(
        events in likers_events(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 60),
        copies in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        size in 1usize..8,
        shard_of in prop::collection::vec(0usize..3, 80),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 300),
        crashes in prop::collection::vec(any::<bool>(), 80),
        queries in prop::collection::vec(0i64..3 * 24 * 60, 4),
    ) {
        let truth = likers_truth(&events);
        let mut stream: Vec<Action> = events.clone();
        for (i, ix) in order.iter().enumerate().take(stream.len()) {
            let j = ix.index(stream.len());
            stream.swap(i, j);
        }
        for c in &copies {
            let e = events[c.index(events.len())];
            let at = c.index(stream.len() + 1);
            stream.insert(at, e);
        }
        let records: Vec<StreamRecord> = stream.iter().enumerate().map(|(i, a)| likers_record(i, a)).collect();
        // Each shard's windows, in its order.
        let mut queues: Vec<std::collections::VecDeque<ClosedWindow>> = vec![Default::default(); 3];
        let mut dedup = Dedup::new(600_000);
        for (i, chunk) in records.chunks(size).enumerate() {
            let mut w = WindowBuilder::new(None, 0).likers();
            for r in chunk {
                w.push("s", r, &mut dedup);
            }
            let closed = w.close(&mut dedup);
            prop_assert!(closed.dedup.ids.is_empty(), "likers need no duplicate filter");
            queues[shard_of[i % shard_of.len()]].push_back(closed);
        }
        let mut store = LikersStore::default();
        // The second stage's checkpoint in each part's log.
        let mut counted = [0usize; 2];
        let mut step = 0;
        loop {
            // What can go on: a shard's next window, or a part's log not counted through.
            let mut runnable: Vec<usize> = (0..3).filter(|s| !queues[*s].is_empty()).collect();
            runnable.extend((0..2).filter(|p| counted[*p] < store.logs[*p].len()).map(|p| 3 + p));
            if runnable.is_empty() {
                break;
            }
            let pick = picks[step % picks.len()];
            let crash = crashes[step % crashes.len()];
            step += 1;
            match runnable[pick.index(runnable.len())] {
                s @ 0..=2 => {
                    let w = queues[s].pop_front().unwrap();
                    store.write_edges(&w);
                    if crash {
                        // Its records read again after a crash: its edges written again.
                        store.write_edges(&w);
                    }
                }
                p => {
                    let part = p - 3;
                    let from = counted[part];
                    let to = (from + 1 + pick.index(4)).min(store.logs[part].len());
                    store.count(part, from, to, crash);
                    counted[part] = to;
                }
            }
            for post in ["p1", "p2"] {
                let (total, items) = store.total(post);
                prop_assert!(total >= 0, "{} below zero: {}", post, total);
                for q in &queries {
                    let since = summary::since(&items, BASE + q * MINUTE_MS);
                    prop_assert!(since >= 0, "{} since minute {} below zero: {}", post, q, since);
                }
            }
        }
        for post in ["p1", "p2"] {
            let (total, items) = store.total(post);
            let likes = truth.get(post).cloned().unwrap_or_default();
            prop_assert_eq!(total, likes.len() as i64, "{}", post);
            for q in &queries {
                let t = BASE + q * MINUTE_MS + 30_000;
                let want = likes.iter().filter(|at| **at >= t - t % MINUTE_MS).count() as i64;
                prop_assert_eq!(summary::since(&items, t), want, "{} since minute {}", post, q);
            }
        }
    }
}
