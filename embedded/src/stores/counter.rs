//! [`CounterStore`]: each chunk one SQLite transaction with the checkpoint row.

use super::*;

#[async_trait]
impl CounterStore for Embedded {
    fn max_items_per_commit(&self) -> usize {
        // One SQLite transaction has no item limit; chunks keep each lock short.
        2_000
    }

    async fn commit_chunk(&self, commit: ChunkCommit<'_>) -> PortResult<()> {
        let fence = commit.fence.clone();
        let start_after = commit.start_after.cloned();
        let end = commit.end.clone();
        let (index, count, shape) = (commit.index, commit.count, commit.shape);
        let items = commit.items.to_vec();
        let last = commit
            .last
            .map(|l| (l.dedup.clone(), l.total_delta, l.shard_finished));
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let st = check_fence(&tx, &fence)?;
            let progress_ok = st.lease.checkpoint == start_after
                && match &st.pending {
                    None => index == 0,
                    Some(p) => p.end == end && p.done == index && p.count == count,
                };
            if !progress_ok {
                return Err(PortError::Fenced { app: fence.app.clone(), shard_id: fence.shard_id.clone() });
            }
            for item in &items {
                write_item(&tx, item)?;
            }
            match last {
                Some((dedup, total_delta, finished)) => {
                    // `expires_ms` is the arrival time past which this shard no longer needs the
                    // record (for reading); records expire by `expire_dedup`, never by wall clock.
                    tx.prepare_cached("INSERT OR REPLACE INTO dedup (app, shard_id, end_seq, max_arrival, expires_ms, ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                        .map_err(sql_err)?
                        .execute(params![fence.app, fence.shard_id, end.as_str(), dedup.max_arrival, dedup.max_arrival.saturating_add(shape.horizon_ms), dedup.encode_ids()])
                        .map_err(sql_err)?;
                    tx.prepare_cached("INSERT INTO global_totals (app, shard_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (app, shard_id) DO UPDATE SET n = n + excluded.n")
                        .map_err(sql_err)?
                        .execute(params![fence.app, fence.shard_id, total_delta])
                        .map_err(sql_err)?;
                    tx.prepare_cached(
                        "UPDATE leases SET checkpoint = ?1, max_arrival = ?2, pending_end = NULL, pending_done = NULL, pending_count = NULL, pending_max_items = NULL, pending_horizon_ms = NULL, finished = ?3 WHERE app = ?4 AND shard_id = ?5",
                    )
                    .map_err(sql_err)?
                    .execute(params![end.as_str(), dedup.max_arrival, finished as i64, fence.app, fence.shard_id])
                    .map_err(sql_err)?;
                }
                None => {
                    tx.prepare_cached("UPDATE leases SET pending_end = ?1, pending_done = ?2, pending_count = ?3, pending_max_items = ?4, pending_horizon_ms = ?5 WHERE app = ?6 AND shard_id = ?7")
                        .map_err(sql_err)?
                        .execute(params![end.as_str(), index as i64 + 1, count as i64, shape.max_items as i64, shape.horizon_ms, fence.app, fence.shard_id])
                        .map_err(sql_err)?;
                }
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn commit_gap(&self, g: GapCommit<'_>) -> PortResult<()> {
        let fence = g.fence.clone();
        let (start_after, pending_end) = (g.start_after.cloned(), g.pending_end.cloned());
        let checkpoint = g.through.cloned().or_else(|| start_after.clone());
        let (finished, gap) = (g.finished, g.gap.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let st = check_fence(&tx, &fence)?;
            if st.lease.checkpoint != start_after || st.pending.map(|p| p.end) != pending_end {
                return Err(PortError::Fenced { app: fence.app.clone(), shard_id: fence.shard_id.clone() });
            }
            write_item(&tx, &WriteItem::DeadLetter(gap))?;
            tx.execute(
                "UPDATE leases SET checkpoint = ?1, pending_end = NULL, pending_done = NULL, pending_count = NULL, pending_max_items = NULL, pending_horizon_ms = NULL, finished = ?2 WHERE app = ?3 AND shard_id = ?4",
                params![checkpoint.as_ref().map(|s| s.as_str()), finished as i64, fence.app, fence.shard_id],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn expire_dedup(&self, app: &str, shard_id: &str, before: i64) -> PortResult<u64> {
        let (app, shard_id) = (app.to_owned(), shard_id.to_owned());
        self.run(move |c| {
            // What DynamoDB would charge: a delete costs the deleted item's size, in started KB.
            let units: i64 = c
                .prepare_cached("SELECT COALESCE(SUM((length(ids) + 160 + 1023) / 1024), 0) FROM dedup WHERE app = ?1 AND shard_id = ?2 AND max_arrival < ?3")
                .map_err(sql_err)?
                .query_row(params![app, shard_id, before], |r| r.get(0))
                .map_err(sql_err)?;
            c.prepare_cached("DELETE FROM dedup WHERE app = ?1 AND shard_id = ?2 AND max_arrival < ?3")
                .map_err(sql_err)?
                .execute(params![app, shard_id, before])
                .map_err(sql_err)?;
            Ok(units.max(0) as u64)
        })
        .await
    }

    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<DedupRecord>> {
        let (app, shard_ids) = (app.to_owned(), shard_ids.to_vec());
        self.run(move |c| {
            let mut out = Vec::new();
            let mut st = c.prepare_cached("SELECT max_arrival, ids FROM dedup WHERE app = ?1 AND shard_id = ?2 AND max_arrival >= ?3").map_err(sql_err)?;
            for s in &shard_ids {
                let rows = st
                    .query_map(params![app, s, min_arrival], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
                    .map_err(sql_err)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(sql_err)?;
                for (max_arrival, ids) in rows {
                    let ids = DedupRecord::decode_ids(&ids).ok_or_else(|| PortError::Other(format!("embedded store: corrupt dedup record of {s}")))?;
                    out.push(DedupRecord { max_arrival, ids });
                }
            }
            Ok(out)
        })
        .await
    }

    async fn post_count(&self, post_id: &str, since_ms: Option<i64>) -> PortResult<PostCount> {
        let post = post_id.to_owned();
        self.run(move |c| {
            let get = |sk: &str, slot: i64| -> PortResult<i64> {
                c.query_row("SELECT n FROM counts WHERE post_id = ?1 AND sk = ?2 AND slot = ?3", params![post, sk, slot], |r| r.get(0))
                    .optional()
                    .map(|o| o.unwrap_or(0))
                    .map_err(sql_err)
            };
            let total = get("T", -1)?;
            let since = match since_ms {
                None => None,
                Some(t) => {
                    let plan = since_plan(t);
                    let slots = |sk: String| -> PortResult<Vec<(u8, i64)>> {
                        let mut st = c.prepare_cached("SELECT slot, n FROM counts WHERE post_id = ?1 AND sk = ?2 AND slot >= 0").map_err(sql_err)?;
                        let rows = st.query_map(params![post, sk], |r| Ok((r.get::<_, i64>(0)? as u8, r.get(1)?))).map_err(sql_err)?;
                        rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
                    };
                    let mut st = c.prepare_cached("SELECT n FROM counts WHERE post_id = ?1 AND sk >= ?2 AND sk < 'E' AND slot = -1").map_err(sql_err)?;
                    let later_days = st
                        .query_map(params![post, ItemKind::Day(plan.first_full_day.clone()).sort_key()], |r| r.get(0))
                        .map_err(sql_err)?
                        .collect::<Result<Vec<i64>, _>>()
                        .map_err(sql_err)?;
                    let items = StoredItems {
                        total,
                        hour_slots: slots(ItemKind::Hour(plan.hour_key.clone()).sort_key())?,
                        day_slots: slots(ItemKind::Day(plan.day_key.clone()).sort_key())?,
                        later_days,
                    };
                    Some((since_count(&plan, &items), items.later_days.len()))
                }
            };
            Ok(PostCount {
                total,
                since: since.map(|(n, _)| n),
                read_units: post_count_read_units(since.is_some(), since.map_or(0, |(_, d)| d)),
            })
        })
        .await
    }

    async fn global_total(&self) -> PortResult<i64> {
        self.run(|c| {
            c.query_row("SELECT COALESCE(SUM(n), 0) FROM global_totals", [], |r| {
                r.get(0)
            })
            .map_err(sql_err)
        })
        .await
    }

    async fn dead_letters(&self, limit: usize) -> PortResult<Vec<DeadLetter>> {
        self.run(move |c| {
            let mut st = c.prepare_cached("SELECT shard_id, seq, arrival_ms, reason, data, size FROM dead_letters ORDER BY arrival_ms, shard_id LIMIT ?1").map_err(sql_err)?;
            let rows = st
                .query_map([limit as i64], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, i64>(5)?)))
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            Ok(rows
                .into_iter()
                .filter_map(|(shard_id, seq, arrival_ms, reason, data, size)| Some(DeadLetter { shard_id, seq: SeqNo::parse(&seq)?, arrival_ms, reason, data, size: size.max(0) as u64 }))
                .collect())
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
