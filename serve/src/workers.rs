//! The counter's lease listing by worker: whom a counts call asks for its open windows, and which
//! shards each answers for. Made once per listing (`Listing::workers`), so that a call's work
//! follows the workers it asks and the shards whose windows hold its posts, not the shard count.

use std::collections::HashMap;

use tally_core::open::shards_digest;
use tally_core::ports::ShardState;

/// One listing's unfinished shards, by the live worker that holds each.
#[derive(Clone, Debug, Default)]
pub struct Workers {
    /// Each worker with an address, and its shards.
    pub by_worker: Vec<Worker>,
    /// Unfinished shards with no holder, or whose holder reported no address, when listed:
    /// nobody answers for them.
    pub unheld: Vec<String>,
}

/// A worker the listing gives shards to, where it is reached, and those shards.
#[derive(Clone, Debug)]
pub struct Worker {
    /// The worker's id: an answer from another is not believed.
    pub owner: String,
    /// Where it serves its open windows (`ShardState::holder_addr`).
    pub addr: String,
    /// Its shards, each with when its lease expires (ms).
    shards: HashMap<String, i64>,
    /// The earliest of those expiries: until then, every one of its shards is live.
    soonest: i64,
    /// The digest of its shards' ids (`board::shards_digest`).
    digest: u64,
}

impl Workers {
    /// The listing's unfinished shards grouped by holder (a holder whose lease has expired is
    /// still one: whether it is live is asked at each call, [`Worker::expired`]).
    pub fn of(states: &[ShardState]) -> Workers {
        let mut by: HashMap<(String, String), HashMap<String, i64>> = HashMap::new();
        let mut unheld = Vec::new();
        for st in states.iter().filter(|s| !s.lease.finished) {
            let shard = st.lease.shard_id.clone();
            match (&st.lease.owner, &st.holder_addr) {
                (Some(owner), Some(addr)) => {
                    by.entry((owner.clone(), addr.clone()))
                        .or_default()
                        .insert(shard, st.lease.expires_ms);
                }
                _ => unheld.push(shard),
            }
        }
        let mut by_worker: Vec<Worker> = by
            .into_iter()
            .map(|((owner, addr), shards)| Worker {
                soonest: shards.values().copied().min().unwrap_or(i64::MAX),
                digest: shards_digest(shards.keys().map(String::as_str)),
                owner,
                addr,
                shards,
            })
            .collect();
        by_worker.sort_by(|a, b| (&a.owner, &a.addr).cmp(&(&b.owner, &b.addr)));
        Workers { by_worker, unheld }
    }
}

impl Worker {
    /// Its shards whose lease has expired by `now` (none while the soonest expiry is ahead: a
    /// call does not look at each).
    pub fn expired(&self, now: i64) -> Vec<&str> {
        if self.soonest > now {
            return Vec::new();
        }
        let mut v: Vec<&str> = self
            .shards
            .iter()
            .filter(|(_, e)| **e <= now)
            .map(|(s, _)| s.as_str())
            .collect();
        v.sort_unstable();
        v
    }

    /// The digest of its shards but `expired` (those [`Worker::expired`] named): what it holds
    /// if it holds what the listing gives it.
    pub fn digest_live(&self, expired: &[&str]) -> u64 {
        self.digest ^ shards_digest(expired.iter().copied())
    }

    /// How many shards the listing gives it.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Whether it holds `shard`, live at `now`.
    pub fn holds(&self, shard: &str, now: i64) -> bool {
        self.shards.get(shard).is_some_and(|e| *e > now)
    }

    /// Its shards live at `now`, in id order.
    pub fn live(&self, now: i64) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .shards
            .iter()
            .filter(|(_, e)| **e > now)
            .map(|(s, _)| s.as_str())
            .collect();
        v.sort_unstable();
        v
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tally_core::lease::Lease;

    /// A lease row of the counter's `shard`, held by `owner` (reached at `addr`) until
    /// `expires_ms`.
    pub(crate) fn state(
        shard: &str,
        owner: Option<&str>,
        addr: Option<&str>,
        expires_ms: i64,
    ) -> ShardState {
        ShardState {
            lease: Lease {
                app: "counter".into(),
                shard_id: shard.into(),
                owner: owner.map(str::to_owned),
                epoch: 1,
                expires_ms,
                checkpoint: None,
                finished: false,
                parents: vec![],
                max_arrival: 0,
            },
            pending: None,
            spent: Default::default(),
            progress: None,
            holder_addr: addr.map(str::to_owned),
        }
    }

    #[test]
    fn a_listing_is_grouped_by_holder_and_expiry_is_asked_at_each_call() {
        let w = Workers::of(&[
            state("s0", Some("a"), Some("h:1"), 100),
            state("s1", Some("a"), Some("h:1"), 200),
            state("s2", Some("b"), Some("h:2"), 300),
            state("s3", Some("c"), None, 300),
            state("s4", None, None, 0),
        ]);
        assert_eq!(w.unheld, ["s3", "s4"]);
        assert_eq!(w.by_worker.len(), 2);
        let a = &w.by_worker[0];
        assert_eq!((a.owner.as_str(), a.addr.as_str()), ("a", "h:1"));
        assert_eq!(a.digest, shards_digest(["s1", "s0"]));
        assert!(a.expired(50).is_empty());
        assert_eq!(a.digest_live(&a.expired(50)), shards_digest(["s0", "s1"]));
        assert_eq!(a.expired(150), ["s0"]);
        assert_eq!(a.digest_live(&a.expired(150)), shards_digest(["s1"]));
        assert_eq!(a.live(150), ["s1"]);
        assert!(a.holds("s1", 150) && !a.holds("s0", 150) && !a.holds("s2", 50));
    }
}
