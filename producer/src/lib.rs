#![warn(missing_docs)]
//! The producer: a synthetic like-event generator and the batched, retrying put path.
//!
//! - [`backfill`]: a table's items put as change records, before its changes streamed.
//! - [`generate`]: Zipf-distributed posts, uniform users, unlike / duplicate / malformed ratios,
//!   reproducible from a seed; it keeps the exact expected count of every post (the "truth").
//! - [`keys`]: partition keys; a hot post fanned out over several, chosen from the user id.
//! - [`produce`]: generating and putting together, with the truth of what was put.
//! - [`put`]: cuts records into PutRecords batches (≤ 500 records, ≤ 5 MiB) and resends only
//!   the entries that failed, with capped, jittered backoff.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod backfill;
pub mod change;
pub mod generate;
pub mod keys;
pub mod produce;
pub mod put;

/// Errors of the producer.
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    /// A stream call failed outright.
    #[error(transparent)]
    Port(#[from] tally_core::ports::PortError),
    /// Some records were still refused when the batch's retries ran out.
    #[error("{failed} records still failed after {attempts} attempts; last error: {last}")]
    GaveUp {
        /// How many records of the batch were not put.
        failed: usize,
        /// How many times the batch was put.
        attempts: u32,
        /// The last refusal's error code and message.
        last: String,
    },
}
