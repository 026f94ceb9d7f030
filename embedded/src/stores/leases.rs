//! [`LeaseStore`]: one row per application and shard, the lease and the checkpoint together.

use super::*;

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
