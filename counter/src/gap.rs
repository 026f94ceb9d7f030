//! Records the stream's retention trimmed before they were applied: given up on record.

use tally_consumer::retry::with_backoff;
use tally_consumer::ConsumerError;
use tally_core::dead_letter::DeadLetter;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{self, CountMode};
use tally_core::ports::{Consistency, GapCommit, Pending, WindowRef, WindowRest};
use tally_core::summary::marker;
use tally_core::{Position, SeqNo};

use crate::{board, CounterShard};

/// Empty reads at the shard's tip, in a row, after which a pending window whose last record was
/// never met is taken as trimmed.
pub(super) const TIP_READS_FOR_A_GAP: u32 = 3;

/// Why a pending window cannot be completed: its last records are gone.
pub(super) const TRIMMED: &str =
    "the stream's retention trimmed the pending window's records before it was completed";

/// Why a pending window cannot be rebuilt whole: its first records are gone.
pub(super) const HEAD_TRIMMED: &str =
    "the stream's retention trimmed the pending window's first records before it was completed";

/// Edges read at once while counting a given-up window's.
const EDGES_PER_READ: usize = 1_000;

/// Why records were never read: the stream said they were trimmed.
pub(super) const UNREAD: &str = "the stream's retention trimmed records before they were read";

/// Why a shard's remaining records were never read.
pub(super) const GONE: &str =
    "the shard is gone from the stream (past its retention) before it was read to its end";

impl CounterShard {
    /// Puts records the stream no longer has on record as a gap (a dead letter whose reason
    /// starts with `gap:`), in one atomic write that moves the checkpoint past them — past the
    /// pending window if there is one, and past `trimmed_through` if the stream named the last
    /// record it trimmed — or finishes the shard (`finished`: it is gone, or ended before the
    /// pending window's end); then goes on from there. Never a silent stall; never silent loss
    /// either: `tally dead-letters` lists the gap with its range.
    pub(super) async fn give_up(
        &mut self,
        finished: bool,
        why: &str,
        trimmed_through: Option<Position>,
    ) -> Result<(), ConsumerError> {
        let fence = self.fence()?.clone();
        let pending = self.replay.clone();
        let counted = match &pending {
            Some(p) => self.count_written_edges(p).await?,
            None => None,
        };
        let through = match (pending.as_ref().map(|p| p.end.clone()), trimmed_through) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let after = self
            .checkpoint
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |c| c.to_string());
        let what = match (&pending, &through) {
            (Some(_), Some(t)) => match (counted, self.cfg.count) {
                (Some(n), _) => format!(
                    "records after {after} through {t} are lost to the window pending there; the \
                     {n} edges it had written are counted as it decided them, its other records \
                     are lost"
                ),
                (None, CountMode::Likers) => format!(
                    "records after {after} through {t} are lost to the window pending there (it \
                     had written no edge yet, so nothing of it is counted)"
                ),
                (None, CountMode::Events) => format!(
                    "records after {after} through {t} are lost to the window pending there (its \
                     writes had begun, so its likes may be partly counted)"
                ),
            },
            (None, Some(t)) => format!("records after {after} through {t} were never read"),
            (_, None) => format!("records after {after} were never read"),
        };
        let gap = DeadLetter::gap(
            &self.shard_id,
            &fence.app,
            self.checkpoint.as_ref(),
            if finished { None } else { through.as_ref() },
            tally_consumer::worker::now_ms(),
            &format!("{why}: {what}"),
        );
        let pending_end = pending.as_ref().map(|p| p.end.clone());
        let commit = GapCommit {
            fence: &fence,
            start_after: self.checkpoint.as_ref(),
            pending_end: pending_end.as_ref(),
            through: through.as_ref(),
            finished,
            gap: &gap,
        };
        with_backoff(&self.cfg.backoff, "record a gap", || {
            self.store.commit_gap(commit.clone())
        })
        .await?;
        tracing::error!(reason = %gap.reason, "records lost to the stream's retention; recorded as a gap");
        self.cfg.emf.emit(
            gap.arrival_ms,
            &[("App", fence.app.as_str())],
            &[&["App"]],
            &[(
                tally_consumer::worker::metric::GAPS,
                tally_consumer::emf::Unit::Count,
                1.0,
            )],
        );
        if let Some(t) = through {
            self.checkpoint = Some(t);
        }
        self.replay = None;
        board::lock(&self.windows).open = None;
        // The filter as a restart at the new checkpoint would restore it (the given-up window's
        // ids were never stored).
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        self.dedup = self
            .restore_dedup(&fence, &st.lease, self.horizon_ms())
            .await?;
        Ok(())
    }

    /// Likers: before a pending window is given up, counts the edges it wrote — found by its edge
    /// record, each transition as the edge remembers this window's write (decided then, never
    /// again from the edge's state now) — with the same marker-guarded writes as any window, so
    /// a give-up interrupted and given up again counts each once. `None`: no record, so no edge
    /// of it was written (or it counts events).
    async fn count_written_edges(&self, pending: &Pending) -> Result<Option<usize>, ConsumerError> {
        let end = &pending.end;
        let fence = self.fence()?.clone();
        let at = WindowRef {
            app: &fence.app,
            shard_id: &fence.shard_id,
            end,
        };
        let backoff = &self.cfg.backoff;
        let Some(pairs) = with_backoff(backoff, "read a window's edge record", || {
            self.store.window_edges(at)
        })
        .await?
        else {
            return Ok(None);
        };
        let window = edge::window_id(&fence.shard_id, &marker(end));
        let mut transitions = Vec::new();
        let mut forgotten = 0;
        for chunk in pairs.chunks(EDGES_PER_READ) {
            let (states, _) = with_backoff(backoff, "read a given-up window's edges", || {
                self.store.edges(chunk, Consistency::Strong)
            })
            .await?;
            for ((post, _), st) in chunk.iter().zip(states) {
                match st.as_ref().map(|s| (s.written_by(&window, post), s)) {
                    Some((Some(t), _)) => transitions.push(t),
                    Some((None, s)) if !s.remembers_all() => forgotten += 1,
                    _ => {}
                }
            }
        }
        self.note_edges(at, 0, forgotten);
        let written = transitions.len();
        let (posts, total_delta) = edge::deltas(&transitions);
        for batch in posts.chunks(self.cfg.posts_per_batch.max(1)) {
            self.apply_batch(at, batch).await?;
        }
        let rest = WindowRest {
            dead_letters: &[],
            total_delta,
            dedup: &DedupRecord {
                max_arrival: i64::MIN,
                ids: Vec::new(),
            },
            horizon_ms: pending.horizon_ms.unwrap_or_else(|| self.horizon_ms()),
        };
        with_backoff(backoff, "write a given-up window's global total", || {
            self.store.apply_rest(at, rest)
        })
        .await?;
        Ok(Some(written))
    }

    /// The stream says the records after our position through `through` were trimmed before we
    /// read them. A pending window cannot be rebuilt whole then; an open window holds only
    /// records before them and is applied first; either way the loss is put on record.
    pub(super) async fn records_trimmed(&mut self, through: &SeqNo) -> Result<(), ConsumerError> {
        let through = Position::whole(through.clone());
        if self.replay.is_some() {
            return self.give_up(false, HEAD_TRIMMED, Some(through)).await;
        }
        if self.has_open() {
            self.close_and_apply(false).await?;
        }
        self.give_up(false, UNREAD, Some(through)).await
    }
}
