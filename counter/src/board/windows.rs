//! One held shard's windows as the board keeps them: the open window, and the closed one whose
//! writes are under way.

use std::sync::Arc;

use smol_str::SmolStr;
use tally_core::summary::marker;
use tally_core::window::{ClosedWindow, WindowBuilder};

/// One shard's windows that are read but not written.
#[derive(Default)]
pub struct ShardWindows {
    /// The window being filled (taken only by [`ShardWindows::close_open`]).
    pub(crate) open: Option<WindowBuilder>,
    /// A closed window whose writes are under way: shown until every write is done, so that a
    /// reader never misses it between its close and its writes.
    pub(crate) applying: Option<Arc<ClosedWindow>>,
    /// How many of the open window's posts (`WindowBuilder::posts_met_since`) are noted in the
    /// worker's index (`Board::note_met`), and the number of the shard's latest note.
    pub(super) met_cursor: usize,
    pub(super) last_note: u64,
}

impl ShardWindows {
    /// Takes the open window to close it.
    pub fn close_open(&mut self) -> Option<WindowBuilder> {
        self.open.take()
    }

    /// The window being applied is done.
    pub(crate) fn applied(&mut self) {
        self.applying = None;
    }

    /// A new open window is made: none of its posts is noted yet.
    pub(crate) fn opening(&mut self) {
        self.met_cursor = 0;
    }

    /// The posts the shard's windows hold (some more than once).
    pub(super) fn posts_held(&self) -> impl Iterator<Item = &str> {
        let open = self.open.iter().flat_map(|o| o.posts_met_since(0));
        let applying = self.applying.iter().flat_map(|c| c.posts_held());
        open.map(SmolStr::as_str).chain(applying)
    }

    /// The marker of the last record the windows hold, or of the checkpoint when they hold none
    /// (`ShardOpen::through`).
    pub(super) fn through(&self) -> Option<String> {
        self.open
            .as_ref()
            .and_then(|b| b.end())
            .or_else(|| self.applying.as_ref().and_then(|c| c.end.as_ref()))
            .or_else(|| self.open.as_ref().and_then(|b| b.start_after()))
            .map(marker)
    }
}
