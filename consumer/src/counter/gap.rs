//! Records the stream's retention trimmed before they were applied: given up on record.

use super::*;

/// Empty reads at the shard's tip, in a row, after which a pending window whose last record was
/// never met is taken as trimmed.
pub(super) const TIP_READS_FOR_A_GAP: u32 = 3;

/// Why a pending window cannot be completed.
pub(super) const TRIMMED: &str =
    "the stream's retention trimmed the pending window's records before it was completed";

impl CounterShard {
    /// Puts records the stream no longer has on record as a gap (a dead letter whose reason
    /// starts with `gap:`), in one atomic write that moves the checkpoint past them (and finishes
    /// the shard when `finished`), then goes on from there. Never a silent stall; never silent
    /// loss either: `tally dead-letters` lists the gap with its sequence range.
    pub(super) async fn give_up(&mut self, finished: bool, why: &str) -> Result<(), ConsumerError> {
        let fence = self.fence()?.clone();
        let pending = self.replay.clone();
        let after = self
            .checkpoint
            .as_ref()
            .map_or_else(|| "the shard's start".to_owned(), |c| c.to_string());
        let what = match &pending {
            Some(p) => format!(
                "records after {after} through {} are lost to that window (its writes had begun, \
                 so its likes may be partly counted)",
                p.end
            ),
            None => format!("records after {after} were never read"),
        };
        let at = pending
            .as_ref()
            .map(|p| p.end.clone())
            .or_else(|| self.checkpoint.clone())
            .or_else(|| Position::parse("0"))
            .ok_or_else(|| ConsumerError::Inconsistent {
                shard_id: self.shard_id.clone(),
                detail: "no sequence number for a gap".into(),
            })?;
        let gap = DeadLetter {
            shard_id: self.shard_id.clone(),
            seq: at,
            arrival_ms: crate::worker::now_ms(),
            reason: format!("gap: {why}: {what}"),
            data: Vec::new(),
            size: 0,
        };
        let end = pending.as_ref().map(|p| p.end.clone());
        let commit = GapCommit {
            fence: &fence,
            start_after: self.checkpoint.as_ref(),
            pending_end: end.as_ref(),
            through: end.as_ref(),
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
            &[(crate::worker::metric::GAPS, crate::emf::Unit::Count, 1.0)],
        );
        if let Some(end) = end {
            self.checkpoint = Some(end);
        }
        self.replay = None;
        self.window = None;
        // The filter as a restart at the new checkpoint would restore it (the given-up window's
        // ids were never stored).
        let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
        self.dedup = self
            .restore_dedup(&fence, &st.lease, self.horizon_ms())
            .await?;
        Ok(())
    }
}
