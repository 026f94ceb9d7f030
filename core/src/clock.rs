//! The wall clock, once: milliseconds since the epoch, for the adapters and the runtime (lease
//! expiry, the embedded stream's arrival stamps, freshness). The core's one reading of the world:
//! no rule of the core calls it (they take times as arguments), and no exactness decision depends
//! on it — dedup follows arrival times.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch (0 on a clock set before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
