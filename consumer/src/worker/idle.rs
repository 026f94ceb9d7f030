//! `--until-idle`: when a worker may exit (every shard finished, or caught up and flushed here or
//! by another live worker since the exit was armed), and what it says while it waits.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tally_core::lease::Lease;
use tally_core::ports::ShardState;
use tokio::sync::Notify;
use tracing::{info, warn};

use super::shard::Running;
use super::Worker;
use tally_core::clock::now_ms;

/// Arms `--until-idle`: once armed, the worker exits when every shard is caught up and flushed.
#[derive(Debug, Default)]
pub struct IdleExit {
    armed_at: Mutex<Option<Instant>>,
    /// The same moment by the wall clock, to compare with other workers' reports.
    armed_at_ms: Mutex<Option<i64>>,
    /// Rung by a shard task when its shard goes idle, so that the worker checks at once rather
    /// than at its next lease poll (`Worker::pause`).
    went_idle: Notify,
}

impl IdleExit {
    /// Arms the exit now: shards count as idle only after an empty read that started later.
    pub fn arm(&self) {
        if let Ok(mut a) = self.armed_at.lock() {
            a.get_or_insert_with(Instant::now);
        }
        if let Ok(mut a) = self.armed_at_ms.lock() {
            a.get_or_insert_with(now_ms);
        }
    }

    /// Whether the exit is armed.
    pub fn is_armed(&self) -> bool {
        self.armed_at().is_some()
    }

    pub(super) fn armed_at_ms(&self) -> Option<i64> {
        self.armed_at_ms.lock().ok().and_then(|a| *a)
    }

    pub(super) fn armed_at(&self) -> Option<Instant> {
        self.armed_at.lock().ok().and_then(|a| *a)
    }

    /// A shard has just gone idle (caught up and flushed since the exit was armed).
    pub(super) fn shard_went_idle(&self) {
        self.went_idle.notify_one();
    }

    /// Until a shard goes idle (at once if one did since the last call).
    pub(super) async fn a_shard_went_idle(&self) {
        self.went_idle.notified().await;
    }
}

/// Whether the shard `r` runs has been idle since the exit was armed at `armed`: its last empty
/// read started later.
fn idle_since(r: &Running, armed: Instant) -> bool {
    r.idle_at
        .lock()
        .ok()
        .and_then(|t| *t)
        .is_some_and(|t| t > armed)
}

/// How long an armed idle exit waits before saying what it waits for, and how often it repeats.
const IDLE_WAIT_REPORT: Duration = Duration::from_secs(5);

impl Worker {
    /// Until idle: every shard finished, or ours, caught up and flushed, or held by another live
    /// worker that has reported it at its tip with nothing left to apply since the exit was armed
    /// (so that workers run `--until-idle` together all end). Any other shard is waited for.
    pub(super) fn all_idle(&mut self, states: &[ShardState]) -> bool {
        let (Some(armed), Some(armed_ms)) =
            (self.idle_exit.armed_at(), self.idle_exit.armed_at_ms())
        else {
            return false;
        };
        let now = now_ms();
        let waiting: Vec<&Lease> = states
            .iter()
            .filter(|st| {
                let l = &st.lease;
                let ours_idle = self
                    .running
                    .get(&l.shard_id)
                    .is_some_and(|r| idle_since(r, armed));
                let theirs_idle = !self.running.contains_key(&l.shard_id)
                    && l.is_held(now)
                    && st.pending.is_none()
                    && st
                        .progress
                        .is_some_and(|p| p.behind_ms == 0 && p.at_ms >= armed_ms);
                !(l.finished || ours_idle || theirs_idle)
            })
            .map(|st| &st.lease)
            .collect();
        if !waiting.is_empty() && armed.elapsed() >= IDLE_WAIT_REPORT {
            self.report_waiting(&waiting);
        }
        waiting.is_empty()
    }

    /// Whether every shard this worker runs is idle since the exit was armed (and it runs some):
    /// only then can a round find the worker idle, so only then does a shard going idle end the
    /// pause before it. An in-memory check, however many shards; the listing is the round's.
    pub(super) fn ours_idle(&self) -> bool {
        self.idle_exit.armed_at().is_some_and(|armed| {
            !self.running.is_empty() && self.running.values().all(|r| idle_since(r, armed))
        })
    }

    /// Says what an armed idle exit is waiting for, at most every [`IDLE_WAIT_REPORT`]: shards
    /// still being read here, and shards whose leases other workers hold (this worker cannot
    /// take a lease that its owner renews, so it waits for as long as that worker runs).
    fn report_waiting(&mut self, waiting: &[&Lease]) {
        if self
            .last_wait_report
            .is_some_and(|t| t.elapsed() < IDLE_WAIT_REPORT)
        {
            return;
        }
        self.last_wait_report = Some(Instant::now());
        let now = now_ms();
        let mut reading = Vec::new();
        let mut elsewhere = Vec::new();
        let mut unowned = Vec::new();
        for l in waiting {
            if self.running.contains_key(&l.shard_id) {
                reading.push(l.shard_id.clone());
            } else if l.is_held(now) {
                let owner = l.owner.as_deref().unwrap_or("?");
                elsewhere.push(format!("{} (held by {owner})", l.shard_id));
            } else {
                unowned.push(l.shard_id.clone());
            }
        }
        if elsewhere.is_empty() && unowned.is_empty() {
            info!(
                reading = %reading.join(", "),
                "waiting until every shard is caught up"
            );
        } else if elsewhere.is_empty() {
            info!(
                reading = %reading.join(", "),
                not_yet_taken = %unowned.join(", "),
                "waiting until every shard is caught up"
            );
        } else {
            warn!(
                held_elsewhere = %elsewhere.join(", "),
                reading = %reading.join(", "),
                "waiting until every shard is caught up: other workers hold some shards' leases, \
                 so this worker exits only once they stop (or bound the wait with --timeout)"
            );
        }
    }
}
