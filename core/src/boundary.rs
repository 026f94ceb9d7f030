//! The window-boundary engine: how a shard's records fall into windows, for every application.
//!
//! A window holds whole user records: a Kinesis record, or one user record of a KPL aggregate.
//! Its size bound counts user records (each may add an id to its dedup record, one store item),
//! so a window may end inside an aggregate; the next window goes on after the last user record
//! taken, and a checkpoint inside a record (a restart there reads the record again) skips the
//! user records it covers. An off-by-one here loses or double-counts likes, so it is written once:
//! [`Parts`] says where each part of a record starts, and [`Extent::take`] hands one part to the
//! application's [`Fold`] and moves the window's end. The counter (`CounterShard`) and analytics
//! (`AnalyticsShard`) drive them, differing only in what they fold and in what closing a window
//! does; the calls go one way, from the shard into the core.

use crate::kpl::{user_records, Took, UserRecords};
use crate::ports::StreamRecord;
use crate::seq::Position;

/// One user record handed to a [`Fold`].
#[derive(Clone, Copy, Debug)]
pub struct UserRecord<'a> {
    /// Its index in the Kinesis record: the sub-sequence number inside an aggregate, else 0.
    pub index: u32,
    /// How many user records the aggregate holds, when the record is a KPL aggregate.
    pub of: Option<usize>,
    /// Its bytes.
    pub data: &'a [u8],
}

impl UserRecord<'_> {
    /// Its position in the shard: the record's sequence number, with the sub-sequence number
    /// inside an aggregate.
    pub fn position(&self, record: &StreamRecord) -> Position {
        Position {
            seq: record.seq.clone(),
            sub: self.of.map(|_| self.index),
        }
    }
}

/// What an application does with each user record a window takes.
pub trait Fold {
    /// Folds one user record of `record`.
    fn user_record(&mut self, record: &StreamRecord, user: UserRecord<'_>);

    /// `record` is marked as a KPL aggregate but is not a valid one (`reason` says why): it is
    /// one user record, taken whole, once.
    fn corrupt(&mut self, record: &StreamRecord, reason: String);
}

/// Where a window ends and how many user records it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    end: Option<Position>,
    user_records: usize,
}

impl Extent {
    /// Folds the user records of `record` from index `from` on into `fold`, at most `max` of
    /// them (at least one, so that a window always moves on), and moves the end past them. Says
    /// whether that took the record whole or the window ends inside it.
    pub fn take(
        &mut self,
        fold: &mut impl Fold,
        record: &StreamRecord,
        from: u32,
        max: usize,
    ) -> Took {
        let took = match user_records(&record.data) {
            Ok(users) => {
                let (range, took) = users.part(from, max);
                let of = matches!(users, UserRecords::Aggregated(_)).then(|| users.len());
                self.user_records += range.len();
                for i in range {
                    let user = UserRecord {
                        index: i as u32,
                        of,
                        data: users.get(i),
                    };
                    fold.user_record(record, user);
                }
                took
            }
            Err(reason) => {
                if from == 0 {
                    self.user_records += 1;
                    fold.corrupt(record, reason);
                }
                Took::Whole
            }
        };
        self.end = Some(Position {
            seq: record.seq.clone(),
            sub: took.sub(),
        });
        took
    }

    /// The last record (or user record of an aggregate) taken, if any.
    pub fn end(&self) -> Option<&Position> {
        self.end.as_ref()
    }

    /// User records taken (a KPL aggregate counts each of its records).
    pub fn len(&self) -> usize {
        self.user_records
    }

    /// Whether nothing was taken: no record, nor the rest of an aggregate a previous window
    /// ended inside (which folds nothing new, but must still be closed and checkpointed).
    pub fn is_empty(&self) -> bool {
        self.end.is_none()
    }

    /// How many more user records fit before a bound of `size`.
    pub fn room(&self, size: usize) -> usize {
        size.saturating_sub(self.user_records)
    }

    /// The end, leaving the extent empty (a window closed).
    pub fn take_end(&mut self) -> Option<Position> {
        self.user_records = 0;
        self.end.take()
    }
}

/// Where the parts of one record start, as a shard folds it into its windows: from the first
/// user record its checkpoint does not cover, then each part after the last user record the part
/// before took, until the record is taken whole. The shard folds each part ([`Extent::take`])
/// and closes its window when the part reaches the window's bound; this only says where the
/// next part starts, so that no application works it out again.
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    next: Option<u32>,
}

impl Parts {
    /// The parts of `record`, read after `checkpoint`.
    pub fn of(record: &StreamRecord, checkpoint: Option<&Position>) -> Parts {
        Parts {
            next: Some(Position::resume_in(checkpoint, &record.seq)),
        }
    }

    /// The first user record of the next part (`None`: the record is taken whole).
    pub fn next(&self) -> Option<u32> {
        self.next
    }

    /// What the last part took.
    pub fn took(&mut self, took: Took) {
        self.next = match took {
            Took::Whole => None,
            Took::Through(k) => Some(k + 1),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kpl::aggregate;
    use crate::SeqNo;

    fn rec(seq: u64, data: Vec<u8>) -> StreamRecord {
        StreamRecord {
            seq: SeqNo::parse(&seq.to_string()).unwrap(),
            arrival_ms: 0,
            partition_key: "k".into(),
            data,
        }
    }

    /// Windows of `size` user records, each a list of the positions it took.
    struct Sized {
        size: usize,
        checkpoint: Option<Position>,
        open: (Extent, Vec<String>),
        closed: Vec<Vec<String>>,
    }

    impl Fold for Vec<String> {
        fn user_record(&mut self, record: &StreamRecord, user: UserRecord<'_>) {
            self.push(user.position(record).to_string());
        }
        fn corrupt(&mut self, record: &StreamRecord, _: String) {
            self.push(format!("{}!", record.seq));
        }
    }

    /// A shard's loop over one record, with windows that close synchronously.
    fn run(w: &mut Sized, record: &StreamRecord) {
        let mut parts = Parts::of(record, w.checkpoint.as_ref());
        while let Some(from) = parts.next() {
            let (extent, fold) = &mut w.open;
            let took = extent.take(fold, record, from, extent.room(w.size));
            if extent.len() >= w.size {
                w.checkpoint = w.open.0.take_end();
                w.closed.push(std::mem::take(&mut w.open.1));
            }
            parts.took(took);
        }
    }

    #[test]
    fn windows_end_inside_aggregates_and_go_on_after_the_last_user_record_taken() {
        let mut w = Sized {
            size: 2,
            checkpoint: None,
            open: Default::default(),
            closed: vec![],
        };
        run(&mut w, &rec(1, b"a".to_vec()));
        run(&mut w, &rec(2, aggregate("k", &[b"0", b"1", b"2"])));
        run(&mut w, &rec(3, b"b".to_vec()));
        assert_eq!(w.closed, [vec!["1", "2:0"], vec!["2:1", "2:2"]]);
        assert_eq!(w.open.1, ["3"]);
        // The aggregate's last user record ends it whole.
        assert_eq!(w.checkpoint.unwrap().to_string(), "2");
    }

    #[test]
    fn a_checkpoint_inside_a_record_skips_what_it_covers() {
        let mut w = Sized {
            size: 10,
            checkpoint: Some(Position {
                seq: SeqNo::parse("2").unwrap(),
                sub: Some(0),
            }),
            open: Default::default(),
            closed: vec![],
        };
        run(&mut w, &rec(2, aggregate("k", &[b"0", b"1", b"2"])));
        assert_eq!(w.open.1, ["2:1", "2:2"]);
        assert_eq!(w.open.0.end().unwrap().to_string(), "2");
    }

    #[test]
    fn a_corrupt_aggregate_is_one_user_record_taken_once() {
        let mut bad = aggregate("k", &[b"0", b"1"]);
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        let r = rec(4, bad);
        let mut e = Extent::default();
        let mut f = Vec::new();
        assert_eq!(e.take(&mut f, &r, 0, 1), Took::Whole);
        assert_eq!(e.take(&mut f, &r, 1, 1), Took::Whole);
        assert_eq!((f, e.len()), (vec!["4!".to_owned()], 1));
    }
}
