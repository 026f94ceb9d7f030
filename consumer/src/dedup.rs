//! The duplicate filter's life in the store, for both consumer apps: restored across the shard's
//! lineage within the horizon, and expired as the arrival clock passes it.

use std::collections::{HashMap, HashSet};

use tally_core::dedup::Dedup;
use tally_core::lease::Lease;
use tally_core::ports::{DedupStore, Fence, LeaseStore, PortError};

use crate::retry::with_backoff;
use crate::ConsumerError;

/// The duplicate filter as it stood at `row`'s checkpoint: this shard's dedup records within the
/// horizon of its clock, and those of every ancestor (across any number of reshards) that can
/// still hold an id within it — only windows at or before each shard's checkpoint. A shard that
/// has not checkpointed yet starts at its parents' clock, so a new child loads only their last
/// `horizon` of ids, not their history.
pub async fn restore<S: LeaseStore + DedupStore + ?Sized>(
    store: &S,
    fence: &Fence,
    row: &Lease,
    horizon_ms: i64,
) -> Result<Dedup, ConsumerError> {
    // The clock: this shard's own, or, before its first checkpoint, its parents' (through any
    // ancestor that finished without a record of its own). Ancestors finished before this shard
    // began, so their clocks are behind the shard's.
    let mut clock = row.max_arrival;
    let mut frontier = row.parents.clone();
    let mut seen = HashSet::new();
    while let Some(id) = frontier.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(a) = lease_row(store, &fence.app, &id).await? {
            if a.max_arrival == i64::MIN {
                frontier.extend(a.parents);
            } else {
                clock = clock.max(a.max_arrival);
            }
        }
    }
    let min = Dedup::min_arrival_to_restore(horizon_ms, clock);
    // Walk up the lineage; an ancestor whose clock is below `min` holds nothing newer, and neither
    // do its own ancestors. A row that is gone was deleted only once every child's clock had
    // passed its own by more than the horizon: nothing in it can matter here.
    let mut shards = vec![fence.shard_id.clone()];
    let mut checkpoints = HashMap::from([(fence.shard_id.clone(), row.checkpoint.clone())]);
    let mut frontier = row.parents.clone();
    while let Some(id) = frontier.pop() {
        if shards.contains(&id) {
            continue;
        }
        let Some(a) = lease_row(store, &fence.app, &id).await? else {
            continue;
        };
        if a.max_arrival == i64::MIN || a.max_arrival >= min {
            frontier.extend(a.parents);
            checkpoints.insert(id.clone(), a.checkpoint);
            shards.push(id);
        }
    }
    // Only windows at or before each shard's checkpoint: a pending window's record may be stored
    // before its checkpoint moves, and its ids are that window's own, not duplicates.
    let records = store
        .load_dedup(&fence.app, &shards, min)
        .await?
        .into_iter()
        .filter(|r| {
            checkpoints
                .get(&r.shard_id)
                .is_some_and(|c| c.as_ref().is_some_and(|c| r.end <= *c))
        })
        .map(|r| r.record)
        .collect();
    let dedup = Dedup::restore(horizon_ms, clock, records);
    if dedup.is_empty() {
        // A shard's first start (nothing to restore) is no news at the default level.
        tracing::debug!(app = %fence.app, shards = ?shards, "dedup filter restored: empty");
    } else {
        tracing::info!(
            app = %fence.app,
            ids = dedup.len(),
            shards = ?shards,
            clock,
            horizon_ms,
            "dedup filter restored"
        );
    }
    Ok(dedup)
}

/// A shard's lease row, `None` if it was cleaned up.
pub async fn lease_row<S: LeaseStore + ?Sized>(
    store: &S,
    app: &str,
    shard_id: &str,
) -> Result<Option<Lease>, ConsumerError> {
    match store.shard_state(app, shard_id).await {
        Ok(st) => Ok(Some(st.lease)),
        Err(PortError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Drops the shard's dedup records that `dedup`'s clock has passed by more than the horizon: no
/// restore at this checkpoint or later can need them. Best effort — a record left behind is
/// skipped by every restore and removed by the store's expiry.
pub async fn expire<S: DedupStore + ?Sized>(
    store: &S,
    fence: &Fence,
    dedup: &Dedup,
    horizon_ms: i64,
    backoff: &tally_core::retry::Backoff,
) {
    let before = Dedup::min_arrival_to_restore(horizon_ms, dedup.running_max());
    let r = with_backoff(backoff, "expire dedup records", || {
        store.expire_dedup(&fence.app, &fence.shard_id, before)
    })
    .await;
    if let Err(e) = r {
        tracing::warn!(error = %e, "expiring dedup records failed; restores skip them")
    }
}
