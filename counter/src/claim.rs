//! Why a counter cannot claim its store: a store's counts mean one thing, so the first counter
//! claims the count mode it is configured with and every later one must match it (the claim is
//! `counting::claim`, made by [`crate::Counter::open`], so that no caller of the library can count
//! without it).

use tally_core::edge::CountMode;
use tally_core::ports::PortError;

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
