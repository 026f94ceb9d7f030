//! A table's change stream, as Kinesis Data Streams for DynamoDB writes it, from the generator's
//! actions: what a like button's API does to a table with one item per (post, user) like, and
//! the records DynamoDB then puts to the stream.
//!
//! - A like of a post the user does not like writes the item (INSERT); a like again rewrites it
//!   (MODIFY); an unlike deletes it (REMOVE) or, when the table keeps withdrawn likes
//!   (`withdrawn_attribute`), sometimes marks it withdrawn (MODIFY). An unlike of an item that
//!   does not exist deletes nothing, and DynamoDB writes no record.
//! - In a single-table design, the post's other items (its `METADATA`, its comments) change in
//!   the same table and stream: records that are no likes (skipped by the counter).
//! - As AWS says such a stream may, some records come twice (a verbatim copy) and some late
//!   (held back behind the next few).
//! - A malformed record is a like item whose user id breaks the id rules, or the generator's own
//!   malformed bytes.
//!
//! Each item's records carry increasing `ApproximateCreationDateTime`s and `eventID`s, so the
//! generator's truth (each post's likers) is the table's final state.

use std::collections::{HashMap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use tally_core::event::{decode, Action};
use tally_core::input::{InputConfig, Precision};
use tally_core::ports::PutEntry;

use crate::generate::Kind;

/// What a change stream adds to the generator's shape.
#[derive(Clone, Debug)]
pub struct ChangeConfig {
    /// Where the post and user are in an item, which items are likes, the soft-delete attribute
    /// and the time's unit.
    pub input: InputConfig,
    /// Share of records held back behind the next few (out of order, as AWS allows).
    pub late_ratio: f64,
    /// Share of actions followed by a change to another item of the post (single-table design
    /// only: with no like selector, every item is a like).
    pub other_ratio: f64,
    /// The random seed.
    pub seed: u64,
}

/// What was written, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeStats {
    /// Records of like items that changed (INSERT, MODIFY, REMOVE).
    pub changes: u64,
    /// Verbatim copies.
    pub duplicates: u64,
    /// Records held back behind later ones.
    pub late: u64,
    /// Records of items that are no likes.
    pub others: u64,
    /// Malformed records.
    pub malformed: u64,
    /// Actions that wrote no record (an unlike of an item that does not exist).
    pub unwritten: u64,
}

/// The state of a like item in the table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Item {
    Liked,
    Withdrawn,
}

/// Change records from the generator's records (an iterator adapter).
pub struct Changes<I> {
    inner: I,
    cfg: ChangeConfig,
    rng: StdRng,
    table: HashMap<(String, String), Item>,
    /// Records ready to put, in order.
    out: VecDeque<(Kind, PutEntry)>,
    /// Records held back: each is put once this many more have been.
    held: Vec<(usize, Kind, PutEntry)>,
    recent: VecDeque<PutEntry>,
    next_event: u64,
    /// The last millisecond written and the microseconds used within it.
    clock: (i64, i64),
    stats: ChangeStats,
}

impl<I: Iterator<Item = (Kind, PutEntry)>> Changes<I> {
    /// Change records for the generator's records `inner`.
    pub fn new(inner: I, cfg: ChangeConfig) -> Changes<I> {
        Changes {
            inner,
            rng: StdRng::seed_from_u64(cfg.seed ^ 0x00d1_7a8e),
            cfg,
            table: HashMap::new(),
            out: VecDeque::new(),
            held: Vec::new(),
            recent: VecDeque::new(),
            next_event: 0,
            clock: (i64::MIN, 0),
            stats: ChangeStats::default(),
        }
    }

    /// What was written so far.
    pub fn stats(&self) -> &ChangeStats {
        &self.stats
    }

    /// Turns one generator record into the records the table writes.
    fn translate(&mut self, kind: Kind, entry: PutEntry) {
        match kind {
            Kind::Duplicate => {
                if self.recent.is_empty() {
                    return;
                }
                let i = self.rng.gen_range(0..self.recent.len());
                let copy = self.recent[i].clone();
                self.stats.duplicates += 1;
                self.emit(Kind::Duplicate, copy);
            }
            Kind::Malformed | Kind::Other => {
                let entry = if self.rng.gen_bool(0.5) {
                    let post = entry.partition_key.clone();
                    // At the table's latest time (0: the clock never goes back).
                    self.like_item_change("INSERT", &post, "not a user", None, 0)
                } else {
                    entry
                };
                self.stats.malformed += 1;
                self.emit(Kind::Malformed, entry);
            }
            Kind::Event => {
                let Ok(ev) = decode(&entry.data) else {
                    return;
                };
                let key = (ev.post_id.clone(), ev.user_id.clone());
                let state = self.table.get(&key).copied();
                let soft = !self.cfg.input.withdrawn_attribute.is_empty();
                let change = match (ev.action, state) {
                    (Action::Like, None) => Some(("INSERT", None, Some(Item::Liked))),
                    (Action::Like, Some(_)) => Some(("MODIFY", None, Some(Item::Liked))),
                    (Action::Unlike, None) => None,
                    (Action::Unlike, Some(Item::Liked)) if soft && self.rng.gen_bool(0.5) => {
                        Some(("MODIFY", Some(ev.created_at), Some(Item::Withdrawn)))
                    }
                    (Action::Unlike, Some(_)) => Some(("REMOVE", None, None)),
                };
                let Some((name, withdrawn, after)) = change else {
                    self.stats.unwritten += 1;
                    return;
                };
                match after {
                    Some(s) => self.table.insert(key, s),
                    None => self.table.remove(&key),
                };
                let record =
                    self.like_item_change(name, &ev.post_id, &ev.user_id, withdrawn, ev.created_at);
                self.stats.changes += 1;
                self.emit(Kind::Event, record);
                if !self.cfg.input.like_attribute.is_empty()
                    && self.rng.gen_bool(self.cfg.other_ratio.clamp(0.0, 1.0))
                {
                    let other = self.other_item_change(&ev.post_id, ev.created_at);
                    self.stats.others += 1;
                    self.emit(Kind::Other, other);
                }
            }
        }
    }

    /// A record of a like item's change.
    fn like_item_change(
        &mut self,
        name: &str,
        post: &str,
        user: &str,
        withdrawn_at: Option<i64>,
        at_ms: i64,
    ) -> PutEntry {
        let c = &self.cfg.input;
        let mut keys = Map::new();
        keys.insert(
            c.post_attribute.clone(),
            s(&format!("{}{post}", c.post_prefix)),
        );
        keys.insert(
            c.user_attribute.clone(),
            s(&format!("{}{user}", c.user_prefix)),
        );
        let mut image = keys.clone();
        if !c.like_attribute.is_empty() && !image.contains_key(&c.like_attribute) {
            image.insert(
                c.like_attribute.clone(),
                s(&format!("{}{user}", c.like_prefix)),
            );
        }
        image.insert("liked_at".into(), json!({"N": at_ms.to_string()}));
        if let Some(t) = withdrawn_at {
            image.insert(c.withdrawn_attribute.clone(), json!({"N": t.to_string()}));
        }
        self.record(name, post, keys, image, at_ms)
    }

    /// A record of another item of the post: its metadata or a comment.
    fn other_item_change(&mut self, post: &str, at_ms: i64) -> PutEntry {
        let c = &self.cfg.input;
        let sort = if self.rng.gen_bool(0.5) {
            "METADATA".to_owned()
        } else {
            format!("COMMENT#c{}", self.rng.gen_range(0..1_000))
        };
        let mut keys = Map::new();
        keys.insert(
            c.post_attribute.clone(),
            s(&format!("{}{post}", c.post_prefix)),
        );
        keys.insert(c.like_attribute.clone(), s(&sort));
        let mut image = keys.clone();
        image.insert("body".into(), s("…"));
        self.record("INSERT", post, keys, image, at_ms)
    }

    /// The record DynamoDB writes, in the precision configured.
    fn record(
        &mut self,
        name: &str,
        post: &str,
        keys: Map<String, Value>,
        image: Map<String, Value>,
        at_ms: i64,
    ) -> PutEntry {
        self.next_event += 1;
        // The table's clock only moves forward; within a millisecond, later changes get later
        // microseconds.
        let at_ms = at_ms.max(self.clock.0);
        self.clock = if self.clock.0 == at_ms {
            (at_ms, (self.clock.1 + 1).min(999))
        } else {
            (at_ms, self.rng.gen_range(0..100))
        };
        let time = match self.cfg.input.time_precision {
            Precision::Millisecond => at_ms,
            Precision::Microsecond => at_ms * 1_000 + self.clock.1,
        };
        PutEntry {
            // Keyed by the item, as DynamoDB keys its own records (`tally_core::event::change_key`).
            partition_key: tally_core::event::change_key(&keys).unwrap_or_else(|| post.to_owned()),
            data: change_record(
                name,
                keys,
                image,
                time,
                &format!("{:032x}", self.next_event),
            ),
        }
    }

    /// Puts a record in line, or holds it back behind the next few.
    fn emit(&mut self, kind: Kind, entry: PutEntry) {
        if kind != Kind::Malformed {
            if self.recent.len() == 64 {
                self.recent.pop_front();
            }
            self.recent.push_back(entry.clone());
        }
        if self.rng.gen_bool(self.cfg.late_ratio.clamp(0.0, 1.0)) {
            self.stats.late += 1;
            let behind = self.rng.gen_range(1..=5);
            self.held.push((behind, kind, entry));
        } else {
            self.out.push_back((kind, entry));
            self.release(1);
        }
    }

    /// `n` records went out: the held ones whose turn it is follow.
    fn release(&mut self, n: usize) {
        for h in &mut self.held {
            h.0 = h.0.saturating_sub(n);
        }
        let (due, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.0 == 0);
        self.held = held;
        self.out.extend(due.into_iter().map(|(_, k, e)| (k, e)));
    }
}

impl<I: Iterator<Item = (Kind, PutEntry)>> Iterator for Changes<I> {
    type Item = (Kind, PutEntry);

    fn next(&mut self) -> Option<(Kind, PutEntry)> {
        loop {
            if let Some(r) = self.out.pop_front() {
                return Some(r);
            }
            match self.inner.next() {
                Some((kind, entry)) => self.translate(kind, entry),
                // The end: whatever is held goes out last.
                None => {
                    let held = std::mem::take(&mut self.held);
                    self.out.extend(held.into_iter().map(|(_, k, e)| (k, e)));
                    return self.out.pop_front();
                }
            }
        }
    }
}

/// A record of Kinesis Data Streams for DynamoDB: `name` (INSERT, MODIFY or REMOVE) of the item
/// with `keys`, whose image (new, or old for REMOVE) is `image`, at `time` (in the table's
/// precision), with `event_id`.
pub fn change_record(
    name: &str,
    keys: Map<String, Value>,
    image: Map<String, Value>,
    time: i64,
    event_id: &str,
) -> Vec<u8> {
    let image_key = if name == "REMOVE" {
        "OldImage"
    } else {
        "NewImage"
    };
    let mut dynamodb = Map::new();
    dynamodb.insert("ApproximateCreationDateTime".into(), json!(time));
    dynamodb.insert("Keys".into(), Value::Object(keys));
    dynamodb.insert(image_key.into(), Value::Object(image));
    dynamodb.insert("SizeBytes".into(), json!(60));
    let record = json!({
        "awsRegion": "us-east-1",
        "eventID": event_id,
        "eventName": name,
        "userIdentity": null,
        "recordFormat": "application/json",
        "tableName": "likes",
        "dynamodb": dynamodb,
        "eventSource": "aws:dynamodb",
    });
    serde_json::to_vec(&record).unwrap_or_default()
}

fn s(v: &str) -> Value {
    json!({ "S": v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{GenConfig, Generation, Generator};
    use tally_core::input::{Decoded, Format};

    /// Counts likers from the records as the counter does: each (post, user)'s latest state by
    /// (time, event id), whatever the order and copies.
    fn likers(input: &InputConfig, records: &[PutEntry]) -> (HashMap<String, i64>, u64, u64) {
        let mut latest: HashMap<(String, String), (i64, String, bool)> = HashMap::new();
        let (mut skipped, mut bad) = (0, 0);
        for r in records {
            match input.decode(&r.data) {
                Ok(Decoded::Event(e)) => {
                    let key = (e.post_id.into_owned(), e.user_id.into_owned());
                    let now = (
                        e.created_at,
                        e.event_id.into_owned(),
                        e.action == Action::Like,
                    );
                    let l = latest
                        .entry(key)
                        .or_insert((i64::MIN, String::new(), false));
                    if (now.0, &now.1) > (l.0, &l.1) {
                        *l = now;
                    }
                }
                Ok(Decoded::Skipped) => skipped += 1,
                Err(_) => bad += 1,
            }
        }
        let mut counts = HashMap::new();
        for ((post, _), (_, _, liked)) in latest {
            *counts.entry(post).or_insert(0) += i64::from(liked);
        }
        counts.retain(|_, n| *n != 0);
        (counts, skipped, bad)
    }

    fn run(input: InputConfig) {
        let shaped = !input.like_attribute.is_empty();
        let mut g = Generator::new(Generation {
            no_op_ratio: 0.1,
            ..Generation::of(
                GenConfig {
                    posts: 40,
                    users: 300,
                    unlike_ratio: 0.3,
                    duplicate_ratio: 0.05,
                    malformed_ratio: 0.01,
                    ..GenConfig::default()
                },
                20_000,
            )
        })
        .with_clock(|| 1_700_000_000_000);
        let mut changes = Changes::new(
            g.by_ref(),
            ChangeConfig {
                input: input.clone(),
                late_ratio: 0.05,
                other_ratio: 0.05,
                seed: 3,
            },
        );
        let records: Vec<PutEntry> = changes.by_ref().map(|(_, e)| e).collect();
        // One partition-key rule for change records: what replaying the record would key it by.
        for r in &records {
            if let Some(key) = tally_core::event::partition_key_of(&r.data) {
                assert_eq!(r.partition_key, key, "{}", String::from_utf8_lossy(&r.data));
            }
        }
        let stats = changes.stats().clone();
        let (counts, skipped, bad) = likers(&input, &records);
        let mut truth = g.truth().counts;
        truth.retain(|_, n| *n != 0);
        assert_eq!(counts, truth, "{input:?}");
        // Copies of other items' records are skipped too.
        assert!(
            skipped >= stats.others && (stats.others > 0) == shaped,
            "{skipped} {stats:?}"
        );
        assert_eq!(bad, stats.malformed);
        assert!(
            stats.duplicates > 0 && stats.late > 0 && stats.unwritten > 0,
            "{stats:?}"
        );
    }

    #[test]
    fn the_table_s_final_state_is_the_truth_whatever_the_copies_and_order() {
        run(InputConfig {
            format: Format::Dynamodb,
            withdrawn_attribute: "deleted_at".into(),
            ..InputConfig::default()
        });
        run(InputConfig {
            format: Format::Dynamodb,
            time_precision: Precision::Microsecond,
            ..InputConfig::default()
        });
        run(InputConfig {
            format: Format::Dynamodb,
            post_attribute: "post_id".into(),
            post_prefix: String::new(),
            user_attribute: "user_id".into(),
            user_prefix: String::new(),
            like_attribute: String::new(),
            like_prefix: String::new(),
            ..InputConfig::default()
        });
    }
}
