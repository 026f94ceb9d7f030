//! The likers counter's second stage: a window over the edge store's change log folds each
//! change ([`EdgeChange`]) into its post's delta by minute ([`crate::edge::moves`]). Every change
//! is in the log once, so there is no duplicate filter; a record that is no change is a dead
//! letter, as a malformed event is.

use std::collections::HashMap;

use smol_str::SmolStr;

use crate::buckets::PostDelta;
use crate::edge::{moves, EdgeChange};

use super::WindowStats;

/// What a window over the change log folds: each post's net change by minute.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) deltas: HashMap<SmolStr, PostDelta, ahash::RandomState>,
}

impl Changes {
    /// Folds one change. A post new to the window is added to `met`.
    pub(super) fn fold(&mut self, c: EdgeChange, stats: &mut WindowStats, met: &mut Vec<SmolStr>) {
        stats.counted += 1;
        for at in c.after.iter() {
            stats.latest_created_ms = stats.latest_created_ms.max(*at);
        }
        if !c.counts() {
            return;
        }
        let d = match self.deltas.get_mut(&c.post_id) {
            Some(d) => d,
            None => {
                met.push(c.post_id.clone());
                self.deltas.entry(c.post_id.clone()).or_default()
            }
        };
        for (at, n) in moves(c.before, c.after) {
            d.add(at, n);
        }
    }

    /// The posts' deltas, by post id; changes that cancel out are dropped.
    pub(super) fn close(self) -> Vec<(String, PostDelta)> {
        super::closed(self.deltas)
    }
}
