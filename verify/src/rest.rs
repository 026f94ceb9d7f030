//! What is not a post's count: the global total (read between two listings of the counter's
//! shards), a sample of the edges, and the dead letters, each beside the recount's.

use super::*;

/// The counter's shards listed before and after the global total was read, and whether its
/// second stage moved between the read of its change log and the total.
pub(super) struct Moves<'a> {
    pub(super) before: &'a HashMap<String, ShardState>,
    pub(super) after: &'a HashMap<String, ShardState>,
    pub(super) second_stage_moved: bool,
}

/// The store's global `total`, read between the two listings, beside the recount's.
pub(super) fn compare_total(total: i64, r: &Recounted, m: Moves<'_>, report: &mut Report) {
    let Moves {
        before,
        after,
        second_stage_moved,
    } = m;
    let moving: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|s| moved(before, after, s))
        .collect();
    let unread = unread_shards(before, &r.read);
    let why = if !moving.is_empty() {
        Some(format!("{} shards moved while it was read", moving.len()))
    } else if second_stage_moved {
        Some("the counter's second stage moved while it was read".to_string())
    } else if !unread.is_empty() {
        Some(format!(
            "{} shards' checkpoints are past the last record read",
            unread.len()
        ))
    } else if r.late_copies > 0 {
        Some(format!(
            "{} copies arrived later than the dedup horizon",
            r.late_copies
        ))
    } else {
        None
    };
    if let Some(why) = why {
        report.global_total = json!({"checked": false});
        report.not_checked.push(format!("the global total: {why}"));
        return;
    }
    let recount = r.total;
    report.rest_off |= total != recount;
    report.global_total =
        json!({"checked": true, "store": total, "recount": recount, "off_by": total - recount});
}

/// The shards whose checkpoint is past the last record read (not listed, or a recording that
/// ends before it): their applied records are not all in the recount.
fn unread_shards<'a>(
    before: &'a HashMap<String, ShardState>,
    read: &HashMap<String, (Position, Position)>,
) -> Vec<&'a String> {
    before
        .iter()
        .filter(|(s, st)| {
            st.lease
                .checkpoint
                .as_ref()
                .is_some_and(|c| read.get(*s).is_none_or(|(_, last)| c.seq > last.seq))
        })
        .map(|(s, _)| s)
        .collect()
}

/// The edges sampled from the pass's recount beside the store's: whether each user likes the
/// post (added to what earlier passes sampled).
///
/// Read between `before` and a listing after the reads: a shard that moved meanwhile may have
/// written a sampled edge. Read from the stream, a shard with nothing left to read holds only
/// records older than any sampled edge's latest action; a recording may end before any shard's
/// checkpoint.
pub(super) async fn compare_edges(
    b: Ports<'_>,
    (r, recording): (&Recount, bool),
    before: &HashMap<String, ShardState>,
    after: &HashMap<String, ShardState>,
    report: &mut Report,
) -> Result<()> {
    const SAMPLE: usize = 100;
    // Counting events, no edges are kept.
    let Some(sample) = r.sample_edges(SAMPLE) else {
        return Ok(());
    };
    let moving = |after: &HashMap<String, ShardState>| {
        before
            .keys()
            .chain(after.keys())
            .any(|s| moved(before, after, s))
    };
    let not_checked = |why: &str, report: &mut Report| {
        if report.edges.is_null() {
            report.edges = json!({"checked": 0, "off": []});
        }
        if !report.not_checked.iter().any(|n| n == why) {
            report.not_checked.push(why.into());
        }
    };
    const MOVED: &str = "the edges: shards moved while the stream was read";
    if moving(after) {
        not_checked(MOVED, report);
        return Ok(());
    }
    let unread = unread_shards(before, &r.read);
    if unread.iter().any(|s| recording || r.read.contains_key(*s)) {
        let why = "the edges: shards' checkpoints are past the last record read";
        not_checked(why, report);
        return Ok(());
    }
    let mut off = Vec::new();
    for (post, user, liked) in &sample {
        let (store_liked, units) = b
            .counter
            .viewer_likes(user, std::slice::from_ref(post), Default::default())
            .await
            .context("reading an edge")?;
        report.store_calls += 1;
        report.read_units += units;
        if store_liked.first() != Some(liked) {
            off.push(json!({"post_id": post, "user_id": user, "recount_liked": liked, "store_liked": store_liked.first()}));
        }
    }
    if moving(&states(b, apps::COUNTER).await?) {
        not_checked(MOVED, report);
        return Ok(());
    }
    report.rest_off |= !off.is_empty();
    let checked = report.edges["checked"].as_u64().unwrap_or(0) + sample.len() as u64;
    let mut all_off = report.edges["off"].as_array().cloned().unwrap_or_default();
    all_off.extend(off);
    report.edges = json!({"checked": checked, "off": all_off});
    Ok(())
}

pub(super) async fn compare_letters(
    store: &dyn DeadLetterReader,
    r: &Recount,
    report: &mut Report,
) -> Result<()> {
    let mut stored: BTreeSet<(String, Position)> = BTreeSet::new();
    let mut gaps = 0;
    let mut after = None;
    loop {
        let (page, next) = store
            .dead_letter_page(after.as_ref(), 1_000)
            .await
            .context("reading dead letters")?;
        report.store_calls += 1;
        for d in page {
            if d.gap.is_some() {
                gaps += 1;
                continue;
            }
            // Only what the counter has applied, in what this check read.
            let applied = r.applied(&d.shard_id, &d.seq);
            let read = r
                .read
                .get(&d.shard_id)
                .is_some_and(|(first, last)| d.seq.seq >= first.seq && d.seq.seq <= last.seq);
            if applied && read {
                stored.insert((d.shard_id, d.seq));
            }
        }
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let missing: Vec<LetterDrift> = r
        .malformed
        .iter()
        .filter(|k| !stored.contains(*k))
        .map(|(s, p)| LetterDrift {
            shard_id: s.clone(),
            position: p.to_string(),
        })
        .collect();
    let unexpected: Vec<LetterDrift> = stored
        .iter()
        .filter(|k| !r.malformed.contains(*k))
        .map(|(s, p)| LetterDrift {
            shard_id: s.clone(),
            position: p.to_string(),
        })
        .collect();
    if gaps > 0 {
        report.not_checked.push(format!(
            "{gaps} gaps on record: records the stream no longer had when they were to be applied (counted by neither)"
        ));
    }
    report.rest_off |= !missing.is_empty() || !unexpected.is_empty();
    report.dead_letters = json!({
        "expected": r.malformed.len(),
        "found": r.malformed.len() - missing.len(),
        "missing": missing,
        "unexpected": unexpected,
    });
    Ok(())
}
