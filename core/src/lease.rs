//! Lease decisions: which shards a worker takes, steals and may start. Pure functions of a
//! snapshot of the lease rows and the clock; the runtime carries them out with conditional writes.

use std::collections::{BTreeMap, HashMap};

use crate::seq::Position;

/// One lease row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The application the row is for: each has its own leases and checkpoints.
    pub app: String,
    /// The shard.
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
    /// The shard's parents (a split's one, a merge's two): read to their end before it.
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
    Take {
        /// The shard.
        shard_id: String,
        /// The epoch the take is conditioned on.
        epoch: u64,
    },
    /// Held by an overloaded worker.
    Steal {
        /// The shard.
        shard_id: String,
        /// The epoch its holder holds it at.
        epoch: u64,
        /// The holder, asked to hand it over.
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

/// Plans what `me` should take: free and expired ready leases up to its fair share, or else
/// leases stolen from the most loaded workers — each from a worker holding more than the floor of
/// the share and at least two more than `me` has by then — until `me` has its share. The fleet is
/// every worker holding a live lease and every live member of `fleet` (workers that hold no
/// lease yet count too), so that a fleet started together is balanced at once and a joining
/// worker gets its share in one poll.
pub fn plan(
    leases: &[Lease],
    me: &str,
    now_ms: i64,
    policy: &LeasePolicy,
    fleet: &[String],
) -> Vec<LeaseAction> {
    let by_shard: HashMap<&str, &Lease> = leases.iter().map(|l| (l.shard_id.as_str(), l)).collect();
    let ready: Vec<&Lease> = leases.iter().filter(|l| is_ready(l, &by_shard)).collect();
    let mut held: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    held.entry(me).or_default();
    for w in fleet {
        held.entry(w.as_str()).or_default();
    }
    for l in &ready {
        if l.is_held(now_ms) {
            held.entry(l.owner.as_deref().unwrap_or_default())
                .or_default()
                .push(l);
        }
    }
    let workers = held.len().max(1);
    let mut target = ready.len().div_ceil(workers);
    // What every worker keeps at least: a victim is never taken below it (with 16 leases and 5
    // workers the share is 4 and the floor 3, so a worker joining four at 4 each still gets 3).
    let floor = (ready.len() / workers).min(target);
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
    let mut have = mine + actions.len();
    // Then from the most loaded, one at a time, each victim keeping at least the floor.
    let mut others: Vec<(&str, Vec<&Lease>)> = held
        .into_iter()
        .filter(|(w, _)| *w != me)
        .map(|(w, mut ls)| {
            ls.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
            (w, ls)
        })
        .collect();
    while have < target {
        let Some((from, ls)) = others
            .iter_mut()
            .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(a.0)))
        else {
            break;
        };
        if ls.len() <= floor || ls.len() < have + 2 {
            break;
        }
        let Some(l) = ls.pop() else { break };
        actions.push(LeaseAction::Steal {
            shard_id: l.shard_id.clone(),
            epoch: l.epoch,
            from: (*from).to_owned(),
        });
        have += 1;
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
        check_in(leases, me, &[], expected);
    }

    fn check_in(leases: &[Lease], me: &str, fleet: &[&str], expected: &[&str]) {
        let fleet: Vec<String> = fleet.iter().map(|w| w.to_string()).collect();
        let got: Vec<String> = plan(
            leases,
            me,
            1_000,
            &LeasePolicy {
                max_leases_per_worker: 0,
            },
            &fleet,
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
    fn a_fleet_started_together_takes_fair_shares_at_once() {
        let ls: Vec<Lease> = (0..8).map(|i| lease(&format!("s{i}"), None, 0)).collect();
        // Alone, a worker takes everything; knowing three others (no lease yet), its quarter.
        check_in(
            &ls,
            "me",
            &[],
            &[
                "take s0", "take s1", "take s2", "take s3", "take s4", "take s5", "take s6",
                "take s7",
            ],
        );
        check_in(
            &ls,
            "me",
            &["me", "w1", "w2", "w3"],
            &["take s0", "take s1"],
        );
        // An expired fleet member is not in the list the store answers: the share grows.
        check_in(
            &ls,
            "me",
            &["w1"],
            &["take s0", "take s1", "take s2", "take s3"],
        );
    }

    #[test]
    fn a_joining_worker_steals_its_share_in_one_poll() {
        let ls: Vec<Lease> = (0..12)
            .map(|i| {
                lease(
                    &format!("s{i:02}"),
                    Some(if i < 6 { "w1" } else { "w2" }),
                    5_000,
                )
            })
            .collect();
        // Three workers: 4 each; me takes two from each, the highest ids first.
        check_in(
            &ls,
            "me",
            &["me", "w1", "w2"],
            &[
                "steal s05 from w1",
                "steal s11 from w2",
                "steal s04 from w1",
                "steal s10 from w2",
            ],
        );
        // No victim goes below the fair share.
        let ls: Vec<Lease> = (0..5)
            .map(|i| {
                lease(
                    &format!("s{i}"),
                    Some(if i < 3 { "w1" } else { "w2" }),
                    5_000,
                )
            })
            .collect();
        check_in(&ls, "me", &["w1", "w2"], &["steal s2 from w1"]);
        // Everyone at the share's ceiling: a joiner still gets the floor of it.
        let ls: Vec<Lease> = (0..16)
            .map(|i| {
                lease(
                    &format!("s{i:02}"),
                    Some(["w0", "w1", "w2", "w3"][i % 4]),
                    5_000,
                )
            })
            .collect();
        check_in(
            &ls,
            "me",
            &["w0", "w1", "w2", "w3"],
            &[
                "steal s12 from w0",
                "steal s13 from w1",
                "steal s14 from w2",
            ],
        );
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
