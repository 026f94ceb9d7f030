//! Counting events: a post's count is its distinct like events less its unlike events. A window
//! folds per-post deltas (with the duplicate filter) and writes nothing but them.

use async_trait::async_trait;
use tally_core::edge::CountMode;
use tally_core::window::WindowBuilder;

use super::Counting;

/// Counting events.
#[derive(Debug)]
pub(crate) struct Events;

#[async_trait]
impl Counting for Events {
    fn mode(&self) -> CountMode {
        CountMode::Events
    }

    fn fold(&self, w: WindowBuilder) -> WindowBuilder {
        w
    }

    /// The share, up to the dedup record's bound: the window's first-seen ids are one store item
    /// (`tally_core::window::MAX_WINDOW_RECORDS`).
    fn window_records(&self, share: usize) -> usize {
        share.min(tally_core::window::MAX_WINDOW_RECORDS)
    }

    /// Its writes may have begun: what it wrote stays, nothing tells which posts it reached.
    fn given_up(&self) -> &'static str {
        " (its writes had begun, so its likes may be partly counted)"
    }
}
