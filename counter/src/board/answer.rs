//! What a worker's board answers the read side: a held shard's windows for the posts asked about
//! ([`ShardOpen`], each [`OpenWindow`]), and what else was asked ([`Also`]).

use std::collections::BTreeMap;

/// What a read side asks a worker about besides the posts' deltas.
#[derive(Clone, Copy, Debug, Default)]
pub struct Also<'a> {
    /// Whether this user likes each post once the open windows are written.
    pub viewer: Option<&'a str>,
    /// A likers page: each user after this one (`Some(None)`: every user) whose like or unlike
    /// of the post asked about an open window holds, and whether they like it once written.
    pub likers: Option<Option<&'a str>>,
}

impl Also<'_> {
    pub(super) fn wants_liker(&self, user: &str) -> bool {
        self.likers
            .is_some_and(|after| after.is_none_or(|a| user > a))
    }

    /// (post, user, liked) states, as the viewer's by post and the likers' by user.
    pub(super) fn split(
        &self,
        states: Vec<(String, String, bool)>,
    ) -> (BTreeMap<String, bool>, BTreeMap<String, bool>) {
        let (mut viewer, mut likers) = (BTreeMap::new(), BTreeMap::new());
        for (post, user, liked) in states {
            if self.viewer == Some(user.as_str()) {
                viewer.insert(post.clone(), liked);
            }
            if self.wants_liker(&user) {
                likers.insert(user, liked);
            }
        }
        (viewer, likers)
    }
}

/// A window's deltas for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenWindow {
    /// The marker of the checkpoint the window follows (`None`: the shard's first window).
    pub after: Option<String>,
    /// Net change per post asked about that the window holds, by the start of the minute (ms)
    /// the events were created in.
    pub posts: BTreeMap<String, BTreeMap<i64, i64>>,
    /// Likers, when a viewer was asked: whether the viewer likes each post once the window is
    /// written, for the posts where the window holds an event of the viewer's (the same view as
    /// `posts`: a post's delta and the viewer's state there come from the same edge reads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub viewer: BTreeMap<String, bool>,
    /// Likers, when a likers page was asked: each user (after the page's start) whose like or
    /// unlike of the post the window holds, and whether they like it once it is written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub likers: BTreeMap<String, bool>,
}

/// A shard's windows, for the posts asked about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardOpen {
    /// The shard.
    pub shard_id: String,
    /// Its closed window being applied, if any, then its open one (for the posts asked about).
    pub windows: Vec<OpenWindow>,
    /// The marker of the last record the windows hold, or of the checkpoint when they hold none:
    /// every record of the shard after the checkpoint and up to it is in them (`None`: nothing
    /// read and nothing applied). What a read side compares answers by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
}

/// The digest of a set of shard ids (the same whatever their order): what tells a worker that
/// the read side lists it as holding exactly the shards it holds ([`super::Listed::Holding`]).
/// Each id's MD5 (`tally_core::hashing::hash_key`, the same in every process and build), folded
/// by exclusive or.
pub fn shards_digest<'a>(shards: impl IntoIterator<Item = &'a str>) -> u64 {
    shards
        .into_iter()
        .fold(0, |d, s| d ^ tally_core::hashing::hash_key(s) as u64)
}
