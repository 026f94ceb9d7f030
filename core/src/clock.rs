//! The wall clock, once: milliseconds since the epoch (lease expiry, arrival stamps of the embedded
//! stream, freshness). Never what an exactness decision depends on: dedup follows arrival times.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch (0 on a clock set before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
