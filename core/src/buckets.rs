//! Time buckets by `created_at` (UTC): minute, hour and day keys, and a window's per-post delta
//! by minute. How the deltas are stored is [`crate::summary`]'s.

use std::collections::BTreeMap;

/// Milliseconds in a minute.
pub const MINUTE_MS: i64 = 60_000;
/// Milliseconds in an hour.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// A civil UTC date from days since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The day key `YYYYMMDD` of a time in milliseconds.
pub fn day_key(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(DAY_MS));
    format!("{y:04}{m:02}{d:02}")
}

/// The hour key `YYYYMMDDHH` of a time in milliseconds.
pub fn hour_key(ms: i64) -> String {
    format!("{}{:02}", day_key(ms), hour_of_day(ms))
}

/// The hour of the day, 0–23.
pub fn hour_of_day(ms: i64) -> u8 {
    (ms.rem_euclid(DAY_MS) / HOUR_MS) as u8
}

/// The minute of the hour, 0–59.
pub fn minute_of_hour(ms: i64) -> u8 {
    (ms.rem_euclid(HOUR_MS) / MINUTE_MS) as u8
}

/// The start of the minute of a time in milliseconds: counts are kept per minute, so "since T"
/// and "as of T" are answered from the start of T's minute.
pub fn minute_start(ms: i64) -> i64 {
    ms - ms.rem_euclid(MINUTE_MS)
}

/// The per-post net change of one window, by minute of `created_at`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostDelta {
    /// Net change, by the start of the minute (ms) the events were created in.
    pub by_minute: BTreeMap<i64, i64>,
}

impl PostDelta {
    /// Adds one distinct event.
    pub fn add(&mut self, created_at: i64, delta: i64) {
        *self.by_minute.entry(minute_start(created_at)).or_default() += delta;
    }

    /// Net change over all minutes.
    pub fn total(&self) -> i64 {
        self.by_minute.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        // 2026-11-30T06:44:18.123Z
        let t = 1_796_021_058_123;
        assert_eq!(day_key(t), "20261130");
        assert_eq!(hour_key(t), "2026113006");
        assert_eq!(minute_of_hour(t), 44);
        assert_eq!(day_key(0), "19700101");
        assert_eq!(day_key(951_782_400_000), "20000229");
    }
}
