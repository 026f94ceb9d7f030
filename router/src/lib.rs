//! The router (`tally route`, docs/REGIONS.md): with several regions, a region's stream carries
//! likes of posts homed elsewhere. The router reads it with leases and checkpoints of its own
//! (application `router`) and puts each record holding such a like, unchanged (its partition
//! key, its bytes: the event id and created_at inside), to the home region's stream — retrying
//! only what failed — and only then moves its checkpoint past the batch. Killed between the two,
//! it puts the batch again: a copy, which the home counter counts once (likers: the edge holds
//! the event; events: the dedup horizon). The local counter skips those records
//! (`tally_core::input::Input::homed`); the home counter counts them.
#![cfg_attr(test, allow(clippy::unwrap_used))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::worker::{ProcessorFactory, ShardProcessor};
use tally_consumer::ConsumerError;
use tally_core::input::{Decoded, Input};
use tally_core::kpl::user_records;
use tally_core::lease::Lease;
use tally_core::ports::{
    CounterStore, Decided, Fence, PutEntry, ReadBatch, ShardTally, StartPosition, Stream,
    StreamRecord,
};
use tally_core::regions::Homes;
use tally_core::Position;
use tally_producer::keys::HotPosts;

/// How long the puts of one batch to a home region may take before that home is named as not
/// taking them (and the batch read again later).
const PEER_PUT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the router did, for its report.
#[derive(Debug, Default, serde::Serialize)]
pub struct RouterMetrics {
    /// Records read.
    pub records: AtomicU64,
    /// Records put to another region's stream (a record with likes of posts homed in two other
    /// regions, once to each).
    pub routed: AtomicU64,
}

/// What every shard's router shares.
struct Shared {
    store: Arc<dyn CounterStore>,
    /// How records are read (without the home filter: the router reads every like).
    input: Input,
    homes: Homes,
    /// Each other region's stream.
    peers: BTreeMap<String, Arc<dyn Stream>>,
    metrics: Arc<RouterMetrics>,
}

/// The router's processors: one per held shard.
pub struct Router(Arc<Shared>);

impl Router {
    /// A router of the records of posts homed elsewhere than `homes.this` to `peers` (a stream
    /// for every other region of `homes`), checkpointing in `store`.
    pub fn new(
        store: Arc<dyn CounterStore>,
        input: Input,
        homes: Homes,
        peers: BTreeMap<String, Arc<dyn Stream>>,
        metrics: Arc<RouterMetrics>,
    ) -> anyhow::Result<Router> {
        for r in homes.regions.iter().filter(|r| **r != homes.this) {
            if !peers.contains_key(r) {
                anyhow::bail!(
                    "invalid configuration: the router needs `regions.peers.{r}`: where region {r}'s stream is"
                );
            }
        }
        Ok(Router(Arc::new(Shared {
            store,
            input,
            homes,
            peers,
            metrics,
        })))
    }
}

impl ProcessorFactory for Router {
    fn create(&self, fence: &Fence) -> Box<dyn ShardProcessor> {
        Box::new(RouterShard {
            shared: self.0.clone(),
            fence: fence.clone(),
            checkpoint: None,
            max_arrival: i64::MIN,
        })
    }
}

/// One held shard's router.
struct RouterShard {
    shared: Arc<Shared>,
    fence: Fence,
    checkpoint: Option<Position>,
    max_arrival: i64,
}

impl RouterShard {
    /// The other regions whose posts a record's likes are of (none for a record this region
    /// counts alone, or one it cannot read: the local counter dead-letters it).
    fn homes_of<'a>(&'a self, r: &StreamRecord) -> BTreeSet<&'a str> {
        let Ok(users) = user_records(&r.data) else {
            return BTreeSet::new();
        };
        let h = &self.shared.homes;
        users
            .iter()
            .filter_map(|d| match self.shared.input.decode(d) {
                Ok(Decoded::Event(e)) => Some(h.home(&e.post_id)),
                _ => None,
            })
            .filter(|home| *home != h.this)
            .collect()
    }

    /// Moves the checkpoint to `end` (a window with no writes of its own: the puts were made).
    async fn checkpoint(
        &mut self,
        first: &StreamRecord,
        end: Position,
    ) -> Result<(), ConsumerError> {
        let decided = Decided::from(0);
        self.shared
            .store
            .begin_window(
                &self.fence,
                self.checkpoint.as_ref(),
                &first.seq,
                &end,
                decided,
            )
            .await?;
        self.finish(end).await
    }

    /// Moves the checkpoint to the window recorded as pending at `end`.
    async fn finish(&mut self, end: Position) -> Result<(), ConsumerError> {
        let spent = ShardTally::default();
        self.shared
            .store
            .finish_window(&self.fence, &end, self.max_arrival, false, &spent, None)
            .await?;
        self.checkpoint = Some(end);
        Ok(())
    }
}

#[async_trait]
impl ShardProcessor for RouterShard {
    async fn start(&mut self, lease: &Lease) -> Result<StartPosition, ConsumerError> {
        self.checkpoint = lease.checkpoint.clone();
        self.max_arrival = lease.max_arrival;
        // Killed between a batch's begin and finish: its puts were all made (they come first).
        let (app, shard_id) = (&self.fence.app, &self.fence.shard_id);
        let state = self.shared.store.shard_state(app, shard_id).await?;
        if let Some(p) = state.pending {
            self.finish(p.end).await?;
        }
        Ok(match &self.checkpoint {
            Some(p) => StartPosition::AfterSequence(p.seq.clone()),
            None => StartPosition::TrimHorizon,
        })
    }

    async fn process(&mut self, batch: &ReadBatch, _now_ms: i64) -> Result<(), ConsumerError> {
        let (Some(first), Some(last)) = (batch.records.first(), batch.records.last()) else {
            return Ok(());
        };
        let m = &self.shared.metrics;
        m.records
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        let mut out: BTreeMap<String, Vec<PutEntry>> = BTreeMap::new();
        for r in &batch.records {
            self.max_arrival = self.max_arrival.max(r.arrival_ms);
            for home in self.homes_of(r) {
                out.entry(home.to_owned()).or_default().push(PutEntry {
                    partition_key: r.partition_key.clone(),
                    data: r.data.clone(),
                });
            }
        }
        let never = AtomicBool::new(false);
        for (region, entries) in out {
            let n = entries.len() as u64;
            let peer = &self.shared.peers[&region];
            let hot = HotPosts::default();
            let put = tally_producer::put::put_all(
                peer.as_ref(),
                &hot,
                entries.into_iter(),
                0.0,
                &|_| {},
                &never,
            );
            // Bounded: a home whose stream neither takes nor refuses the puts (an embedded store
            // locked by another process waits in SQLite) is named within the bound, and a stop
            // asked meanwhile is not held up by it.
            let unavailable = |detail: String| {
                // Retryable: the shard is read again from its checkpoint, these records put
                // again, for as long as the home stream refuses them.
                ConsumerError::Port(tally_core::ports::PortError::Unavailable {
                    endpoint: format!("region {region}'s stream"),
                    detail,
                })
            };
            match tokio::time::timeout(PEER_PUT_TIMEOUT, put).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(unavailable(e.to_string())),
                Err(_) => {
                    return Err(unavailable(format!(
                        "its stream did not take the {n} records of a batch in {}s (its store \
                         locked or not writable?); they are put again",
                        PEER_PUT_TIMEOUT.as_secs()
                    )))
                }
            }
            m.routed.fetch_add(n, Ordering::Relaxed);
        }
        self.checkpoint(first, Position::whole(last.seq.clone()))
            .await
    }

    async fn tick(&mut self, _now_ms: i64) -> Result<(), ConsumerError> {
        Ok(())
    }

    async fn flush(&mut self, shard_end: bool) -> Result<(), ConsumerError> {
        if shard_end {
            self.shared.store.mark_finished(&self.fence).await?;
        }
        Ok(())
    }

    async fn shard_gone(&mut self) -> Result<(), ConsumerError> {
        tracing::error!(
            shard = %self.fence.shard_id,
            "the stream's retention trimmed records the router had not routed: their likes are not counted in their home regions"
        );
        self.flush(true).await
    }
}
