//! Counting likers: a post's count is its users whose latest action is a like. A window folds
//! each touched edge's latest event (ordered with the clock skew it records), writes the edges
//! first — the pairs it writes recorded before the first of them — and counts what those writes
//! decided (`tally_core::edge`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use tally_consumer::retry::with_backoff;
use tally_consumer::ConsumerError;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{self, CountMode, EdgeEvent, Transition};
use tally_core::ports::{
    Applied, Consistency, CounterStore, Decided, Pending, PortResult, WindowRef, WindowRest,
};
use tally_core::summary::marker;
use tally_core::window::{ClosedWindow, WindowBuilder};

use super::Counting;
use crate::board::{self, Board};
use crate::claim::ClaimError;
use crate::held;
use crate::writes::{window_err, Resend, ShardWrites};

/// Edges read at once while counting a given-up window's.
const EDGES_PER_READ: usize = 1_000;

/// Counting likers, ordering events with this clock skew (`counter.max_clock_skew_secs`, ms)
/// unless a pending window recorded another.
#[derive(Debug)]
pub(crate) struct Likers {
    pub(crate) skew_ms: i64,
}

impl Likers {
    /// The skew a window orders its events with: the pending one's, when rebuilding it (a
    /// setting changed since must not change what it decided).
    fn skew(&self, pending: Option<&Pending>) -> i64 {
        pending.and_then(|p| p.skew_ms).unwrap_or(self.skew_ms)
    }
}

#[async_trait]
impl Counting for Likers {
    fn mode(&self) -> CountMode {
        CountMode::Likers
    }

    /// Records the skew among those the store was counted with (what `tally verify` recounts
    /// with), and warns when there are several.
    async fn claimed(&self, store: &dyn CounterStore) -> Result<(), ClaimError> {
        let skews = store.clock_skews(Some(self.skew_ms)).await?;
        if skews.len() > 1 {
            tracing::warn!(
                ?skews,
                "this store has been counted with several values of \
                 counter.max_clock_skew_secs (ms): an event whose clock was ahead by between \
                 them orders differently by the window that read it, and `tally verify` says so"
            );
        }
        Ok(())
    }

    fn fold(&self, w: WindowBuilder, pending: Option<&Pending>) -> WindowBuilder {
        w.likers(self.skew(pending))
    }

    fn decided(&self, horizon_ms: i64, pending: Option<&Pending>) -> Decided {
        Decided {
            horizon_ms,
            skew_ms: Some(self.skew(pending)),
        }
    }

    /// The share: a likers window keeps no dedup record, so only memory bounds it.
    fn window_records(&self, share: usize) -> usize {
        share
    }

    /// An open window's effect depends on the stored edges it will write over: only a board
    /// that reads them (`Board::resolving`) shows it.
    fn shows_open(&self, board: &Board) -> bool {
        board.shows_open_windows()
    }

    async fn write(
        &self,
        shard: &ShardWrites,
        w: Arc<ClosedWindow>,
        at: WindowRef<'_>,
        replaying: bool,
        spent: &mut Applied,
    ) -> Result<Arc<ClosedWindow>, ConsumerError> {
        if w.edges.is_empty() {
            return Ok(w);
        }
        // Which edges it writes is durable before the first of them is written: a window
        // given up later (its records trimmed while pending) still finds and counts them.
        let pairs: Vec<(&str, &str)> = w
            .edges
            .iter()
            .map(|e| (e.post_id.as_str(), e.user_id.as_str()))
            .collect();
        let recorded = with_backoff(
            &shard.ctx.backoff,
            "record which edges a window writes",
            || shard.store.record_window_edges(at, &pairs),
        )
        .await
        .map_err(|e| window_err(&w, at.shard_id, e))?;
        spent.merge(&recorded);
        let transitions = apply_edges(shard, at, &w.edges, replaying, spent)
            .await
            .map_err(|e| window_err(&w, at.shard_id, e))?;
        // What the edges changed is known now: the read side sees it until it is written.
        let counted = Arc::new(w.with_transitions(&transitions));
        board::lock(&shard.windows).applying = Some(counted.clone());
        Ok(counted)
    }

    /// Counts the edges the window wrote — found by its edge record, each transition as the
    /// edge remembers this window's write (decided then, never again from the edge's state now)
    /// — with the same marker-guarded writes as any window, so a give-up interrupted and given
    /// up again counts each once. No record: no edge of it was written.
    async fn give_up(
        &self,
        shard: &ShardWrites,
        pending: &Pending,
    ) -> Result<String, ConsumerError> {
        Ok(match count_written_edges(shard, pending).await? {
            Some(n) => format!(
                "; the {n} edges it had written are counted as it decided them, its other \
                 records are lost"
            ),
            None => " (it had written no edge yet, so nothing of it is counted)".to_owned(),
        })
    }
}

/// Writes a window's edges, batch by batch, sending again only what failed for a passing
/// reason; returns the transitions they made.
async fn apply_edges(
    shard: &ShardWrites,
    at: WindowRef<'_>,
    edges: &[EdgeEvent],
    replaying: bool,
    spent: &mut Applied,
) -> PortResult<Vec<Transition>> {
    let (cfg, ctx) = (&shard.cfg, &shard.ctx);
    let mut transitions = Vec::with_capacity(edges.len());
    for batch in edges.chunks(cfg.batch()) {
        let mut sending = Resend::new(&ctx.backoff, "write a window's edges", batch);
        loop {
            let sent = shard
                .store
                .apply_edges(at, sending.todo())
                .await
                .map(|done| {
                    spent.merge(&done.applied);
                    transitions.extend(done.transitions);
                    // A first attempt wrote nothing before: what an edge forgot is not its.
                    let forgotten = if replaying { done.forgotten } else { 0 };
                    note_edges(shard, at, done.crossed, forgotten);
                    (done.retry, done.error)
                });
            if sending.settle(sent).await? {
                break;
            }
        }
        shard.failpoint("edge and post writes");
    }
    Ok(transitions)
}

/// Counts and reports what an edge batch met: edges two shards write, and edges that no longer
/// remember whether this window wrote them.
fn note_edges(shard: &ShardWrites, at: WindowRef<'_>, crossed: u64, forgotten: u64) {
    let m = &shard.metrics;
    m.edges_crossed.fetch_add(crossed, Ordering::Relaxed);
    if forgotten > 0 {
        m.edges_forgotten.fetch_add(forgotten, Ordering::Relaxed);
        tracing::warn!(
            window_end = %at.end,
            edges = forgotten,
            "edges of a window applied again no longer remember whether it wrote them \
             (more writes by other shards since than an edge keeps): counted as no change; \
             `tally verify` shows any post this made wrong"
        );
    }
}

/// Before a pending window is given up, counts the edges it wrote; `None`: it recorded none.
async fn count_written_edges(
    shard: &ShardWrites,
    pending: &Pending,
) -> Result<Option<usize>, ConsumerError> {
    let end = &pending.end;
    let fence = shard.fence.clone();
    let at = WindowRef {
        app: &fence.app,
        shard_id: &fence.shard_id,
        end,
        held: false,
    };
    let backoff = &shard.ctx.backoff;
    let Some(pairs) = with_backoff(backoff, "read a window's edge record", || {
        shard.store.window_edges(at)
    })
    .await?
    else {
        return Ok(None);
    };
    let window = edge::window_id(&fence.shard_id, &marker(end));
    let mut transitions = Vec::new();
    let mut forgotten = 0;
    for chunk in pairs.chunks(EDGES_PER_READ) {
        let (states, _) = with_backoff(backoff, "read a given-up window's edges", || {
            shard.store.edges(chunk, Consistency::Strong)
        })
        .await?;
        for ((post, _), st) in chunk.iter().zip(states) {
            match st.as_ref().map(|s| (s.written_by(&window, post), s)) {
                Some((Some(t), _)) => transitions.push(t),
                Some((None, s)) if !s.remembers_all() => forgotten += 1,
                _ => {}
            }
        }
    }
    note_edges(shard, at, 0, forgotten);
    let written = transitions.len();
    let ((posts, total_delta), held) = edge::split(&transitions);
    for batch in posts.chunks(shard.cfg.batch()) {
        shard.apply_batch(at, batch).await?;
    }
    let rest = WindowRest {
        dead_letters: &[],
        total_delta,
        dedup: &DedupRecord {
            max_arrival: i64::MIN,
            ids: Vec::new(),
        },
        horizon_ms: pending
            .horizon_ms
            .unwrap_or_else(|| shard.cfg.dedup_horizon_ms()),
    };
    with_backoff(backoff, "write a given-up window's global total", || {
        shard.store.apply_rest(at, rest)
    })
    .await?;
    held::write(shard, at, &held, &mut Applied::default()).await?;
    Ok(Some(written))
}
