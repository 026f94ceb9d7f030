//! The posts' side of a check: each post the pass recounted read once from the store (a post
//! whose keys several passes hold compared with the sum of their parts), its count beside the
//! recount's, with what windows the counter applies meanwhile may move it by ([`Held`]).

use super::*;

/// Every post the pass holds records of (the stream never names a post the store alone holds;
/// the global total covers those), and the split posts whose last part this pass held.
pub(super) fn posts_to_check(r: &Recount, split: &HashMap<String, PostCheck>) -> Vec<String> {
    let part = r.part();
    let mut posts: Vec<String> = r
        .posts()
        .keys()
        .cloned()
        .chain(r.beyond.iter().map(|b| b.post_id.clone()))
        .chain(split.keys().filter(|p| !part.continues(p)).cloned())
        .collect();
    posts.sort_unstable();
    posts.dedup();
    posts
}

/// Posts' counts since each time, a feed page at a time.
pub(super) async fn read_counts(
    store: &dyn CountReader,
    posts: &[String],
    since: &[i64],
    report: &mut Report,
) -> Result<Vec<Vec<PostCount>>> {
    let mut out: Vec<Vec<PostCount>> = posts.iter().map(|_| Vec::new()).collect();
    for t in since {
        let counts = store
            .post_counts(posts, Some(*t), Consistency::Strong)
            .await
            .context("reading counts")?;
        report.store_calls += 1;
        for (o, c) in out.iter_mut().zip(counts) {
            report.read_units += c.read_units;
            o.push(c);
        }
    }
    Ok(out)
}

/// Whether a shard's state moved between the two listings (or had a window half applied).
pub(super) fn moved(
    before: &HashMap<String, ShardState>,
    after: &HashMap<String, ShardState>,
    shard: &str,
) -> bool {
    match (before.get(shard), after.get(shard)) {
        (Some(b), Some(a)) => {
            b.lease.checkpoint != a.lease.checkpoint || b.pending.is_some() || a.pending.is_some()
        }
        (None, None) => false,
        _ => true,
    }
}

/// One post being compared: its counts as read once (in the first pass holding any of its
/// keys), and what the passes so far say each read should show — a post's count is a sum over
/// its users, so a post whose keys several passes hold (kept in `split` between them) is compared
/// with the sum of its passes' parts.
pub(super) struct PostCheck {
    reads: Vec<PostCount>,
    checks: Vec<Check>,
    /// Shards of its records after their checkpoints (a window may be applying them).
    beyond_shards: BTreeSet<String>,
    /// It holds records this check did not read: not compared.
    unread: bool,
}

/// One number the store shows for a post beside the range the recount allows it.
#[derive(Clone, Debug)]
pub(super) struct Check {
    since_ms: Option<i64>,
    store: i64,
    lo: i64,
    hi: i64,
}

/// A post whose counts are off, unless a window was being applied to it while it was read.
pub(super) struct OffPost {
    post: String,
    drifts: Vec<Drift>,
    beyond_shards: BTreeSet<String>,
}

impl OffPost {
    pub(super) fn post(&self) -> &str {
        &self.post
    }
}

/// Compares the posts this pass recounted in full (or in their last part) with the store, a
/// feed page at a time; a post that continues into the next pass is read now and kept in
/// `split`. Returns the posts found off, for [`settle`].
pub(super) async fn check_posts(
    store: &dyn CountReader,
    r: &Recount,
    in_flight: Option<InFlight<'_>>,
    since: &[i64],
    split: &mut HashMap<String, PostCheck>,
    report: &mut Report,
) -> Result<Vec<OffPost>> {
    let mut beyond: HashMap<&str, Vec<&recount::Beyond>> = HashMap::new();
    for b in &r.beyond {
        beyond.entry(b.post_id.as_str()).or_default().push(b);
    }
    let last_read: HashMap<&str, String> = r
        .read
        .iter()
        .map(|(s, (_, last))| (s.as_str(), marker(last)))
        .collect();
    let posts = posts_to_check(r, split);
    let mut drifted = Vec::new();
    let mut unread = 0;
    for chunk in posts.chunks(MAX_POSTS_PER_CALL) {
        let to_read: Vec<String> = chunk
            .iter()
            .filter(|p| !split.contains_key(*p))
            .cloned()
            .collect();
        let mut reads: HashMap<String, Vec<PostCount>> = to_read
            .iter()
            .cloned()
            .zip(read_counts(store, &to_read, since, report).await?)
            .collect();
        for p in chunk {
            let beyond = beyond
                .get(p.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut post = match (split.remove(p), reads.remove(p)) {
                (Some(s), _) => s,
                (None, Some(c)) if c.is_empty() => continue,
                (None, Some(c)) => PostCheck {
                    // A post the counter applied records to that this check did not read.
                    // Counting likers, the marks are of the edges' change log, not the stream.
                    unread: in_flight.is_none()
                        && c.iter().any(|c| {
                            c.marks
                                .iter()
                                .any(|(s, m)| last_read.get(s.as_str()).is_none_or(|l| m > l))
                        }),
                    checks: Vec::new(),
                    reads: c,
                    beyond_shards: BTreeSet::new(),
                },
                (None, None) => continue,
            };
            post.add(r, p, beyond, in_flight, since);
            if r.part().continues(p) {
                split.insert(p.clone(), post);
                continue;
            }
            if post.unread {
                unread += 1;
                continue;
            }
            let drifts = post.drifts(p);
            if drifts.is_empty() {
                report.posts_checked += 1;
            } else {
                drifted.push(OffPost {
                    post: p.clone(),
                    drifts,
                    beyond_shards: post.beyond_shards,
                });
            }
        }
    }
    if unread > 0 {
        report.not_checked.push(format!(
            "{unread} posts hold records this check did not read (applied after their shard was read, or the recording ends before the counter's checkpoint)"
        ));
    }
    Ok(drifted)
}

impl PostCheck {
    /// Adds what one pass's records of the post say each read should show. Each read is
    /// compared with the records its own markers say it holds: a window may land between the
    /// reads of one post.
    fn add(
        &mut self,
        r: &Recount,
        post: &str,
        beyond: &[&recount::Beyond],
        in_flight: Option<InFlight<'_>>,
        since: &[i64],
    ) {
        self.beyond_shards
            .extend(beyond.iter().map(|b| b.shard_id.clone()));
        let mut checks = Vec::new();
        // A post split over passes is summed over its parts: what its count lags by, once.
        let first_part = self.checks.is_empty();
        for (i, (t, count)) in since.iter().zip(&self.reads).enumerate() {
            let pending = in_flight.map(|f| f.pending);
            let held = Held::of(r, post, beyond, &count.marks, pending);
            let mut check = |since_ms: Option<i64>, store: i64| {
                let from = since_ms.map(|t| t.div_euclid(MINUTE_MS));
                let (lo, hi) = held.range(from);
                // Counting likers, the changes the count does not hold yet are added to it.
                let lag = in_flight
                    .filter(|_| first_part)
                    .map_or(0, |f| f.tail.unapplied(post, &count.marks, from));
                let (lo, hi) = (lo - lag, hi - lag);
                checks.push(Check {
                    since_ms,
                    store,
                    lo,
                    hi,
                });
            };
            if i == 0 {
                check(None, count.total);
            }
            if let Some(n) = count.since {
                check(Some(*t), n);
            }
        }
        if self.checks.is_empty() {
            self.checks = checks;
        } else {
            for (c, more) in self.checks.iter_mut().zip(checks) {
                c.lo += more.lo;
                c.hi += more.hi;
            }
        }
    }

    fn drifts(&self, post: &str) -> Vec<Drift> {
        self.checks
            .iter()
            .filter(|c| c.store < c.lo || c.store > c.hi)
            .map(|c| Drift {
                post_id: post.to_owned(),
                since_ms: c.since_ms,
                store: c.store,
                recount: c.lo,
                recount_up_to: (c.hi != c.lo).then_some(c.hi),
                off_by: if c.store < c.lo {
                    c.store - c.lo
                } else {
                    c.store - c.hi
                },
            })
            .collect()
    }
}

/// The posts found off: off, unless a window was being applied to them while they were read, or
/// the counter may have applied records of theirs that no pass read (`unread`: how many; counting
/// likers each moves a count by one at most, so a post further off is off).
pub(super) fn settle(
    drifted: Vec<OffPost>,
    (before, after): (&HashMap<String, ShardState>, &HashMap<String, ShardState>),
    unread: &HashMap<String, i64>,
    report: &mut Report,
) {
    let (mut unsettled, mut not_read) = (0, 0);
    for d in drifted {
        let n = unread.get(&d.post).copied().unwrap_or(0);
        if n > 0 && d.drifts.iter().all(|x| x.off_by.abs() <= n) {
            not_read += 1;
            continue;
        }
        if d.beyond_shards.iter().any(|s| moved(before, after, s)) {
            unsettled += 1;
            continue;
        }
        report.posts_checked += 1;
        report.posts_off += 1;
        report.drifts.extend(d.drifts);
    }
    if unsettled > 0 {
        report.not_checked.push(format!(
            "{unsettled} posts were being written while they were read (run verify again)"
        ));
    }
    if not_read > 0 {
        report.not_checked.push(format!(
            "{not_read} posts hold records the counter applied after their shard was read, or past the recording's end"
        ));
    }
}

/// What one read of a post should show: the recount's applied records, and those after their
/// checkpoints that the read's markers say the post's summary holds.
pub(super) struct Held<'a> {
    applied: recount::PostRecount,
    /// Counting events: the held records, added as deltas (counting likers they are merged into
    /// `applied`).
    extra: Vec<&'a recount::Beyond>,
    /// Counting likers: the post with the records after their checkpoint merged in that the
    /// edges may hold already — those of shards with a window being applied (the first stage
    /// writes a window's edges after recording it pending, before its checkpoint).
    all: Option<recount::PostRecount>,
}

/// Counting likers, what was in flight as the check began.
#[derive(Clone, Copy)]
pub(super) struct InFlight<'a> {
    /// The edges' changes not counted yet: what the counts lag the edges by.
    pub tail: &'a tail::LogTail,
    /// The shards with a window being applied: only their records after the checkpoint may be
    /// in the edges (a window begun later moves its shard, see [`settle`]).
    pub pending: &'a HashSet<String>,
}

impl<'a> Held<'a> {
    fn of(
        r: &Recount,
        post: &str,
        beyond: &[&'a recount::Beyond],
        marks: &[(String, String)],
        likers_pending: Option<&HashSet<String>>,
    ) -> Held<'a> {
        if let Some(pending) = likers_pending {
            let (applied, _) = r.with_held(post, Vec::new());
            let in_edges = beyond.iter().copied();
            let in_edges = in_edges.filter(|b| pending.contains(&b.shard_id)).collect();
            let (all, _) = r.with_held(post, in_edges);
            return Held {
                applied,
                extra: Vec::new(),
                all: Some(all),
            };
        }
        let marks: HashMap<&str, &str> = marks
            .iter()
            .map(|(s, m)| (s.as_str(), m.as_str()))
            .collect();
        let held: Vec<&'a recount::Beyond> = beyond
            .iter()
            .copied()
            .filter(|b| {
                marks
                    .get(b.shard_id.as_str())
                    .is_some_and(|m| marker(&b.at).as_str() <= *m)
            })
            .collect();
        let (applied, extra) = r.with_held(post, held);
        Held {
            applied,
            extra,
            all: None,
        }
    }

    /// The range the store's count (since minute `from`, else the total) may take: late copies
    /// may or may not have been counted; counting likers, records after the checkpoint may or
    /// may not be in the edges yet.
    fn range(&self, from: Option<Minute>) -> (i64, i64) {
        let of = |p: &recount::PostRecount| match from {
            None => p.total,
            Some(f) => p.since(f),
        };
        if let Some(all) = &self.all {
            let (a, b) = (of(&self.applied), of(all));
            return (a.min(b), a.max(b));
        }
        let inside = |m: Minute| from.is_none_or(|f| m >= f);
        let mut n = of(&self.applied);
        let (mut lo, mut hi) = (0, 0);
        let mut open = |m: Minute, d: i64| {
            if inside(m) {
                if d < 0 {
                    lo += d
                } else {
                    hi += d
                }
            }
        };
        for (m, d) in &self.applied.late {
            open(*m, *d);
        }
        for b in &self.extra {
            if b.late {
                open(b.minute, b.delta);
            } else if inside(b.minute) {
                n += b.delta;
            }
        }
        (n + lo, n + hi)
    }
}
