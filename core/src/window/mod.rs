//! Tumbling windows of per-post deltas.
//!
//! A shard's records are folded, in sequence order, into a window that closes on size (records)
//! or on time, whichever comes first (time is the caller's concern: it passes the clock). A closed
//! window is its per-post deltas (sorted by post), its dead letters (by sequence number), its
//! global-total delta and its dedup record. The same records, read after the same checkpoint with
//! the same duplicate filter, always give the same window: that is what lets whoever applies a
//! pending window — a restarted owner, a successor, a stale owner — write the same deltas.
//!
//! How a window folds its records is chosen once when the window is made, one module each:
//! `events` (each event once, through the shard's duplicate filter, into its post's delta by
//! minute), `likers` (the likers counter's first stage: each edge's latest event, to write to
//! the edge) and `changes` (its second stage: each change of the edge store's log, into its
//! post's delta by minute). This module holds what they share: the records' extent, decoding,
//! dead letters and the closed window.

use std::collections::HashSet;

use smol_str::SmolStr;

use crate::boundary::{Extent, Fold, UserRecord};
use crate::buckets::PostDelta;

mod changes;
mod events;
mod key_order;
mod likers;
use crate::dead_letter::{
    truncate_utf8, DeadLetter, DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON,
};
use crate::dedup::{Dedup, DedupRecord};
use crate::edge::{EdgeChange, EdgeEvent};
use crate::input::{Decoded, Input};
use crate::kpl::Took;
use crate::ports::StreamRecord;
use crate::seq::{Position, SeqNo};

/// The most user records a window that keeps a dedup record (the counter's counting events,
/// analytics') may hold: its dedup record (12 bytes per id) is one store item, which must stay
/// below DynamoDB's 400 KB item limit with room to spare. Windows end inside a KPL aggregate when
/// they must, so this bound is exact.
pub const MAX_WINDOW_RECORDS: usize = 20_000;

/// The most user records a counter window may hold counting likers, which keeps no dedup record:
/// what bounds it is the memory its records take while it is open (about 500 bytes each), shared
/// by a worker's shards (`counter.worker_window_records`).
pub const MAX_LIKERS_WINDOW_RECORDS: usize = 100_000;

/// Where a window closes.
#[derive(Clone, Copy, Debug)]
pub enum Bound<'a> {
    /// After this many user records: a new window.
    Size(usize),
    /// At this position: a pending window rebuilt, whose end was fixed when it was recorded.
    End(&'a Position),
}

/// What a window counted, for metrics and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowStats {
    /// User records folded.
    pub records: u64,
    /// Events counted (likers: each (post, user)'s latest, kept).
    pub counted: u64,
    /// Copies of events met before (producer retries).
    pub duplicates: u64,
    /// Records that are no event (each a dead letter).
    pub malformed: u64,
    /// Records of a change stream about items that are no likes (read and skipped).
    pub skipped: u64,
    /// The latest `created_at` of an event counted (ms; 0: none).
    pub latest_created_ms: i64,
}

/// A window being filled.
#[derive(Debug)]
pub struct WindowBuilder {
    /// The checkpoint before the window: the window holds records strictly after it.
    start_after: Option<Position>,
    /// The record the first user record came from: a rebuild must meet it first.
    first: Option<SeqNo>,
    /// Where it ends, and the user records folded (more than `stats.records` when records are
    /// KPL aggregates).
    extent: Extent,
    content: Content,
    /// When the window opened (caller's clock, ms), for closing on time.
    opened_at_ms: i64,
    /// What the records are.
    input: Input,
}

/// What a window folded.
#[derive(Debug)]
struct Content {
    /// Its events, as its count mode folds them (chosen once, when the window is made).
    folded: Folded,
    /// Each post the window holds, in the order it first met them: what a worker's index of
    /// which shards hold a post is kept from ([`WindowBuilder::posts_met_since`]).
    met: Vec<SmolStr>,
    dead_letters: Vec<DeadLetter>,
    stats: WindowStats,
}

/// How a window folds its records: one module each.
#[derive(Debug)]
enum Folded {
    Events(events::Events),
    Likers(likers::Likers),
    Changes(changes::Changes),
}

/// The counter's [`Fold`]: a window's content, with the shard's duplicate filter.
struct Counting<'a> {
    shard_id: &'a str,
    content: &'a mut Content,
    dedup: &'a mut Dedup,
    input: &'a Input,
}

impl WindowBuilder {
    /// An empty window after `start_after`.
    pub fn new(start_after: Option<Position>, opened_at_ms: i64) -> WindowBuilder {
        WindowBuilder {
            start_after,
            first: None,
            extent: Extent::default(),
            content: Content {
                folded: Folded::Events(events::Events::default()),
                met: Vec::new(),
                dead_letters: Vec::new(),
                stats: WindowStats::default(),
            },
            opened_at_ms,
            input: Input::default(),
        }
    }

    /// Reads the records by `input`'s contract (like events unless told).
    pub fn input(mut self, input: Input) -> WindowBuilder {
        self.input = input;
        self
    }

    /// The likers counter's first stage instead of counting events: each edge's latest event
    /// is kept (ordered by `created_at`, then the event id) to be written to the edge, and no
    /// duplicate filter is needed — a copy is never newer than itself.
    pub fn likers(mut self) -> WindowBuilder {
        self.content.folded = Folded::Likers(likers::Likers::default());
        self
    }

    /// The likers counter's second stage: the records are the edge store's change log
    /// ([`EdgeChange`]), each folded into its post's delta by minute, with no duplicate filter
    /// (the log holds each change once).
    pub fn changes(mut self) -> WindowBuilder {
        self.content.folded = Folded::Changes(changes::Changes::default());
        self
    }

    /// Decodes, dedups and folds one Kinesis record whole: its one event, or every user record of
    /// a KPL aggregate.
    pub fn push(&mut self, shard_id: &str, record: &StreamRecord, dedup: &mut Dedup) {
        self.push_part(shard_id, record, 0, usize::MAX, dedup);
    }

    /// Folds the user records of `record` from index `from` on (its sub-sequence numbers: a
    /// checkpoint or the previous window covered those before), as many as fit before `bound`,
    /// and says whether the record is done or the window ends inside it.
    pub fn push_to(
        &mut self,
        shard_id: &str,
        record: &StreamRecord,
        from: u32,
        bound: Bound<'_>,
        dedup: &mut Dedup,
    ) -> Took {
        let max = match bound {
            Bound::Size(n) => self.extent.room(n),
            Bound::End(end) if end.seq == record.seq => end
                .sub
                .map_or(usize::MAX, |k| (k + 1).saturating_sub(from) as usize),
            Bound::End(_) => usize::MAX,
        };
        self.push_part(shard_id, record, from, max, dedup)
    }

    /// Room for `edges` edges (counting likers; counting events, nothing to do): what the
    /// shard's last window held, so a busy shard's windows do not grow a doubling at a time.
    pub fn reserve_edges(&mut self, edges: usize) {
        if let Folded::Likers(l) = &mut self.content.folded {
            l.reserve(edges);
        }
    }

    /// Whether the window has reached `bound` and closes.
    pub fn reached(&self, bound: Bound<'_>) -> bool {
        match bound {
            Bound::Size(n) => self.len() >= n,
            Bound::End(end) => self.extent.end() == Some(end),
        }
    }

    /// Folds user records `from..` of `record`, at most `max` of them (at least one). A record
    /// that is not an aggregate — or a corrupt one, dead-lettered whole — is one user record.
    fn push_part(
        &mut self,
        shard_id: &str,
        record: &StreamRecord,
        from: u32,
        max: usize,
        dedup: &mut Dedup,
    ) -> Took {
        if from == 0 {
            self.content.stats.records += 1;
        }
        if self.first.is_none() {
            self.first = Some(record.seq.clone());
        }
        let mut counting = Counting {
            shard_id,
            content: &mut self.content,
            dedup,
            input: &self.input,
        };
        self.extent.take(&mut counting, record, from, max)
    }
    /// User records folded so far (a KPL aggregate counts each of its records): what the
    /// window's size limit counts, since each may add an id to the dedup record.
    pub fn len(&self) -> usize {
        self.extent.len()
    }

    /// Whether nothing was folded: no record, nor the rest of an aggregate a previous window
    /// ended inside (which counts no new record, but must be applied and checkpointed).
    pub fn is_empty(&self) -> bool {
        self.extent.is_empty()
    }

    /// When the window opened.
    pub fn opened_at_ms(&self) -> i64 {
        self.opened_at_ms
    }

    /// The posts the window met after the first `n` it met (in the order it met them; a post
    /// is met once, when the window first holds an event of it): every post the window holds is
    /// in `posts_met_since(0)`.
    pub fn posts_met_since(&self, n: usize) -> &[SmolStr] {
        self.content.met.get(n..).unwrap_or_default()
    }

    /// The last sequence number folded, if any.
    pub fn end(&self) -> Option<&Position> {
        self.extent.end()
    }

    /// The checkpoint the window follows.
    pub fn start_after(&self) -> Option<&Position> {
        self.start_after.as_ref()
    }

    /// The window's deltas for the posts `wanted` names, by post id, sorted: what its write
    /// will add (none for the likers counter's first stage, which counts nothing itself). Only
    /// those posts are looked at: the cost is theirs, not the window's.
    pub fn deltas_of(&self, wanted: &HashSet<&str>) -> Vec<(String, PostDelta)> {
        let mut out: Vec<(String, PostDelta)> = match &self.content.folded {
            Folded::Events(e) => wanted
                .iter()
                .filter_map(|p| e.deltas.get_key_value(*p))
                .map(|(p, d)| (p.clone(), d.clone()))
                .collect(),
            Folded::Changes(c) => wanted
                .iter()
                .filter_map(|p| c.deltas.get_key_value(*p))
                .map(|(p, d)| (p.to_string(), d.clone()))
                .collect(),
            Folded::Likers(_) => Vec::new(),
        };
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Closes the window, sealing its first-seen ids.
    pub fn close(mut self, dedup: &mut Dedup) -> ClosedWindow {
        let (posts, edges) = match self.content.folded {
            Folded::Events(e) => (e.close(), Vec::new()),
            Folded::Changes(c) => (c.close(), Vec::new()),
            Folded::Likers(l) => (Vec::new(), l.close()),
        };
        ClosedWindow {
            start_after: self.start_after,
            first: self.first,
            end: self.extent.take_end(),
            total_delta: posts.iter().map(|(_, d)| d.total()).sum(),
            posts,
            edges,
            dead_letters: self.content.dead_letters,
            dedup: dedup.seal(),
            stats: self.content.stats,
        }
    }
}

impl Fold for Counting<'_> {
    fn user_record(&mut self, record: &StreamRecord, user: UserRecord<'_>) {
        if let Err(e) = self.fold_event(user.data, record.arrival_ms) {
            self.content.stats.malformed += 1;
            let reason = match user.of {
                Some(n) => format!("KPL user record {} of {n}: {e}", user.index + 1),
                None => e.to_string(),
            };
            self.dead_letter(user.position(record), record, user.data, reason);
        }
    }

    fn corrupt(&mut self, record: &StreamRecord, reason: String) {
        self.content.stats.malformed += 1;
        let at = Position::whole(record.seq.clone());
        self.dead_letter(at, record, &record.data, reason);
    }
}

impl Counting<'_> {
    /// Folds one user record; a malformed one is returned for its dead letter.
    fn fold_event(&mut self, data: &[u8], arrival_ms: i64) -> Result<(), String> {
        let stats = &mut self.content.stats;
        let met = &mut self.content.met;
        if let Folded::Changes(c) = &mut self.content.folded {
            let change = EdgeChange::decode(data)?;
            if self.input.counts_post(&change.post_id) {
                c.fold(change, stats, met);
            } else {
                stats.skipped += 1;
            }
            return Ok(());
        }
        let ev = match self.input.decode(data).map_err(|e| e.to_string())? {
            Decoded::Event(ev) => ev,
            Decoded::Skipped => {
                stats.skipped += 1;
                return Ok(());
            }
        };
        match &mut self.content.folded {
            Folded::Events(e) => e.fold(ev, arrival_ms, stats, self.dedup, met),
            Folded::Likers(l) => {
                // No filter, but the shard's arrival clock kept with its checkpoint.
                self.dedup.tick(arrival_ms);
                l.fold(ev, stats);
            }
            Folded::Changes(_) => unreachable!("folded above"),
        }
        Ok(())
    }

    fn dead_letter(&mut self, at: Position, record: &StreamRecord, data: &[u8], reason: String) {
        let keep = data.len().min(DEAD_LETTER_MAX_BYTES);
        self.content.dead_letters.push(DeadLetter {
            shard_id: self.shard_id.to_owned(),
            seq: at,
            arrival_ms: record.arrival_ms,
            reason: truncate_utf8(&reason, DEAD_LETTER_MAX_REASON),
            data: data[..keep].to_vec(),
            size: data.len() as u64,
            gap: None,
        });
    }
}

/// A closed window, ready to apply.
#[derive(Clone, Debug)]
pub struct ClosedWindow {
    /// The checkpoint before the window.
    pub start_after: Option<Position>,
    /// The record its first user record came from (`None` with `end`).
    pub first: Option<SeqNo>,
    /// The window's last record (or user record of an aggregate); `None` only for a window of no
    /// records (a shard-end flush).
    pub end: Option<Position>,
    /// Net change per post, by post id (none in the likers counter's first stage).
    pub posts: Vec<(String, PostDelta)>,
    /// The likers counter's first stage: each touched edge's latest event in the window, in the
    /// order of the store's keys (post, then user: `window::key_order`).
    pub edges: Vec<EdgeEvent>,
    /// Malformed records, by sequence number.
    pub dead_letters: Vec<DeadLetter>,
    /// Net change of the global total.
    pub total_delta: i64,
    /// The window's first-seen ids.
    pub dedup: DedupRecord,
    /// What it counted.
    pub stats: WindowStats,
}

impl ClosedWindow {
    /// The posts it holds something of: their deltas, and the posts of its edges (a post may
    /// come more than once).
    pub fn posts_held(&self) -> impl Iterator<Item = &str> {
        let edges = self.edges.iter().map(|e| e.post_id.as_str());
        let mut last = None;
        let edges = edges.filter(move |p| last.replace(*p) != Some(*p));
        self.posts.iter().map(|(p, _)| p.as_str()).chain(edges)
    }
}

/// A window's posts' deltas as it closes: by post id, the minutes that cancel out dropped, and
/// a post left with none dropped too.
fn closed<K: Into<String>>(
    deltas: impl IntoIterator<Item = (K, PostDelta)>,
) -> Vec<(String, PostDelta)> {
    let mut posts: Vec<(String, PostDelta)> = deltas
        .into_iter()
        .filter_map(|(post, mut d)| {
            d.by_minute.retain(|_, n| *n != 0);
            (!d.by_minute.is_empty()).then(|| (post.into(), d))
        })
        .collect();
    posts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    posts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::dead_letter_units;

    fn rec(seq: u64, data: &str) -> StreamRecord {
        StreamRecord {
            seq: SeqNo::parse(&seq.to_string()).unwrap(),
            arrival_ms: seq as i64,
            partition_key: "k".into(),
            data: data.as_bytes().to_vec(),
        }
    }

    fn ev(id: &str, post: &str, action: &str) -> String {
        format!(
            r#"{{"event_id":"{id}","post_id":"{post}","user_id":"u","action":"{action}","created_at":1796021058123}}"#
        )
    }

    /// A window's posts as it met them, and the posts a closed one holds something of: each
    /// post the window holds is there, counting events and counting likers, before and after a
    /// likers window's edges are written.
    #[test]
    fn a_window_names_the_posts_it_holds() {
        let records = [
            ev("1", "b", "like"),
            ev("2", "a", "like"),
            ev("3", "b", "like"),
        ];
        for likers in [false, true] {
            let mut dedup = Dedup::new(600_000);
            let mut w = WindowBuilder::new(None, 0);
            if likers {
                w = w.likers();
            }
            for (i, data) in records.iter().enumerate() {
                w.push("s", &rec(i as u64 + 1, data), &mut dedup);
            }
            if !likers {
                assert_eq!(w.posts_met_since(0), ["b", "a"]);
                assert_eq!(w.posts_met_since(1), ["a"]);
                assert!(w.posts_met_since(5).is_empty());
            }
            let c = w.close(&mut dedup);
            let mut held: Vec<&str> = c.posts_held().collect();
            held.sort_unstable();
            assert_eq!(held, ["a", "b"], "likers: {likers}");
        }
    }

    /// A window over the edge log: each change into its post's minutes, a change that moves no
    /// like counted and adding nothing, a record that is no change dead-lettered, no filter.
    #[test]
    fn a_window_of_changes_folds_each_into_its_post_s_minutes() {
        const M0: i64 = 1_796_000_040_000;
        const M1: i64 = M0 + 60_000;
        let change = |post: &str, user: &str, before, after| {
            EdgeChange {
                post_id: post.into(),
                user_id: user.into(),
                before,
                after,
            }
            .encode()
        };
        let records = [
            change("a", "u1", None, Some(M0)),
            change("a", "u2", None, Some(M1)),
            change("a", "u1", Some(M0), Some(M1)),
            change("b", "u1", None, None),
            b"oops".to_vec(),
            change("b", "u2", None, Some(M0)),
            change("b", "u2", Some(M0), None),
        ];
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0).changes();
        for (i, data) in records.iter().enumerate() {
            let r = StreamRecord {
                data: data.clone(),
                ..rec(i as u64 + 1, "")
            };
            w.push("edges-0", &r, &mut dedup);
        }
        let wanted: HashSet<&str> = ["a", "c"].into();
        let open = w.deltas_of(&wanted);
        let c = w.close(&mut dedup);
        let minutes: Vec<(String, Vec<(i64, i64)>)> = c
            .posts
            .iter()
            .map(|(p, d)| (p.clone(), d.by_minute.clone().into_iter().collect()))
            .collect();
        assert_eq!(minutes, [("a".to_owned(), vec![(M1, 2)])]);
        assert_eq!(open.len(), 1);
        assert_eq!(c.total_delta, 2);
        assert_eq!((c.stats.counted, c.stats.malformed), (6, 1));
        assert_eq!(c.dead_letters[0].seq.to_string(), "5");
        assert!(c.dedup.ids.is_empty(), "no duplicate filter");
    }

    #[test]
    fn folds_dedups_and_dead_letters() {
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0);
        for (i, data) in [
            ev("1", "a", "like"),
            ev("2", "a", "like"),
            ev("1", "a", "like"),
            "{oops".into(),
            ev("3", "b", "unlike"),
            ev("4", "a", "unlike"),
        ]
        .iter()
        .enumerate()
        {
            w.push("shard-0", &rec(i as u64 + 1, data), &mut dedup);
        }
        let c = w.close(&mut dedup);
        assert_eq!(
            c.stats,
            WindowStats {
                records: 6,
                counted: 4,
                duplicates: 1,
                malformed: 1,
                skipped: 0,
                latest_created_ms: 1796021058123,
            }
        );
        assert_eq!(c.total_delta, 0);
        assert_eq!(c.end.as_ref().unwrap().to_string(), "6");
        let totals: Vec<(String, i64)> = c
            .posts
            .iter()
            .map(|(post, d)| (post.clone(), d.total()))
            .collect();
        assert_eq!(totals, vec![("a".into(), 1), ("b".into(), -1)]);
        let dead: Vec<&DeadLetter> = c.dead_letters.iter().collect();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (dead[0].shard_id.as_str(), dead[0].seq.to_string()),
            ("shard-0", "4".to_owned())
        );
        assert!(dead[0].reason.contains("JSON"), "{}", dead[0].reason);
        assert_eq!(c.dedup.ids.len(), 4);
    }

    #[test]
    fn a_window_can_end_inside_an_aggregate() {
        let users: Vec<String> = (0..5)
            .map(|i| {
                if i == 3 {
                    "{oops".to_owned()
                } else {
                    ev(&i.to_string(), "a", "like")
                }
            })
            .collect();
        let refs: Vec<&[u8]> = users.iter().map(|u| u.as_bytes()).collect();
        let agg = StreamRecord {
            data: crate::kpl::aggregate("k", &refs),
            ..rec(7, "")
        };
        let mut dedup = Dedup::new(600_000);
        // Window one: a plain record, then two user records of the aggregate.
        let mut w = WindowBuilder::new(None, 0);
        w.push("s", &rec(6, &ev("x", "b", "like")), &mut dedup);
        assert_eq!(
            w.push_to("s", &agg, 0, Bound::Size(3), &mut dedup),
            Took::Through(1)
        );
        assert_eq!(w.len(), 3);
        assert!(w.reached(Bound::Size(3)));
        let one = w.close(&mut dedup);
        assert_eq!(one.end, Position::parse("7:1"));
        assert_eq!(one.total_delta, 3);
        // Window two goes on after it, to the record's end; its malformed user record is
        // dead-lettered at its own place.
        let mut w = WindowBuilder::new(one.end.clone(), 0);
        let from = Position::resume_in(one.end.as_ref(), &agg.seq);
        assert_eq!(from, 2);
        assert_eq!(
            w.push_to("s", &agg, from, Bound::Size(10), &mut dedup),
            Took::Whole
        );
        assert!(!w.reached(Bound::Size(10)));
        // Holding only the rest of an aggregate, it counts no new record, yet it is not empty:
        // a flush at the shard's end (or when caught up) must apply it, not skip it.
        assert!(!w.is_empty());
        let two = w.close(&mut dedup);
        assert_eq!(two.first, Some(agg.seq.clone()));
        assert_eq!(two.end, Position::parse("7"));
        assert_eq!((two.total_delta, two.stats.malformed), (2, 1));
        assert_eq!(two.dead_letters[0].seq, Position::parse("7:3").unwrap());
        assert!(two.dead_letters[0]
            .reason
            .starts_with("KPL user record 4 of 5"));
        // Rebuilt to a recorded end inside the aggregate, the first window is the same.
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0);
        let end = one.end.clone().unwrap();
        w.push_to(
            "s",
            &rec(6, &ev("x", "b", "like")),
            0,
            Bound::End(&end),
            &mut dedup,
        );
        assert!(!w.reached(Bound::End(&end)));
        assert_eq!(
            w.push_to("s", &agg, 0, Bound::End(&end), &mut dedup),
            Took::Through(1)
        );
        assert!(w.reached(Bound::End(&end)));
        assert_eq!(w.close(&mut dedup).posts, one.posts);
        // Together: the aggregate whole, once.
        let mut w = WindowBuilder::new(None, 0);
        let mut dedup = Dedup::new(600_000);
        w.push("s", &agg, &mut dedup);
        let whole = w.close(&mut dedup);
        assert_eq!(whole.total_delta, one.total_delta + two.total_delta - 1);
        assert_eq!(
            whole.dedup.ids.len(),
            one.dedup.ids.len() + two.dedup.ids.len() - 1
        );
    }

    #[test]
    fn an_oversized_bad_record_becomes_a_small_dead_letter() {
        // A 10 MiB record (the largest a Kinesis stream can be set to accept) whose `action` is
        // one huge string: the dead letter stays far below DynamoDB's 400 KB item limit.
        let big = format!(
            r#"{{"event_id":"e","post_id":"p","user_id":"u","action":"{}","created_at":1}}"#,
            "é".repeat(5 * 1024 * 1024)
        );
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0);
        w.push("s", &rec(1, &big), &mut dedup);
        let c = w.close(&mut dedup);
        let [d] = c.dead_letters.as_slice() else {
            panic!("{:?}", c.stats)
        };
        assert_eq!(d.size, big.len() as u64);
        assert_eq!(d.data.len(), DEAD_LETTER_MAX_BYTES);
        assert!(
            d.reason.len() <= DEAD_LETTER_MAX_REASON,
            "{}",
            d.reason.len()
        );
        assert!(d.reason.starts_with("field `action`"), "{}", d.reason);
        assert!(dead_letter_units(d) <= 5);
    }

    /// A likers window keeps each edge's latest event, whatever order its events come in, and
    /// counts a copy of the event it holds as a duplicate.
    #[test]
    fn a_likers_window_keeps_each_edge_s_latest_event() {
        let e = |id: &str, user: &str, action: &str, at: i64| {
            format!(
                r#"{{"event_id":"{id}","post_id":"p","user_id":"{user}","action":"{action}","created_at":{at}}}"#
            )
        };
        let records = [
            e("2", "u", "unlike", 2_000),
            e("1", "u", "like", 1_000),
            e("2", "u", "unlike", 2_000),
            e("3", "v", "like", 5_000),
            e("4", "v", "like", 5_000),
        ];
        let mut dedup = Dedup::new(600_000);
        let mut w = WindowBuilder::new(None, 0).likers();
        for (i, data) in records.iter().enumerate() {
            w.push("s", &rec(i as u64 + 1, data), &mut dedup);
        }
        let c = w.close(&mut dedup);
        let kept: Vec<(&str, bool, &str)> = c
            .edges
            .iter()
            .map(|e| (e.user_id.as_str(), e.liked, e.event_id.as_str()))
            .collect();
        assert_eq!(kept, [("u", false, "2"), ("v", true, "4")]);
        assert_eq!(c.stats.duplicates, 1);
        assert!(
            c.posts.is_empty() && c.total_delta == 0,
            "it counts nothing itself"
        );
    }
}
