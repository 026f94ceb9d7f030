//! Lease decisions: which shards a worker takes, steals and may start. Pure functions of a
//! snapshot of the lease rows and the clock; the runtime carries them out with conditional writes.

use std::collections::{BTreeMap, HashMap};

use crate::seq::Position;

/// One lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub app: String,
    pub shard_id: String,
    /// The worker holding it; `None` when free.
    pub owner: Option<String>,
    /// Bumped at every take; fences stale holders.
    pub epoch: u64,
    /// Wall-clock expiry (ms) set by the holder's last renewal.
    pub expires_ms: i64,
    /// Last record whose effects are durable; `None` before the first.
    pub checkpoint: Option<Position>,
    /// The shard was read to its end and everything was applied.
    pub finished: bool,
    pub parents: Vec<String>,
    /// The running maximum arrival time at the checkpoint: the dedup clock, which decides which
    /// dedup records a restart (of this shard or of a descendant) still needs.
    pub max_arrival: i64,
}

impl Lease {
    /// Whether a live worker holds it at `now`.
    pub fn is_held(&self, now_ms: i64) -> bool {
        self.owner.is_some() && self.expires_ms > now_ms
    }
}

/// Lease timings and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasePolicy {
    /// Most leases one worker holds (0: no limit).
    pub max_leases_per_worker: usize,
}

/// A lease the worker should try to take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// Free or expired.
    Take { shard_id: String, epoch: u64 },
    /// Held by an overloaded worker.
    Steal {
        shard_id: String,
        epoch: u64,
        from: String,
    },
}

/// Whether a shard may be processed: not finished, and its parents all finished (a parent with no
/// row was cleaned up after it finished).
pub fn is_ready(lease: &Lease, by_shard: &HashMap<&str, &Lease>) -> bool {
    !lease.finished
        && lease
            .parents
            .iter()
            .all(|p| by_shard.get(p.as_str()).is_none_or(|l| l.finished))
}

/// Plans what `me` should take: free and expired ready leases up to its fair share, or else one
/// lease stolen from the most loaded worker when that worker holds more than the fair share and at
/// least two more than `me`.
pub fn plan(leases: &[Lease], me: &str, now_ms: i64, policy: &LeasePolicy) -> Vec<LeaseAction> {
    let by_shard: HashMap<&str, &Lease> = leases.iter().map(|l| (l.shard_id.as_str(), l)).collect();
    let ready: Vec<&Lease> = leases.iter().filter(|l| is_ready(l, &by_shard)).collect();
    let mut held: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    held.entry(me).or_default();
    for l in &ready {
        if l.is_held(now_ms) {
            held.entry(l.owner.as_deref().unwrap_or_default())
                .or_default()
                .push(l);
        }
    }
    let workers = held.len();
    let mut target = ready.len().div_ceil(workers.max(1));
    if policy.max_leases_per_worker > 0 {
        target = target.min(policy.max_leases_per_worker);
    }
    let mine = held.get(me).map_or(0, Vec::len);
    if mine >= target {
        return Vec::new();
    }
    let mut free: Vec<&Lease> = ready
        .iter()
        .copied()
        .filter(|l| !l.is_held(now_ms))
        .collect();
    free.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    let mut actions: Vec<LeaseAction> = free
        .iter()
        .take(target - mine)
        .map(|l| LeaseAction::Take {
            shard_id: l.shard_id.clone(),
            epoch: l.epoch,
        })
        .collect();
    if actions.is_empty() {
        let busiest = held
            .iter()
            .filter(|(w, _)| **w != me)
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)));
        if let Some((from, ls)) = busiest {
            if ls.len() > target && ls.len() >= mine + 2 {
                if let Some(l) = ls.iter().max_by(|a, b| a.shard_id.cmp(&b.shard_id)) {
                    actions.push(LeaseAction::Steal {
                        shard_id: l.shard_id.clone(),
                        epoch: l.epoch,
                        from: (*from).to_owned(),
                    });
                }
            }
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(shard: &str, owner: Option<&str>, expires: i64) -> Lease {
        Lease {
            app: "a".into(),
            shard_id: shard.into(),
            owner: owner.map(Into::into),
            epoch: 3,
            expires_ms: expires,
            checkpoint: None,
            finished: false,
            parents: vec![],
            max_arrival: i64::MIN,
        }
    }

    fn check(leases: &[Lease], me: &str, expected: &[&str]) {
        let got: Vec<String> = plan(
            leases,
            me,
            1_000,
            &LeasePolicy {
                max_leases_per_worker: 0,
            },
        )
        .into_iter()
        .map(|a| match a {
            LeaseAction::Take { shard_id, .. } => format!("take {shard_id}"),
            LeaseAction::Steal { shard_id, from, .. } => format!("steal {shard_id} from {from}"),
        })
        .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn takes_free_and_expired_up_to_fair_share() {
        let ls = [
            lease("s0", None, 0),
            lease("s1", Some("w1"), 500),
            lease("s2", Some("w1"), 5_000),
            lease("s3", None, 0),
        ];
        // Workers: me and w1 → 2 each; w1 holds s2 live.
        check(&ls, "me", &["take s0", "take s1"]);
    }

    #[test]
    fn steals_one_from_the_most_loaded() {
        let ls = [
            lease("s0", Some("w1"), 5_000),
            lease("s1", Some("w1"), 5_000),
            lease("s2", Some("w1"), 5_000),
            lease("s3", Some("w2"), 5_000),
        ];
        check(&ls, "me", &["steal s2 from w1"]);
        // Balanced: nothing to do.
        let ls = [
            lease("s0", Some("w1"), 5_000),
            lease("s1", Some("me"), 5_000),
        ];
        check(&ls, "me", &[]);
    }

    #[test]
    fn children_wait_for_parents() {
        let mut child = lease("s2", None, 0);
        child.parents = vec!["s0".into(), "s1".into()];
        let mut p0 = lease("s0", Some("w1"), 5_000);
        p0.finished = true;
        let p1 = lease("s1", Some("w1"), 5_000);
        check(&[p0.clone(), p1.clone(), child.clone()], "me", &[]);
        let mut p1 = p1;
        p1.finished = true;
        check(&[p0.clone(), p1, child.clone()], "me", &["take s2"]);
        // A parent whose row was cleaned up counts as finished.
        check(&[p0, child], "me", &["take s2"]);
    }
}
