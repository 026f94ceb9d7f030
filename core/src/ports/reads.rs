//! The read side: what the counter's store answers a reader (counts, the viewer's likes, a post's
//! likers, a scan of the edges), and the readers `tally serve` is built from.

use async_trait::async_trait;

use super::{AnalyticsReader, DeadLetterReader, LeaseReader, PortError, PortResult};
use crate::edge::CountMode;

/// How a count is read: strongly consistent (every write acknowledged before it is seen, at one
/// read unit per 4 KB) or eventually consistent (at half the units; a write of the last second
/// may not be seen yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Consistency {
    /// Sees every acknowledged write (one read unit per 4 KB).
    #[default]
    Strong,
    /// Half the units; a write of the last second may not be seen yet.
    Eventual,
}

/// The most posts one [`CountReader::post_counts`] call reads: a feed page's worth.
pub const MAX_POSTS_PER_CALL: usize = 100;

/// A post's count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostCount {
    /// Net likes, all time (likers: the users who like it now).
    pub total: i64,
    /// Likes created at or after the `since` time, at minute granularity.
    pub since: Option<i64>,
    /// What the reads cost in DynamoDB read units (strongly consistent; see `summary::read_units`).
    pub read_units: u64,
    /// The marker of the last window applied to the post's live item, per writing shard: a
    /// window after a checkpoint whose marker is at least this one is not applied to the post
    /// yet (what a provisional count adds; see `summary::pending_applies`).
    pub marks: Vec<(String, String)>,
}

/// One page of a post's likers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LikersPage {
    /// User ids, in id order.
    pub users: Vec<String>,
    /// Where the next page starts (the last user of this one), if there may be more.
    pub next: Option<String>,
    /// What the page cost in read units (strongly consistent).
    pub read_units: u64,
}

/// The most likers one [`LikersReader::likers`] call returns.
pub const MAX_LIKERS_PER_PAGE: usize = 1_000;

/// Where a page of likers most recent first ends: the like it passed over last — its time, then
/// its user (likers are ordered by the like's ordering time, then user id, both descending).
/// Written `<at_ms>:<user>` (`Display`, [`RecentCursor::parse`]) for a client to send back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentCursor {
    /// The like's ordering time (ms).
    pub at_ms: i64,
    /// Its user.
    pub user: String,
}

impl RecentCursor {
    /// A cursor as `Display` wrote it; `None` if `s` is not one.
    pub fn parse(s: &str) -> Option<RecentCursor> {
        let (at, user) = s.split_once(':')?;
        // 1 to 18 digits, as `Display` writes a time (no sign: `+5` and `-5` are not one).
        if !(1..=18).contains(&at.len()) || !at.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let at_ms = at.parse().ok()?;
        crate::event::check_id("user_id", user).ok()?;
        Some(RecentCursor {
            at_ms,
            user: user.to_owned(),
        })
    }
}

impl std::fmt::Display for RecentCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.at_ms, self.user)
    }
}

/// A user who likes a post, and when (the like's ordering time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentLiker {
    /// The user.
    pub user: String,
    /// The like's ordering time (ms).
    pub at_ms: i64,
}

/// One page of a post's likers, most recent like first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecentPage {
    /// The likers, most recent first.
    pub likers: Vec<RecentLiker>,
    /// Where the next page starts, if there may be more.
    pub next: Option<RecentCursor>,
    /// What the page cost in read units: the index read (eventually consistent) and the edges
    /// read to check it (strongly consistent).
    pub read_units: u64,
}

/// Where the next page of a scan of every stored edge starts: the key the last page ended at,
/// as the store that gave it keys its items (only that store reads it back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanCursor {
    /// The partition (a post).
    pub pk: String,
    /// The sort key within it.
    pub sk: String,
}

/// One page of a scan of every stored edge.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EdgeScan {
    /// The edges: post, user, state.
    pub edges: Vec<(String, String, crate::edge::EdgeState)>,
    /// Where the next page starts (`None`: the scan is done).
    pub next: Option<ScanCursor>,
    /// What the page cost in read units (DynamoDB: every item the Scan passed over).
    pub read_units: u64,
}

/// What the counter's store answers to a reader — counts, "since", the global total, what the
/// store counts — and nothing that writes: the read side (`tally serve`, `tally query`, `tally
/// verify`) is built from readers alone, so the compiler keeps it read-only. Who likes what is
/// [`LikersReader`]'s, which only a store counting likers answers.
#[async_trait]
pub trait CountReader: Send + Sync {
    /// One post's count, strongly consistent ([`CountReader::post_counts`] of one).
    async fn post_count(&self, post_id: &str, since_ms: Option<i64>) -> PortResult<PostCount> {
        let mut v = self
            .post_counts(&[post_id.to_owned()], since_ms, Consistency::Strong)
            .await?;
        v.pop()
            .ok_or_else(|| PortError::Other("a count of one post answered none".into()))
    }
    /// Several posts' counts, in order, read side by side (at most [`MAX_POSTS_PER_CALL`]).
    async fn post_counts(
        &self,
        post_ids: &[String],
        since_ms: Option<i64>,
        consistency: Consistency,
    ) -> PortResult<Vec<PostCount>>;
    /// The sum of every post's count.
    async fn global_total(&self) -> PortResult<i64>;
    /// What the store counts (`None`: no counter has claimed it yet). Never writes.
    async fn stored_mode(&self) -> PortResult<Option<CountMode>>;
}

/// Who likes what, read from the edges a store counting likers keeps: the viewer's likes, a
/// post's likers (by id or most recent first), and a scan of every edge (a rebuild, `tally
/// verify`'s sample). Never writes.
#[async_trait]
pub trait LikersReader: Send + Sync {
    /// The stored edges of these (post, user) pairs, in order (`None`: never written), read in
    /// batches (DynamoDB: `BatchGetItem`s of 100 keys), and what the reads cost in read units:
    /// the viewer's likes, a likers page among users, `tally verify`'s sampled edges.
    async fn edges(
        &self,
        pairs: &[(String, String)],
        consistency: Consistency,
    ) -> PortResult<(Vec<Option<crate::edge::EdgeState>>, u64)>;
    /// Whether `viewer` likes each post, in order (at most [`MAX_POSTS_PER_CALL`]): its edges,
    /// and what the read cost in read units.
    async fn viewer_likes(
        &self,
        viewer: &str,
        post_ids: &[String],
        consistency: Consistency,
    ) -> PortResult<(Vec<bool>, u64)> {
        let pairs: Vec<(String, String)> = post_ids
            .iter()
            .map(|p| (p.clone(), viewer.to_owned()))
            .collect();
        let (states, units) = self.edges(&pairs, consistency).await?;
        let liked = states.iter().map(|s| s.as_ref().is_some_and(|s| s.liked));
        Ok((liked.collect(), units))
    }
    /// A page of the users who like `post_id`, in id order after `after`, at most `limit`
    /// (capped at [`MAX_LIKERS_PER_PAGE`]).
    async fn likers(
        &self,
        post_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> PortResult<LikersPage>;
    /// A page of the users who like `post_id`, most recent like first, after `after` (a page's
    /// `next`), at most `limit` (capped at [`MAX_LIKERS_PER_PAGE`]), read off the counts table's
    /// [`crate::edge::RECENT_INDEX`]. Where that index is read eventually consistently
    /// (DynamoDB), each liker's edge is then read strongly and kept only if it still holds that
    /// like: a page never shows a like the edges no longer hold (a like newer than the index
    /// may be missing, and is shown once the index has it). No index: `NotFound` naming it and
    /// the setting that creates it.
    async fn recent_likers(
        &self,
        post_id: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage>;
    /// A page of every stored edge, after `after` (a page's `next`), about `limit` items read:
    /// what a rebuild of the counts from the edges reads (DynamoDB: a `Scan` of the counts
    /// table, passing over its summary items too). Every edge comes once over a whole scan.
    async fn scan_edges(&self, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan>;
}

/// A store's reads of counts and of edges together: what reads across regions take from each
/// home.
pub trait StoreReader: CountReader + LikersReader {}

impl<T: CountReader + LikersReader + ?Sized> StoreReader for T {}

/// What a store counts, resolved once, when its readers are made: counting likers it also
/// answers who likes what (its [`LikersReader`]); counting events it keeps no edges, so nothing
/// on the read side can ask it who likes what.
#[derive(Clone)]
pub enum Counted {
    /// Distinct like events less distinct unlike events.
    Events,
    /// The users whose latest action is a like, read from their edges.
    Likers(std::sync::Arc<dyn LikersReader>),
}

impl Counted {
    /// A store counting `mode`: counting likers, `edges` answers who likes what.
    pub fn of(mode: CountMode, edges: std::sync::Arc<dyn LikersReader>) -> Counted {
        match mode.keeps_edges() {
            true => Counted::Likers(edges),
            false => Counted::Events,
        }
    }

    /// Who likes what (`None`: the store counts events).
    pub fn likers(&self) -> Option<&std::sync::Arc<dyn LikersReader>> {
        match self {
            Counted::Likers(l) => Some(l),
            Counted::Events => None,
        }
    }

    /// The mode this is.
    pub fn mode(&self) -> CountMode {
        match self {
            Counted::Likers(_) => CountMode::Likers,
            Counted::Events => CountMode::Events,
        }
    }
}

/// The read side's ports: counts, dead letters, leases and analytics, each as a reader sees it —
/// what `tally serve` is built from, so that the compiler, not a reviewer, keeps it read-only.
#[derive(Clone)]
pub struct Readers {
    /// Counts, "since", the global total.
    pub counts: std::sync::Arc<dyn CountReader>,
    /// What the store counts, and counting likers, who likes what.
    pub counted: Counted,
    /// The dead letters.
    pub letters: std::sync::Arc<dyn DeadLetterReader>,
    /// Leases and checkpoints (freshness, the workers to ask for open windows).
    pub leases: std::sync::Arc<dyn LeaseReader>,
    /// Trending and latency.
    pub analytics: std::sync::Arc<dyn AnalyticsReader>,
    /// Several regions: each other home's lease rows, by region, as replicated here — how fresh
    /// the counts of its posts are (empty: one region).
    pub homes: std::collections::BTreeMap<String, std::sync::Arc<dyn LeaseReader>>,
}
