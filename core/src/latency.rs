//! Latency analytics: HdrHistograms of creation → processing, arrival → processing and iterator
//! age, in milliseconds, with snapshots that serialize and merge.

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::Serialize;

/// The largest latency tracked (7 days); larger values are clamped to it.
pub const MAX_LATENCY_MS: u64 = 7 * 24 * 3_600_000;

/// The three histograms.
#[derive(Debug, Clone)]
pub struct Latency {
    /// Processing time − `created_at`.
    pub creation: Histogram<u64>,
    /// Processing time − arrival in the stream.
    pub arrival: Histogram<u64>,
    /// Iterator age (`MillisBehindLatest`) per read.
    pub iterator_age: Histogram<u64>,
}

/// The percentiles reported for one histogram. With no values there are none: they serialize as
/// `null` (never as a latency of 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Percentiles {
    /// How many values the histogram holds.
    pub count: u64,
    /// The median (ms).
    pub p50: u64,
    /// The 90th percentile (ms).
    pub p90: u64,
    /// The 99th percentile (ms).
    pub p99: u64,
    /// The 99.9th percentile (ms).
    pub p999: u64,
    /// The largest value (ms).
    pub max: u64,
}

impl Serialize for Percentiles {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let some = |v: u64| (self.count > 0).then_some(v);
        let mut st = s.serialize_struct("Percentiles", 6)?;
        st.serialize_field("count", &self.count)?;
        st.serialize_field("p50", &some(self.p50))?;
        st.serialize_field("p90", &some(self.p90))?;
        st.serialize_field("p99", &some(self.p99))?;
        st.serialize_field("p999", &some(self.p999))?;
        st.serialize_field("max", &some(self.max))?;
        st.end()
    }
}

fn new_hist() -> Histogram<u64> {
    // Bounds are constants known to be valid.
    Histogram::new_with_bounds(1, MAX_LATENCY_MS, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

fn record(h: &mut Histogram<u64>, ms: i64) {
    h.saturating_record(ms.clamp(0, MAX_LATENCY_MS as i64) as u64);
}

/// The upper bounds (ms) of the histogram buckets reported by the API and `/metrics`.
pub const BUCKETS_MS: &[u64] = &[
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 3_600_000,
    86_400_000,
];

/// A histogram's cumulative counts at each of [`BUCKETS_MS`] (values ≤ the bound), then the total
/// (the `+Inf` bucket), and the sum of its values (from its mean).
pub fn buckets(h: &Histogram<u64>) -> (Vec<(u64, u64)>, u64, u64) {
    let counts = BUCKETS_MS
        .iter()
        .map(|&le| (le, h.count_between(0, le)))
        .collect();
    let sum = (h.mean() * h.len() as f64).round() as u64;
    (counts, h.len(), sum)
}

/// The percentiles of a histogram.
pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        count: h.len(),
        p50: h.value_at_quantile(0.5),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    }
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            creation: new_hist(),
            arrival: new_hist(),
            iterator_age: new_hist(),
        }
    }
}

impl Latency {
    /// Records one event processed at `now_ms`.
    pub fn record_event(&mut self, created_at: i64, arrival_ms: i64, now_ms: i64) {
        record(&mut self.creation, now_ms - created_at);
        record(&mut self.arrival, now_ms - arrival_ms);
    }

    /// Records one read's iterator age.
    pub fn record_iterator_age(&mut self, ms: i64) {
        record(&mut self.iterator_age, ms);
    }

    /// Adds another snapshot's counts.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.creation.add(&other.creation);
        let _ = self.arrival.add(&other.arrival);
        let _ = self.iterator_age.add(&other.iterator_age);
    }

    /// Serializes the three histograms (V2 format, each length-prefixed).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for h in [&self.creation, &self.arrival, &self.iterator_age] {
            let mut buf = Vec::new();
            // Writing into a Vec cannot fail.
            let _ = V2Serializer::new().serialize(h, &mut buf);
            out.extend_from_slice(&(buf.len() as u32).to_le_bytes());
            out.extend_from_slice(&buf);
        }
        out
    }

    /// Decodes [`Latency::encode`].
    pub fn decode(mut bytes: &[u8]) -> Option<Latency> {
        let mut hs = Vec::with_capacity(3);
        for _ in 0..3 {
            let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
            let body = bytes.get(4..4 + len)?;
            let h: Histogram<u64> = Deserializer::new().deserialize(&mut &body[..]).ok()?;
            hs.push(h);
            bytes = &bytes[4 + len..];
        }
        let mut it = hs.into_iter();
        Some(Latency {
            creation: it.next()?,
            arrival: it.next()?,
            iterator_age: it.next()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_values_are_no_percentiles_not_zero() {
        let v = serde_json::to_value(percentiles(&new_hist())).unwrap();
        assert_eq!(v["count"], 0);
        assert!(
            v["p50"].is_null() && v["p99"].is_null() && v["max"].is_null(),
            "{v}"
        );
        let mut h = new_hist();
        record(&mut h, 7);
        let v = serde_json::to_value(percentiles(&h)).unwrap();
        assert_eq!(v["p50"], 7);
    }

    #[test]
    fn percentiles_and_round_trip() {
        let mut l = Latency::default();
        for i in 1..=1000 {
            l.record_event(0, 0, i);
        }
        l.record_iterator_age(-5); // clamped to 0
        let p = percentiles(&l.creation);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50, 500);
        assert_eq!(p.p90, 900);
        assert_eq!(p.max, 1000);
        let back = Latency::decode(&l.encode()).unwrap();
        assert_eq!(percentiles(&back.creation), p);
        assert_eq!(percentiles(&back.iterator_age).count, 1);
        let mut m = back.clone();
        m.merge(&back);
        assert_eq!(percentiles(&m.creation).count, 2000);
        assert!(Latency::decode(&[1, 2, 3]).is_none());
    }
}
