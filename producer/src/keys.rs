//! Partition keys: a post's likes go to one shard by default (the key is the post id), and a hot
//! post's are fanned out over several keys so that no single shard's limit (1,000 records/s on
//! Kinesis) caps one post. The key is chosen from the event id, so a producer retry of the same
//! event lands on the same shard as the original, where the counter's duplicate filter finds it.
//! The counter needs nothing of this: it counts by the `post_id` in the record, whatever shard
//! carried it.

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

    /// The key of an event of `post_id` with `event_id`.
    pub fn key(&self, post_id: &str, event_id: &str) -> String {
        if self.fanout > 1 && self.posts.contains(post_id) {
            format!("{post_id}#{}", id_hash(event_id) % self.fanout as u128)
        } else {
            post_id.to_owned()
        }
    }

    /// Re-keys a record keyed by its post id, when that post is hot (others pass untouched,
    /// without being decoded).
    pub fn rekey(&self, mut e: PutEntry) -> PutEntry {
        if self.fanout > 1 && self.posts.contains(&e.partition_key) {
            if let Ok(ev) = decode(&e.data) {
                e.partition_key = self.key(&ev.post_id, &ev.event_id);
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hot_post_spreads_over_its_keys_and_a_retry_keeps_its_key() {
        let hot = HotPosts::new(["viral".to_owned()], 8);
        let keys: HashSet<String> = (0..1_000)
            .map(|i| hot.key("viral", &format!("e{i}")))
            .collect();
        assert_eq!(keys.len(), 8, "{keys:?}");
        assert!(keys.iter().all(|k| k.starts_with("viral#")));
        assert_eq!(hot.key("viral", "e7"), hot.key("viral", "e7"));
        assert_eq!(hot.key("calm", "e7"), "calm");
        let data =
            br#"{"event_id":"e7","post_id":"viral","user_id":"u","action":"like","created_at":1}"#;
        let e = hot.rekey(PutEntry {
            partition_key: "viral".into(),
            data: data.to_vec(),
        });
        assert_eq!(e.partition_key, hot.key("viral", "e7"));
        // Without fan-out, nothing changes.
        assert_eq!(
            HotPosts::new(["viral".to_owned()], 1).key("viral", "e7"),
            "viral"
        );
    }
}
