//! A way back: the likers' edges of one store copied into a fresh one, whose counter then counts
//! them.
//!
//! The edges are the system of record of who likes what; every count follows from them. A
//! rebuild copies them, and the edge store logs each copy as a change (an edge new to the
//! destination): the destination's counter counts those changes through its change log as it
//! counts any, so the counts are rebuilt by the code that keeps them, not by a second one. Each
//! application that reads the stream (the counter's first stage, analytics) goes on in the
//! destination from the source's checkpoint, copied *before* the edges: every event up to it is
//! in the source's edges before the checkpoint moved (`EdgeWriter::edges_durable`), so the edges
//! copied after it hold it too, and an event after it is read again from the stream and written
//! again, which a register takes once whatever the order. So a source still being counted is
//! copied exactly too.
//!
//! **A rebuild is inside the protocol.** It first records itself in the destination
//! (`Claims::set_rebuilding`), and a counter refuses a store that says so until the rebuild
//! clears it at its end: nothing counts a half-copied store. Killed anywhere, it is run again and
//! resumes: its record names its source, and a copy made again changes nothing (an edge is
//! written only if it is newer), a checkpoint copied again moves only forward. The rebuilt store
//! answers every later copy of an event as the source would: an edge orders events by their
//! content alone.

use tally_consumer::retry::with_backoff;
use tally_core::clock::now_ms;
use tally_core::dead_letter::DeadLetter;
use tally_core::dedup::DedupRecord;
use tally_core::edge::{CountMode, EdgeEvent};
use tally_core::meta::Claims;
use tally_core::ports::{
    CounterStore, Decided, LetterCursor, PortError, ScanCursor, ShardInfo, ShardTally, WindowRef,
    WindowRest,
};
use tally_core::retry::Backoff;
use tally_core::Position;

use crate::writes::Resend;

/// The worker id a rebuild takes the destination's leases as.
pub const REBUILD_OWNER: &str = "rebuild";

/// How long a rebuild's lease on a destination shard lasts.
const LEASE_MS: i64 = 3_600_000;

/// How many items one page of the source's scan reads.
const SCAN_PAGE: usize = 1_000;

/// How many dead letters one `apply_rest` writes.
const DEAD_LETTERS_PER_CALL: usize = 100;

/// Why a rebuild did not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
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
    /// Edges copied from the source (written, or found written by an earlier run).
    pub edges: u64,
    /// Of them, the likes: what the destination's counter counts from their changes.
    pub likes: u64,
    /// Posts with a like.
    pub posts: u64,
    /// Shard checkpoints copied (each application's that reads the stream).
    pub checkpoints: usize,
    /// Dead letters copied (each keyed as in the source).
    pub dead_letters: u64,
    /// Whether an earlier run of this rebuild had begun it.
    pub resumed: bool,
}

/// What a rebuild copies from and with: the source's name (recorded in the destination while
/// the rebuild is under way), the applications whose checkpoints it copies (those that read the
/// stream), how store calls are retried, and the tests' failpoint.
pub struct RebuildFrom<'a> {
    /// The source's name (a data dir, a table prefix).
    pub source: &'a str,
    /// The applications whose checkpoints are copied.
    pub apps: &'a [&'a str],
    /// How store calls are retried.
    pub backoff: &'a Backoff,
    /// Test failpoint: abort the process right after this many pages of edges are copied.
    pub crash_after_pages: Option<u64>,
}

/// Copies `from`'s edges, the checkpoints of the stream's applications and its dead letters
/// into `into` — fresh, or a rebuild from the same source begun there already — recording the
/// rebuild in `into` until it is done. See the module.
pub async fn rebuild(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    with: RebuildFrom<'_>,
) -> Result<Rebuilt, RebuildError> {
    let RebuildFrom {
        source,
        apps,
        backoff,
        crash_after_pages,
    } = with;
    match from.stored_mode().await? {
        Some(CountMode::Likers) => {}
        Some(CountMode::Events) => return Err(RebuildError::NoEdges("counts events".into())),
        None => return Err(RebuildError::NoEdges("has counted nothing".into())),
    }
    let resumed = begin(into, source).await?;
    tracing::info!(
        source,
        resumed,
        "rebuild recorded in the destination: counters refuse it until the rebuild is done"
    );
    claim(from, into).await?;
    let mut done = Rebuilt {
        resumed,
        ..Rebuilt::default()
    };
    for app in apps {
        done.checkpoints += copy_checkpoints(from, into, app).await?;
    }
    copy_edges(from, into, backoff, crash_after_pages, &mut done).await?;
    done.dead_letters = copy_dead_letters(from, into, backoff).await?;
    into.set_rebuilding(None).await?;
    tracing::info!(
        source,
        "rebuild done: its record in the destination cleared"
    );
    Ok(done)
}

/// Records the rebuild from `source` in `into` (refusing a store that is neither fresh nor this
/// rebuild's); answers whether an earlier run had begun it.
async fn begin(into: &dyn CounterStore, source: &str) -> Result<bool, RebuildError> {
    match into.rebuilding().await? {
        Some(s) if s == source => return Ok(true),
        Some(s) => {
            return Err(RebuildError::NotFresh(format!(
                "a rebuild from {s} into it has begun; run that one again"
            )))
        }
        None => {}
    }
    let counted = !into
        .list_states(tally_core::apps::COUNTER)
        .await?
        .is_empty()
        || !into
            .list_states(tally_core::apps::CHANGES)
            .await?
            .is_empty();
    let edges = !into.scan_edges(None, 1).await?.edges.is_empty();
    if counted || edges {
        return Err(RebuildError::NotFresh(
            "it has been counted (it has lease rows or edges)".into(),
        ));
    }
    into.set_rebuilding(Some(source)).await?;
    Ok(false)
}

/// The destination counts likers, from the source's stream.
async fn claim(from: &dyn CounterStore, into: &dyn CounterStore) -> Result<(), RebuildError> {
    if into.count_mode(Some(CountMode::Likers)).await? != Some(CountMode::Likers) {
        return Err(RebuildError::NotFresh("it counts events".into()));
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

/// Moves each of `app`'s checkpoints in the destination to the source's (never back), through
/// the window protocol (an empty window ending there; one an earlier run left pending is
/// finished first); answers how many shards it copied.
async fn copy_checkpoints(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    app: &str,
) -> Result<usize, RebuildError> {
    let source = from.list_states(app).await?;
    let shards: Vec<ShardInfo> = source
        .iter()
        .map(|s| ShardInfo {
            shard_id: s.lease.shard_id.clone(),
            parents: s.lease.parents.clone(),
            closed: s.lease.finished,
        })
        .collect();
    into.ensure_leases(app, &shards).await?;
    let mut copied = 0;
    for s in &source {
        let Some(end) = &s.lease.checkpoint else {
            continue;
        };
        let state = into.shard_state(app, &s.lease.shard_id).await?;
        let fence = into
            .take_lease(
                app,
                &s.lease.shard_id,
                state.lease.epoch,
                REBUILD_OWNER,
                now_ms() + LEASE_MS,
            )
            .await?
            .ok_or_else(|| {
                RebuildError::NotFresh(format!(
                    "its lease of {app}/{} was taken meanwhile",
                    s.lease.shard_id
                ))
            })?;
        let mut at = state.lease.checkpoint.clone();
        let spent = ShardTally::default();
        if let Some(p) = &state.pending {
            into.finish_window(&fence, &p.end, s.lease.max_arrival, false, &spent, None)
                .await?;
            at = Some(p.end.clone());
        }
        if at.as_ref().is_none_or(|c| c < end) {
            let decided = Decided::from(0);
            into.begin_window(&fence, at.as_ref(), &end.seq, end, decided)
                .await?;
            into.finish_window(
                &fence,
                end,
                s.lease.max_arrival,
                s.lease.finished,
                &spent,
                None,
            )
            .await?;
        }
        into.release_lease(&fence).await?;
        copied += 1;
    }
    Ok(copied)
}

fn window<'a>(app: &'a str, shard_id: &'a str, end: &'a Position) -> WindowRef<'a> {
    WindowRef { app, shard_id, end }
}

/// Reads every edge of the source and writes it into the destination (a register: an edge
/// written by an earlier run, or newer there, is refused).
async fn copy_edges(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    backoff: &Backoff,
    crash_after_pages: Option<u64>,
    done: &mut Rebuilt,
) -> Result<(), RebuildError> {
    let mut after: Option<ScanCursor> = None;
    let mut last_post: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = with_backoff(backoff, "scanning the source's edges", || {
            from.scan_edges(after.as_ref(), SCAN_PAGE)
        })
        .await?;
        let mut events = Vec::with_capacity(page.edges.len());
        for (post, user, s) in &page.edges {
            done.edges += 1;
            if s.liked {
                done.likes += 1;
                if last_post.as_deref() != Some(post) {
                    done.posts += 1;
                    last_post = Some(post.clone());
                }
            }
            events.push(EdgeEvent {
                post_id: post.as_str().into(),
                user_id: user.as_str().into(),
                liked: s.liked,
                at_ms: s.at_ms,
                event_id: s.event_id.as_str().into(),
            });
        }
        let mut sending = Resend::bounded(backoff, "writing the copied edges", &events);
        loop {
            let sent = into
                .write_edges(sending.todo())
                .await
                .map(|w| (w.retry, w.error));
            if sending.settle(sent).await? {
                break;
            }
        }
        pages += 1;
        if crash_after_pages.is_some_and(|n| pages >= n) {
            eprintln!("failpoint: aborting after {pages} pages of copied edges");
            std::process::abort();
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    Ok(into.edges_durable().await?)
}

/// Copies the source's dead letters, keyed as there (a second copy is the same item); answers
/// how many.
async fn copy_dead_letters(
    from: &dyn CounterStore,
    into: &dyn CounterStore,
    backoff: &Backoff,
) -> Result<u64, RebuildError> {
    let mut after: Option<LetterCursor> = None;
    let mut copied = 0;
    loop {
        let (page, next) = from.dead_letter_page(after.as_ref(), SCAN_PAGE).await?;
        for chunk in page.chunks(DEAD_LETTERS_PER_CALL) {
            copied += chunk.len() as u64;
            write_letters(into, chunk, backoff).await?;
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok(copied),
        }
    }
}

/// Writes dead letters as a window's rest does, each under its own key, nothing else: a window
/// of their own shard's app, no total, no dedup record.
async fn write_letters(
    into: &dyn CounterStore,
    letters: &[DeadLetter],
    backoff: &Backoff,
) -> Result<(), RebuildError> {
    let end = Position::parse("0").expect("a position");
    let rest = WindowRest {
        dead_letters: letters,
        total_delta: 0,
        dedup: &DedupRecord {
            max_arrival: i64::MIN,
            ids: Vec::new(),
        },
        horizon_ms: 0,
    };
    let shard = letters.first().map_or("", |d| d.shard_id.as_str());
    let w = window(REBUILD_OWNER, shard, &end);
    with_backoff(backoff, "copying the dead letters", || {
        into.apply_rest(w, rest)
    })
    .await?;
    Ok(())
}
