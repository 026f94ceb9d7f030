//! The one retry policy for retryable port errors (throttling, conflicts, timeouts, unreachable
//! endpoints): capped exponential backoff with full jitter, bounded in attempts. [`Retry`] is the
//! policy; [`with_backoff`] the common loop around it.

use std::future::Future;

use rand::Rng;
use tally_core::ports::{PortError, PortResult};
use tally_core::retry::Backoff;

/// The retry budget of one call: decides whether a failure is retried, and sleeps before it.
/// Every retry loop of the consumers goes through it, so policy, bounds and logging live here.
pub struct Retry<'a> {
    backoff: &'a Backoff,
    /// What is being retried, for logs and the final error.
    what: &'a str,
    attempt: u32,
}

impl<'a> Retry<'a> {
    pub fn new(backoff: &'a Backoff, what: &'a str) -> Retry<'a> {
        Retry {
            backoff,
            what,
            attempt: 0,
        }
    }

    /// After a failure: `Ok` once the pause before the next attempt is over, or the error to give
    /// up with (not retryable, or the budget is spent).
    pub async fn pause(&mut self, e: PortError) -> PortResult<()> {
        if !e.is_retryable() {
            return Err(e);
        }
        if self.attempt >= self.backoff.max_retries {
            return Err(PortError::Other(format!(
                "{}: gave up after {} retries: {e}",
                self.what, self.backoff.max_retries
            )));
        }
        let delay = self
            .backoff
            .delay(self.attempt, rand::thread_rng().gen::<f64>());
        tracing::warn!(error = %e, attempt = self.attempt, delay_ms = delay.as_millis() as u64, "{}: retrying", self.what);
        tokio::time::sleep(delay).await;
        self.attempt += 1;
        Ok(())
    }
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or the budget runs out.
pub async fn with_backoff<T, F, Fut>(backoff: &Backoff, what: &str, mut op: F) -> PortResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PortResult<T>>,
{
    let mut retry = Retry::new(backoff, what);
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
    async fn run(n: u32, b: &Backoff) -> (PortResult<u32>, u32, Duration) {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let r = with_backoff(b, "test call", || async {
            let c = calls.fetch_add(1, Ordering::SeqCst);
            if c < n {
                Err(PortError::Throttled("slow down".into()))
            } else {
                Ok(c)
            }
        })
        .await;
        (r, calls.load(Ordering::SeqCst), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn retries_throttling_within_its_bounds() {
        let b = backoff();
        let (r, calls, spent) = run(4, &b).await;
        assert_eq!(r.unwrap(), 4);
        assert_eq!(calls, 5);
        // Never more than the sum of the ceilings of the four delays: 100 + 200 + 400 + 400 ms.
        assert!(spent <= Duration::from_millis(1_100), "{spent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries_and_says_so() {
        let b = backoff();
        let (r, calls, spent) = run(100, &b).await;
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
