//! The lease, counter and analytics stores on SQLite.

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tally_core::buckets::{since_count, since_plan, ItemKind, StoredItems};
use tally_core::cost::post_count_read_units;
use tally_core::dedup::DedupRecord;
use tally_core::lease::Lease;
use tally_core::ports::{
    AnalyticsSnapshot, AnalyticsStore, BaselineWriters, ChunkCommit, CounterStore, Fence,
    GapCommit, LeaseStore, Pending, PortError, PortResult, PostCount, ShardInfo, ShardState,
    TrendingEntry, WindowShape,
};
use tally_core::window::{DeadLetter, WriteItem};
use tally_core::SeqNo;

use crate::{sql_err, Embedded};

const LEASE_COLUMNS: &str = "app, shard_id, owner, epoch, expires_ms, checkpoint, finished, parents, max_arrival, pending_end, pending_done, pending_count, pending_max_items, pending_horizon_ms";

fn read_state(r: &rusqlite::Row<'_>) -> rusqlite::Result<ShardState> {
    let checkpoint: Option<String> = r.get(5)?;
    let parents: String = r.get(7)?;
    let pending_end: Option<String> = r.get(9)?;
    Ok(ShardState {
        lease: Lease {
            app: r.get(0)?,
            shard_id: r.get(1)?,
            owner: r.get(2)?,
            epoch: r.get::<_, i64>(3)? as u64,
            expires_ms: r.get(4)?,
            checkpoint: checkpoint.as_deref().and_then(SeqNo::parse),
            finished: r.get::<_, i64>(6)? != 0,
            parents: serde_json::from_str(&parents).unwrap_or_default(),
            max_arrival: r.get(8)?,
        },
        pending: match pending_end.as_deref().and_then(SeqNo::parse) {
            Some(end) => Some(Pending {
                end,
                done: r.get::<_, i64>(10)? as u32,
                count: r.get::<_, i64>(11)? as u32,
                shape: match (r.get::<_, Option<i64>>(12)?, r.get::<_, Option<i64>>(13)?) {
                    (Some(m), Some(h)) => Some(WindowShape {
                        max_items: m as u32,
                        horizon_ms: h,
                    }),
                    _ => None,
                },
            }),
            None => None,
        },
    })
}

fn state_in(c: &Connection, app: &str, shard_id: &str) -> PortResult<ShardState> {
    c.query_row(
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE app = ?1 AND shard_id = ?2"),
        params![app, shard_id],
        read_state,
    )
    .optional()
    .map_err(sql_err)?
    .ok_or_else(|| PortError::NotFound {
        what: format!("lease {app}/{shard_id}"),
        hint: String::new(),
    })
}

/// Checks the fence inside a write transaction.
fn check_fence(tx: &Transaction<'_>, fence: &Fence) -> PortResult<ShardState> {
    let st = state_in(tx, &fence.app, &fence.shard_id)?;
    if st.lease.owner.as_deref() != Some(fence.owner.as_str()) || st.lease.epoch != fence.epoch {
        return Err(PortError::Fenced {
            app: fence.app.clone(),
            shard_id: fence.shard_id.clone(),
        });
    }
    Ok(st)
}

fn write_item(tx: &Transaction<'_>, item: &WriteItem) -> PortResult<()> {
    match item {
        WriteItem::Summary(s) => {
            let sk = s.kind.sort_key();
            let mut up = tx
                .prepare_cached("INSERT INTO counts (post_id, sk, slot, n) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (post_id, sk, slot) DO UPDATE SET n = n + excluded.n")
                .map_err(sql_err)?;
            up.execute(params![s.post_id, sk, -1, s.n])
                .map_err(sql_err)?;
            for (slot, n) in &s.slots {
                up.execute(params![s.post_id, sk, *slot as i64, n])
                    .map_err(sql_err)?;
            }
        }
        WriteItem::DeadLetter(d) => {
            tx.prepare_cached("INSERT OR IGNORE INTO dead_letters (shard_id, seq, arrival_ms, reason, data, size) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                .map_err(sql_err)?
                .execute(params![d.shard_id, d.seq.as_str(), d.arrival_ms, d.reason, d.data, d.size as i64])
                .map_err(sql_err)?;
        }
    }
    Ok(())
}

#[async_trait]
impl LeaseStore for Embedded {
    async fn ensure_leases(&self, app: &str, shards: &[ShardInfo]) -> PortResult<()> {
        let (app, shards) = (app.to_owned(), shards.to_vec());
        self.run(move |c| {
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            for s in &shards {
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO leases (app, shard_id, parents) VALUES (?1, ?2, ?3)",
                )
                .map_err(sql_err)?
                .execute(params![
                    app,
                    s.shard_id,
                    serde_json::to_string(&s.parents).unwrap_or_default()
                ])
                .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn list_leases(&self, app: &str) -> PortResult<Vec<Lease>> {
        let app = app.to_owned();
        self.run(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {LEASE_COLUMNS} FROM leases WHERE app = ?1 ORDER BY shard_id"
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map([&app], read_state)
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            Ok(rows.into_iter().map(|s| s.lease).collect())
        })
        .await
    }

    async fn take_lease(
        &self,
        app: &str,
        shard_id: &str,
        expected_epoch: u64,
        owner: &str,
        expires_ms: i64,
    ) -> PortResult<Option<Fence>> {
        let (app, shard_id, owner) = (app.to_owned(), shard_id.to_owned(), owner.to_owned());
        self.run(move |c| {
            let n = c
                .execute(
                    "UPDATE leases SET owner = ?1, epoch = epoch + 1, expires_ms = ?2 WHERE app = ?3 AND shard_id = ?4 AND epoch = ?5",
                    params![owner, expires_ms, app, shard_id, expected_epoch as i64],
                )
                .map_err(sql_err)?;
            Ok((n == 1).then(|| Fence { app, shard_id, owner, epoch: expected_epoch + 1 }))
        })
        .await
    }

    async fn renew_lease(&self, fence: &Fence, expires_ms: i64) -> PortResult<()> {
        let f = fence.clone();
        self.run(move |c| {
            let n = c
                .execute(
                    "UPDATE leases SET expires_ms = ?1 WHERE app = ?2 AND shard_id = ?3 AND owner = ?4 AND epoch = ?5",
                    params![expires_ms, f.app, f.shard_id, f.owner, f.epoch as i64],
                )
                .map_err(sql_err)?;
            if n == 1 { Ok(()) } else { Err(PortError::Fenced { app: f.app, shard_id: f.shard_id }) }
        })
        .await
    }

    async fn release_lease(&self, fence: &Fence) -> PortResult<()> {
        let f = fence.clone();
        self.run(move |c| {
            c.execute(
                "UPDATE leases SET owner = NULL, expires_ms = 0 WHERE app = ?1 AND shard_id = ?2 AND owner = ?3 AND epoch = ?4",
                params![f.app, f.shard_id, f.owner, f.epoch as i64],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn delete_lease(&self, app: &str, shard_id: &str) -> PortResult<()> {
        let (app, shard_id) = (app.to_owned(), shard_id.to_owned());
        self.run(move |c| {
            // A row is deleted once every child's clock is past the shard's horizon: its dedup
            // records can matter to no one any more.
            c.execute(
                "DELETE FROM dedup WHERE app = ?1 AND shard_id = ?2",
                params![app, shard_id],
            )
            .map_err(sql_err)?;
            c.execute(
                "DELETE FROM leases WHERE app = ?1 AND shard_id = ?2",
                params![app, shard_id],
            )
            .map(|_| ())
            .map_err(sql_err)
        })
        .await
    }

    async fn shard_state(&self, app: &str, shard_id: &str) -> PortResult<ShardState> {
        let (app, shard_id) = (app.to_owned(), shard_id.to_owned());
        self.run(move |c| state_in(c, &app, &shard_id)).await
    }

    async fn mark_finished(&self, fence: &Fence) -> PortResult<()> {
        let f = fence.clone();
        self.run(move |c| {
            let n = c
                .execute(
                    "UPDATE leases SET finished = 1 WHERE app = ?1 AND shard_id = ?2 AND owner = ?3 AND epoch = ?4 AND pending_end IS NULL",
                    params![f.app, f.shard_id, f.owner, f.epoch as i64],
                )
                .map_err(sql_err)?;
            if n == 1 { Ok(()) } else { Err(PortError::Fenced { app: f.app, shard_id: f.shard_id }) }
        })
        .await
    }
}

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

#[async_trait]
impl AnalyticsStore for Embedded {
    async fn save_snapshot(&self, fence: &Fence, snapshot: &AnalyticsSnapshot) -> PortResult<()> {
        let (fence, s) = (fence.clone(), snapshot.clone());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            check_fence(&tx, &fence)?;
            tx.execute(
                "INSERT OR REPLACE INTO analytics_snapshots (app, shard_id, end_seq, taken_at_ms, latency) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![fence.app, fence.shard_id, s.end.as_str(), s.taken_at_ms, s.latency],
            )
            .map_err(sql_err)?;
            let entries: Vec<(&str, f64, f64)> = s.trending.iter().map(|e| (e.post_id.as_str(), e.score, e.error)).collect();
            tx.execute(
                "INSERT OR REPLACE INTO trending (app, shard_id, at_ms, entries) VALUES (?1, ?2, ?3, ?4)",
                params![fence.app, fence.shard_id, s.trending_at_ms, serde_json::to_string(&entries).unwrap_or_default()],
            )
            .map_err(sql_err)?;
            tx.execute(
                "UPDATE leases SET checkpoint = ?1, max_arrival = ?2, finished = ?3 WHERE app = ?4 AND shard_id = ?5",
                params![s.end.as_str(), s.max_arrival, s.shard_finished as i64, fence.app, fence.shard_id],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn trending_sketches(
        &self,
        app: &str,
    ) -> PortResult<Vec<(String, Vec<TrendingEntry>, i64)>> {
        let app = app.to_owned();
        self.run(move |c| {
            let mut st = c
                .prepare_cached("SELECT shard_id, entries, at_ms FROM trending WHERE app = ?1")
                .map_err(sql_err)?;
            let rows = st
                .query_map([&app], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            Ok(rows
                .into_iter()
                .map(|(shard, json, at)| {
                    let raw: Vec<(String, f64, f64)> =
                        serde_json::from_str(&json).unwrap_or_default();
                    (
                        shard,
                        raw.into_iter()
                            .map(|(post_id, score, error)| TrendingEntry {
                                post_id,
                                score,
                                error,
                            })
                            .collect(),
                        at,
                    )
                })
                .collect())
        })
        .await
    }

    async fn latency_snapshots(&self, app: &str, since_ms: i64) -> PortResult<Vec<Vec<u8>>> {
        let app = app.to_owned();
        self.run(move |c| {
            let mut st = c
                .prepare_cached(
                    "SELECT latency FROM analytics_snapshots WHERE app = ?1 AND taken_at_ms >= ?2",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![app, since_ms], |r| r.get(0))
                .map_err(sql_err)?
                .collect::<Result<Vec<Vec<u8>>, _>>()
                .map_err(sql_err)?;
            Ok(rows)
        })
        .await
    }
}

#[async_trait]
impl BaselineWriters for Embedded {
    async fn update_per_like(&self, run: &str, post_id: &str, delta: i64) -> PortResult<()> {
        let (run, post) = (run.to_owned(), post_id.to_owned());
        self.run(move |c| {
            c.prepare_cached("INSERT INTO baseline_counts (run, post_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (run, post_id) DO UPDATE SET n = n + excluded.n")
                .map_err(sql_err)?
                .execute(params![run, post, delta])
                .map(|_| ())
                .map_err(sql_err)
        })
        .await
    }

    async fn transaction_per_like(
        &self,
        run: &str,
        event_id: &str,
        post_id: &str,
        delta: i64,
    ) -> PortResult<bool> {
        let (run, id, post) = (run.to_owned(), event_id.to_owned(), post_id.to_owned());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sql_err)?;
            let fresh = tx
                .prepare_cached("INSERT OR IGNORE INTO baseline_ids (run, event_id) VALUES (?1, ?2)")
                .map_err(sql_err)?
                .execute(params![run, id])
                .map_err(sql_err)?
                == 1;
            if fresh {
                tx.prepare_cached("INSERT INTO baseline_counts (run, post_id, n) VALUES (?1, ?2, ?3) ON CONFLICT (run, post_id) DO UPDATE SET n = n + excluded.n")
                    .map_err(sql_err)?
                    .execute(params![run, post, delta])
                    .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok(fresh)
        })
        .await
    }

    async fn baseline_count(&self, run: &str, post_id: &str) -> PortResult<i64> {
        let (run, post) = (run.to_owned(), post_id.to_owned());
        self.run(move |c| {
            c.query_row(
                "SELECT n FROM baseline_counts WHERE run = ?1 AND post_id = ?2",
                params![run, post],
                |r| r.get(0),
            )
            .optional()
            .map(|n| n.unwrap_or(0))
            .map_err(sql_err)
        })
        .await
    }
}
