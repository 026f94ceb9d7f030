//! The lease, counter and analytics stores on DynamoDB.
//!
//! Tables (names are `<prefix>-<suffix>`; the design and its reasons are in ARCHITECTURE.md):
//! - `leases` (`app`, `shard_id`): owner, epoch, expiry, checkpoint, dedup clock, pending window
//!   progress, finished flag, parents.
//! - `counts` (`pk` = post id, `sk` = `T` | `H<YYYYMMDDHH>` | `D<YYYYMMDD>`): `n`, plus `m00`–`m59`
//!   in hour items and `h00`–`h23` in day items; global totals under `pk = #global`,
//!   `sk = <app>#<shard>`.
//! - `dedup` (`pk` = `<app>#<shard>`, `sk` = window end): first-seen id hashes, TTL `expires_at`.
//! - `dead-letters` (`shard_id`, `seq`): reason and raw bytes.
//! - `analytics` (`pk` = `<app>#latency` | `<app>#trending`, `sk`): snapshots, TTL `expires_at`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Put, Select, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use tally_core::buckets::{since_count, since_plan, ItemKind, StoredItems};
use tally_core::dedup::DedupRecord;
use tally_core::lease::Lease;
use tally_core::ports::{
    AnalyticsSnapshot, AnalyticsStore, ChunkCommit, CounterStore, Fence, LeaseStore, Pending,
    PortError, PortResult, PostCount, ShardInfo, ShardState, TrendingEntry, WindowShape,
};
use tally_core::window::{DeadLetter, WriteItem};
use tally_core::SeqNo;

use crate::errors::{map, Target};
use crate::AwsSettings;

/// The tables: suffix, partition key, sort key, TTL attribute. `setup` and the Terraform drift
/// test read this list.
pub const TABLES: &[(&str, &str, &str, Option<&str>)] = &[
    ("leases", "app", "shard_id", None),
    ("counts", "pk", "sk", None),
    ("dedup", "pk", "sk", Some("expires_at")),
    ("dead-letters", "shard_id", "seq", None),
    ("analytics", "pk", "sk", Some("expires_at")),
];

/// Most items in one TransactWriteItems call.
pub const MAX_TRANSACT_ITEMS: usize = 100;
/// Items a window's last chunk adds to its data items: the lease row, the dedup record, the
/// global total.
pub const FENCE_ITEMS: usize = 3;
/// Dedup records are kept this long (seconds) after they are written.
pub const DEDUP_TTL_SECS: i64 = 26 * 3_600;
/// Latency snapshots are kept this long (seconds).
pub const SNAPSHOT_TTL_SECS: i64 = 7 * 86_400;
/// The partition of the global totals in the counts table (`#` cannot start a post id).
pub const GLOBAL_PK: &str = "#global";

/// The DynamoDB tables.
#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    prefix: String,
    target: Target,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &HashMap<String, AttributeValue>, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &HashMap<String, AttributeValue>, k: &str) -> Option<i64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Collects expression attribute names and values.
#[derive(Default)]
struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    fn name(&mut self, attr: &str) -> String {
        let k = format!("#{attr}");
        self.names.insert(k.clone(), attr.to_owned());
        k
    }

    fn val(&mut self, v: AttributeValue) -> String {
        let k = format!(":v{}", self.values.len());
        self.values.insert(k.clone(), v);
        k
    }

    fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

fn lease_from(item: &HashMap<String, AttributeValue>) -> ShardState {
    let parents = item
        .get("parents")
        .and_then(|v| v.as_l().ok())
        .map(|l| l.iter().filter_map(|p| p.as_s().ok().cloned()).collect())
        .unwrap_or_default();
    let pending = match (
        get_s(item, "pending_end").as_deref().and_then(SeqNo::parse),
        get_n(item, "pending_done"),
        get_n(item, "pending_count"),
    ) {
        (Some(end), Some(done), Some(count)) => Some(Pending {
            end,
            done: done as u32,
            count: count as u32,
            shape: match (
                get_n(item, "pending_max_items"),
                get_n(item, "pending_horizon_ms"),
            ) {
                (Some(m), Some(h)) => Some(WindowShape {
                    max_items: m as u32,
                    horizon_ms: h,
                }),
                _ => None,
            },
        }),
        _ => None,
    };
    ShardState {
        lease: Lease {
            app: get_s(item, "app").unwrap_or_default(),
            shard_id: get_s(item, "shard_id").unwrap_or_default(),
            owner: get_s(item, "owner"),
            epoch: get_n(item, "epoch").unwrap_or(0) as u64,
            expires_ms: get_n(item, "expires_ms").unwrap_or(0),
            checkpoint: get_s(item, "checkpoint").as_deref().and_then(SeqNo::parse),
            finished: item
                .get("finished")
                .and_then(|v| v.as_bool().ok())
                .copied()
                .unwrap_or(false),
            parents,
            max_arrival: get_n(item, "max_arrival").unwrap_or(i64::MIN),
        },
        pending,
    }
}

/// Maps a cancelled transaction by its cancellation reasons: a failed condition means the lease
/// (or the progress it guards) moved, a conflict is retried, a validation error is a bug.
fn transact_err(
    target: &Target,
    fence: &Fence,
    e: SdkError<TransactWriteItemsError, aws_smithy_runtime_api::http::Response>,
) -> PortError {
    if let SdkError::ServiceError(se) = &e {
        if let TransactWriteItemsError::TransactionCanceledException(c) = se.err() {
            let codes: Vec<&str> = c
                .cancellation_reasons()
                .iter()
                .filter_map(|r| r.code())
                .collect();
            let has = |x: &str| codes.contains(&x);
            let what = format!("TransactWriteItems for {}/{}", fence.app, fence.shard_id);
            return if has("ConditionalCheckFailed") {
                PortError::Fenced {
                    app: fence.app.clone(),
                    shard_id: fence.shard_id.clone(),
                }
            } else if has("TransactionConflict") {
                PortError::Conflict(format!("{what}: {codes:?}"))
            } else if has("ThrottlingError")
                || has("ProvisionedThroughputExceeded")
                || has("RequestLimitExceeded")
            {
                PortError::Throttled(format!("{what}: {codes:?}"))
            } else if has("ValidationError") {
                let msgs: Vec<&str> = c
                    .cancellation_reasons()
                    .iter()
                    .filter_map(|r| r.message())
                    .collect();
                PortError::Invalid(format!("{what}: {msgs:?}"))
            } else {
                PortError::Other(format!("{what} cancelled: {codes:?}"))
            };
        }
    }
    map(
        target,
        "TransactWriteItems",
        &format!("tables of {}/{}", fence.app, fence.shard_id),
        e,
    )
}

impl DynamoStore {
    /// A client for the tables with the configured prefix.
    pub fn new(sdk: &SdkConfig, st: &AwsSettings) -> DynamoStore {
        let mut b = aws_sdk_dynamodb::config::Builder::from(sdk);
        if let Some(url) = &st.dynamodb_endpoint_url {
            b = b.endpoint_url(url);
        }
        DynamoStore {
            client: Client::from_conf(b.build()),
            prefix: st.table_prefix.clone(),
            target: Target::new(
                "DynamoDB",
                "dynamodb",
                st.dynamodb_endpoint_url.as_ref(),
                sdk,
            ),
        }
    }

    /// The SDK client (setup).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A table's full name.
    pub fn table(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    pub(crate) fn err<E>(
        &self,
        call: &str,
        table: &str,
        e: SdkError<E, aws_smithy_runtime_api::http::Response>,
    ) -> PortError
    where
        E: aws_smithy_types::error::metadata::ProvideErrorMetadata
            + std::error::Error
            + Send
            + Sync
            + 'static,
    {
        map(
            &self.target,
            call,
            &format!("table {}", self.table(table)),
            e,
        )
    }

    /// Checks that every table exists and the endpoint answers.
    pub async fn check(&self) -> PortResult<()> {
        for (suffix, ..) in TABLES {
            self.client
                .describe_table()
                .table_name(self.table(suffix))
                .send()
                .await
                .map_err(|e| self.err("DescribeTable", suffix, e))?;
        }
        Ok(())
    }

    fn lease_key(app: &str, shard_id: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("app".to_owned(), s(app)),
            ("shard_id".to_owned(), s(shard_id)),
        ])
    }

    /// Adds `#owner = :o AND #epoch = :e` for a fence.
    fn fence_cond(x: &mut Expr, fence: &Fence) -> String {
        let (o, e) = (x.name("owner"), x.name("epoch"));
        let (vo, ve) = (x.val(s(&fence.owner)), x.val(n(fence.epoch as i64)));
        format!("{o} = {vo} AND {e} = {ve}")
    }

    fn fenced_update(
        &self,
        fence: &Fence,
        x: Expr,
        cond: String,
        update: String,
    ) -> PortResult<TransactWriteItem> {
        let u = Update::builder()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(&fence.app, &fence.shard_id)))
            .condition_expression(cond)
            .update_expression(update)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        Ok(TransactWriteItem::builder().update(u).build())
    }

    fn item_write(&self, item: &WriteItem) -> PortResult<TransactWriteItem> {
        match item {
            WriteItem::Summary(si) => {
                let mut x = Expr::default();
                let mut adds = vec![format!("{} {}", x.name("n"), x.val(n(si.n)))];
                let prefix = match si.kind {
                    ItemKind::Hour(_) => "m",
                    _ => "h",
                };
                for (slot, v) in &si.slots {
                    let attr = format!("{prefix}{slot:02}");
                    adds.push(format!("{} {}", x.name(&attr), x.val(n(*v))));
                }
                let u = Update::builder()
                    .table_name(self.table("counts"))
                    .key("pk", s(&si.post_id))
                    .key("sk", s(si.kind.sort_key()))
                    .update_expression(format!("ADD {}", adds.join(", ")))
                    .set_expression_attribute_names(x.names())
                    .set_expression_attribute_values(x.values())
                    .build()
                    .map_err(|e| PortError::Invalid(e.to_string()))?;
                Ok(TransactWriteItem::builder().update(u).build())
            }
            WriteItem::DeadLetter(d) => {
                let p = Put::builder()
                    .table_name(self.table("dead-letters"))
                    .item("shard_id", s(&d.shard_id))
                    .item("seq", s(d.seq.as_str()))
                    .item("arrival_ms", n(d.arrival_ms))
                    .item("reason", s(&d.reason))
                    .item("data", AttributeValue::B(Blob::new(d.data.clone())))
                    .item("size", n(d.size as i64))
                    .build()
                    .map_err(|e| PortError::Invalid(e.to_string()))?;
                Ok(TransactWriteItem::builder().put(p).build())
            }
        }
    }

    async fn transact(&self, fence: &Fence, items: Vec<TransactWriteItem>) -> PortResult<()> {
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| transact_err(&self.target, fence, e))?;
        Ok(())
    }

    /// Every item of a Query, following pagination.
    async fn query_all(
        &self,
        table: &str,
        key_cond: &str,
        values: HashMap<String, AttributeValue>,
        filter: Option<String>,
    ) -> PortResult<Vec<HashMap<String, AttributeValue>>> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let resp = self
                .client
                .query()
                .table_name(self.table(table))
                .key_condition_expression(key_cond)
                .set_expression_attribute_values(Some(values.clone()))
                .set_filter_expression(filter.clone())
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Query", table, e))?;
            out.extend(resp.items().iter().cloned());
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(out),
            }
        }
    }

    /// Every item of one partition (`key_attr` = `value`).
    async fn partition(
        &self,
        table: &str,
        key_attr: &str,
        value: impl Into<String>,
    ) -> PortResult<Vec<HashMap<String, AttributeValue>>> {
        let values = HashMap::from([(":k".to_owned(), s(value))]);
        self.query_all(table, &format!("{key_attr} = :k"), values, None)
            .await
    }

    async fn get(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
    ) -> PortResult<Option<HashMap<String, AttributeValue>>> {
        let resp = self
            .client
            .get_item()
            .table_name(self.table(table))
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("GetItem", table, e))?;
        Ok(resp.item().cloned())
    }

    async fn counts_item(
        &self,
        post: &str,
        sk: &str,
    ) -> PortResult<Option<HashMap<String, AttributeValue>>> {
        self.get(
            "counts",
            HashMap::from([("pk".to_owned(), s(post)), ("sk".to_owned(), s(sk))]),
        )
        .await
    }

    /// A conditional update of a lease row outside a transaction; a failed condition is `Fenced`.
    async fn lease_update(
        &self,
        fence: &Fence,
        call: &str,
        extra_cond: &str,
        update: impl FnOnce(&mut Expr) -> String,
    ) -> PortResult<()> {
        let mut x = Expr::default();
        let cond = format!("{}{extra_cond}", Self::fence_cond(&mut x, fence));
        let upd = update(&mut x);
        let r = self
            .client
            .update_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(&fence.app, &fence.shard_id)))
            .condition_expression(cond)
            .update_expression(upd)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) => match self.err(call, "leases", e) {
                PortError::Fenced { .. } => Err(PortError::Fenced {
                    app: fence.app.clone(),
                    shard_id: fence.shard_id.clone(),
                }),
                other => Err(other),
            },
        }
    }
}

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
        self.lease_update(fence, "UpdateItem", "", |x| {
            format!("SET {} = {}", x.name("expires_ms"), x.val(n(expires_ms)))
        })
        .await
    }

    async fn release_lease(&self, fence: &Fence) -> PortResult<()> {
        match self
            .lease_update(fence, "UpdateItem", "", |x| {
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
        self.lease_update(
            fence,
            "UpdateItem",
            " AND attribute_not_exists(pending_end)",
            |x| {
                format!(
                    "SET {} = {}",
                    x.name("finished"),
                    x.val(AttributeValue::Bool(true))
                )
            },
        )
        .await
    }
}

#[async_trait]
impl CounterStore for DynamoStore {
    fn max_items_per_commit(&self) -> usize {
        MAX_TRANSACT_ITEMS - FENCE_ITEMS
    }

    async fn commit_chunk(&self, c: ChunkCommit<'_>) -> PortResult<()> {
        let fence = c.fence;
        let mut items = Vec::with_capacity(c.items.len() + FENCE_ITEMS);
        // The fence: the lease row's owner and epoch, and the progress recorded so far.
        let mut x = Expr::default();
        let mut cond = Self::fence_cond(&mut x, fence);
        let (cp, pe, pd, pc) = (
            x.name("checkpoint"),
            x.name("pending_end"),
            x.name("pending_done"),
            x.name("pending_count"),
        );
        match c.start_after {
            None => cond.push_str(&format!(" AND attribute_not_exists({cp})")),
            Some(sa) => cond.push_str(&format!(" AND {cp} = {}", x.val(s(sa.as_str())))),
        }
        let end = x.val(s(c.end.as_str()));
        // DynamoDB rejects unused values, so the count is only named where an expression uses it.
        let needs_count = c.index > 0 || c.last.is_none();
        let count = if needs_count {
            x.val(n(c.count as i64))
        } else {
            String::new()
        };
        if c.index == 0 {
            cond.push_str(&format!(" AND attribute_not_exists({pe})"));
        } else {
            cond.push_str(&format!(
                " AND {pe} = {end} AND {pd} = {} AND {pc} = {count}",
                x.val(n(c.index as i64))
            ));
        }
        let update = match &c.last {
            Some(l) => {
                let (ma, fin) = (x.name("max_arrival"), x.name("finished"));
                let (pm, ph) = (x.name("pending_max_items"), x.name("pending_horizon_ms"));
                format!(
                    "SET {cp} = {end}, {ma} = {}, {fin} = {} REMOVE {pe}, {pd}, {pc}, {pm}, {ph}",
                    x.val(n(l.dedup.max_arrival)),
                    x.val(AttributeValue::Bool(l.shard_finished))
                )
            }
            None => {
                let (pm, ph) = (x.name("pending_max_items"), x.name("pending_horizon_ms"));
                format!(
                    "SET {pe} = {end}, {pd} = {}, {pc} = {count}, {pm} = {}, {ph} = {}",
                    x.val(n(c.index as i64 + 1)),
                    x.val(n(c.shape.max_items as i64)),
                    x.val(n(c.shape.horizon_ms))
                )
            }
        };
        items.push(self.fenced_update(fence, x, cond, update)?);
        for it in c.items {
            items.push(self.item_write(it)?);
        }
        if let Some(l) = &c.last {
            let pk = format!("{}#{}", fence.app, fence.shard_id);
            let dedup = Put::builder()
                .table_name(self.table("dedup"))
                .item("pk", s(&pk))
                .item("sk", s(c.end.as_str()))
                .item("max_arrival", n(l.dedup.max_arrival))
                .item("ids", AttributeValue::B(Blob::new(l.dedup.encode_ids())))
                .item("expires_at", n(now_ms() / 1000 + DEDUP_TTL_SECS))
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            items.push(TransactWriteItem::builder().put(dedup).build());
            let total = Update::builder()
                .table_name(self.table("counts"))
                .key("pk", s(GLOBAL_PK))
                .key("sk", s(&pk))
                .update_expression("ADD #n :d")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":d", n(l.total_delta))
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            items.push(TransactWriteItem::builder().update(total).build());
        }
        if items.len() > MAX_TRANSACT_ITEMS {
            return Err(PortError::Invalid(format!(
                "a chunk of {} items exceeds TransactWriteItems' {MAX_TRANSACT_ITEMS}",
                items.len()
            )));
        }
        self.transact(fence, items).await
    }

    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<DedupRecord>> {
        let mut out = Vec::new();
        for shard in shard_ids {
            let values = HashMap::from([
                (":p".to_owned(), s(format!("{app}#{shard}"))),
                (":m".to_owned(), n(min_arrival)),
            ]);
            let items = self
                .query_all("dedup", "pk = :p", values, Some("max_arrival >= :m".into()))
                .await?;
            for i in items {
                let ids = i
                    .get("ids")
                    .and_then(|v| v.as_b().ok())
                    .and_then(|b| DedupRecord::decode_ids(b.as_ref()));
                match (ids, get_n(&i, "max_arrival")) {
                    (Some(ids), Some(max_arrival)) => out.push(DedupRecord { max_arrival, ids }),
                    _ => {
                        return Err(PortError::Other(format!(
                            "corrupt dedup record of {app}/{shard} in {}",
                            self.table("dedup")
                        )))
                    }
                }
            }
        }
        Ok(out)
    }

    async fn post_count(&self, post_id: &str, since_ms: Option<i64>) -> PortResult<PostCount> {
        let total = self
            .counts_item(post_id, "T")
            .await?
            .and_then(|i| get_n(&i, "n"))
            .unwrap_or(0);
        let since = match since_ms {
            None => None,
            Some(t) => {
                let plan = since_plan(t);
                let slots = |item: Option<HashMap<String, AttributeValue>>,
                             prefix: char|
                 -> Vec<(u8, i64)> {
                    item.map(|i| {
                        i.iter()
                            .filter_map(|(k, v)| {
                                let slot: u8 = k.strip_prefix(prefix)?.parse().ok()?;
                                Some((slot, v.as_n().ok()?.parse().ok()?))
                            })
                            .collect()
                    })
                    .unwrap_or_default()
                };
                let hour = self
                    .counts_item(post_id, &ItemKind::Hour(plan.hour_key.clone()).sort_key())
                    .await?;
                let day = self
                    .counts_item(post_id, &ItemKind::Day(plan.day_key.clone()).sort_key())
                    .await?;
                let values = HashMap::from([
                    (":p".to_owned(), s(post_id)),
                    (
                        ":lo".to_owned(),
                        s(ItemKind::Day(plan.first_full_day.clone()).sort_key()),
                    ),
                    (":hi".to_owned(), s("D99999999")),
                ]);
                let later = self
                    .query_all("counts", "pk = :p AND sk BETWEEN :lo AND :hi", values, None)
                    .await?;
                let items = StoredItems {
                    total,
                    hour_slots: slots(hour, 'm'),
                    day_slots: slots(day, 'h'),
                    later_days: later.iter().filter_map(|i| get_n(i, "n")).collect(),
                };
                Some(since_count(&plan, &items))
            }
        };
        Ok(PostCount { total, since })
    }

    async fn global_total(&self) -> PortResult<i64> {
        let items = self.partition("counts", "pk", GLOBAL_PK).await?;
        Ok(items.iter().filter_map(|i| get_n(i, "n")).sum())
    }

    async fn dead_letters(&self, limit: usize) -> PortResult<Vec<DeadLetter>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(self.table("dead-letters"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Scan", "dead-letters", e))?;
            for i in resp.items() {
                if let (Some(shard_id), Some(seq)) = (
                    get_s(i, "shard_id"),
                    get_s(i, "seq").as_deref().and_then(SeqNo::parse),
                ) {
                    out.push(DeadLetter {
                        shard_id,
                        seq,
                        arrival_ms: get_n(i, "arrival_ms").unwrap_or(0),
                        reason: get_s(i, "reason").unwrap_or_default(),
                        data: i
                            .get("data")
                            .and_then(|v| v.as_b().ok())
                            .map(|b| b.as_ref().to_vec())
                            .unwrap_or_default(),
                        size: get_n(i, "size").unwrap_or(0).max(0) as u64,
                    });
                }
            }
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() && out.len() < limit => start = Some(k.clone()),
                _ => break,
            }
        }
        out.sort_by(|a, b| {
            (a.arrival_ms, &a.shard_id, &a.seq).cmp(&(b.arrival_ms, &b.shard_id, &b.seq))
        });
        out.truncate(limit);
        Ok(out)
    }

    async fn dead_letter_count(&self) -> PortResult<u64> {
        let mut total = 0u64;
        let mut start = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(self.table("dead-letters"))
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Scan", "dead-letters", e))?;
            total += resp.count().max(0) as u64;
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(total),
            }
        }
    }
}

#[async_trait]
impl AnalyticsStore for DynamoStore {
    async fn save_snapshot(&self, fence: &Fence, snap: &AnalyticsSnapshot) -> PortResult<()> {
        let mut x = Expr::default();
        let cond = Self::fence_cond(&mut x, fence);
        let (cp, ma, fin) = (
            x.name("checkpoint"),
            x.name("max_arrival"),
            x.name("finished"),
        );
        let update = format!(
            "SET {cp} = {}, {ma} = {}, {fin} = {}",
            x.val(s(snap.end.as_str())),
            x.val(n(snap.max_arrival)),
            x.val(AttributeValue::Bool(snap.shard_finished))
        );
        let lease = self.fenced_update(fence, x, cond, update)?;
        let latency = Put::builder()
            .table_name(self.table("analytics"))
            .item("pk", s(format!("{}#latency", fence.app)))
            .item(
                "sk",
                s(format!(
                    "{:013}#{}#{}",
                    snap.taken_at_ms.max(0),
                    fence.shard_id,
                    snap.end
                )),
            )
            .item(
                "latency",
                AttributeValue::B(Blob::new(snap.latency.clone())),
            )
            .item("expires_at", n(now_ms() / 1000 + SNAPSHOT_TTL_SECS))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let entries: Vec<(&str, f64, f64)> = snap
            .trending
            .iter()
            .map(|e| (e.post_id.as_str(), e.score, e.error))
            .collect();
        let trending = Put::builder()
            .table_name(self.table("analytics"))
            .item("pk", s(format!("{}#trending", fence.app)))
            .item("sk", s(&fence.shard_id))
            .item("at_ms", n(snap.trending_at_ms))
            .item(
                "entries",
                s(serde_json::to_string(&entries).unwrap_or_default()),
            )
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        self.transact(
            fence,
            vec![
                lease,
                TransactWriteItem::builder().put(latency).build(),
                TransactWriteItem::builder().put(trending).build(),
            ],
        )
        .await
    }

    async fn trending_sketches(
        &self,
        app: &str,
    ) -> PortResult<Vec<(String, Vec<TrendingEntry>, i64)>> {
        let items = self
            .partition("analytics", "pk", format!("{app}#trending"))
            .await?;
        Ok(items
            .iter()
            .map(|i| {
                let raw: Vec<(String, f64, f64)> = get_s(i, "entries")
                    .and_then(|j| serde_json::from_str(&j).ok())
                    .unwrap_or_default();
                (
                    get_s(i, "sk").unwrap_or_default(),
                    raw.into_iter()
                        .map(|(post_id, score, error)| TrendingEntry {
                            post_id,
                            score,
                            error,
                        })
                        .collect(),
                    get_n(i, "at_ms").unwrap_or(0),
                )
            })
            .collect())
    }

    async fn latency_snapshots(&self, app: &str, since_ms: i64) -> PortResult<Vec<Vec<u8>>> {
        let values = HashMap::from([
            (":p".to_owned(), s(format!("{app}#latency"))),
            (":t".to_owned(), s(format!("{:013}", since_ms.max(0)))),
        ]);
        let items = self
            .query_all("analytics", "pk = :p AND sk >= :t", values, None)
            .await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                i.get("latency")
                    .and_then(|v| v.as_b().ok())
                    .map(|b| b.as_ref().to_vec())
            })
            .collect())
    }
}
