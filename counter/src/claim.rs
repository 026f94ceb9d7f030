//! A counter's claim on its store: a store's counts mean one thing, so the first counter claims
//! the count mode it is configured with and every later one must match it; counting likers, it
//! also records the clock skew it orders events by, which `tally verify` recounts with. Made by
//! [`crate::Counter::open`], so that no caller of the library can count without it.

use tally_core::edge::CountMode;
use tally_core::ports::{CounterStore, PortError};

use crate::CounterConfig;

/// Why a counter cannot count a store.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The store was claimed by another count mode.
    #[error(
        "this store counts {stored}, and `counter.count` is `{wanted}`: a store's counts mean \
         one thing. Set counter.count = \"{stored}\" (or TALLY_COUNTER__COUNT={stored}) to go on \
         counting it, or start a new store (another --data-dir, or another table_prefix) to \
         count {wanted}"
    )]
    Mismatch {
        /// What the store counts.
        stored: CountMode,
        /// What the counter was configured to count.
        wanted: CountMode,
    },
    /// Reading or writing the claim failed.
    #[error("claiming the store's count mode: {0}")]
    Store(#[from] PortError),
}

/// Claims `store` for `cfg.count` (the first claim wins; a store claimed otherwise is refused),
/// and counting likers records `cfg.max_clock_skew` among the skews it was counted with.
pub async fn claim(store: &dyn CounterStore, cfg: &CounterConfig) -> Result<(), ClaimError> {
    let wanted = cfg.count;
    let stored = store.count_mode(Some(wanted)).await?;
    match stored {
        Some(stored) if stored != wanted => return Err(ClaimError::Mismatch { stored, wanted }),
        Some(CountMode::Likers) => {
            let skew = tally_core::config::millis(cfg.max_clock_skew) as i64;
            let skews = store.clock_skews(Some(skew)).await?;
            if skews.len() > 1 {
                tracing::warn!(
                    ?skews,
                    "this store has been counted with several values of \
                     counter.max_clock_skew_secs (ms): an event whose clock was ahead by between \
                     them orders differently by the window that read it, and `tally verify` says so"
                );
            }
        }
        _ => {}
    }
    Ok(())
}
