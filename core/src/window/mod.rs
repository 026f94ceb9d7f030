//! Tumbling windows of per-post deltas.
//!
//! A shard's records are folded, in sequence order, into a window that closes on size (records)
//! or on time, whichever comes first (time is the caller's concern: it passes the clock). A closed
//! window is its per-post deltas (sorted by post), its dead letters (by sequence number), its
//! global-total delta and its dedup record. The same records, read after the same checkpoint with
//! the same duplicate filter, always give the same window: that is what lets whoever applies a
//! pending window — a restarted owner, a successor, a stale owner — write the same deltas.
//!
//! How a window folds its events is its count mode's, one module each, chosen once when the
//! window is made: `events` (each event once, through the shard's duplicate filter, into its
//! post's delta by minute) and `likers` (each edge's latest event, written to the edge; its
//! deltas follow from what those writes change). This module holds what both share: the
//! records' extent, decoding, dead letters and the closed window.

use std::collections::HashSet;

use smol_str::SmolStr;

use crate::boundary::{Extent, Fold, UserRecord};
use crate::buckets::PostDelta;

mod events;
mod key_order;
mod likers;
use crate::dead_letter::{
    truncate_utf8, DeadLetter, DEAD_LETTER_MAX_BYTES, DEAD_LETTER_MAX_REASON,
};
use crate::dedup::{Dedup, DedupRecord};
use crate::edge::{self, EdgeEvent, HeldCounts, Transition};
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

/// Whose states [`WindowBuilder::states_as_written`] says.
#[derive(Clone, Copy)]
pub enum Users<'a> {
    /// One user's (a viewer's): its edge of each post looked up at once.
    One(&'a str),
    /// Those the predicate takes (a likers page): found among each post's users.
    Where(&'a dyn Fn(&str) -> bool),
}

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

/// How a window folds its events: one module per count mode.
#[derive(Debug)]
enum Folded {
    Events(events::Events),
    Likers(likers::Likers),
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

    /// Counts likers instead of events: each edge's latest event is kept (ordered by
    /// [`edge::ordering_time`] with this skew, then the event id), and no duplicate filter is
    /// needed — a copy is never newer than itself.
    pub fn likers(mut self, max_skew_ms: i64) -> WindowBuilder {
        self.content.folded = Folded::Likers(likers::Likers::new(max_skew_ms));
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

    /// The window's deltas for the posts `wanted` names, by post id, as its write will make
    /// them: counting events, its own; counting likers, each of those posts' edges' latest
    /// event resolved against the edge's stored state (`stored`: `None` while that edge is not
    /// read, and then the answer is `None`) by the rule every store writes by
    /// ([`edge::resolve`], as `window`, the identity its write will have). Only those posts are
    /// looked at: the cost is theirs, not the window's.
    pub fn deltas_as_written<'a>(
        &self,
        wanted: &HashSet<&str>,
        stored: impl Fn(&EdgeEvent) -> Option<Option<&'a edge::EdgeState>>,
        window: &str,
    ) -> Option<Vec<(String, PostDelta)>> {
        match &self.content.folded {
            Folded::Events(e) => {
                let mut out: Vec<(String, PostDelta)> = wanted
                    .iter()
                    .filter_map(|p| e.deltas.get_key_value(*p))
                    .map(|(p, d)| (p.clone(), d.clone()))
                    .collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                Some(out)
            }
            Folded::Likers(l) => {
                let mut transitions = Vec::new();
                for e in l.edges_of(wanted) {
                    let old = stored(e)?;
                    transitions.extend(edge::resolve(old, e, window).transition());
                }
                Some(edge::deltas(&transitions).0)
            }
        }
    }

    /// Likers: whether each user `users` says likes each of the posts `wanted` names once this
    /// window is written, for the edges where it holds an event of that user's (none when
    /// counting events), as (post, user, liked) in that order: resolved as
    /// [`WindowBuilder::deltas_as_written`] resolves its deltas, so that the two answer from the
    /// same view (`None` while one of those edges is not read).
    pub fn states_as_written<'a>(
        &self,
        wanted: &HashSet<&str>,
        users: Users<'_>,
        stored: impl Fn(&EdgeEvent) -> Option<Option<&'a edge::EdgeState>>,
        window: &str,
    ) -> Option<Vec<(String, String, bool)>> {
        let mut out = Vec::new();
        // The users' edges alone are looked up (a viewer's: its one edge per post, at once).
        let edges: Box<dyn Iterator<Item = &EdgeEvent>> = match (self.folded_likers(), users) {
            (None, _) => Box::new(std::iter::empty()),
            (Some(l), Users::One(user)) => Box::new(l.user_edges_of(wanted, user)),
            (Some(l), Users::Where(f)) => Box::new(l.users_edges_of(wanted, f)),
        };
        for e in edges {
            let old = stored(e)?;
            let liked = match edge::resolve(old, e, window).transition() {
                Some(t) => t.after.is_some(),
                None => old.is_some_and(|o| o.liked),
            };
            out.push((e.post_id.to_string(), e.user_id.to_string(), liked));
        }
        out.sort();
        Some(out)
    }

    /// Likers: the window's latest event of each edge of the posts `wanted` names (none when
    /// counting events): the edges whose stored state its deltas are resolved against. Found by
    /// post: the window's other edges are not looked at.
    pub fn edges_of<'a>(
        &'a self,
        wanted: &'a HashSet<&str>,
    ) -> impl Iterator<Item = &'a EdgeEvent> + 'a {
        self.folded_likers()
            .into_iter()
            .flat_map(move |l| l.edges_of(wanted))
    }

    /// Likers: how many times the window changed the post's edges since it opened (`None`
    /// counting events): what an answer resolved for the post
    /// ([`WindowBuilder::deltas_as_written`]) against edges that stay as they were read stays
    /// true until this moves.
    pub fn post_changes(&self, post: &str) -> Option<u64> {
        self.folded_likers().map(|l| l.changes_of(post))
    }

    /// Likers: the post's edges the window changed since the post's change count
    /// ([`WindowBuilder::post_changes`]) was `since`, each once, with its place among the post's
    /// edges (every edge of the post for 0; none counting events): what an answer that resolved
    /// the post at that count resolves again, edge by edge.
    pub fn post_edges_since(&self, post: &str, since: u64) -> Vec<(u32, &EdgeEvent)> {
        self.folded_likers()
            .map(|l| l.changed_since(post, since))
            .unwrap_or_default()
    }

    /// What the window folds counting likers (`None`: counting events).
    fn folded_likers(&self) -> Option<&likers::Likers> {
        match &self.content.folded {
            Folded::Likers(l) => Some(l),
            Folded::Events(_) => None,
        }
    }

    /// The record the window's first user record came from, if any.
    pub fn first(&self) -> Option<&SeqNo> {
        self.first.as_ref()
    }

    /// Closes the window, sealing its first-seen ids.
    pub fn close(mut self, dedup: &mut Dedup) -> ClosedWindow {
        let (posts, edges) = match self.content.folded {
            Folded::Events(e) => (e.close(), Vec::new()),
            Folded::Likers(l) => (Vec::new(), l.close()),
        };
        ClosedWindow {
            start_after: self.start_after,
            first: self.first,
            end: self.extent.take_end(),
            total_delta: posts.iter().map(|(_, d)| d.total()).sum(),
            posts,
            held: HeldCounts::default(),
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
    /// Folds one user record's event; a malformed one is returned for its dead letter.
    fn fold_event(
        &mut self,
        data: &[u8],
        arrival_ms: i64,
    ) -> Result<(), crate::event::DecodeError> {
        let ev = match self.input.decode(data)? {
            Decoded::Event(ev) => ev,
            Decoded::Skipped => {
                self.content.stats.skipped += 1;
                return Ok(());
            }
        };
        let stats = &mut self.content.stats;
        let met = &mut self.content.met;
        match &mut self.content.folded {
            Folded::Events(e) => e.fold(ev, arrival_ms, stats, self.dedup, met),
            Folded::Likers(l) => {
                // No filter, but the shard's arrival clock kept with its checkpoint.
                self.dedup.tick(arrival_ms);
                l.fold(ev, arrival_ms, stats, met);
            }
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
    /// Net change per post, by post id (likers mode: known once the edges are written, see
    /// [`ClosedWindow::with_transitions`]).
    pub posts: Vec<(String, PostDelta)>,
    /// Likers mode: the removals it holds until the windows whose likes they remove have
    /// written their counts (two shards writing one edge), written after `posts` under its held
    /// marker; not in `posts` or `total_delta`.
    pub held: HeldCounts,
    /// Likers mode: each touched edge's latest event in the window, in the order of the store's
    /// keys (post, then user: `window::key_order`), until they are written
    /// ([`ClosedWindow::with_transitions`]).
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
    /// The posts it holds something of: their deltas, their edges still to write, and their
    /// held removals (a post may come more than once).
    pub fn posts_held(&self) -> impl Iterator<Item = &str> {
        let edges = self.edges.iter().map(|e| e.post_id.as_str());
        let mut last = None;
        let edges = edges.filter(move |p| last.replace(*p) != Some(*p));
        let deltas = self.posts.iter().chain(&self.held.posts);
        deltas.map(|(p, _)| p.as_str()).chain(edges)
    }

    /// Likers: its edges still to write of the posts `wanted` names, each post's found in
    /// `edges`' key order (the others not looked at).
    pub fn edges_of<'a>(
        &'a self,
        wanted: &'a HashSet<&str>,
    ) -> impl Iterator<Item = &'a EdgeEvent> + 'a {
        wanted.iter().flat_map(move |p| {
            let from = self.edges.partition_point(|e| e.post_id.as_str() < *p);
            self.edges[from..]
                .iter()
                .take_while(move |e| e.post_id.as_str() == *p)
        })
    }

    /// The window once its edges are written (likers): the posts' and the global total's
    /// deltas those writes made — the removals it holds apart ([`edge::split`]) — and no edges
    /// left to write.
    pub fn with_transitions(&self, transitions: &[Transition]) -> ClosedWindow {
        let ((posts, total_delta), held) = edge::split(transitions);
        // Field by field: the edges written (most of a likers window) are not copied to be
        // dropped.
        ClosedWindow {
            start_after: self.start_after.clone(),
            first: self.first.clone(),
            end: self.end.clone(),
            posts,
            held,
            edges: Vec::new(),
            dead_letters: self.dead_letters.clone(),
            total_delta,
            dedup: self.dedup.clone(),
            stats: self.stats,
        }
    }

    /// Whether it still has edges to write (likers): its deltas are not known until they are.
    pub fn has_edges_to_write(&self) -> bool {
        !self.edges.is_empty()
    }
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
                w = w.likers(i64::MAX / 4);
            }
            for (i, data) in records.iter().enumerate() {
                w.push("s", &rec(i as u64 + 1, data), &mut dedup);
            }
            assert_eq!(w.posts_met_since(0), ["b", "a"]);
            assert_eq!(w.posts_met_since(1), ["a"]);
            assert!(w.posts_met_since(5).is_empty());
            let c = w.close(&mut dedup);
            let mut held: Vec<&str> = c.posts_held().collect();
            held.sort_unstable();
            assert_eq!(held, ["a", "b"], "likers: {likers}");
            if likers {
                let t: Vec<Transition> = c
                    .edges
                    .iter()
                    .filter_map(|e| edge::resolve(None, e, "w").transition())
                    .collect();
                let written = c.with_transitions(&t);
                let mut held: Vec<&str> = written.posts_held().collect();
                held.sort_unstable();
                assert_eq!(held, ["a", "b"], "its edges written");
            }
        }
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
        assert_eq!(w.first(), Some(&agg.seq));
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

    /// (post, user, event id, liked) of edges, sorted: what two ways of finding them compare by.
    fn ids<'a>(edges: impl Iterator<Item = &'a EdgeEvent>) -> Vec<(String, String, String, bool)> {
        let mut out: Vec<_> = edges
            .map(|e| {
                let (p, u, id) = (&e.post_id, &e.user_id, &e.event_id);
                (p.to_string(), u.to_string(), id.to_string(), e.liked)
            })
            .collect();
        out.sort();
        out
    }

    proptest::proptest! {
        /// A few posts' edges found by post — in the open window (by its users of each post, or
        /// one pass where they are most of it) and in the closed one (by its key order) — are the
        /// window's edges of those posts, every one, and a user's states there are that user's
        /// edges': a post the window holds none of finds nothing.
        #[test]
        fn a_window_finds_a_few_posts_edges_by_post(
            events in proptest::collection::vec((0..6usize, 0..5usize, proptest::bool::ANY), 0..80),
            wanted in proptest::collection::vec(0..8usize, 0..6),
        ) {
            let mut dedup = Dedup::new(600_000);
            let mut w = WindowBuilder::new(None, 0).likers(i64::MAX / 4);
            for (i, (post, user, like)) in events.iter().enumerate() {
                let data = format!(
                    r#"{{"event_id":"e{i}","post_id":"p{post}","user_id":"u{user}","action":"{}","created_at":{}}}"#,
                    if *like { "like" } else { "unlike" },
                    1_796_021_058_000 + i as i64,
                );
                w.push("s", &rec(i as u64 + 1, &data), &mut dedup);
            }
            let names: Vec<String> = wanted.iter().map(|p| format!("p{p}")).collect();
            let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
            let open = ids(w.edges_of(&wanted));
            // One user's states there, every edge absent from the store: each its event's.
            let states = w
                .states_as_written(&wanted, Users::One("u1"), |_| Some(None), "w")
                .unwrap();
            let found = w
                .states_as_written(&wanted, Users::Where(&|u| u == "u1"), |_| Some(None), "w")
                .unwrap();
            proptest::prop_assert_eq!(&states, &found, "looked up, or found among the users");
            let closed = w.close(&mut dedup);
            let every = ids(closed.edges.iter().filter(|e| wanted.contains(e.post_id.as_str())));
            proptest::prop_assert_eq!(&open, &every);
            proptest::prop_assert_eq!(&ids(closed.edges_of(&wanted)), &every);
            let of_u1: Vec<(String, String, bool)> = every
                .iter()
                .filter(|(_, u, _, _)| u == "u1")
                .map(|(p, u, _, liked)| (p.clone(), u.clone(), *liked))
                .collect();
            proptest::prop_assert_eq!(states, of_u1);
        }
    }
}
