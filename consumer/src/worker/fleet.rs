//! The fleet and the handoff protocol: each worker keeps a fleet row alive (its heartbeat, which
//! carries the leases it asks for), lists the live fleet (the lease plan's fair share counts it),
//! asks a worker above its share for a lease (`LeaseStore::ask_handoff`), hears the asks aimed at
//! its own leases and has their tasks hand them over, and takes outright a lease asked for and
//! not handed over in time.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tally_core::lease::Lease;
use tally_core::ports::{Ask, Fence, Member};
use tracing::{info, warn};

use super::{keeper, Worker};
use tally_core::clock::now_ms;

/// What a worker knows of its fleet and of the leases it asked for.
#[derive(Default)]
pub(super) struct Fleet {
    /// When this worker last said it is alive (its fleet row).
    pub(super) last_heartbeat: Option<Instant>,
    /// Whether its fleet row was written once (it takes leases from the next round on).
    pub(super) joined: bool,
    /// Between the round that wrote its first fleet row and the next: the pause between them is
    /// the join wait (`lease.join_ms`), not a poll.
    pub(super) joining: bool,
    /// The live members, as last listed.
    pub(super) members: Vec<String>,
    /// When a failed heartbeat or fleet listing was last logged.
    pub(super) last_beat_warning: Option<Instant>,
    /// Leases this worker asked their holders for, by shard: the request and when (ms).
    pub(super) asked: HashMap<String, (Ask, i64)>,
    /// The requests its fleet row carries, as last written.
    pub(super) asks_written: Vec<Ask>,
    /// When a member last vanished from the fleet listing (its row expired or deleted).
    pub(super) member_lost_at: Option<Instant>,
}

impl Worker {
    /// Whether this round may skip the full lease listing: the last one found nothing to do, less
    /// than half a lease duration ago, and nothing has changed since that this worker can see (no
    /// shard task ended, the fleet is the same, no idle exit waits on the listing). A lease left by
    /// a worker killed since is then found at most half a lease duration after it expires; a
    /// worker at its share reads its fleet's rows each poll and the leases only that often.
    pub(super) fn settled(&self, held_before: usize, fleet_before: &[String]) -> bool {
        // A killed member renewed its leases at most a renewal interval after its last heartbeat,
        // so they expire within a renewal interval of its fleet row: list every poll until then.
        let lost_recently = self
            .fleet
            .member_lost_at
            .is_some_and(|t| t.elapsed() < self.cfg.renew_interval + self.cfg.lease_poll_interval);
        !lost_recently
            && self.running.len() == held_before
            && self.fleet.members == fleet_before
            && self.idle_exit.armed_at().is_none()
            && self
                .settled_at
                .is_some_and(|t| t.elapsed() < self.cfg.lease_duration / 2)
    }

    /// Keeps this worker's fleet row alive (written every renewal interval) and lists the live
    /// fleet (every poll: one small read), which the lease plan counts in its fair share. Returns
    /// false on the first call, when the row has just been written.
    pub(super) async fn beat(&mut self) -> bool {
        let first = !std::mem::replace(&mut self.fleet.joined, true);
        self.publish().await;
        self.fleet.joining = first && !self.cfg.join_wait().is_zero();
        if self.fleet.joining {
            return false;
        }
        self.metrics.fleet_listings.fetch_add(1, Ordering::Relaxed);
        match self.deps.leases.fleet(&self.ctx.app, now_ms()).await {
            Ok(members) => {
                self.hear_asks(&members);
                let fleet: Vec<String> = members.into_iter().map(|m| m.worker).collect();
                // Its own row lapsing (`alone`) is no member lost.
                let me = &self.cfg.worker_id;
                if self
                    .fleet
                    .members
                    .iter()
                    .any(|w| w != me && !fleet.contains(w))
                {
                    self.fleet.member_lost_at = Some(Instant::now());
                }
                self.fleet.members = fleet;
            }
            Err(e) => crate::retry::Retry::new(&self.ctx.backoff, "fleet listing")
                .note(&e, &mut self.fleet.last_beat_warning),
        }
        true
    }

    /// Writes this worker's fleet row when the renewal interval has passed since the last (unless
    /// it is [`alone`](Self::alone)), or at once when the leases it asks for have changed (so that
    /// their holders hear of it at their next fleet listing).
    pub(super) async fn publish(&mut self) {
        let mut asks: Vec<Ask> = self.fleet.asked.values().map(|(a, _)| a.clone()).collect();
        asks.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        let due = self
            .fleet
            .last_heartbeat
            .is_none_or(|t| t.elapsed() >= self.cfg.renew_interval)
            && !self.alone();
        if !due && asks == self.fleet.asks_written {
            return;
        }
        let expires = now_ms() + self.cfg.lease_duration.as_millis() as i64;
        let leases = &self.deps.leases;
        match leases
            .heartbeat(&self.ctx.app, &self.cfg.worker_id, expires, &asks)
            .await
        {
            Ok(()) => {
                self.fleet.last_heartbeat = Some(Instant::now());
                self.metrics.heartbeats.fetch_add(1, Ordering::Relaxed);
                self.fleet.asks_written = asks;
            }
            Err(e) => crate::retry::Retry::new(&self.ctx.backoff, "fleet heartbeat")
                .note(&e, &mut self.fleet.last_beat_warning),
        }
    }

    /// Whether this worker's heartbeat would be a write no one reads: its last fleet listing
    /// shows no other member, it holds a lease (so a worker that joins counts it in the fair share
    /// from the lease rows, and finds its leases when they expire) and it asks for none. Its row
    /// then lapses; at the poll after another member's row appears it writes its own again, and
    /// from then on that member hears of its death from the fleet listing as before. A worker
    /// alone saves a write every renewal interval: at 2 likes/s on one shard, 0.14 write units
    /// per like (BENCHMARKS, "A like's cost from a trickle to a flood").
    fn alone(&self) -> bool {
        let me = &self.cfg.worker_id;
        !self.running.is_empty()
            && self.fleet.asked.is_empty()
            && self.fleet.members.iter().all(|w| w == me)
    }

    /// Tells the shard tasks whose leases other members ask for (at the epoch they hold) to hand
    /// them over.
    fn hear_asks(&self, members: &[Member]) {
        let me = self.cfg.worker_id.as_str();
        for m in members {
            for ask in m.asks.iter().filter(|a| a.holder == me) {
                if let Some(r) = self.running.get(&ask.shard_id) {
                    if r.fence.epoch == ask.epoch {
                        keeper::note_ask(&r.asked_by, Some(m.worker.clone()));
                    }
                }
            }
        }
    }

    /// A lease of a worker above its share is asked for, so that its holder flushes, checkpoints
    /// and hands it over (`LeaseStore::ask_handoff`; the holder reads the request with its next
    /// renewal).
    pub(super) async fn steal(&mut self, shard_id: &str, epoch: u64, from: String, now: i64) {
        let held = Fence {
            app: self.ctx.app.clone(),
            shard_id: shard_id.to_owned(),
            owner: from,
            epoch,
        };
        match self
            .deps
            .leases
            .ask_handoff(&held, &self.cfg.worker_id)
            .await
        {
            Ok(true) => {
                self.metrics.asked.fetch_add(1, Ordering::Relaxed);
                info!(shard_id = %shard_id, from = %held.owner, "asked for the lease");
                let ask = Ask {
                    shard_id: shard_id.to_owned(),
                    holder: held.owner,
                    epoch,
                };
                self.fleet.asked.insert(shard_id.to_owned(), (ask, now));
            }
            Ok(false) => {
                self.metrics.take_failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => warn!(shard_id = %shard_id, error = %e, "asking for a lease failed"),
        }
    }

    /// A lease asked for and not handed over a lease duration later (its holder alive and
    /// renewing, but stuck) is taken outright: its open windows are dropped and read again here.
    pub(super) async fn take_overdue(&mut self, leases: &[Lease], now: i64) {
        let patience = self.cfg.lease_duration.as_millis() as i64;
        let overdue: Vec<(String, u64)> = self
            .fleet
            .asked
            .iter()
            .filter(|(_, (_, at))| now - at >= patience)
            .map(|(shard, (ask, _))| (shard.clone(), ask.epoch))
            .collect();
        for (shard_id, epoch) in overdue {
            warn!(shard_id = %shard_id, "the holder did not hand the lease over in time; taking it");
            self.fleet.asked.remove(&shard_id);
            self.take(leases, &shard_id, epoch, true, now).await;
        }
    }
}
