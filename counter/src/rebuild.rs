//! A way back: every count rebuilt from the stored edges into a fresh table set.
//!
//! The edges are the system of record of who likes what; the summary items (totals, "since"
//! buckets, the global total) follow from them. Counting likers, a post's "since" buckets hold
//! +1 at the minute of each current like (a like undone removes its +1 where it was added,
//! `edge::split`), so the counts are a function of the edges alone.
//!
//! The rebuild writes them through the counter's own window protocol, one window per shard of
//! the source: the shard's lease is taken in the destination, a window ending at the source's
//! checkpoint is begun (recorded as pending), the edges that shard's windows wrote last are
//! written by it (`apply_edges`: each only if absent, its transition read off the item when an
//! earlier attempt wrote it), then the posts' deltas, the global total and the shard's dead
//! letters (copied as they are), and the checkpoint. The
//! destination ends as if a counter had applied each shard up to its checkpoint in one window, so
//! the counter goes on from there and `verify` checks it as any store. A rebuild that stops at
//! any point is run again: it finds its pending windows and applies them again, deciding each
//! edge's transition from the destination's own items, which nothing else writes — never again
//! from the source.

use std::collections::BTreeMap;

use tally_consumer::retry::with_backoff;
use tally_core::buckets::PostDelta;
use tally_core::clock::now_ms;
use tally_core::dead_letter::DeadLetter;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{self, CountMode, EdgeEvent, EdgeState};
use tally_core::lease::Lease;
use tally_core::ports::{
    CounterStore, Decided, Fence, LetterCursor, PortError, ScanCursor, ShardInfo, ShardTally,
    WindowRef, WindowRest,
};
use tally_core::retry::Backoff;
use tally_core::summary::marker;
use tally_core::Position;

use crate::writes::Resend;

/// The worker id a rebuild takes the destination's leases as.
pub const REBUILD_OWNER: &str = "rebuild";

/// How long a rebuild's lease on a destination shard lasts (no counter may run there meanwhile).
const LEASE_MS: i64 = 3_600_000;

/// Why a rebuild did not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The source is being counted or a window of it is half applied: its edges may still move.
    #[error("shard {shard} of the source {why}: stop its counters (and let a crashed one's window be applied) before rebuilding from it")]
    SourceBusy {
        /// The shard.
        shard: String,
        /// What is under way there.
        why: String,
    },
    /// The source keeps no edges.
    #[error("the source {0}: a rebuild reads the edges a store counting likers keeps")]
    NoEdges(String),
    /// The destination holds counts of its own.
    #[error("the destination is not a fresh table set: {0}. Rebuild into new tables (another table prefix or data dir)")]
    NotFresh(String),
    /// A store call failed.
    #[error(transparent)]
    Port(#[from] PortError),
}

/// What a rebuild did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Shards whose window it applied (now, or found applied by an earlier run).
    pub shards: usize,
    /// Of them, those an earlier run had finished.
    pub already: usize,
    /// Edges read from the source.
    pub edges: u64,
    /// Of them, those written by a shard the source has no lease row for (counted with the first
    /// shard rebuilt).
    pub orphans: u64,
    /// Likes counted by the windows this run applied: the global total they wrote.
    pub likes: i64,
    /// Dead letters those windows wrote again (each shard's, keyed as in the source).
    pub dead_letters: u64,
    /// Posts whose counts it wrote.
    pub posts: usize,
}

/// One source shard's window in the destination.
struct ShardWindow {
    lease: Lease,
    end: Position,
    fence: Fence,
    /// Every post's delta from the edges it wrote, merged page by page.
    posts: BTreeMap<String, PostDelta>,
    total: i64,
}

impl ShardWindow {
    fn at(&self) -> WindowRef<'_> {
        WindowRef {
            app: &self.fence.app,
            shard_id: &self.fence.shard_id,
            end: &self.end,
            held: false,
        }
    }
}

/// Rebuilds `app`'s counts from the edges of `from` into `into`, which must hold none of its own
/// (a fresh table set, or one an earlier run of the same rebuild left); `decided` is what the
/// windows are recorded with, `batch` the posts one store call writes. See the module.
pub async fn rebuild(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    app: &str,
    decided: Decided,
    batch: usize,
    backoff: &Backoff,
) -> Result<Rebuilt, RebuildError> {
    match from.stored_mode().await? {
        Some(CountMode::Likers) => {}
        Some(CountMode::Events) => return Err(RebuildError::NoEdges("counts events".into())),
        None => return Err(RebuildError::NoEdges("has counted nothing".into())),
    }
    let source = quiet_source(from, app).await?;
    claim(from, into).await?;
    let mut windows = open_windows(into, app, &source, decided).await?;
    let mut done = Rebuilt {
        shards: windows.len(),
        ..Rebuilt::default()
    };
    let finished: Vec<String> = source
        .iter()
        .filter(|l| !windows.contains_key(&l.shard_id) && l.checkpoint.is_some())
        .map(|l| l.shard_id.clone())
        .collect();
    done.already = finished.len();
    done.shards += finished.len();
    write_edges(from, into, &mut windows, &finished, backoff, &mut done).await?;
    let mut letters = dead_letters(from, &windows, &finished).await?;
    for w in windows.values() {
        done.likes += w.total;
        done.posts += w.posts.len();
        let mine = letters.remove(&w.fence.shard_id).unwrap_or_default();
        done.dead_letters += mine.len() as u64;
        finish(into, w, &mine, batch, backoff).await?;
    }
    Ok(done)
}

/// The source's dead letters by the window that writes them again: their shard's (a shard the
/// source has no row for: the first window's; a shard an earlier run finished: none).
async fn dead_letters(
    from: &dyn CounterStore,
    windows: &BTreeMap<String, ShardWindow>,
    finished: &[String],
) -> Result<BTreeMap<String, Vec<DeadLetter>>, RebuildError> {
    let mut out: BTreeMap<String, Vec<DeadLetter>> = BTreeMap::new();
    let mut after: Option<LetterCursor> = None;
    loop {
        let (page, next) = from.dead_letter_page(after.as_ref(), SCAN_PAGE).await?;
        for d in page {
            let shard = if windows.contains_key(&d.shard_id) {
                d.shard_id.clone()
            } else if finished.contains(&d.shard_id) {
                continue;
            } else {
                match windows.keys().next() {
                    Some(first) => first.clone(),
                    None => continue,
                }
            };
            out.entry(shard).or_default().push(d);
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(out),
        }
    }
}

/// The source's lease rows, refused while any is held or has a window pending.
async fn quiet_source(from: &dyn CounterStore, app: &str) -> Result<Vec<Lease>, RebuildError> {
    let now = now_ms();
    let states = from.list_states(app).await?;
    for s in &states {
        let why = if s.pending.is_some() {
            "has a window being applied"
        } else if s.lease.is_held(now) {
            "is held by a running counter"
        } else {
            continue;
        };
        return Err(RebuildError::SourceBusy {
            shard: s.lease.shard_id.clone(),
            why: why.into(),
        });
    }
    Ok(states.into_iter().map(|s| s.lease).collect())
}

/// The destination counts likers, with the source's clock skews, from the source's stream.
async fn claim(from: &dyn CounterStore, into: &dyn CounterStore) -> Result<(), RebuildError> {
    if into.count_mode(Some(CountMode::Likers)).await? != Some(CountMode::Likers) {
        return Err(RebuildError::NotFresh("it counts events".into()));
    }
    for skew in from.stored_skews().await? {
        into.clock_skews(Some(skew)).await?;
    }
    if let Some(stream) = from.counted_stream(None).await? {
        let claimed = into.counted_stream(Some(&stream)).await?;
        if claimed.as_deref() != Some(stream.as_str()) {
            return Err(RebuildError::NotFresh(format!(
                "it is counted from {}, the source from {stream}",
                claimed.unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// Takes each source shard's lease in the destination and begins its window there (ending at the
/// source's checkpoint), or finds the window an earlier run began; a shard an earlier run
/// finished, or with nothing applied, has none. Anything else there is refused.
async fn open_windows(
    into: &dyn CounterStore,
    app: &str,
    source: &[Lease],
    decided: Decided,
) -> Result<BTreeMap<String, ShardWindow>, RebuildError> {
    let shards: Vec<ShardInfo> = source
        .iter()
        .map(|l| ShardInfo {
            shard_id: l.shard_id.clone(),
            parents: l.parents.clone(),
            closed: l.finished,
        })
        .collect();
    // Nothing counted there but what this rebuild writes: a checkpoint other than the source's
    // is counts of the destination's own.
    for d in into.list_states(app).await? {
        let theirs = source.iter().find(|l| l.shard_id == d.lease.shard_id);
        let expected = theirs.and_then(|l| l.checkpoint.as_ref());
        if d.lease.checkpoint.is_some() && d.lease.checkpoint.as_ref() != expected {
            return Err(not_fresh(&d.lease.shard_id, "has a checkpoint of its own"));
        }
    }
    into.ensure_leases(app, &shards).await?;
    let mut windows = BTreeMap::new();
    for l in source {
        let state = into.shard_state(app, &l.shard_id).await?;
        let pending = state.pending.as_ref().map(|p| &p.end);
        let Some(end) = &l.checkpoint else {
            if state.lease.checkpoint.is_some() || pending.is_some() {
                return Err(not_fresh(
                    &l.shard_id,
                    "has a checkpoint the source has not",
                ));
            }
            continue;
        };
        match (&state.lease.checkpoint, pending) {
            (Some(c), None) if c == end => continue,
            (None, None) | (None, Some(_)) => {}
            _ => return Err(not_fresh(&l.shard_id, "has a checkpoint of its own")),
        }
        if pending.is_some_and(|p| p != end) {
            return Err(not_fresh(&l.shard_id, "has a window of its own pending"));
        }
        if state.lease.is_held(now_ms()) && state.lease.owner.as_deref() != Some(REBUILD_OWNER) {
            return Err(not_fresh(&l.shard_id, "is held by a counter"));
        }
        let fence = into
            .take_lease(
                app,
                &l.shard_id,
                state.lease.epoch,
                REBUILD_OWNER,
                now_ms() + LEASE_MS,
            )
            .await?
            .ok_or_else(|| not_fresh(&l.shard_id, "was taken by another worker meanwhile"))?;
        if pending.is_none() {
            into.begin_window(&fence, None, &end.seq, end, decided)
                .await?;
        }
        windows.insert(
            l.shard_id.clone(),
            ShardWindow {
                lease: l.clone(),
                end: end.clone(),
                fence,
                posts: BTreeMap::new(),
                total: 0,
            },
        );
    }
    Ok(windows)
}

fn not_fresh(shard: &str, what: &str) -> RebuildError {
    RebuildError::NotFresh(format!("its lease row of shard {shard} {what}"))
}

/// How many items one page of the source's scan reads.
const SCAN_PAGE: usize = 1_000;

/// How many dead letters one `apply_rest` writes.
const DEAD_LETTERS_PER_CALL: usize = 100;

/// Reads every edge of the source and writes each with the window of the shard that wrote it
/// last (edges of a shard an earlier run finished are skipped; those of a shard the source has no
/// row for go with the first window), merging the transitions into each window's deltas.
async fn write_edges(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    windows: &mut BTreeMap<String, ShardWindow>,
    finished: &[String],
    backoff: &Backoff,
    done: &mut Rebuilt,
) -> Result<(), RebuildError> {
    let mut after: Option<ScanCursor> = None;
    loop {
        let page = with_backoff(backoff, "scanning the source's edges", || {
            from.scan_edges(after.as_ref(), SCAN_PAGE)
        })
        .await?;
        done.edges += page.edges.len() as u64;
        let mut by_shard: BTreeMap<String, Vec<EdgeEvent>> = BTreeMap::new();
        for (post, user, state) in &page.edges {
            let writer = state
                .writes
                .first()
                .map(|w| edge::window_shard(&w.window))
                .unwrap_or_default();
            let shard = if windows.contains_key(writer) {
                writer.to_owned()
            } else if finished.iter().any(|f| f == writer) {
                continue;
            } else {
                done.orphans += 1;
                match windows.keys().next() {
                    Some(first) => first.clone(),
                    None => continue,
                }
            };
            by_shard
                .entry(shard)
                .or_default()
                .push(event_of(post, user, state));
        }
        for (shard, events) in by_shard {
            let w = windows.get_mut(&shard).expect("a window of each shard");
            write_window_edges(into, w, &events, backoff).await?;
        }
        match page.next {
            Some(n) => after = Some(n),
            None => return Ok(()),
        }
    }
}

/// The edge's state as the event a window writes: its like or unlike, time and id, and the
/// clamped events it remembers (oldest first, as an event carries them).
fn event_of(post: &str, user: &str, s: &EdgeState) -> EdgeEvent {
    EdgeEvent {
        post_id: post.into(),
        user_id: user.into(),
        liked: s.liked,
        at_ms: s.at_ms,
        event_id: s.event_id.as_str().into(),
        clamped: false,
        lost: s.lost.iter().rev().cloned().collect(),
    }
}

/// Writes `events` with the shard's window, those a retry may mend sent again
/// ([`Resend::bounded`]), and adds their transitions to the window's deltas. A call retried after
/// it took effect finds the edges this window wrote and gets their transitions back as they were
/// decided (`EdgeOutcome::Mine`), so nothing is counted twice or decided again (an edge that
/// other shards wrote more often since than it remembers is `Forgotten`, as for a window).
async fn write_window_edges(
    into: &dyn CounterStore,
    w: &mut ShardWindow,
    events: &[EdgeEvent],
    backoff: &Backoff,
) -> Result<(), RebuildError> {
    let mut sending = Resend::bounded(backoff, "writing the rebuilt edges", events);
    loop {
        let sent = into
            .apply_edges(w.at(), sending.todo())
            .await
            .map(|applied| {
                let (posts, total) = edge::deltas(&applied.transitions);
                for (p, d) in posts {
                    let into_post = w.posts.entry(p).or_default();
                    for (m, n) in d.by_minute {
                        into_post.add(m, n);
                    }
                }
                w.total += total;
                (applied.retry, applied.error)
            });
        if sending.settle(sent).await? {
            return Ok(());
        }
    }
}

/// Writes a window's posts (each once), its global total, and moves the checkpoint; then lets
/// the lease go.
async fn finish(
    into: &dyn CounterStore,
    w: &ShardWindow,
    letters: &[DeadLetter],
    batch: usize,
    backoff: &Backoff,
) -> Result<(), RebuildError> {
    let posts: Vec<(String, PostDelta)> = w
        .posts
        .iter()
        .filter(|(_, d)| d.by_minute.values().any(|n| *n != 0))
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    for chunk in posts.chunks(batch.max(1)) {
        let mut sending = Resend::bounded(backoff, "writing the rebuilt counts", chunk);
        loop {
            let sent = into
                .apply_posts(w.at(), sending.todo())
                .await
                .map(|applied| (applied.retry, applied.error));
            if sending.settle(sent).await? {
                break;
            }
        }
    }
    let dedup = DedupRecord {
        max_arrival: w.lease.max_arrival,
        ids: Vec::new(),
    };
    // The global total is written by the first call (its item's marker refuses the others);
    // the dead letters, keyed by their position, once each.
    let mut chunks: Vec<&[DeadLetter]> = letters.chunks(DEAD_LETTERS_PER_CALL).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for chunk in chunks {
        let rest = WindowRest {
            dead_letters: chunk,
            total_delta: w.total,
            dedup: &dedup,
            horizon_ms: 0,
        };
        with_backoff(
            backoff,
            "writing the global total and the dead letters",
            || into.apply_rest(w.at(), rest),
        )
        .await?;
    }
    let spent = ShardTally::default();
    into.finish_window(
        &w.fence,
        &w.end,
        w.lease.max_arrival,
        w.lease.finished,
        &spent,
        None,
    )
    .await?;
    into.release_lease(&w.fence).await?;
    tracing::info!(
        shard = %w.fence.shard_id,
        end = %marker(&w.end),
        posts = posts.len(),
        likes = w.total,
        "rebuilt"
    );
    Ok(())
}
