//! [`CounterStore`]: the summary items of [`tally_core::summary`] as rows of attribute maps, each
//! write applied with the same condition and effect as on DynamoDB (and charged the same).

use async_trait::async_trait;
use rusqlite::{params, Connection};
use tally_core::buckets::PostDelta;
use tally_core::cost::{self, Purpose};
use tally_core::dead_letter::DeadLetter;
use tally_core::edge::{CountMode, EdgeEvent, EdgeState};
use tally_core::ports::{
    Applied, Consistency, CountReader, DeadLetterReader, Decided, DedupStore, EdgeScan, EdgeWriter,
    EdgesWritten, Fence, LetterCursor, LikersPage, LikersReader, PortError, PortResult, PostCount,
    PostsApplied, RecentCursor, RecentPage, Renewal, ScanCursor, ShardTally, StoredDedup, Stream,
    WindowRef, WindowRest, WindowWriter,
};
use tally_core::rows::Field;
use tally_core::summary::{self, Known, Plan, Refused, Write, GLOBAL_PK};
use tally_core::{Position, SeqNo};

use super::items::{get_item, put_item, query};
use super::{check_fence, spent_json, write_dead_letter};
use crate::{sql_err, Embedded};

/// Applies one conditional write, charging it as DynamoDB would; `Err(Refused::Stale)` asks for a
/// re-plan.
fn write(
    c: &Connection,
    pk: &str,
    w: &Write,
    end: &str,
    out: &mut Applied,
) -> PortResult<Result<(), Refused>> {
    let item = get_item(c, pk, &w.sk)?;
    match summary::apply(item.as_ref(), w, end) {
        Ok(a) => {
            put_item(c, pk, &w.sk, &a)?;
            out.wrote(w.purpose, summary::write_units(pk, &w.sk, &a));
            Ok(Ok(()))
        }
        Err(r) => {
            out.was_refused(item.map_or(1, |a| summary::write_units(pk, &w.sk, &a)));
            Ok(Err(r))
        }
    }
}

fn apply_post(
    c: &Connection,
    shard: &str,
    post: &str,
    delta: &PostDelta,
    end: &str,
    out: &mut Applied,
) -> PortResult<()> {
    let live_sk = summary::live_sk(shard);
    // Reads are free here; the plan is made from the item as it is, like a writer that has it.
    for _ in 0..summary::PLAN_ATTEMPTS {
        let known = match get_item(c, post, &live_sk)? {
            None => Known::Absent,
            Some(a) => Known::Item(summary::live_state(post, &live_sk, &a)?),
        };
        let writes = match summary::plan(shard, delta, end, &known) {
            Plan::Skip => {
                // DynamoDB's writer tries the write and is refused.
                out.was_refused(1);
                return Ok(());
            }
            Plan::NeedItem => unreachable!("a plan from the item itself never needs it"),
            Plan::Writes(ws) => ws,
        };
        let mut stale = false;
        for w in &writes {
            stale |= write(c, post, w, end, out)? == Err(Refused::Stale);
        }
        if !stale {
            return Ok(());
        }
    }
    Err(PortError::Other(format!(
        "embedded store: the live item {post}/{live_sk} kept changing while being written"
    )))
}

#[async_trait]
impl WindowWriter for Embedded {
    /// A call is one SQLite transaction, and a commit costs more than its pages: after a page
    /// split, SQLite's page cache is scanned whole (`balance_nonroot` renumbers pages through
    /// the locking page's number, which `pcache1TruncateUnsafe` then sees as the cache's largest
    /// key: BENCHMARKS, "A commit's hidden cost"). 20,000 makes a likers window of 100,000 five
    /// commits, not a hundred, and holds the write lock ~0.1 s at a time, not a window's length.
    fn posts_per_call(&self) -> usize {
        20_000
    }

    async fn begin_window(
        &self,
        fence: &Fence,
        start_after: Option<&Position>,
        first: &SeqNo,
        end: &Position,
        decided: Decided,
    ) -> PortResult<()> {
        let (fence, start_after, end) = (fence.clone(), start_after.cloned(), end.clone());
        let first = first.to_string();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let st = check_fence(&tx, &fence)?;
            if st.lease.checkpoint != start_after || st.pending.is_some() {
                return Err(PortError::Fenced { app: fence.app.clone(), shard_id: fence.shard_id.clone() });
            }
            tx.prepare_cached("UPDATE leases SET pending_end = ?1, pending_horizon_ms = ?2, pending_first = ?3 WHERE app = ?4 AND shard_id = ?5")
                .map_err(sql_err)?
                .execute(params![end.to_string(), decided.horizon_ms, first, fence.app, fence.shard_id])
                .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn apply_posts(
        &self,
        w: WindowRef<'_>,
        posts: &[(String, PostDelta)],
    ) -> PortResult<PostsApplied> {
        let (shard, end, posts) = (
            w.shard_id.to_owned(),
            summary::marker_of(&w),
            posts.to_vec(),
        );
        self.run(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let mut out = Applied::default();
            for (post, delta) in &posts {
                apply_post(&tx, &shard, post, delta, &end, &mut out)?;
            }
            tx.commit().map_err(sql_err)?;
            // One transaction: every post is done, or the call failed.
            Ok(PostsApplied {
                applied: out,
                ..PostsApplied::default()
            })
        })
        .await
    }

    async fn apply_rest(&self, w: WindowRef<'_>, rest: WindowRest<'_>) -> PortResult<Applied> {
        let (app, shard, seq_end) = (w.app.to_owned(), w.shard_id.to_owned(), w.end.clone());
        let end = summary::marker_of(&w);
        let (dead, total_delta, dedup, horizon_ms) = (
            rest.dead_letters.to_vec(),
            rest.total_delta,
            rest.dedup.clone(),
            rest.horizon_ms,
        );
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let mut out = Applied::default();
            for d in &dead {
                // An overwrite with the same content, as DynamoDB's PutItem.
                write_dead_letter(&tx, d)?;
                out.wrote(Purpose::DeadLetters, cost::dead_letter_units(d));
            }
            // A window that moves no total writes none (the likers counter's first stage, a
            // rebuild's copies): its item would only carry the marker.
            if total_delta != 0 {
                let total = summary::global_total_write(&app, &shard, total_delta, &end);
                write(&tx, GLOBAL_PK, &total, &end, &mut out)?.ok();
            }
            if !dedup.ids.is_empty() {
                // Written once (a second write would replace it); expires by arrival, not wall clock.
                let n = tx.prepare_cached("INSERT OR IGNORE INTO dedup (app, shard_id, end_seq, max_arrival, expires_ms, ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                    .map_err(sql_err)?
                    .execute(params![app, shard, seq_end.to_string(), dedup.max_arrival, dedup.max_arrival.saturating_add(horizon_ms), dedup.encode_ids()])
                    .map_err(sql_err)?;
                let units = cost::dedup_units(&dedup);
                if n == 1 {
                    out.wrote(Purpose::Dedup, units);
                } else {
                    out.was_refused(units);
                }
            }
            tx.commit().map_err(sql_err)?;
            Ok(out)
        })
        .await
    }

    async fn finish_window(
        &self,
        fence: &Fence,
        end: &Position,
        max_arrival: i64,
        shard_finished: bool,
        spent: &ShardTally,
        renewal: Option<&Renewal>,
    ) -> PortResult<Option<String>> {
        // Never past the records whose edges are not durable yet ("Durable in order").
        self.sync_edges().await?;
        let (fence, end, spent, renewal) = (fence.clone(), end.clone(), *spent, renewal.cloned());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let st = check_fence(&tx, &fence)?;
            if st.pending.map(|p| p.end) != Some(end.clone()) {
                return Err(PortError::Fenced { app: fence.app.clone(), shard_id: fence.shard_id.clone() });
            }
            let mut total = st.spent;
            total.merge(&spent);
            // A renewal in the same write: each of its values, or what the row has.
            let r = renewal.as_ref();
            let progress = r.and_then(|r| r.progress);
            let wanted = tx
                .prepare_cached(
                    "UPDATE leases SET checkpoint = ?1, max_arrival = ?2, pending_end = NULL, pending_horizon_ms = NULL, pending_first = NULL, finished = ?3, spent = ?4, \
                     expires_ms = COALESCE(?7, expires_ms), behind_ms = COALESCE(?8, behind_ms), behind_at_ms = COALESCE(?9, behind_at_ms), holder_addr = COALESCE(?10, holder_addr) \
                     WHERE app = ?5 AND shard_id = ?6 RETURNING wanted_by",
                )
                .map_err(sql_err)?
                .query_row(
                    params![
                        end.to_string(),
                        max_arrival,
                        shard_finished as i64,
                        spent_json(&total),
                        fence.app,
                        fence.shard_id,
                        r.map(|r| r.expires_ms),
                        progress.map(|p| p.behind_ms),
                        progress.map(|p| p.at_ms),
                        r.and_then(|r| r.addr.clone()),
                    ],
                    |row| super::row_of(row, "wanted_by"),
                )
                .map_err(sql_err)?;
            // Read before the commit: a corrupt request rolls the window's finish back.
            let wanted = match renewal {
                Some(_) => tally_core::rows::handoff_ask(&wanted, "leases", &fence)?,
                None => None,
            };
            tx.commit().map_err(sql_err)?;
            Ok(wanted)
        })
        .await
    }
}

#[async_trait]
impl EdgeWriter for Embedded {
    /// Each part's edges (`edge_parts`) written at once, each in a transaction of its own that
    /// logs its changes (`edges::write_edges`): a part that failed for a passing reason is sent
    /// again, the parts done are not.
    async fn write_edges(&self, edges: &[EdgeEvent]) -> PortResult<EdgesWritten> {
        let calls: Vec<_> = super::edges::by_part(edges, self.edge_parts())
            .into_iter()
            .map(|(part, at, edges)| {
                let this = self.clone();
                let call = tokio::spawn(async move {
                    this.write_part(part, move |c| super::edges::write_edges(c, &edges))
                        .await
                });
                (at, call)
            })
            .collect();
        let mut done = Vec::with_capacity(calls.len());
        for (at, call) in calls {
            let out = call
                .await
                .map_err(|e| PortError::Other(format!("embedded store task failed: {e}")))?;
            done.push((at, out));
        }
        super::edges::merge_parts(done)
    }

    async fn edges_durable(&self) -> PortResult<()> {
        self.sync_edges().await
    }

    fn change_log(&self) -> PortResult<std::sync::Arc<dyn Stream>> {
        Ok(std::sync::Arc::new(crate::edge_log::EdgeLog::of(self)?))
    }
}

#[async_trait]
impl CountReader for Embedded {
    async fn stored_mode(&self) -> PortResult<Option<CountMode>> {
        tally_core::meta::Claims::count_mode(self, None).await
    }

    async fn post_counts(
        &self,
        post_ids: &[String],
        since_ms: Option<i64>,
        _consistency: Consistency,
    ) -> PortResult<Vec<PostCount>> {
        let posts = post_ids.to_vec();
        self.run(move |c| {
            // One read transaction: every count of the answer from one snapshot (SQLite's reads
            // are always consistent; what DynamoDB would charge is computed the same way).
            let tx = c.transaction().map_err(sql_err)?;
            let mut out = Vec::with_capacity(posts.len());
            for post in &posts {
                let live = query(&tx, post, summary::LIVE_PREFIX, "L$")?;
                let since = match since_ms {
                    None => None,
                    Some(t) => {
                        let (hour_prefix, (day_lo, day_hi)) = summary::since_reads(t);
                        let hours =
                            query(&tx, post, &hour_prefix, &format!("{hour_prefix}\u{10ffff}"))?;
                        Some((t, hours, query(&tx, post, &day_lo, &day_hi)?))
                    }
                };
                out.push(summary::post_count(post, live, since)?);
            }
            Ok(out)
        })
        .await
    }

    async fn global_total(&self) -> PortResult<i64> {
        self.run(|c| summary::total_of(&query(c, GLOBAL_PK, "", "\u{10ffff}")?))
            .await
    }
}

#[async_trait]
impl LikersReader for Embedded {
    async fn edges(
        &self,
        pairs: &[(String, String)],
        _consistency: Consistency,
    ) -> PortResult<(Vec<Option<EdgeState>>, u64)> {
        let pairs = pairs.to_vec();
        self.run_edges(move |parts| super::edges::edge_states(parts, &pairs))
            .await
    }

    async fn likers(
        &self,
        post_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> PortResult<LikersPage> {
        let (post, after) = (post_id.to_owned(), after.map(str::to_owned));
        self.run_post_edges(post, move |c, post| {
            super::likers::likers(c, post, after.as_deref(), limit)
        })
        .await
    }

    async fn recent_likers(
        &self,
        post_id: &str,
        after: Option<&RecentCursor>,
        limit: usize,
    ) -> PortResult<RecentPage> {
        let (post, after) = (post_id.to_owned(), after.cloned());
        self.run_post_edges(post, move |c, post| {
            super::likers::recent_likers(c, post, after.as_ref(), limit)
        })
        .await
    }

    async fn scan_edges(&self, after: Option<&ScanCursor>, limit: usize) -> PortResult<EdgeScan> {
        let after = after.cloned();
        self.run_edges(move |parts| super::likers::scan_edges(parts, after.as_ref(), limit))
            .await
    }
}

#[async_trait]
impl DeadLetterReader for Embedded {
    async fn dead_letter_page(
        &self,
        after: Option<&LetterCursor>,
        limit: usize,
    ) -> PortResult<(Vec<DeadLetter>, Option<LetterCursor>)> {
        let (shard, key) = after.map_or((String::new(), String::new()), |c| {
            (c.shard_id.clone(), c.key.clone())
        });
        self.run(move |c| {
            let sql = format!(
                "SELECT {LETTER_COLUMNS} FROM dead_letters WHERE (shard_id, seq) > (?1, ?2) \
                 ORDER BY shard_id, seq LIMIT ?3"
            );
            let mut st = c.prepare_cached(&sql).map_err(sql_err)?;
            let rows = st
                .query_map(params![shard, key, limit as i64], |r| {
                    super::row_of(r, LETTER_COLUMNS)
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            let letter = |row| tally_core::rows::dead_letter(row, "dead_letters");
            let page = rows.iter().map(letter).collect::<PortResult<Vec<_>>>()?;
            // The page's last key as stored (the cursor is the store's order, whatever it holds).
            let next = (rows.len() == limit)
                .then(|| {
                    rows.last()
                        .and_then(|r| match (r.get("shard_id"), r.get("seq")) {
                            (Some(Field::S(shard_id)), Some(Field::S(key))) => Some(LetterCursor {
                                shard_id: shard_id.clone(),
                                key: key.clone(),
                            }),
                            _ => None,
                        })
                })
                .flatten();
            Ok((page, next))
        })
        .await
    }

    async fn dead_letter_count(&self) -> PortResult<u64> {
        self.run(|c| {
            c.query_row("SELECT COUNT(*) FROM dead_letters", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(sql_err)
        })
        .await
    }
}

#[async_trait]
impl DedupStore for Embedded {
    async fn expire_dedup(&self, app: &str, shard_id: &str, before: i64) -> PortResult<()> {
        let (app, shard_id) = (app.to_owned(), shard_id.to_owned());
        self.run(move |c| {
            c.prepare_cached(
                "DELETE FROM dedup WHERE app = ?1 AND shard_id = ?2 AND max_arrival < ?3",
            )
            .map_err(sql_err)?
            .execute(params![app, shard_id, before])
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<StoredDedup>> {
        let (app, shard_ids) = (app.to_owned(), shard_ids.to_vec());
        self.run(move |c| {
            let mut out = Vec::new();
            let mut st = c.prepare_cached("SELECT end_seq, max_arrival, ids FROM dedup WHERE app = ?1 AND shard_id = ?2 AND max_arrival >= ?3").map_err(sql_err)?;
            for s in &shard_ids {
                let rows = st
                    .query_map(params![app, s, min_arrival], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, Vec<u8>>(2)?)))
                    .map_err(sql_err)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(sql_err)?;
                for (end, max_arrival, ids) in rows {
                    let item = format!("dedup {app}/{s}/{end}");
                    let (end, record) = tally_core::rows::dedup_row(&item, Some(&end), Some(max_arrival), Some(&ids))?;
                    out.push(StoredDedup { shard_id: s.clone(), end, record });
                }
            }
            Ok(out)
        })
        .await
    }
}

/// The columns of a dead letter's row, as `tally_core::rows::dead_letter` reads them.
const LETTER_COLUMNS: &str = "shard_id, seq, arrival_ms, reason, data, size";
