//! The lease, counter and analytics stores on DynamoDB.
//!
//! Tables (names are `<prefix>-<suffix>`; the design and its reasons are in ARCHITECTURE.md):
//! - `leases` (`app`, `shard_id`): owner, epoch, expiry, checkpoint, dedup clock, pending window
//!   progress, finished flag, parents.
//! - `counts` (`pk` = post id, `sk` = `L#<shard>` | `H<YYYYMMDDHH>#<shard>` | `D<YYYYMMDD>#<shard>`):
//!   the summary items of [`tally_core::summary`]; global totals under `pk = #global`,
//!   `sk = <app>#<shard>`; the store's own items under `pk = #meta` (`sk` = `count`: the count
//!   mode, `stream`: the stream it counts, `rebuilding`: a rebuild under way).
//! - `edges` (`pk` = post id, `sk` = `E#<user>`): likers' edges, each a last-writer-wins register
//!   (`l`, `t`, `e`, and `lt` while liked); its stream (DynamoDB Streams, `NEW_AND_OLD_IMAGES`)
//!   is the edges' change log ([`crate::edge_log`]), its index `recent` the liked edges by time.
//! - `dedup` (`pk` = `<app>#<shard>`, `sk` = `<clock>#<window end>`): first-seen id hashes, TTL
//!   `expires_at`.
//! - `dead-letters` (`shard_id`, `seq`): reason and raw bytes.
//! - `analytics` (`pk` = `<app>#latency` | `<app>#trending`, `sk`): snapshots, TTL `expires_at`.
//!
//! Layout: this module holds the client, the table list and the helpers every store uses; one
//! file per port implements it: `leases` ([`LeaseStore`](tally_core::ports::LeaseStore)),
//! `counter` ([`CounterStore`](tally_core::ports::CounterStore)'s window protocol, reads and
//! store records), `edges` ([`EdgeWriter`](tally_core::ports::EdgeWriter): the conditional edge
//! writes and their change log), `analytics`
//! ([`AnalyticsStore`](tally_core::ports::AnalyticsStore)), `baselines`
//! ([`BaselineWriters`](tally_baselines::BaselineWriters), for benchmarks). The counter's other
//! likers parts are a file each: `likers` (edges read back: a page's viewer likes, a post's
//! likers), `recent` (likers most recent first), `scan` (every edge), and `meta` (the `#meta`
//! items the claims of `tally_core::meta` read and write, and the tables' replicas).

use std::collections::HashMap;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnConsumedCapacity, ReturnValue, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use tally_core::dedup::DedupRecord;
use tally_core::ports::{Fence, PortError, PortResult};
use tally_core::rows::{Field, Row};
use tally_core::Position;

use crate::errors::{map, CallError, ServiceError, Target};
use crate::AwsSettings;

mod analytics;
mod baselines;
mod counter;
mod edges;
mod leases;
mod likers;
mod meta;
mod recent;
mod scan;

/// The tables: suffix, partition key, sort key, TTL attribute. `setup` and the Terraform drift
/// test read this list.
pub const TABLES: &[(&str, &str, &str, Option<&str>)] = &[
    ("leases", "app", "shard_id", None),
    ("counts", "pk", "sk", None),
    ("edges", "pk", "sk", None),
    ("dedup", "pk", "sk", Some("expires_at")),
    ("dead-letters", "shard_id", "seq", None),
    ("analytics", "pk", "sk", Some("expires_at")),
];

/// What a dedup record's TTL adds to the latest time a restore can need it (its clock plus the
/// horizon plus the stream's retention): room for clock skew between the stream and DynamoDB.
pub const DEDUP_TTL_MARGIN_SECS: i64 = 86_400;

/// A dedup record's sort key: its clock, 20 digits so that keys sort by it (restores and expiry
/// are key ranges), then its window's end.
pub(crate) fn dedup_sk(max_arrival: i64, end: &Position) -> String {
    format!("{}#{end}", arrival_key(max_arrival))
}

/// An arrival time as the sortable prefix of a dedup sort key.
pub(crate) fn arrival_key(ms: i64) -> String {
    format!("{:020}", ms.max(0))
}
/// One call of several run side by side ([`side_by_side`]).
pub(crate) type Call<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Runs `calls` side by side, at most `in_flight` at a time; their results in the calls' order.
pub(crate) async fn side_by_side<T>(calls: Vec<Call<'_, T>>, in_flight: usize) -> Vec<T> {
    use futures_util::stream::{self, StreamExt};
    stream::iter(calls).buffered(in_flight).collect().await
}

/// Latency snapshots are kept this long (seconds).
pub const SNAPSHOT_TTL_SECS: i64 = 7 * 86_400;

/// The DynamoDB tables.
#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    prefix: String,
    target: Target,
    /// The hour of each live item this process wrote last (saves reads and refused writes).
    known_hours: std::sync::Arc<counter::KnownHours>,
    /// The stream's retention: how long a dedup record can still be needed past its horizon.
    retention_secs: i64,
    /// The edges table's change log, its stream's ARN looked up once for every clone.
    edge_log: crate::edge_log::EdgeLog,
}

/// The full name of the table `suffix` of the table set `prefix`.
fn table_name(prefix: &str, suffix: &str) -> String {
    format!("{prefix}-{suffix}")
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

    /// ` AND <attr> = <v>`, or ` AND attribute_not_exists(<attr>)` when `v` is `None`: a stored
    /// sequence number (a checkpoint, a pending end) that must still be the expected one.
    fn seq_is(&mut self, attr: &str, v: Option<&Position>) -> String {
        match v {
            None => format!(" AND attribute_not_exists({attr})"),
            Some(v) => format!(" AND {attr} = {}", self.val(s(v.to_string()))),
        }
    }

    fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// A DynamoDB item as a stored row (`tally_core::rows`), its attributes as they are.
pub(crate) fn row_of(item: &HashMap<String, AttributeValue>) -> Row {
    item.iter()
        .map(|(k, v)| {
            let f = match v {
                AttributeValue::N(n) => n
                    .parse()
                    .map_or_else(|_| Field::Other(format!("the number {n}")), Field::N),
                AttributeValue::S(t) => Field::S(t.clone()),
                AttributeValue::Bool(b) => Field::B(*b),
                AttributeValue::B(b) => Field::Bytes(b.as_ref().to_vec()),
                AttributeValue::L(l) => l
                    .iter()
                    .map(|x| x.as_s().ok().cloned())
                    .collect::<Option<Vec<String>>>()
                    .map_or_else(|| Field::Other(format!("the list {l:?}")), Field::L),
                other => Field::Other(format!("{other:?}")),
            };
            (k.clone(), f)
        })
        .collect()
}

/// Maps a cancelled transaction by its cancellation reasons: a failed condition means the lease
/// (or the progress it guards) moved, a conflict is retried, a validation error is a bug.
fn transact_err(
    target: &Target,
    (app, shard_id): (&str, &str),
    e: CallError<TransactWriteItemsError>,
) -> PortError {
    if let SdkError::ServiceError(se) = &e {
        if let TransactWriteItemsError::TransactionCanceledException(c) = se.err() {
            let codes: Vec<&str> = c
                .cancellation_reasons()
                .iter()
                .filter_map(|r| r.code())
                .collect();
            let has = |x: &str| codes.contains(&x);
            let what = format!("TransactWriteItems for {app}/{shard_id}");
            return if has("ConditionalCheckFailed") {
                PortError::Fenced {
                    app: app.to_owned(),
                    shard_id: shard_id.to_owned(),
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
        &format!("tables of {app}/{shard_id}"),
        e,
    )
}

impl DynamoStore {
    /// A client for the tables with the configured prefix.
    pub fn new(sdk: &SdkConfig, st: &AwsSettings) -> DynamoStore {
        let mut b = aws_sdk_dynamodb::config::Builder::from(sdk)
            .retry_partition(crate::retry_partition("tally-dynamodb"));
        if let Some(url) = &st.dynamodb_endpoint_url {
            b = b.endpoint_url(url);
        }
        let client = Client::from_conf(b.build());
        let target = Target::new(
            "DynamoDB",
            "dynamodb",
            st.dynamodb_endpoint_url.as_ref(),
            sdk,
        );
        let edges = table_name(&st.table_prefix, "edges");
        DynamoStore {
            edge_log: crate::edge_log::EdgeLog::new(sdk, st, client.clone(), target.clone(), edges),
            client,
            prefix: st.table_prefix.clone(),
            known_hours: Default::default(),
            retention_secs: st.stream_retention_hours as i64 * 3600,
            target,
        }
    }

    /// Where its calls go, for messages (a backfill's source table goes there too).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The SDK client (setup).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A table's full name.
    pub fn table(&self, suffix: &str) -> String {
        table_name(&self.prefix, suffix)
    }

    /// An error of `call` on the table of suffix `table`.
    pub(crate) fn err<E: ServiceError>(
        &self,
        call: &str,
        table: &str,
        e: CallError<E>,
    ) -> PortError {
        let resource = format!("table {}", self.table(table));
        map(&self.target, call, &resource, e)
    }

    /// Checks that every table exists and the endpoint answers.
    pub async fn check(&self) -> PortResult<()> {
        let all: Vec<&str> = TABLES.iter().map(|(suffix, ..)| *suffix).collect();
        self.check_tables(&all).await
    }

    /// Checks that these tables (by suffix) exist and the endpoint answers.
    pub async fn check_tables(&self, suffixes: &[&str]) -> PortResult<()> {
        for suffix in suffixes {
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

    /// One `TransactWriteItems`; `(app, shard_id)` names whose write it is in errors, and a
    /// failed condition is `Fenced` for them.
    async fn transact(&self, whose: (&str, &str), items: Vec<TransactWriteItem>) -> PortResult<()> {
        self.client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
            .map_err(|e| transact_err(&self.target, whose, e))?;
        Ok(())
    }

    /// A window's dedup record. It expires by TTL, which costs nothing, once no restore can need
    /// it: past the horizon of its clock plus the stream's retention (nothing older can still be
    /// read), plus a margin.
    fn dedup_put(
        &self,
        app: &str,
        shard_id: &str,
        end: &Position,
        rec: &DedupRecord,
        horizon_ms: i64,
    ) -> PortResult<Put> {
        let expires = rec.max_arrival.saturating_add(horizon_ms) / 1000
            + self.retention_secs
            + DEDUP_TTL_MARGIN_SECS;
        Put::builder()
            .table_name(self.table("dedup"))
            .item("pk", s(format!("{app}#{shard_id}")))
            .item("sk", s(dedup_sk(rec.max_arrival, end)))
            .item("max_arrival", n(rec.max_arrival))
            .item("ids", AttributeValue::B(Blob::new(rec.encode_ids())))
            .item("expires_at", n(expires))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))
    }

    /// Every item of a Query, following pagination: only the `projection`'s attributes when
    /// given, strongly consistent when `consistent`.
    async fn query_all(
        &self,
        table: &str,
        key_cond: &str,
        values: HashMap<String, AttributeValue>,
        projection: Option<&str>,
        consistent: bool,
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
                .set_projection_expression(projection.map(str::to_owned))
                .consistent_read(consistent)
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
        self.query_all(table, &format!("{key_attr} = :k"), values, None, true)
            .await
    }

    /// Deletes the dedup records of `app`/`shard_id` whose clock is below `before` (all of them
    /// for `i64::MAX`): a key-only Query of the range, one DeleteItem per record (a window evicts
    /// about one record, so there are few). Returns the write units the deletes consumed.
    async fn delete_dedup_below(&self, app: &str, shard_id: &str, before: i64) -> PortResult<u64> {
        let pk = format!("{app}#{shard_id}");
        let values = HashMap::from([
            (":p".to_owned(), s(&pk)),
            (":c".to_owned(), s(arrival_key(before))),
        ]);
        let keys = self
            .query_all("dedup", "pk = :p AND sk < :c", values, Some("pk, sk"), true)
            .await?;
        let mut units = 0.0;
        for key in keys {
            let r = self
                .client
                .delete_item()
                .table_name(self.table("dedup"))
                .set_key(Some(key))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .map_err(|e| self.err("DeleteItem", "dedup", e))?;
            units += r
                .consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(1.0);
        }
        Ok(units.ceil() as u64)
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

    /// A conditional update of a lease row outside a transaction; a failed condition is `Fenced`.
    async fn lease_update(
        &self,
        fence: &Fence,
        extra_cond: &str,
        update: impl FnOnce(&mut Expr) -> String,
    ) -> PortResult<()> {
        let mut x = Expr::default();
        let upd = update(&mut x);
        self.lease_write(fence, x, extra_cond, upd, ReturnValue::None)
            .await
            .map(drop)
    }

    /// An `UpdateItem` of the fence's lease row, conditioned on the fence and `extra_cond`
    /// (whose names and values are in `x`); a failed condition is `Fenced`. Answers the row's
    /// attributes as `returns` asks (no extra units: an `UpdateItem` costs its write whatever it
    /// returns).
    async fn lease_write(
        &self,
        fence: &Fence,
        mut x: Expr,
        extra_cond: &str,
        update: String,
        returns: ReturnValue,
    ) -> PortResult<HashMap<String, AttributeValue>> {
        let cond = format!("{}{extra_cond}", Self::fence_cond(&mut x, fence));
        let r = self
            .client
            .update_item()
            .table_name(self.table("leases"))
            .set_key(Some(Self::lease_key(&fence.app, &fence.shard_id)))
            .condition_expression(cond)
            .update_expression(update)
            .set_expression_attribute_names(x.names())
            .set_expression_attribute_values(x.values())
            .return_values(returns)
            .send()
            .await;
        match r {
            Ok(out) => Ok(out.attributes.unwrap_or_default()),
            Err(e) => match self.err("UpdateItem", "leases", e) {
                PortError::Fenced { .. } => Err(PortError::Fenced {
                    app: fence.app.clone(),
                    shard_id: fence.shard_id.clone(),
                }),
                other => Err(other),
            },
        }
    }
}
