#![warn(missing_docs)]
//! tally's pure core and its ports.
//!
//! Everything here is synchronous and free of I/O except the port traits, which the backends
//! implement: the input contracts ([`event`], a table's change records in [`input`]), sequence numbers ([`seq`]), dedup ([`dedup`]),
//! dead letters and gaps ([`dead_letter`]), likers' edges ([`edge`]), where windows end ([`boundary`]), the counter's windows
//! ([`window`]), what writes cost ([`cost`]), time buckets ([`buckets`]), the summary items and
//! their exactly-once writes ([`summary`]), lease decisions ([`lease`]),
//! trending ([`trending`]), latency ([`latency`]), backoff ([`retry`]), shard hashing
//! ([`hashing`]) and the ports themselves ([`ports`]).
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod boundary;
pub mod buckets;
pub mod clock;
pub mod config;
pub mod cost;
pub mod dead_letter;
pub mod dedup;
pub mod edge;
pub mod event;
pub mod hashing;
pub mod input;
pub mod item;
pub mod kpl;
pub mod latency;
pub mod lease;
pub mod meta;
pub mod open;
pub mod ports;
pub mod progress;
pub mod regions;
pub mod retry;
pub mod rows;
pub mod seq;
pub mod summary;
pub mod trending;
pub mod window;

pub use seq::{Position, SeqNo};

/// Names of the consumer applications; each has its own leases and checkpoints.
pub mod apps {
    /// The exactly-once counter of the stream: counting events, the events; counting likers, its
    /// first stage, which writes the edges.
    pub const COUNTER: &str = "counter";
    /// Counting likers, the counter's second stage: the edges' change log, counted.
    pub const CHANGES: &str = "changes";
    /// Trending and latency analytics.
    pub const ANALYTICS: &str = "analytics";
    /// Several regions: the records of posts homed elsewhere, put to their home's stream.
    pub const ROUTER: &str = "router";
}
