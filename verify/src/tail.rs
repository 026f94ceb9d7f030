//! Counting likers, the changes of the edges the counter's second stage has not counted yet: the
//! edges' change log after each of its checkpoints, read once, so that each post's count is
//! compared with them added (a count lags the edges by them, not the stream).

use std::collections::HashMap;

use anyhow::{Context, Result};
use tally_core::apps;
use tally_core::buckets::MINUTE_MS;
use tally_core::edge::{moves, EdgeChange};
use tally_core::ports::{ShardState, StartPosition, StreamRecord};
use tally_core::summary::marker;

use crate::recount::Minute;
use crate::Ports;

/// One change not counted yet, as a post's deltas: its shard, its marker and what it moves.
struct Pending {
    shard: String,
    marker: String,
    moves: Vec<(Minute, i64)>,
}

/// The changes after the second stage's checkpoints, by post.
#[derive(Default)]
pub struct LogTail {
    by_post: HashMap<String, Vec<Pending>>,
    /// How many changes there are.
    pub changes: u64,
    /// What they move the global total by.
    pub total: i64,
    /// The second stage's shards as they were when the log was read.
    pub states: HashMap<String, ShardState>,
}

impl LogTail {
    /// Reads the change log of `b`'s store after each checkpoint of the second stage (from the
    /// log's start for a shard it has none of).
    pub async fn read(b: Ports<'_>) -> Result<LogTail> {
        let log = b
            .counter
            .change_log()
            .context("opening the edges' change log")?;
        let mut out = LogTail {
            states: super::states(b, apps::CHANGES).await?,
            ..LogTail::default()
        };
        for shard in log.list_shards().await.context("listing the change log")? {
            let state = out.states.get(&shard.shard_id);
            if state.is_some_and(|s| s.lease.finished) {
                // Read to its end and counted: nothing is left in it.
                continue;
            }
            let from = StartPosition::after(state.and_then(|s| s.lease.checkpoint.as_ref()));
            let read =
                tally_recording::reading::read_to_tip(log.as_ref(), &shard, from, 1_000, |b| {
                    b.records.iter().for_each(|r| out.note(&shard.shard_id, r));
                    Ok(())
                });
            read.await.context("reading the change log")?;
        }
        Ok(out)
    }

    /// Notes a record of the log's `shard`: its change, if it is one.
    fn note(&mut self, shard: &str, rec: &StreamRecord) {
        let Ok(c) = EdgeChange::decode(&rec.data) else {
            return;
        };
        let m: Vec<(Minute, i64)> = moves(c.before, c.after)
            .map(|(at, n)| (at.div_euclid(MINUTE_MS), n))
            .collect();
        self.changes += 1;
        self.total += m.iter().map(|(_, n)| n).sum::<i64>();
        self.by_post
            .entry(c.post_id.to_string())
            .or_default()
            .push(Pending {
                shard: shard.to_owned(),
                marker: marker(&tally_core::Position::whole(rec.seq.clone())),
                moves: m,
            });
    }

    /// What the changes of `post` that a count whose live items are marked `marks` does not
    /// hold yet add to it (since minute `from`, else in all).
    pub fn unapplied(&self, post: &str, marks: &[(String, String)], from: Option<Minute>) -> i64 {
        let Some(pending) = self.by_post.get(post) else {
            return 0;
        };
        pending
            .iter()
            .filter(|p| {
                !marks
                    .iter()
                    .any(|(s, m)| *s == p.shard && p.marker.as_str() <= m.as_str())
            })
            .flat_map(|p| &p.moves)
            .filter(|(m, _)| from.is_none_or(|f| *m >= f))
            .map(|(_, n)| n)
            .sum()
    }
}
