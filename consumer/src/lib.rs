#![warn(missing_docs)]
//! The consumer runtime every application runs on. The applications are crates of their own
//! beside it — the counter (`tally-counter`) and analytics (`tally-analytics`) — which depend on
//! this one and never on each other.
//!
//! - [`worker`]: shard discovery, lease taking, stealing and renewal, one task per held shard,
//!   graceful shutdown, `--until-idle`. It is generic over a [`worker::ShardProcessor`].
//! - [`dedup`]: the duplicate filter's restore across a shard's lineage and its expiry, for
//!   every application that keeps one.
//! - [`retry`]: the one backoff loop for retryable port errors, which are never fatal.
//! - [`emf`]: lease and shard metrics as CloudWatch embedded metric format lines.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod dedup;
pub mod emf;
pub mod retry;
pub mod worker;

/// Errors of the consumer applications.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A store or stream call failed (its retries, where retryable, exhausted).
    #[error(transparent)]
    Port(#[from] tally_core::ports::PortError),
    /// A stored checkpoint disagrees with what the stream delivers.
    #[error("inconsistent state for shard {shard_id}: {detail}")]
    Inconsistent {
        /// The shard.
        shard_id: String,
        /// What disagrees.
        detail: String,
    },
    /// A window's write failed for good (not a lost lease, not worth retrying): the worker stops
    /// and says which records it could not apply, rather than stalling the shard in silence.
    #[error("shard {shard_id}: applying the window of records after {after} through {end} failed: {source}")]
    Window {
        /// The shard.
        shard_id: String,
        /// The checkpoint the window starts after (`the shard's start` before the first).
        after: String,
        /// The window's last sequence number.
        end: String,
        /// The store's error.
        source: Box<tally_core::ports::PortError>,
    },
}

impl ConsumerError {
    /// Whether a later attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ConsumerError::Port(e) if e.is_retryable())
    }

    /// Whether the shard's lease was lost.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            ConsumerError::Port(tally_core::ports::PortError::Fenced { .. })
        )
    }
}
