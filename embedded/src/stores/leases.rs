//! [`LeaseStore`]: one row per application and shard, the lease and the checkpoint together.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use tally_core::ports::{
    asks_to_text, tombstones_app as tombstones, Ask, Fence, GapCommit, LeaseReader, LeaseStore,
    Member, PortError, PortResult, ReadProgress, ShardInfo, ShardState,
};

use super::{check_fence, read_row, state_in, states_of, write_dead_letter, LEASE_COLUMNS};
use crate::{sql_err, Embedded};

#[async_trait]
impl LeaseReader for Embedded {
    async fn list_states(&self, app: &str) -> PortResult<Vec<ShardState>> {
        let app = app.to_owned();
        self.run(move |c| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT {LEASE_COLUMNS} FROM leases WHERE app = ?1 ORDER BY shard_id"
                ))
                .map_err(sql_err)?;
            let rows = st
                .query_map([&app], read_row)
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            states_of(rows)
        })
        .await
    }

    async fn shard_state(&self, app: &str, shard_id: &str) -> PortResult<ShardState> {
        let (app, shard_id) = (app.to_owned(), shard_id.to_owned());
        self.run(move |c| state_in(c, &app, &shard_id)).await
    }

    async fn fleet(&self, app: &str, now_ms: i64) -> PortResult<Vec<Member>> {
        let fleet = tally_core::ports::fleet_app(app);
        self.run(move |c| {
            // A fleet row's asks live in its `wanted_by` column (a lease row's asker there),
            // decoded by the one codec both stores use (`tally_core::rows::fleet_member`).
            let mut st = c
                .prepare_cached("SELECT shard_id, wanted_by, expires_ms FROM leases WHERE app = ?1 AND expires_ms > ?2 ORDER BY shard_id")
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![fleet, now_ms], |r| super::row_of(r, "shard_id, asks, expires_ms"))
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            rows.iter()
                .map(|row| tally_core::rows::fleet_member(row, "leases", &fleet).map(|(m, _)| m))
                .collect::<PortResult<Vec<Member>>>()
        })
        .await
    }
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
                // Never again for a shard whose row was cleaned up: its tombstone says so, however
                // old the listing that asked for the row.
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO leases (app, shard_id, parents) SELECT ?1, ?2, ?3 \
                     WHERE NOT EXISTS (SELECT 1 FROM leases WHERE app = ?4 AND shard_id = ?2)",
                )
                .map_err(sql_err)?
                .execute(params![
                    app,
                    s.shard_id,
                    serde_json::to_string(&s.parents).unwrap_or_default(),
                    tombstones(&app)
                ])
                .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)
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
                    "UPDATE leases SET owner = ?1, epoch = epoch + 1, expires_ms = ?2, holder_addr = NULL, wanted_by = NULL WHERE app = ?3 AND shard_id = ?4 AND epoch = ?5",
                    params![owner, expires_ms, app, shard_id, expected_epoch as i64],
                )
                .map_err(sql_err)?;
            Ok((n == 1).then(|| Fence { app, shard_id, owner, epoch: expected_epoch + 1 }))
        })
        .await
    }

    async fn renew_lease(
        &self,
        fence: &Fence,
        expires_ms: i64,
        progress: Option<ReadProgress>,
        addr: Option<&str>,
    ) -> PortResult<Option<String>> {
        let f = fence.clone();
        let (behind, at) = (progress.map(|p| p.behind_ms), progress.map(|p| p.at_ms));
        let addr = addr.map(str::to_owned);
        self.run(move |c| {
            let wanted = c
                .query_row(
                    "UPDATE leases SET expires_ms = ?1, behind_ms = COALESCE(?6, behind_ms), behind_at_ms = COALESCE(?7, behind_at_ms), \
                     holder_addr = COALESCE(?8, holder_addr) WHERE app = ?2 AND shard_id = ?3 AND owner = ?4 AND epoch = ?5 RETURNING wanted_by",
                    params![expires_ms, f.app, f.shard_id, f.owner, f.epoch as i64, behind, at, addr],
                    |r| super::row_of(r, "wanted_by"),
                )
                .optional()
                .map_err(sql_err)?;
            match wanted {
                Some(row) => tally_core::rows::handoff_ask(&row, "leases", &f),
                None => Err(PortError::Fenced { app: f.app, shard_id: f.shard_id }),
            }
        })
        .await
    }

    async fn ask_handoff(&self, held: &Fence, to: &str) -> PortResult<bool> {
        let (f, to) = (held.clone(), to.to_owned());
        self.run(move |c| {
            let n = c
                .execute(
                    "UPDATE leases SET wanted_by = ?1 WHERE app = ?2 AND shard_id = ?3 AND owner = ?4 AND epoch = ?5 AND finished = 0",
                    params![to, f.app, f.shard_id, f.owner, f.epoch as i64],
                )
                .map_err(sql_err)?;
            Ok(n == 1)
        })
        .await
    }

    async fn hand_over(&self, fence: &Fence, to: &str, expires_ms: i64) -> PortResult<()> {
        let (f, to) = (fence.clone(), to.to_owned());
        self.run(move |c| {
            let n = c
                .execute(
                    "UPDATE leases SET owner = ?1, epoch = epoch + 1, expires_ms = ?2, holder_addr = NULL, wanted_by = NULL \
                     WHERE app = ?3 AND shard_id = ?4 AND owner = ?5 AND epoch = ?6",
                    params![to, expires_ms, f.app, f.shard_id, f.owner, f.epoch as i64],
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
                "UPDATE leases SET owner = NULL, expires_ms = 0, holder_addr = NULL, wanted_by = NULL WHERE app = ?1 AND shard_id = ?2 AND owner = ?3 AND epoch = ?4",
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
            let tx = c
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            // A row is deleted once every child's clock is past the shard's horizon: its dedup
            // records can matter to no one any more.
            tx.execute(
                "DELETE FROM dedup WHERE app = ?1 AND shard_id = ?2",
                params![app, shard_id],
            )
            .map_err(sql_err)?;
            tx.execute(
                "DELETE FROM leases WHERE app = ?1 AND shard_id = ?2",
                params![app, shard_id],
            )
            .map_err(sql_err)?;
            tx.execute(
                "INSERT OR IGNORE INTO leases (app, shard_id, parents, finished) VALUES (?1, ?2, '[]', 1)",
                params![tombstones(&app), shard_id],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
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
            write_dead_letter(&tx, &gap)?;
            tx.execute(
                "UPDATE leases SET checkpoint = ?1, pending_end = NULL, pending_horizon_ms = NULL, pending_first = NULL, finished = ?2 WHERE app = ?3 AND shard_id = ?4",
                params![checkpoint.as_ref().map(|s| s.to_string()), finished as i64, fence.app, fence.shard_id],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)
        })
        .await
    }

    async fn heartbeat(
        &self,
        app: &str,
        worker: &str,
        expires_ms: i64,
        asks: &[Ask],
    ) -> PortResult<()> {
        let (fleet, worker) = (tally_core::ports::fleet_app(app), worker.to_owned());
        let asks = asks_to_text(asks);
        self.run(move |c| {
            c.execute(
                "INSERT INTO leases (app, shard_id, owner, expires_ms, parents, wanted_by) VALUES (?1, ?2, ?2, ?3, '[]', ?4) \
                 ON CONFLICT(app, shard_id) DO UPDATE SET expires_ms = excluded.expires_ms, wanted_by = excluded.wanted_by",
                params![fleet, worker, expires_ms, asks],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }

    async fn leave_fleet(&self, app: &str, worker: &str) -> PortResult<()> {
        let (fleet, worker) = (tally_core::ports::fleet_app(app), worker.to_owned());
        self.run(move |c| {
            c.execute(
                "DELETE FROM leases WHERE app = ?1 AND shard_id = ?2",
                params![fleet, worker],
            )
            .map_err(sql_err)?;
            Ok(())
        })
        .await
    }
}
