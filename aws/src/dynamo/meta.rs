//! What a store says of how it was counted, as `#meta` items of the counts table: its count
//! mode, the one stream it counts, a rebuild into it under way; and the regions its tables are
//! replicated to.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use tally_core::edge::{self, MetaItem};
use tally_core::ports::{PortResult, StoreMeta};
use tally_core::rows::Row;
use tally_core::summary;

use super::{row_of, s, DynamoStore};

#[async_trait]
impl StoreMeta for DynamoStore {
    async fn meta_item(&self, item: MetaItem) -> PortResult<Option<Row>> {
        let key = meta_key(item.sk());
        Ok(self.get("counts", key).await?.as_ref().map(row_of))
    }

    async fn put_meta_item(&self, it: MetaItem, value: &str, if_absent: bool) -> PortResult<bool> {
        let item = meta_key(it.sk())
            .into_iter()
            .chain([(it.field().to_owned(), s(value))]);
        let put = self.client.put_item().table_name(self.table("counts"));
        let put = put.set_item(Some(item.collect()));
        let put = match if_absent {
            true => put.condition_expression("attribute_not_exists(pk)"),
            false => put,
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.err("PutItem", "counts", e)),
        }
    }

    async fn delete_rebuilding(&self) -> PortResult<()> {
        let delete = self.client.delete_item().table_name(self.table("counts"));
        delete
            .set_key(Some(meta_key(MetaItem::Rebuilding.sk())))
            .send()
            .await
            .map(drop)
            .map_err(|e| self.err("DeleteItem", "counts", e))
    }

    /// One item of the global totals' partition read.
    async fn has_counted(&self) -> PortResult<bool> {
        let query = self.client.query().table_name(self.table("counts"));
        let out = query
            .key_condition_expression("pk = :k")
            .expression_attribute_values(":k", s(summary::GLOBAL_PK))
            .limit(1)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("Query", "counts", e))?;
        Ok(!out.items().is_empty())
    }

    fn store_name(&self) -> String {
        self.table("counts")
    }

    /// By `DescribeTable` of each of the counter's tables.
    async fn replica_regions(&self) -> PortResult<Vec<String>> {
        let mut regions = Vec::new();
        for t in ["counts", "edges", "leases", "dedup"] {
            let d = self
                .client
                .describe_table()
                .table_name(self.table(t))
                .send()
                .await
                .map_err(|e| self.err("DescribeTable", t, e))?;
            for r in d.table().map(replica_regions).unwrap_or_default() {
                if !regions.contains(&r) {
                    regions.push(r);
                }
            }
        }
        Ok(regions)
    }
}

/// The key of the `#meta` item `sk` of the counts table.
fn meta_key(sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s(edge::MODE_PK)),
        ("sk".to_owned(), s(sk)),
    ])
}

/// The regions a table description names as replicas (a global table; none otherwise).
pub(super) fn replica_regions(t: &aws_sdk_dynamodb::types::TableDescription) -> Vec<String> {
    t.replicas()
        .iter()
        .filter_map(|r| r.region_name().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod replica_tests {
    use aws_sdk_dynamodb::types::{ReplicaDescription, TableDescription};

    /// A global table's description names its replicas' regions; a table of one region none.
    #[test]
    fn a_global_table_s_replicas_are_named() {
        let global = TableDescription::builder()
            .replicas(
                ReplicaDescription::builder()
                    .region_name("eu-west-1")
                    .build(),
            )
            .replicas(
                ReplicaDescription::builder()
                    .region_name("ap-south-1")
                    .build(),
            )
            .build();
        assert_eq!(super::replica_regions(&global), ["eu-west-1", "ap-south-1"]);
        let single = TableDescription::builder().build();
        assert!(super::replica_regions(&single).is_empty());
    }
}
