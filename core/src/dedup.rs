//! Exact duplicate detection by `event_id` within a horizon, with state that survives restarts.
//!
//! Each window's first-seen ids are sealed into a [`DedupRecord`] that the counter stores in the
//! same atomic write as the window's last chunk. After a restart the consumer restores the records
//! whose window is still inside the horizon, so a producer retry that arrives after the restart
//! still counts once. Eviction is a pure function of the records' arrival times (the running
//! maximum), never of the wall clock, so re-reading the same records after a crash makes exactly
//! the same decisions.

use std::collections::{HashSet, VecDeque};

use xxhash_rust::xxh3::xxh3_128;

/// Bytes an id is stored in: its hash's low 96 bits. Each window stores its ids, so their size
/// is the dedup record's cost (12 bytes: 0.012 write units per like). Two distinct ids collide
/// with probability 2^-96 (1.3e-29) per pair; a filter of 12 million ids (20,000 likes/s over a
/// 10-minute horizon) drops a like wrongly about once in 10^12 years.
pub const ID_BYTES: usize = 12;

/// How long after an event arrived a retry of it is recognised, unless configured
/// (`counter.dedup_horizon_secs`): the counter's, analytics' and the reshard lineage's default.
pub const DEFAULT_HORIZON: std::time::Duration = std::time::Duration::from_secs(600);

/// The hash an event id is remembered by: xxh3-128 cut to [`ID_BYTES`] bytes.
pub fn id_hash(event_id: &str) -> u128 {
    xxh3_128(event_id.as_bytes()) & ((1u128 << (8 * ID_BYTES)) - 1)
}

/// The first-seen ids of one window, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupRecord {
    /// The running maximum arrival time when the window was sealed; decides eviction.
    pub max_arrival: i64,
    /// Hashes of the ids first seen in the window.
    pub ids: Vec<u128>,
}

impl DedupRecord {
    /// [`ID_BYTES`] bytes per id, little endian.
    pub fn encode_ids(&self) -> Vec<u8> {
        self.ids
            .iter()
            .flat_map(|id| id.to_le_bytes().into_iter().take(ID_BYTES))
            .collect()
    }

    /// Decodes [`DedupRecord::encode_ids`]; `None` if the length is not a multiple of
    /// [`ID_BYTES`].
    pub fn decode_ids(bytes: &[u8]) -> Option<Vec<u128>> {
        if !bytes.len().is_multiple_of(ID_BYTES) {
            return None;
        }
        Some(
            bytes
                .chunks_exact(ID_BYTES)
                .map(|c| {
                    let mut b = [0u8; 16];
                    b[..ID_BYTES].copy_from_slice(c);
                    u128::from_le_bytes(b)
                })
                .collect(),
        )
    }
}

/// The duplicate filter of one shard (and, after a reshard, of its parents' tails).
#[derive(Debug)]
pub struct Dedup {
    /// How long after an event arrived a retry of it is still recognised.
    horizon_ms: i64,
    /// Sealed windows still inside the horizon, oldest first.
    windows: VecDeque<DedupRecord>,
    /// Every id remembered: sealed windows plus the open one.
    seen: HashSet<u128, ahash::RandomState>,
    /// Ids first seen in the open window.
    current: Vec<u128>,
    /// Whether a stored window was evicted since the last [`Dedup::take_evicted`].
    evicted: bool,
    /// The largest arrival time observed: the clock that eviction follows.
    running_max: i64,
}

impl Dedup {
    /// An empty filter.
    pub fn new(horizon_ms: i64) -> Dedup {
        Dedup {
            horizon_ms,
            windows: VecDeque::new(),
            seen: HashSet::default(),
            current: Vec::new(),
            evicted: false,
            running_max: i64::MIN,
        }
    }

    /// A filter restored from stored records, as it stood when the checkpoint was written.
    pub fn restore(horizon_ms: i64, running_max: i64, mut records: Vec<DedupRecord>) -> Dedup {
        records.sort_by_key(|r| r.max_arrival);
        let mut d = Dedup::new(horizon_ms);
        for r in records {
            d.seen.extend(r.ids.iter().copied());
            d.windows.push_back(r);
        }
        d.running_max = running_max;
        d.evict();
        d
    }

    /// The smallest `max_arrival` a stored record may have and still matter after a restart at
    /// `running_max`.
    pub fn min_arrival_to_restore(horizon_ms: i64, running_max: i64) -> i64 {
        running_max.saturating_sub(horizon_ms)
    }

    fn evict(&mut self) {
        while let Some(front) = self.windows.front() {
            if front.max_arrival.saturating_add(self.horizon_ms) >= self.running_max {
                break;
            }
            for id in &front.ids {
                self.seen.remove(id);
            }
            self.windows.pop_front();
            self.evicted = true;
        }
    }

    /// Moves the arrival clock without recording an id (likers mode, where no event needs the
    /// filter, still keeps the shard's clock with its checkpoint).
    pub fn tick(&mut self, arrival_ms: i64) {
        if arrival_ms > self.running_max {
            self.running_max = arrival_ms;
            self.evict();
        }
    }

    /// Records an event; `true` when it is the first time its id is seen within the horizon.
    pub fn observe(&mut self, id: u128, arrival_ms: i64) -> bool {
        self.tick(arrival_ms);
        if self.seen.insert(id) {
            self.current.push(id);
            true
        } else {
            false
        }
    }

    /// Closes the open window's ids into a record to store with the window.
    pub fn seal(&mut self) -> DedupRecord {
        let rec = DedupRecord {
            max_arrival: self.running_max,
            ids: std::mem::take(&mut self.current),
        };
        self.windows.push_back(rec.clone());
        rec
    }

    /// Whether a window was evicted since the last call: its stored record is due for deletion.
    pub fn take_evicted(&mut self) -> bool {
        std::mem::take(&mut self.evicted)
    }

    /// How long after an event arrived a retry of it is recognised (ms).
    pub fn horizon_ms(&self) -> i64 {
        self.horizon_ms
    }

    /// The running maximum arrival time, stored with the checkpoint.
    pub fn running_max(&self) -> i64 {
        self.running_max
    }

    /// How many ids are remembered (memory is ~40 bytes each).
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_within_horizon_count_once_across_restart() {
        let mut d = Dedup::new(1_000);
        assert!(d.observe(id_hash("a"), 100));
        assert!(!d.observe(id_hash("a"), 150));
        assert!(d.observe(id_hash("b"), 200));
        let rec = d.seal();
        assert_eq!(rec.ids.len(), 2);
        // A restart restores the sealed window: a retry of "a" is still a duplicate.
        let mut r = Dedup::restore(1_000, d.running_max(), vec![rec.clone()]);
        assert!(!r.observe(id_hash("a"), 900));
        // Past the horizon the id is forgotten, the same way before and after a restart.
        assert!(r.observe(id_hash("a"), 1_201));
        assert!(d.observe(id_hash("a"), 1_201));
    }

    #[test]
    fn eviction_follows_arrival_not_order() {
        let mut d = Dedup::new(10);
        d.observe(1, 100);
        d.seal();
        d.observe(2, 105);
        d.seal();
        // A late record (lower arrival) does not move the clock back.
        assert!(!d.observe(1, 50));
        d.observe(3, 111); // 100 + 10 < 111: window of id 1 evicted
        assert!(d.observe(1, 111));
        assert!(!d.observe(2, 111));
    }

    #[test]
    fn ids_encode_round_trip() {
        let r = DedupRecord {
            max_arrival: 5,
            ids: vec![1, id_hash("a"), id_hash("b"), 7],
        };
        assert_eq!(DedupRecord::decode_ids(&r.encode_ids()).unwrap(), r.ids);
        assert_eq!(r.encode_ids().len(), 4 * ID_BYTES);
        assert!(DedupRecord::decode_ids(&[0; 15]).is_none());
    }
}
