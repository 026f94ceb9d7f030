//! Properties over generated input: arbitrary bytes never panic the decoder and always end as an
//! event or a dead letter within the store's limits; the same records after the same checkpoint
//! always make the same window — the same deltas — including when the consumer restarts with
//! other settings (ARCHITECTURE.md's invariant); and a window's summary writes, however they are
//! cut short, repeated and raced by a stale writer, leave exactly its counts (the summary items'
//! invariant).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use tally_core::boundary::{self, Windows};
use tally_core::dedup::{Dedup, DedupRecord};
use tally_core::event::decode;

use tally_core::buckets::{PostDelta, DAY_MS, MINUTE_MS};
use tally_core::dead_letter::{DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON};
use tally_core::kpl::Took;
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

impl Windows for Counter {
    type Error = ();

    fn checkpoint(&self) -> Option<&Position> {
        self.checkpoint.as_ref()
    }

    fn fold_part(&mut self, r: &StreamRecord, from: u32, _now: i64) -> (Took, bool) {
        let bound = Bound::Size(self.size);
        let took = self
            .open
            .push_to("shard-0", r, from, bound, &mut self.dedup);
        (took, self.open.reached(bound))
    }

    async fn close(&mut self) -> Result<(), ()> {
        let next = WindowBuilder::new(self.open.end().cloned(), 0);
        let closed = std::mem::replace(&mut self.open, next).close(&mut self.dedup);
        self.stored.push(closed.dedup.clone());
        self.checkpoint.clone_from(&closed.end);
        self.windows.push(closed);
        Ok(())
    }
}

/// Runs a future that never waits (the windows above store nothing) to its end.
fn ready<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::pin!(f).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("nothing here waits"),
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
        ready(boundary::fold_record(&mut c, r, 0)).expect("closing stores nothing");
    }
    if !c.open.is_empty() {
        ready(c.close()).expect("closing stores nothing");
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

// Likers: a like is a user's state. The same events in any order, with duplicates, in any
// windows, with crashes between a window's edge writes and its count writes, give the same
// counts and the same "since" answers: those of each (post, user)'s latest action.

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

/// A likers store: edges and each post's summary items, written as every store must write them.
#[derive(Default)]
struct LikersStore {
    edges: BTreeMap<String, Attrs>,
    posts: BTreeMap<String, Items>,
}

impl LikersStore {
    /// A window's edge writes; returns the transitions they made.
    fn write_edges(&mut self, w: &ClosedWindow, window: &str) -> Vec<tally_core::edge::Transition> {
        use tally_core::edge::{apply, EdgeOutcome};
        let mut out = Vec::new();
        for e in &w.edges {
            let key = format!("{}/{}", e.post_id, e.user_id);
            match apply(self.edges.get(&key), e, window).unwrap() {
                EdgeOutcome::Wrote(a, t) => {
                    self.edges.insert(key, a);
                    out.push(t);
                }
                EdgeOutcome::Mine(t) => out.push(t),
                EdgeOutcome::Superseded(remember) | EdgeOutcome::Forgotten(remember) => {
                    if let Some(a) = remember {
                        self.edges.insert(key, a);
                    }
                }
            }
        }
        out
    }

    /// Applies a window: its edges, then (unless it crashes first) its counts.
    fn apply(&mut self, w: &ClosedWindow, i: usize, crash: bool) {
        let end = summary::marker(&Position::whole(
            SeqNo::parse(&(100 + i).to_string()).unwrap(),
        ));
        let window = tally_core::edge::window_id("s1", &end);
        let transitions = self.write_edges(w, &window);
        if crash {
            // The next owner rebuilds the same window and applies it again.
            return self.apply(w, i, false);
        }
        let counted = w.with_transitions(&transitions);
        for (post, delta) in &counted.posts {
            self.posts.entry(post.clone()).or_default().run(
                "s1",
                delta,
                &end,
                Known::Unknown,
                None,
            );
        }
    }
}

proptest! {
    #[test]
    fn likers_counts_and_since_are_the_same_in_any_order_with_copies_and_crashes(
        events in likers_events(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 60),
        copies in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
        size in 1usize..12,
        crashes in prop::collection::vec(any::<bool>(), 80),
        queries in prop::collection::vec(0i64..3 * 24 * 60, 5),
    ) {
        let truth = likers_truth(&events);
        // The stream: the events shuffled, then copies of some of them (retries, replays, late
        // copies) put anywhere.
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
        let mut store = LikersStore::default();
        let mut dedup = Dedup::new(600_000);
        for (i, chunk) in records.chunks(size).enumerate() {
            let mut w = WindowBuilder::new(None, 0).likers(i64::MAX / 4);
            for r in chunk {
                w.push("s1", r, &mut dedup);
            }
            let closed = w.close(&mut dedup);
            prop_assert!(closed.dedup.ids.is_empty(), "likers need no duplicate filter");
            store.apply(&closed, i, crashes[i % crashes.len()]);
        }
        for post in ["p1", "p2"] {
            let items: Vec<(String, Attrs)> = store
                .posts
                .get(post)
                .map(|p| p.0.clone().into_iter().collect())
                .unwrap_or_default();
            let likes = truth.get(post).cloned().unwrap_or_default();
            prop_assert_eq!(summary::total(&items), likes.len() as i64, "{}", post);
            for q in &queries {
                let t = BASE + q * MINUTE_MS + 30_000;
                let want = likes.iter().filter(|at| **at >= t - t % MINUTE_MS).count() as i64;
                prop_assert_eq!(summary::since(&items, t), want, "{} since minute {}", post, q);
            }
        }
    }
}

/// A window of one shard on its way through the store in [`likers_counts_never_go_below_zero`]:
/// its edges written (`counted` known), then its counts, then its held removals.
struct Flight {
    pos: Position,
    closed: ClosedWindow,
    counted: Option<ClosedWindow>,
    counts_written: bool,
}

impl LikersStore {
    /// Whether a held removal's wait is over: the post's item of the writer's shard is marked at
    /// or past the writer, or that shard is done through it.
    fn written(&self, post: &str, writer: &str, done: &BTreeMap<String, String>) -> bool {
        use tally_core::edge::{window_marker, window_shard};
        let (shard, mark) = (window_shard(writer), window_marker(writer));
        let marked = self
            .posts
            .get(post)
            .and_then(|p| p.0.get(&summary::live_sk(shard)))
            .and_then(LiveState::from_attrs)
            .is_some_and(|l| l.marker.as_str() >= mark);
        marked || done.get(shard).is_some_and(|d| d.as_str() >= mark)
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
    /// Two shards writing one edge (a producer keying at random): each window's edges, counts
    /// and held removals land in steps, the shards' steps interleaved at random and a window's
    /// counts landing long after its edges (a worker that died, rebuilt later). After every
    /// step every post's count and "since" is at least zero — a removal of a like another
    /// shard's window made is held until that window's counts are written — and at the end
    /// every count is exact. Fails if held removals are written with the window's other counts.
    #[test]
    fn likers_counts_never_go_below_zero(
        events in likers_events(),
        order in prop::collection::vec(any::<prop::sample::Index>(), 60),
        size in 1usize..6,
        shard_of in prop::collection::vec(any::<bool>(), 60),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 200),
        queries in prop::collection::vec(0i64..3 * 24 * 60, 3),
    ) {
        let truth = likers_truth(&events);
        let mut stream: Vec<Action> = events.clone();
        for (i, ix) in order.iter().enumerate().take(stream.len()) {
            let j = ix.index(stream.len());
            stream.swap(i, j);
        }
        let records: Vec<StreamRecord> = stream.iter().enumerate().map(|(i, a)| likers_record(i, a)).collect();
        let mut dedup = Dedup::new(600_000);
        let mut queues: BTreeMap<String, std::collections::VecDeque<Flight>> = BTreeMap::new();
        for (i, chunk) in records.chunks(size).enumerate() {
            let shard = if shard_of[i % shard_of.len()] { "s1" } else { "s0" };
            let mut w = WindowBuilder::new(None, 0).likers(i64::MAX / 4);
            for r in chunk {
                w.push(shard, r, &mut dedup);
            }
            queues.entry(shard.to_owned()).or_default().push_back(Flight {
                pos: Position::whole(SeqNo::parse(&(100 + i).to_string()).unwrap()),
                closed: w.close(&mut dedup),
                counted: None,
                counts_written: false,
            });
        }
        let mut store = LikersStore::default();
        // Each shard's checkpoint: the marker of its last window done.
        let mut done: BTreeMap<String, String> = BTreeMap::new();
        let mut step = 0;
        loop {
            // The shards whose next step can run: a held removal only once its wait is over.
            let runnable: Vec<String> = queues
                .iter()
                .filter(|(_, q)| q.front().is_some_and(|f| match &f.counted {
                    Some(c) if f.counts_written => c
                        .held
                        .waits
                        .iter()
                        .all(|(post, writer)| store.written(post, writer, &done)),
                    _ => true,
                }))
                .map(|(s, _)| s.clone())
                .collect();
            if runnable.is_empty() {
                prop_assert!(queues.values().all(|q| q.is_empty()), "no window can go on");
                break;
            }
            let shard = runnable[picks[step % picks.len()].index(runnable.len())].clone();
            step += 1;
            let f = queues.get_mut(&shard).unwrap().front_mut().unwrap();
            let end = summary::marker(&f.pos);
            match &f.counted {
                None => {
                    let window = tally_core::edge::window_id(&shard, &end);
                    let transitions = store.write_edges(&f.closed, &window);
                    f.counted = Some(f.closed.with_transitions(&transitions));
                }
                Some(c) if !f.counts_written => {
                    for (post, delta) in &c.posts {
                        store.posts.entry(post.clone()).or_default().run(&shard, delta, &end, Known::Unknown, None);
                    }
                    f.counts_written = true;
                }
                Some(c) => {
                    let held = summary::held_marker(&f.pos);
                    for (post, delta) in &c.held.posts {
                        store.posts.entry(post.clone()).or_default().run(&shard, delta, &held, Known::Unknown, None);
                    }
                    done.insert(shard.clone(), end);
                    queues.get_mut(&shard).unwrap().pop_front();
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
            let likes = truth.get(post).cloned().unwrap_or_default();
            prop_assert_eq!(store.total(post).0, likes.len() as i64, "{}", post);
        }
    }
}
