//! [`LeaseStore`] on the leases table: one row per application and shard, the lease and the
//! checkpoint together so that one condition fences both.

use super::*;

#[async_trait]
impl LeaseStore for DynamoStore {
    async fn ensure_leases(&self, app: &str, shards: &[ShardInfo]) -> PortResult<()> {
        for sh in shards {
            let r = self
                .client
                .put_item()
                .table_name(self.table("leases"))
                .item("app", s(app))
                .item("shard_id", s(&sh.shard_id))
                .item("epoch", n(0))
                .item("expires_ms", n(0))
                .item("finished", AttributeValue::Bool(false))
                .item("max_arrival", n(i64::MIN))
                .item(
                    "parents",
                    AttributeValue::L(sh.parents.iter().map(s).collect()),
                )
                .condition_expression("attribute_not_exists(app)")
                .send()
                .await;
            match r.map_err(|e| self.err("PutItem", "leases", e)) {
                Ok(_) | Err(PortError::Fenced { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn list_leases(&self, app: &str) -> PortResult<Vec<Lease>> {
        let items = self.partition("leases", "app", app).await?;
        let mut out: Vec<Lease> = items.iter().map(|i| lease_from(i).lease).collect();
        out.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(out)
    }

    async fn take_lease(
        &self,
        app: &str,
        shard_id: &str,
        expected_epoch: u64,
        owner: &str,
        expires_ms: i64,
    ) -> PortResult<Option<Fence>> {
        let mut x = Expr::default();
        let (e, o, xp) = (x.name("epoch"), x.name("owner"), x.name("expires_ms"));
        let cond = format!("{e} = {}", x.val(n(expected_epoch as i64)));
        let upd = format!(
            "SET {o} = {}, {xp} = {}, {e} = {}",
            x.val(s(owner)),
            x.val(n(expires_ms)),
            x.val(n(expected_epoch as i64 + 1))
        );
        let r = self
            .client
            .update_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(app, shard_id)))
            .condition_expression(cond)
            .update_expression(upd)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .send()
            .await;
        match r.map_err(|e| self.err("UpdateItem", "leases", e)) {
            Ok(_) => Ok(Some(Fence {
                app: app.to_owned(),
                shard_id: shard_id.to_owned(),
                owner: owner.to_owned(),
                epoch: expected_epoch + 1,
            })),
            Err(PortError::Fenced { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn renew_lease(&self, fence: &Fence, expires_ms: i64) -> PortResult<()> {
        self.lease_update(fence, "", |x| {
            format!("SET {} = {}", x.name("expires_ms"), x.val(n(expires_ms)))
        })
        .await
    }

    async fn release_lease(&self, fence: &Fence) -> PortResult<()> {
        match self
            .lease_update(fence, "", |x| {
                format!(
                    "REMOVE {} SET {} = {}",
                    x.name("owner"),
                    x.name("expires_ms"),
                    x.val(n(0))
                )
            })
            .await
        {
            Ok(()) | Err(PortError::Fenced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_lease(&self, app: &str, shard_id: &str) -> PortResult<()> {
        // A row is deleted once every child's clock is past the shard's horizon: its dedup
        // records can matter to no one any more.
        self.delete_dedup_below(app, shard_id, i64::MAX).await?;
        self.client
            .delete_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(app, shard_id)))
            .send()
            .await
            .map_err(|e| self.err("DeleteItem", "leases", e))?;
        Ok(())
    }

    async fn shard_state(&self, app: &str, shard_id: &str) -> PortResult<ShardState> {
        match self.get("leases", Self::lease_key(app, shard_id)).await? {
            Some(item) => Ok(lease_from(&item)),
            None => Err(PortError::NotFound {
                what: format!("lease {app}/{shard_id}"),
                hint: String::new(),
            }),
        }
    }

    async fn mark_finished(&self, fence: &Fence) -> PortResult<()> {
        self.lease_update(fence, " AND attribute_not_exists(pending_end)", |x| {
            format!(
                "SET {} = {}",
                x.name("finished"),
                x.val(AttributeValue::Bool(true))
            )
        })
        .await
    }
}
