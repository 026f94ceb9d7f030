//! Which shards get a lease row: discovery never gives a processed shard a row again.

use std::collections::HashMap;

use tally_core::lease::Lease;

/// The shards that need a lease row: all, except a closed shard without one that was already
/// processed — its row was cleaned up after it finished, and it must never be read again.
///
/// A shard's row is only deleted once every child has progress of its own (a checkpoint), and
/// progress is only made after all parents finished. So a closed shard without a row was
/// processed exactly when some descendant, however many reshards later, has a row with progress:
/// by induction down the generations, the rows of a finished lineage end in such a row (open
/// shards' rows are never deleted). A fresh application has no row with progress anywhere, so
/// every shard gets its row.
pub(super) fn shards_needing_rows(
    shards: Vec<tally_core::ports::ShardInfo>,
    rows: &[Lease],
) -> Vec<tally_core::ports::ShardInfo> {
    let row = |id: &str| rows.iter().find(|l| l.shard_id == id);
    let progressed = |id: &str| row(id).is_some_and(|l| l.finished || l.checkpoint.is_some());
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in &shards {
        for p in &s.parents {
            children
                .entry(p.as_str())
                .or_default()
                .push(s.shard_id.as_str());
        }
    }
    let processed = |id: &str| {
        let mut todo: Vec<&str> = children.get(id).cloned().unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        while let Some(c) = todo.pop() {
            if !seen.insert(c) {
                continue;
            }
            if progressed(c) {
                return true;
            }
            todo.extend(children.get(c).into_iter().flatten().copied());
        }
        false
    };
    let cleaned: Vec<String> = shards
        .iter()
        .filter(|s| s.closed && row(&s.shard_id).is_none() && processed(&s.shard_id))
        .map(|s| s.shard_id.clone())
        .collect();
    shards
        .into_iter()
        .filter(|s| !cleaned.contains(&s.shard_id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::ports::ShardInfo;

    fn shard(id: &str, parents: &[&str], closed: bool) -> ShardInfo {
        ShardInfo {
            shard_id: id.into(),
            parents: parents.iter().map(|p| p.to_string()).collect(),
            closed,
        }
    }

    fn row(id: &str) -> Lease {
        Lease {
            app: "a".into(),
            shard_id: id.into(),
            owner: None,
            epoch: 0,
            expires_ms: 0,
            checkpoint: None,
            finished: false,
            parents: vec![],
            max_arrival: i64::MIN,
        }
    }

    fn progressed(id: &str) -> Lease {
        Lease {
            checkpoint: tally_core::Position::parse("5"),
            ..row(id)
        }
    }

    #[test]
    fn a_cleaned_up_parent_is_not_created_again() {
        let shards = vec![
            shard("p", &[], true),
            shard("c1", &["p"], false),
            shard("c2", &["p"], false),
        ];
        let ids = |v: Vec<ShardInfo>| v.into_iter().map(|s| s.shard_id).collect::<Vec<_>>();
        // A fresh application: everything gets a row, the parent first in line.
        assert_eq!(
            ids(shards_needing_rows(shards.clone(), &[])),
            ["p", "c1", "c2"]
        );
        // Rows of the children were created before the parent's (a discovery cut short): the
        // children have no progress yet, so the parent still gets its row.
        assert_eq!(
            ids(shards_needing_rows(shards.clone(), &[row("c1"), row("c2")])),
            ["p", "c1", "c2"]
        );
        // The parent's row was deleted after its children progressed: it stays gone.
        assert_eq!(
            ids(shards_needing_rows(
                shards.clone(),
                &[progressed("c1"), row("c2")]
            )),
            ["c1", "c2"]
        );
        // An open shard always keeps its row.
        assert_eq!(
            ids(shards_needing_rows(vec![shard("o", &[], false)], &[])),
            ["o"]
        );
    }

    #[test]
    fn a_cleaned_up_grandparent_is_not_created_again() {
        // p split into c1 and c2, each split again; p's, c1's and c2's rows are all cleaned up.
        let shards = vec![
            shard("p", &[], true),
            shard("c1", &["p"], true),
            shard("c2", &["p"], true),
            shard("g1", &["c1"], false),
            shard("g2", &["c1"], false),
            shard("g3", &["c2"], false),
            shard("g4", &["c2"], false),
        ];
        let rows = [
            progressed("g1"),
            progressed("g2"),
            progressed("g3"),
            progressed("g4"),
        ];
        let got: Vec<String> = shards_needing_rows(shards, &rows)
            .into_iter()
            .map(|s| s.shard_id)
            .collect();
        assert_eq!(got, ["g1", "g2", "g3", "g4"]);
    }
}
