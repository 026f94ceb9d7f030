//! Applying a closed window: its chunks, each one atomic write with the checkpoint row, and what
//! they cost.

use super::*;

impl CounterShard {
    pub(super) async fn apply(
        &self,
        w: &ClosedWindow,
        skip: u32,
        shard_end: bool,
        shape: WindowShape,
    ) -> Result<Units, ConsumerError> {
        let fence = self.fence()?;
        let Some(end) = w.end.as_ref() else {
            return Ok(Units::default());
        };
        let mut charged = Units::default();
        let chunks = plan_chunks(w.items.len(), (shape.max_items as usize).max(1));
        debug!(end = %end, items = w.items.len(), chunks = chunks.len(), skip, "applying window");
        for chunk in chunks.iter().skip(skip as usize) {
            let is_last = chunk.index + 1 == chunk.count;
            let commit = ChunkCommit {
                fence,
                start_after: w.start_after.as_ref(),
                end,
                index: chunk.index,
                count: chunk.count,
                shape,
                items: &w.items[chunk.range.clone()],
                last: is_last.then_some(LastChunk {
                    dedup: &w.dedup,
                    total_delta: w.total_delta,
                    shard_finished: shard_end,
                }),
            };
            charged.merge(&self.commit_once(commit).await?);
            self.metrics.chunks.fetch_add(1, Ordering::Relaxed);
            // The items, the lease row, and on the last chunk the dedup record and global total.
            let extra = if is_last { 3 } else { 1 };
            self.metrics
                .items_written
                .fetch_add((chunk.range.len() + extra) as u64, Ordering::Relaxed);
            if let Some(n) = self.cfg.crash_after_chunks {
                if self.metrics.chunks.load(Ordering::Relaxed) >= n {
                    eprintln!("failpoint: aborting after {n} chunk commits");
                    std::process::abort();
                }
            }
        }
        Ok(charged)
    }

    /// Commits one chunk, retrying retryable errors. A failed condition is told apart by reading
    /// the checkpoint row back: still our lease (same owner and epoch) with this chunk recorded
    /// as applied means an earlier attempt landed although its answer was lost (a timeout, a
    /// dropped connection, an SDK-level retry) — only this take of the lease can have written
    /// it, so it is done; still our lease otherwise is an inconsistency; another owner or
    /// epoch means the lease was lost.
    pub(super) async fn commit_once(
        &self,
        commit: ChunkCommit<'_>,
    ) -> Result<Units, ConsumerError> {
        let result = with_backoff(&self.cfg.backoff, "commit chunk", || {
            self.store.commit_chunk(commit.clone())
        })
        .await;
        let units = chunk_units(commit.items, commit.last.as_ref().map(|l| l.dedup));
        match result {
            Ok(()) => {
                self.metrics.cost.add(&units);
                Ok(units)
            }
            Err(PortError::Fenced { .. }) => {
                // A write refused by its condition is charged all the same.
                self.metrics
                    .cost
                    .add_one(Purpose::FailedConditions, units.total());
                let st = self
                    .store
                    .shard_state(&commit.fence.app, &commit.fence.shard_id)
                    .await?;
                let mine = st.lease.owner.as_deref() == Some(commit.fence.owner.as_str())
                    && st.lease.epoch == commit.fence.epoch;
                let applied = if commit.last.is_some() {
                    st.pending.is_none() && st.lease.checkpoint.as_ref() == Some(commit.end)
                } else {
                    st.pending
                        .as_ref()
                        .is_some_and(|p| &p.end == commit.end && p.done == commit.index + 1)
                };
                if mine && applied {
                    // An earlier attempt landed (and was charged) although its answer was lost.
                    self.metrics.cost.add(&units);
                    let mut charged = units;
                    charged.add(Purpose::FailedConditions, units.total());
                    return Ok(charged);
                }
                if mine {
                    return Err(ConsumerError::Inconsistent {
                        shard_id: commit.fence.shard_id.clone(),
                        detail: format!(
                            "the checkpoint row (checkpoint {:?}, pending {:?}) does not match chunk {} of {} of the window ending at {}",
                            st.lease.checkpoint, st.pending, commit.index, commit.count, commit.end
                        ),
                    });
                }
                Err(PortError::Fenced {
                    app: commit.fence.app.clone(),
                    shard_id: commit.fence.shard_id.clone(),
                }
                .into())
            }
            Err(e) if e.is_retryable() => Err(e.into()),
            Err(e) => Err(ConsumerError::Window {
                shard_id: commit.fence.shard_id.clone(),
                after: commit
                    .start_after
                    .map_or_else(|| "the shard's start".to_owned(), |s| s.to_string()),
                end: commit.end.to_string(),
                source: Box::new(e),
            }),
        }
    }

    /// Emits what a window's writes cost, by purpose (CloudWatch embedded metric format).
    pub(super) fn emit_cost(&self, u: &Units) {
        let Ok(fence) = self.fence() else { return };
        let values: Vec<(&str, crate::emf::Unit, f64)> = Purpose::ALL
            .iter()
            .filter(|p| **p != Purpose::Leases)
            .map(|p| (p.metric(), crate::emf::Unit::Count, u.get(*p) as f64))
            .collect();
        self.cfg.emf.emit(
            crate::worker::now_ms(),
            &[("App", fence.app.as_str())],
            &[&["App"]],
            &values,
        );
    }
}
