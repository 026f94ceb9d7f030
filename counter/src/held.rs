//! A likers window's **held removals**: an unlike (or a newer like) that removes a like another
//! shard's window made — two shards writing one edge — is counted only once that window has
//! written its counts of the post, so that a post's count, the sum of its shards' items, never
//! goes below zero while the like it removes is still to be counted (that window's worker may
//! have died before its counts; it is rebuilt within a lease expiry).
//!
//! The window writes its other counts first and never waits for them, so no two windows wait
//! for each other: a held removal waits only for another window's counts that are not held
//! ones. Then it waits until, for each (post, window) it holds a removal for, the post's item of
//! that window's shard is marked at or past that window, or that shard's checkpoint is past it
//! (the window is done, or was given up), and writes the removals under its **held marker**
//! (`tally_core::summary::held_marker`): each item once, whoever writes them, however often —
//! the same guard as every count write. What it holds is decided by its edge writes
//! (`tally_core::edge::Transition::held_for`), so a rebuild holds the same removals.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tally_consumer::retry::with_backoff;
use tally_consumer::ConsumerError;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{self, HeldCounts};
use tally_core::ports::{
    Applied, Consistency, PortError, WindowRef, WindowRest, MAX_POSTS_PER_CALL,
};
use tally_core::summary::marker;

use crate::writes::ShardWrites;

/// The longest pause between two looks at the windows a held removal waits for.
const MOST_PAUSE: Duration = Duration::from_secs(1);

/// How often a wait that lasts is said again in the log.
const SAY_AGAIN: Duration = Duration::from_secs(30);

/// Writes a window's held removals once the windows they wait for have written their counts.
pub(crate) async fn write(
    shard: &ShardWrites,
    at: WindowRef<'_>,
    held: &HeldCounts,
    spent: &mut Applied,
) -> Result<(), ConsumerError> {
    if held.is_empty() {
        return Ok(());
    }
    wait_for_writers(shard, at, &held.waits, spent).await?;
    let at = at.held();
    for batch in held.posts.chunks(shard.cfg.batch()) {
        spent.merge(&shard.apply_batch(at, batch).await?);
    }
    let rest = WindowRest {
        dead_letters: &[],
        total_delta: held.total_delta,
        dedup: &DedupRecord {
            max_arrival: i64::MIN,
            ids: Vec::new(),
        },
        horizon_ms: 0,
    };
    let done = with_backoff(
        &shard.ctx.backoff,
        "write a window's held removals' global total",
        || shard.store.apply_rest(at, rest),
    )
    .await?;
    spent.merge(&done);
    shard.failpoint("held removals");
    Ok(())
}

/// Waits until each (post, window) of `waits` is written: the post's item of the window's shard
/// marked at or past it, or that shard's checkpoint past it.
async fn wait_for_writers(
    shard: &ShardWrites,
    at: WindowRef<'_>,
    waits: &[(String, String)],
    spent: &mut Applied,
) -> Result<(), ConsumerError> {
    let backoff = &shard.ctx.backoff;
    let mut todo: Vec<&(String, String)> = waits.iter().collect();
    let mut pause = Duration::from_millis(20);
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    loop {
        // The writers' shards first: most windows a removal waits for were done long ago.
        let shards: BTreeSet<&str> = todo.iter().map(|(_, w)| edge::window_shard(w)).collect();
        let mut passed: HashMap<&str, Option<String>> = HashMap::new();
        for s in shards {
            let st = with_backoff(backoff, "read a writer shard's checkpoint", || {
                shard.store.shard_state(at.app, s)
            })
            .await;
            spent.reads += 1;
            let through = match st {
                Ok(st) if !st.lease.finished => {
                    Some(st.lease.checkpoint.as_ref().map(marker).unwrap_or_default())
                }
                // Finished, or its row cleaned up after it was.
                Ok(_) | Err(PortError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            passed.insert(s, through);
        }
        todo.retain(|(_, w)| {
            match &passed[edge::window_shard(w)] {
                // Finished: every window of it is done.
                None => false,
                Some(through) => through.as_str() < edge::window_marker(w),
            }
        });
        if !todo.is_empty() {
            let posts: Vec<String> = todo
                .iter()
                .map(|(p, _)| p.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut marks: HashMap<String, Vec<(String, String)>> = HashMap::new();
            for chunk in posts.chunks(MAX_POSTS_PER_CALL) {
                let counts =
                    with_backoff(backoff, "read the posts a held removal waits for", || {
                        shard.store.post_counts(chunk, None, Consistency::Strong)
                    })
                    .await?;
                spent.reads += chunk.len() as u64;
                for (p, c) in chunk.iter().zip(counts) {
                    marks.insert(p.clone(), c.marks);
                }
            }
            todo.retain(|(p, w)| {
                let s = edge::window_shard(w);
                !marks.get(p).is_some_and(|m| {
                    m.iter()
                        .any(|(ms, mark)| ms == s && mark.as_str() >= edge::window_marker(w))
                })
            });
        }
        if todo.is_empty() {
            return Ok(());
        }
        // Said when the wait starts, and again every `SAY_AGAIN` while it lasts (the other
        // shard may be stalled: this shard's next windows wait behind it).
        if said.is_none_or(|t| t.elapsed() >= SAY_AGAIN) {
            let (post, window) = todo[0];
            let waited_secs = started.elapsed().as_secs();
            tracing::info!(
                shard_id = at.shard_id,
                window_end = %at.end,
                waiting = todo.len(),
                waited_secs,
                post,
                window,
                "a window's removals of likes other shards' windows made are held until those \
                 windows have written their counts (their worker may have died: a lease expiry)"
            );
            said = Some(std::time::Instant::now());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MOST_PAUSE);
    }
}
