//! Records the stream's retention trimmed before they were applied: given up on record.

use tally_consumer::retry::with_backoff;
use tally_consumer::ConsumerError;
use tally_core::dead_letter::DeadLetter;
use tally_core::ports::GapCommit;
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
        self.settle().await?;
        let fence = &self.fence;
        let pending = self.replay.clone();
        let became = pending.as_ref().map(|_| self.counting.given_up());
        let through = match (pending.as_ref().map(|p| p.end.clone()), trimmed_through) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let after = self
            .checkpoint
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |c| c.to_string());
        let what = match (&became, &through) {
            (Some(became), Some(t)) => {
                format!("records after {after} through {t} are lost to the window pending there{became}")
            }
            (None, Some(t)) => format!("records after {after} through {t} were never read"),
            (_, None) => format!("records after {after} were never read"),
        };
        let gap = DeadLetter::gap(
            &fence.shard_id,
            &fence.app,
            self.checkpoint.as_ref(),
            if finished { None } else { through.as_ref() },
            tally_core::clock::now_ms(),
            &format!("{why}: {what}"),
        );
        let pending_end = pending.as_ref().map(|p| p.end.clone());
        let commit = GapCommit {
            fence,
            start_after: self.checkpoint.as_ref(),
            pending_end: pending_end.as_ref(),
            through: through.as_ref(),
            finished,
            gap: &gap,
        };
        with_backoff(&self.ctx.backoff, "record a gap", || {
            self.store.commit_gap(commit.clone())
        })
        .await?;
        tracing::error!(reason = %gap.reason, "records lost to the stream's retention; recorded as a gap");
        self.ctx.emf.emit(
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
        self.dedup = self.restore_dedup(self.horizon_ms()).await?;
        Ok(())
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
