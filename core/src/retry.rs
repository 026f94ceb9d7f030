//! Backoff policy: capped exponential with full jitter. Pure; the loops that sleep live in the
//! apps, one per failure kind.

use std::time::Duration;

/// A retry budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay's ceiling.
    pub base: Duration,
    /// No delay is longer.
    pub cap: Duration,
    /// Tries after the first before giving up.
    pub max_retries: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
            max_retries: 10,
        }
    }
}

impl Backoff {
    /// The ceiling of the delay before retry `attempt` (0-based): `min(cap, base · 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .min(self.cap)
    }

    /// The delay before retry `attempt`, given a uniform `jitter` in [0, 1).
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        self.ceiling(attempt).mul_f64(jitter.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_and_jittered() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            max_retries: 5,
        };
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(3), Duration::from_millis(800));
        assert_eq!(b.ceiling(4), Duration::from_secs(1));
        assert_eq!(b.ceiling(40), Duration::from_secs(1));
        assert_eq!(b.delay(2, 0.5), Duration::from_millis(200));
        assert_eq!(b.delay(2, 7.0), Duration::from_millis(400));
    }
}
