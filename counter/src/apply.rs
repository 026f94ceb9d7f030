//! Applying a closed window: its pending end, its items, its checkpoint, and what they cost.

use std::sync::atomic::Ordering;

use std::sync::Arc;
use tally_consumer::retry::with_backoff;
use tally_consumer::worker::LeaseKeeper;
use tally_consumer::ConsumerError;
use tally_core::cost::{Purpose, Units};
use tally_core::ports::{Applied, Decided, PortError, WindowRef, WindowRest};
use tally_core::window::ClosedWindow;
use tracing::debug;

use crate::board;
use crate::counting::Counting;
use crate::writes::{window_err, ShardWrites};

/// Which fenced write of the lease row.
#[derive(Clone, Copy, Debug)]
enum Fenced {
    /// Recording the window's end as pending.
    Begin,
    /// Moving the checkpoint to it.
    Finish,
}

/// What applies a shard's closed windows: the shard's writes (`writes::ShardWrites`, what it
/// writes with) and how it counts — owned, so that a window can be applied on a task of its own
/// while the shard reads on (`CounterShard::close_and_apply`).
pub(crate) struct Applier {
    pub(crate) writes: ShardWrites,
    pub(crate) counting: Arc<dyn Counting>,
}

impl std::ops::Deref for Applier {
    type Target = ShardWrites;

    fn deref(&self) -> &ShardWrites {
        &self.writes
    }
}

/// A closed window to apply, with what decides how.
pub(crate) struct Closing {
    pub(crate) window: Arc<ClosedWindow>,
    /// It is the rebuild of the pending window already recorded: no **Begin**.
    pub(crate) replaying: bool,
    /// It is the shard's last: **Finish** marks the shard finished.
    pub(crate) shard_end: bool,
    /// The settings recorded with it (**Begin**).
    pub(crate) decided: Decided,
    /// The latest `created_at` counted on the shard with it (kept in the lease row).
    pub(crate) latest_created_ms: i64,
}

impl Applier {
    /// Applies a closed window and does what follows once it is written: its cost emitted, its
    /// records counted in the metrics, and the board no longer showing it as being applied.
    pub(crate) async fn apply_and_count(
        &self,
        c: Closing,
    ) -> Result<Arc<ClosedWindow>, ConsumerError> {
        let (closed, spent) = self.apply(c).await?;
        self.emit_cost(&spent.units);
        let s = &closed.stats;
        let m = &self.metrics;
        m.applied_records.fetch_add(s.records, Ordering::Relaxed);
        m.counted.fetch_add(s.counted, Ordering::Relaxed);
        m.duplicates.fetch_add(s.duplicates, Ordering::Relaxed);
        m.malformed.fetch_add(s.malformed, Ordering::Relaxed);
        m.skipped.fetch_add(s.skipped, Ordering::Relaxed);
        m.windows.fetch_add(1, Ordering::Relaxed);
        board::lock(&self.windows).applied();
        Ok(closed)
    }

    /// Applies a closed window (`replaying`: it is the pending one already recorded). Returns
    /// the window and what its writes did and cost.
    async fn apply(&self, c: Closing) -> Result<(Arc<ClosedWindow>, Applied), ConsumerError> {
        let Closing {
            window: w,
            replaying,
            shard_end,
            decided,
            latest_created_ms,
        } = c;
        let fence = &self.fence;
        let (Some(end), Some(first)) = (w.end.clone(), w.first.as_ref()) else {
            return Ok((w, Applied::default()));
        };
        let end = &end;
        debug!(end = %end, posts = w.posts.len(), edges = w.edges.len(), replaying, "applying window");
        let mut spent = Applied::default();
        if !replaying {
            self.fenced(Fenced::Begin, &w, &mut spent, || {
                self.store
                    .begin_window(fence, w.start_after.as_ref(), first, end, decided)
            })
            .await?;
        }
        let at = WindowRef {
            app: &fence.app,
            shard_id: &fence.shard_id,
            end,
        };
        self.counting.write(&self.writes, &w, &mut spent).await?;
        let applied = w;
        let w = &*applied;
        for batch in w.posts.chunks(self.cfg.batch()) {
            let done = self
                .apply_batch(at, batch)
                .await
                .map_err(|e| window_err(w, &fence.shard_id, e))?;
            spent.merge(&done);
            self.failpoint("post writes");
        }
        let rest = WindowRest {
            dead_letters: &w.dead_letters,
            total_delta: w.total_delta,
            dedup: &w.dedup,
            horizon_ms: decided.horizon_ms,
        };
        let done = with_backoff(
            &self.ctx.backoff,
            "write a window's dead letters and dedup record",
            || self.store.apply_rest(at, rest),
        )
        .await
        .map_err(|e| window_err(w, &fence.shard_id, e))?;
        spent.merge(&done);
        // The shard's row keeps what its windows spent (this finish included) and counted.
        let mut kept = tally_core::ports::ShardTally {
            units: spent.units,
            counted: w.stats.counted,
            latest_created_ms,
        };
        kept.units.add(Purpose::Checkpoints, 1);
        // The checkpoint renews the lease in the same write (`LeaseKeeper`): at a low rate a
        // renewal fewer per window.
        self.fenced(Fenced::Finish, w, &mut spent, || async {
            let renewal = self.keeper.as_ref().map(LeaseKeeper::renewal);
            let asked = self
                .store
                .finish_window(
                    fence,
                    end,
                    w.dedup.max_arrival,
                    shard_end,
                    &kept,
                    renewal.as_ref(),
                )
                .await?;
            if let (Some(k), Some(r)) = (&self.keeper, &renewal) {
                k.extended(r, asked);
            }
            Ok(())
        })
        .await?;
        self.counting.applied(&fence.shard_id, end).await?;
        self.metrics.cost.add(&spent.units);
        self.metrics
            .items_written
            .fetch_add(spent.written, Ordering::Relaxed);
        self.metrics
            .writes_refused
            .fetch_add(spent.refused, Ordering::Relaxed);
        self.metrics
            .items_read
            .fetch_add(spent.reads, Ordering::Relaxed);
        Ok((applied, spent))
    }

    /// One fenced write of the lease row, retrying retryable errors. A failed condition is told
    /// apart by reading the row back: still our lease (same owner and epoch) with the step's
    /// effect there means an earlier attempt landed although its answer was lost (a timeout, a
    /// dropped connection, an SDK-level retry) — only this take of the lease can have written it;
    /// still our lease otherwise is an inconsistency; another owner or epoch: the lease was lost.
    async fn fenced<F, Fut>(
        &self,
        step: Fenced,
        w: &ClosedWindow,
        spent: &mut Applied,
        call: F,
    ) -> Result<(), ConsumerError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = tally_core::ports::PortResult<()>>,
    {
        let fence = &self.fence;
        let end = w.end.as_ref();
        let what = match step {
            Fenced::Begin => "record a window as pending",
            Fenced::Finish => "move the checkpoint past a window",
        };
        // The lease row is one unit, whether the write takes effect or is refused.
        match with_backoff(&self.ctx.backoff, what, &call).await {
            Ok(()) => {
                spent.written += 1;
                spent.units.add(Purpose::Checkpoints, 1);
                Ok(())
            }
            Err(PortError::Fenced { .. }) => {
                spent.refused += 1;
                spent.units.add(Purpose::FailedConditions, 1);
                let st = self.store.shard_state(&fence.app, &fence.shard_id).await?;
                let mine = st.lease.owner.as_deref() == Some(fence.owner.as_str())
                    && st.lease.epoch == fence.epoch;
                let landed = match step {
                    Fenced::Begin => st.pending.as_ref().map(|p| &p.end) == end,
                    Fenced::Finish => st.pending.is_none() && st.lease.checkpoint.as_ref() == end,
                };
                if mine && landed {
                    // An earlier attempt landed (and was charged) although its answer was lost.
                    spent.units.add(Purpose::Checkpoints, 1);
                    return Ok(());
                }
                if mine {
                    return Err(ConsumerError::Inconsistent {
                        shard_id: fence.shard_id.clone(),
                        detail: format!(
                            "the checkpoint row (checkpoint {:?}, pending {:?}) does not match the window after {:?} ending at {:?} ({what})",
                            st.lease.checkpoint, st.pending, w.start_after, end
                        ),
                    });
                }
                Err(PortError::Fenced {
                    app: fence.app.clone(),
                    shard_id: fence.shard_id.clone(),
                }
                .into())
            }
            Err(e) if e.is_retryable() => Err(e.into()),
            Err(e) => Err(window_err(w, &fence.shard_id, e)),
        }
    }

    /// Emits what a window's writes cost, by purpose (CloudWatch embedded metric format).
    pub(super) fn emit_cost(&self, u: &Units) {
        let fence = &self.fence;
        let values: Vec<(&str, tally_consumer::emf::Unit, f64)> = Purpose::ALL
            .iter()
            .filter(|p| **p != Purpose::Leases)
            .map(|p| {
                (
                    p.metric(),
                    tally_consumer::emf::Unit::Count,
                    u.get(*p) as f64,
                )
            })
            .collect();
        self.ctx.emf.emit(
            tally_core::clock::now_ms(),
            &[("App", fence.app.as_str())],
            &[&["App"]],
            &values,
        );
    }
}
