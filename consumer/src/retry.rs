//! The one retry loop for retryable port errors (throttling, conflicts, timeouts, unreachable
//! endpoints): capped exponential backoff with full jitter, bounded in attempts.

use std::future::Future;

use rand::Rng;
use tally_core::ports::{PortError, PortResult};
use tally_core::retry::Backoff;

/// Runs `op` until it succeeds, fails with a non-retryable error, or the budget runs out.
pub async fn with_backoff<T, F, Fut>(backoff: &Backoff, what: &str, mut op: F) -> PortResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = PortResult<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && attempt < backoff.max_retries => {
                let delay = backoff.delay(attempt, rand::thread_rng().gen::<f64>());
                tracing::warn!(error = %e, attempt, delay_ms = delay.as_millis() as u64, "{what}: retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(e) if e.is_retryable() => {
                return Err(PortError::Other(format!(
                    "{what}: gave up after {} retries: {e}",
                    backoff.max_retries
                )));
            }
            other => return other,
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
