//! Partition keys: a post's likes go to one shard by default (the key is the post id), and a hot
//! post's are fanned out over several keys so that no single shard's limit (1,000 records/s on
//! Kinesis) caps one post. The key is chosen from the **user** id, never the event id: every
//! action of one user on one post — a like, its unlike, a retry of either — lands on one shard,
//! in order, and a producer retry lands beside its original, where the events mode's duplicate filter
//! finds it. Likers counting does not need this (an edge's outcome is decided by its events'
//! content, whatever shards carried them), but keeps a user's actions in order for the reader.
//! The counter counts by the `post_id` in the record, whatever shard carried it.

use std::collections::HashSet;

use tally_core::dedup::id_hash;
use tally_core::event::decode;
use tally_core::ports::PutEntry;

/// The posts to fan out, and over how many keys.
#[derive(Clone, Debug, Default)]
pub struct HotPosts {
    posts: HashSet<String>,
    /// Keys per hot post (each `<post_id>#<k>`, `k` < this).
    fanout: u32,
}

impl HotPosts {
    /// Fans each of `posts` out over `fanout` keys (1: no fan-out).
    pub fn new(posts: impl IntoIterator<Item = String>, fanout: u32) -> HotPosts {
        HotPosts {
            posts: posts.into_iter().collect(),
            fanout: fanout.max(1),
        }
    }

    /// The key of an event of `user_id` on `post_id`.
    pub fn key(&self, post_id: &str, user_id: &str) -> String {
        if self.fanout > 1 && self.posts.contains(post_id) {
            format!("{post_id}#{}", id_hash(user_id) % self.fanout as u128)
        } else {
            post_id.to_owned()
        }
    }

    /// Re-keys a record keyed by its post id, when that post is hot (others pass untouched,
    /// without being decoded).
    pub fn rekey(&self, mut e: PutEntry) -> PutEntry {
        if self.fanout > 1 && self.posts.contains(&e.partition_key) {
            if let Ok(ev) = decode(&e.data) {
                e.partition_key = self.key(&ev.post_id, &ev.user_id);
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hot_post_spreads_over_its_keys_by_user_and_a_user_keeps_its_key() {
        let hot = HotPosts::new(["viral".to_owned()], 8);
        let keys: HashSet<String> = (0..1_000)
            .map(|i| hot.key("viral", &format!("u{i}")))
            .collect();
        assert_eq!(keys.len(), 8, "{keys:?}");
        assert!(keys.iter().all(|k| k.starts_with("viral#")));
        assert_eq!(hot.key("viral", "e7"), hot.key("viral", "e7"));
        assert_eq!(hot.key("calm", "e7"), "calm");
        // A user's like and unlike of the post (different events) share a key.
        let key = |data: &[u8]| {
            hot.rekey(PutEntry {
                partition_key: "viral".into(),
                data: data.to_vec(),
            })
            .partition_key
        };
        let like = key(
            br#"{"event_id":"e7","post_id":"viral","user_id":"u","action":"like","created_at":1}"#,
        );
        let unlike = key(br#"{"event_id":"e8","post_id":"viral","user_id":"u","action":"unlike","created_at":2}"#);
        assert_eq!(
            (like.as_str(), unlike.as_str()),
            (hot.key("viral", "u").as_str(), like.as_str())
        );
        // Without fan-out, nothing changes.
        assert_eq!(
            HotPosts::new(["viral".to_owned()], 1).key("viral", "e7"),
            "viral"
        );
    }
}
