//! [`LeaseStore`] on the leases table: one row per application and shard, the lease and the
//! checkpoint together so that one condition fences both.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, ReturnValue, TransactWriteItem,
};
use tally_core::ports::{
    asks_to_text, fleet_app, tombstones_app as tombstones, Ask, Fence, GapCommit, LeaseReader,
    LeaseStore, Member, PortError, PortResult, ReadProgress, Renewal, ShardInfo, ShardState,
};

use super::{n, row_of, s, DynamoStore, Expr};

impl DynamoStore {
    /// A lease item, decoded by the one codec both stores use (`tally_core::rows::shard_state`):
    /// a corrupt attribute is an error naming the item in its table, never a default.
    fn lease_from(&self, item: &HashMap<String, AttributeValue>) -> PortResult<ShardState> {
        tally_core::rows::shard_state(&row_of(item), &self.table("leases"))
    }

    /// Lease rows' states, by shard id.
    fn states_of(&self, items: &[HashMap<String, AttributeValue>]) -> PortResult<Vec<ShardState>> {
        let mut out = items
            .iter()
            .map(|i| self.lease_from(i))
            .collect::<PortResult<Vec<_>>>()?;
        out.sort_by(|a, b| a.lease.shard_id.cmp(&b.lease.shard_id));
        Ok(out)
    }
}

#[async_trait]
impl LeaseReader for DynamoStore {
    async fn list_states(&self, app: &str) -> PortResult<Vec<ShardState>> {
        let items = self.partition("leases", "app", app).await?;
        self.states_of(&items)
    }

    async fn list_states_to_plan(&self, app: &str) -> PortResult<Vec<ShardState>> {
        let values = HashMap::from([(":k".to_owned(), s(app))]);
        let items = self
            .query_all("leases", "app = :k", values, None, false)
            .await?;
        self.states_of(&items)
    }

    async fn shard_state(&self, app: &str, shard_id: &str) -> PortResult<ShardState> {
        match self.get("leases", Self::lease_key(app, shard_id)).await? {
            Some(item) => self.lease_from(&item),
            None => Err(PortError::NotFound {
                what: format!("lease {app}/{shard_id}"),
                hint: String::new(),
            }),
        }
    }

    async fn fleet(&self, app: &str, now_ms: i64) -> PortResult<Vec<Member>> {
        let items = self.partition("leases", "app", fleet_app(app)).await?;
        let mut out = Vec::new();
        for i in &items {
            let (table, row) = (self.table("leases"), super::row_of(i));
            let (member, expires_ms) =
                tally_core::rows::fleet_member(&row, &table, &fleet_app(app))?;
            if expires_ms > now_ms {
                out.push(member);
            }
        }
        out.sort_by(|a, b| a.worker.cmp(&b.worker));
        Ok(out)
    }
}

#[async_trait]
impl LeaseStore for DynamoStore {
    async fn ensure_leases(&self, app: &str, shards: &[ShardInfo]) -> PortResult<()> {
        for sh in shards {
            // Created only if absent and never cleaned up before: the shard's tombstone is checked
            // in the same transaction, so a listing made before a clean-up cannot bring the row
            // back (one transaction per row, once per shard and application).
            let row = Put::builder()
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
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            let never_cleaned = ConditionCheck::builder()
                .table_name(self.table("leases"))
                .set_key(Some(Self::lease_key(&tombstones(app), &sh.shard_id)))
                .condition_expression("attribute_not_exists(app)")
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            let items = vec![
                TransactWriteItem::builder().put(row).build(),
                TransactWriteItem::builder()
                    .condition_check(never_cleaned)
                    .build(),
            ];
            match self.transact((app, &sh.shard_id), items).await {
                // There already, or cleaned up for good.
                Ok(()) | Err(PortError::Fenced { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
            "SET {o} = {}, {xp} = {}, {e} = {} REMOVE {}, {}",
            x.val(s(owner)),
            x.val(n(expires_ms)),
            x.val(n(expected_epoch as i64 + 1)),
            x.name("holder_addr"),
            x.name("wanted_by")
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

    async fn renew_lease(
        &self,
        fence: &Fence,
        expires_ms: i64,
        progress: Option<ReadProgress>,
        addr: Option<&str>,
    ) -> PortResult<Option<String>> {
        let mut x = Expr::default();
        let r = Renewal {
            expires_ms,
            progress,
            addr: addr.map(str::to_owned),
        };
        let set = format!("SET {}", renewal_set(&mut x, &r));
        // The row as written, for the request in it: an UpdateItem's answer costs no read.
        let row = self
            .lease_write(fence, x, "", set, ReturnValue::AllNew)
            .await?;
        let table = self.table("leases");
        tally_core::rows::handoff_ask(&super::row_of(&row), &table, fence)
    }

    async fn ask_handoff(&self, held: &Fence, to: &str) -> PortResult<bool> {
        let mut x = Expr::default();
        let not_finished = format!(
            " AND NOT {} = {}",
            x.name("finished"),
            x.val(AttributeValue::Bool(true))
        );
        let set = format!("SET {} = {}", x.name("wanted_by"), x.val(s(to)));
        match self
            .lease_write(held, x, &not_finished, set, ReturnValue::None)
            .await
        {
            Ok(_) => Ok(true),
            Err(PortError::Fenced { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn hand_over(&self, fence: &Fence, to: &str, expires_ms: i64) -> PortResult<()> {
        self.lease_update(fence, "", |x| {
            format!(
                "SET {} = {}, {} = {}, {} = {} REMOVE {}, {}",
                x.name("owner"),
                x.val(s(to)),
                x.name("expires_ms"),
                x.val(n(expires_ms)),
                x.name("epoch"),
                x.val(n(fence.epoch as i64 + 1)),
                x.name("holder_addr"),
                x.name("wanted_by")
            )
        })
        .await
    }

    async fn release_lease(&self, fence: &Fence) -> PortResult<()> {
        match self
            .lease_update(fence, "", |x| {
                format!(
                    "REMOVE {}, {}, {} SET {} = {}",
                    x.name("owner"),
                    x.name("holder_addr"),
                    x.name("wanted_by"),
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
        // The row and its tombstone in one transaction: discovery checks the tombstone.
        let delete = Delete::builder()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(app, shard_id)))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let tombstone = Put::builder()
            .table_name(self.table("leases"))
            .item("app", s(tombstones(app)))
            .item("shard_id", s(shard_id))
            .item("finished", AttributeValue::Bool(true))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            TransactWriteItem::builder().put(tombstone).build(),
        ];
        self.transact((app, shard_id), items).await
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

    async fn commit_gap(&self, g: GapCommit<'_>) -> PortResult<()> {
        let mut x = Expr::default();
        let mut cond = Self::fence_cond(&mut x, g.fence);
        let (cp, pe, ph, pf, fin) = (
            x.name("checkpoint"),
            x.name("pending_end"),
            x.name("pending_horizon_ms"),
            x.name("pending_first"),
            x.name("finished"),
        );
        cond.push_str(&x.seq_is(&cp, g.start_after));
        cond.push_str(&x.seq_is(&pe, g.pending_end));
        let mut update = format!("SET {fin} = {}", x.val(AttributeValue::Bool(g.finished)));
        if let Some(t) = g.through {
            update.push_str(&format!(", {cp} = {}", x.val(s(t.to_string()))));
        }
        update.push_str(&format!(" REMOVE {pe}, {ph}, {pf}"));
        let items = vec![
            self.fenced_update(g.fence, x, cond, update)?,
            TransactWriteItem::builder()
                .put(self.dead_letter_put(g.gap)?)
                .build(),
        ];
        self.transact((&g.fence.app, &g.fence.shard_id), items)
            .await
    }

    async fn heartbeat(
        &self,
        app: &str,
        worker: &str,
        expires_ms: i64,
        asks: &[Ask],
    ) -> PortResult<()> {
        let mut x = Expr::default();
        let mut upd = format!(
            "SET {} = {}, {} = {}",
            x.name("expires_ms"),
            x.val(n(expires_ms)),
            x.name("owner"),
            x.val(s(worker))
        );
        match asks_to_text(asks) {
            Some(text) => upd.push_str(&format!(", {} = {}", x.name("asks"), x.val(s(text)))),
            None => upd.push_str(&format!(" REMOVE {}", x.name("asks"))),
        }
        self.client
            .update_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(&fleet_app(app), worker)))
            .update_expression(upd)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .send()
            .await
            .map_err(|e| self.err("UpdateItem", "leases", e))?;
        Ok(())
    }

    async fn leave_fleet(&self, app: &str, worker: &str) -> PortResult<()> {
        self.client
            .delete_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(&fleet_app(app), worker)))
            .send()
            .await
            .map_err(|e| self.err("DeleteItem", "leases", e))?;
        Ok(())
    }
}

/// The assignments of a renewal (`a = b, …`, without `SET`): the expiry, and the progress and
/// address when given. `renew_lease` writes them alone; a window's checkpoint writes them too.
pub(super) fn renewal_set(x: &mut Expr, r: &Renewal) -> String {
    let mut set = format!("{} = {}", x.name("expires_ms"), x.val(n(r.expires_ms)));
    if let Some(p) = r.progress {
        set.push_str(&format!(
            ", {} = {}, {} = {}",
            x.name("behind_ms"),
            x.val(n(p.behind_ms)),
            x.name("behind_at_ms"),
            x.val(n(p.at_ms))
        ));
    }
    if let Some(a) = &r.addr {
        set.push_str(&format!(", {} = {}", x.name("holder_addr"), x.val(s(a))));
    }
    set
}
