//! Counting events: each event is one like or one unlike of its post, counted once — the shard's
//! duplicate filter drops a copy met within the horizon — into its post's delta by minute.

use std::collections::HashMap;

use smol_str::SmolStr;

use crate::buckets::PostDelta;
use crate::dedup::{id_hash, Dedup};
use crate::event::EventRef;

use super::WindowStats;

/// What a window counting events folds: each post's net change by minute.
#[derive(Debug, Default)]
pub(super) struct Events {
    /// Net change per post (sorted when the window closes).
    pub(super) deltas: HashMap<String, PostDelta, ahash::RandomState>,
}

impl Events {
    /// Folds one event: a copy the filter has seen changes nothing. A post new to the window is
    /// added to `met`.
    pub(super) fn fold(
        &mut self,
        ev: EventRef<'_>,
        arrival_ms: i64,
        stats: &mut WindowStats,
        dedup: &mut Dedup,
        met: &mut Vec<SmolStr>,
    ) {
        if !dedup.observe(id_hash(&ev.event_id), arrival_ms) {
            stats.duplicates += 1;
            return;
        }
        stats.counted += 1;
        stats.latest_created_ms = stats.latest_created_ms.max(ev.created_at);
        // Looked up by the borrowed id: a post already in the window costs no allocation.
        let delta = ev.action.delta();
        match self.deltas.get_mut(ev.post_id.as_ref()) {
            Some(d) => d.add(ev.created_at, delta),
            None => {
                let mut d = PostDelta::default();
                d.add(ev.created_at, delta);
                met.push(SmolStr::new(&*ev.post_id));
                self.deltas.insert(ev.post_id.into_owned(), d);
            }
        }
    }

    /// The posts' deltas, by post id; a like and its unlike in the same minute cancel out.
    pub(super) fn close(self) -> Vec<(String, PostDelta)> {
        super::closed(self.deltas)
    }
}
