//! [`AnalyticsStore`] on the leases, analytics and dedup tables: a snapshot, its dedup record and
//! its checkpoint in one `TransactWriteItems`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use tally_core::clock::now_ms;
use tally_core::ports::{
    AnalyticsReader, AnalyticsSnapshot, AnalyticsStore, Fence, PortError, PortResult, TrendingEntry,
};

use super::{get_s, n, s, DynamoStore, Expr, SNAPSHOT_TTL_SECS};

#[async_trait]
impl AnalyticsReader for DynamoStore {
    async fn trending_sketches(
        &self,
        app: &str,
    ) -> PortResult<Vec<(String, Vec<TrendingEntry>, i64)>> {
        let items = self
            .partition("analytics", "pk", format!("{app}#trending"))
            .await?;
        items
            .iter()
            .map(|i| {
                let shard = get_s(i, "sk").unwrap_or_default();
                let item = format!("{} {app}#trending/{shard}", self.table("analytics"));
                let (entries, at) = tally_core::rows::trending_row(&super::row_of(i), &item)?;
                Ok((shard, entries, at))
            })
            .collect()
    }

    async fn latency_snapshots(&self, app: &str, since_ms: i64) -> PortResult<Vec<(i64, Vec<u8>)>> {
        let values = HashMap::from([
            (":p".to_owned(), s(format!("{app}#latency"))),
            (":t".to_owned(), s(format!("{:013}", since_ms.max(0)))),
        ]);
        let items = self
            .query_all("analytics", "pk = :p AND sk >= :t", values, None, true)
            .await?;
        // A snapshot item that is not what tally writes is an error naming it, never left out.
        items
            .iter()
            .map(|i| {
                let sk = get_s(i, "sk").unwrap_or_default();
                let item = format!("{} {app}#latency/{sk}", self.table("analytics"));
                let at = tally_core::rows::snapshot_time(&sk, &item)?;
                let bytes = i
                    .get("latency")
                    .and_then(|v| v.as_b().ok())
                    .ok_or_else(|| PortError::Corrupt {
                        item,
                        detail: "`latency` is missing or not binary".into(),
                    })?;
                Ok((at, bytes.as_ref().to_vec()))
            })
            .collect()
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
            x.val(s(snap.end.to_string())),
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
        // The window's sketches, the trending one and the all-time one, each a put of its own.
        let sketch = |app: &str, entries: &[TrendingEntry]| {
            Put::builder()
                .table_name(self.table("analytics"))
                .item("pk", s(format!("{app}#trending")))
                .item("sk", s(&fence.shard_id))
                .item("at_ms", n(snap.trending_at_ms))
                .item("entries", s(TrendingEntry::encode_all(entries)))
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))
        };
        let trending = sketch(&fence.app, &snap.trending)?;
        let top_liked = sketch(&tally_core::ports::all_time(&fence.app), &snap.top_liked)?;
        let mut items = vec![
            lease,
            TransactWriteItem::builder().put(latency).build(),
            TransactWriteItem::builder().put(trending).build(),
            TransactWriteItem::builder().put(top_liked).build(),
        ];
        if !snap.dedup.ids.is_empty() {
            let dedup = self.dedup_put(
                &fence.app,
                &fence.shard_id,
                &snap.end,
                &snap.dedup,
                snap.horizon_ms,
            )?;
            items.push(TransactWriteItem::builder().put(dedup).build());
        }
        self.transact((&fence.app, &fence.shard_id), items).await
    }
}
