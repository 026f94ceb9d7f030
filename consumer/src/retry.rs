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
