//! The one retry policy for retryable port errors (throttling, conflicts, timeouts, unreachable
//! endpoints): capped exponential backoff with full jitter. [`Retry`] is the policy;
//! [`with_backoff`] the common loop around it.
//!
//! A retryable error is never fatal to a shard's work: it is retried, at the backoff's cap once
//! the budget of growing delays is spent, for as long as the work goes on — a shard task's for as
//! long as it holds its lease (the task is cancelled when the lease is lost,
//! `worker::shard`). A fleet-wide throttle or a store outage slows every worker down instead of
//! stopping them all. Each retry is counted ([`retries`]) and the retrying is logged at most
//! every [`LOG_EVERY`]. Only [`Retry::bounded`] gives up, for the calls whose failure should end
//! a command with a clear error (a worker's very first look at the stream).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use tally_core::ports::{PortError, PortResult};
use tally_core::retry::Backoff;

/// Retries of this process so far, every call and kind together (a metric).
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// Retries of retryable port errors since the process started.
pub fn retries() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

/// How often one call's retrying is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// The retry budget of one call: decides whether a failure is retried, and sleeps before it.
/// Every retry loop of the consumers goes through it, so policy, bounds and logging live here.
pub struct Retry<'a> {
    backoff: &'a Backoff,
    /// What is being retried, for logs and the final error.
    what: &'a str,
    attempt: u32,
    /// Whether the budget of `backoff.max_retries` ends the retrying.
    bounded: bool,
    /// When the retrying was last logged, and when it began.
    logged: Option<Instant>,
    since: Instant,
}

impl<'a> Retry<'a> {
    /// Retries retryable errors for as long as the caller goes on.
    pub fn new(backoff: &'a Backoff, what: &'a str) -> Retry<'a> {
        Retry {
            backoff,
            what,
            attempt: 0,
            bounded: false,
            logged: None,
            since: Instant::now(),
        }
    }

    /// Gives up after `backoff.max_retries` retries.
    pub fn bounded(backoff: &'a Backoff, what: &'a str) -> Retry<'a> {
        Retry {
            bounded: true,
            ..Retry::new(backoff, what)
        }
    }

    /// Counts and logs a retryable failure that the caller retries on its own schedule (a loop
    /// that polls anyway), logging at most every [`LOG_EVERY`] by `last`.
    pub fn note(&self, e: &PortError, last: &mut Option<Instant>) {
        RETRIES.fetch_add(1, Ordering::Relaxed);
        if last.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(error = %e, "{}: failed; trying again at the next poll", self.what);
        }
    }

    /// After a failure: `Ok` once the pause before the next attempt is over, or the error to give
    /// up with (not retryable, or a bounded budget is spent).
    pub async fn pause(&mut self, e: PortError) -> PortResult<()> {
        if !e.is_retryable() {
            return Err(e);
        }
        if self.bounded && self.attempt >= self.backoff.max_retries {
            return Err(PortError::Other(format!(
                "{}: gave up after {} retries: {e}",
                self.what, self.backoff.max_retries
            )));
        }
        let delay = self
            .backoff
            .delay(self.attempt, rand::thread_rng().gen::<f64>());
        RETRIES.fetch_add(1, Ordering::Relaxed);
        if self.logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            self.logged = Some(Instant::now());
            tracing::warn!(
                error = %e,
                attempts = self.attempt + 1,
                retrying_for_ms = self.since.elapsed().as_millis() as u64,
                "{}: retrying",
                self.what
            );
        }
        tokio::time::sleep(delay).await;
        self.attempt = self.attempt.saturating_add(1);
        Ok(())
    }
}

/// Runs `op` until it succeeds or fails with an error no retry mends.
pub async fn with_backoff<T, F, Fut>(backoff: &Backoff, what: &str, op: F) -> PortResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PortResult<T>>,
{
    run(Retry::new(backoff, what), op).await
}

/// Runs `op` until it succeeds, fails with an error no retry mends, or `backoff.max_retries`
/// retries are spent.
pub async fn with_bounded_backoff<T, F, Fut>(backoff: &Backoff, what: &str, op: F) -> PortResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PortResult<T>>,
{
    run(Retry::bounded(backoff, what), op).await
}

async fn run<T, F, Fut>(mut retry: Retry<'_>, mut op: F) -> PortResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PortResult<T>>,
{
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => retry.pause(e).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    fn backoff() -> Backoff {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(400),
            max_retries: 5,
        }
    }

    /// Fails `n` times with a throttle, then succeeds; returns (result, calls, virtual time spent).
    async fn run_n(n: u32, bounded: bool) -> (PortResult<u32>, u32, Duration) {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let b = backoff();
        let op = || async {
            let c = calls.fetch_add(1, Ordering::SeqCst);
            if c < n {
                Err(PortError::Throttled("slow down".into()))
            } else {
                Ok(c)
            }
        };
        let r = if bounded {
            with_bounded_backoff(&b, "test call", op).await
        } else {
            with_backoff(&b, "test call", op).await
        };
        (r, calls.load(Ordering::SeqCst), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn retries_throttling_within_its_bounds() {
        let (r, calls, spent) = run_n(4, false).await;
        assert_eq!(r.unwrap(), 4);
        assert_eq!(calls, 5);
        // Never more than the sum of the ceilings of the four delays: 100 + 200 + 400 + 400 ms.
        assert!(spent <= Duration::from_millis(1_100), "{spent:?}");
    }

    /// A throttle that lasts (a fleet-wide one, a store outage) is waited out at the cap, never
    /// turned into a failure that would stop the worker and every shard it holds.
    #[tokio::test(start_paused = true)]
    async fn a_lasting_throttle_is_waited_out_not_fatal() {
        let before = retries();
        let (r, calls, spent) = run_n(1_000, false).await;
        assert_eq!(r.unwrap(), 1_000);
        assert_eq!(calls, 1_001);
        assert!(spent <= Duration::from_millis(400 * 1_000), "{spent:?}");
        assert!(retries() - before >= 1_000, "each retry is counted");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_retry_gives_up_after_max_retries_and_says_so() {
        let (r, calls, spent) = run_n(100, true).await;
        assert_eq!(calls, 6);
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("test call") && e.contains("gave up after 5 retries"),
            "{e}"
        );
        assert!(spent <= Duration::from_millis(100 + 200 + 400 + 400 + 400));
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_what_cannot_succeed() {
        let calls = AtomicU32::new(0);
        let r: PortResult<()> = with_backoff(&backoff(), "test call", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(PortError::Invalid("bad request".into()))
        })
        .await;
        assert!(matches!(r, Err(PortError::Invalid(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
