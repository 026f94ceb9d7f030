//! What a store says of how it was counted, as `#meta` items of the counts table: its count
//! mode, the one stream it counts, a rebuild into it under way; and the regions its tables are
//! replicated to.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use tally_core::edge::{self, CountMode};
use tally_core::ports::PortResult;
use tally_core::{rows, summary};

use super::{row_of, s, DynamoStore};

impl DynamoStore {
    /// The stored count mode; with `claim`, set first if unset. A store with global totals and no
    /// mode is refused, read or claimed: only an earlier build of tally counted without claiming
    /// a mode.
    pub(super) async fn mode(&self, claim: Option<CountMode>) -> PortResult<Option<CountMode>> {
        let key = meta_key(edge::MODE_SK);
        let mode_of = |item: &HashMap<String, AttributeValue>| {
            rows::count_mode(&row_of(item), &self.meta_item(edge::MODE_SK))
        };
        if let Some(item) = self.get("counts", key.clone()).await? {
            return mode_of(&item).map(Some);
        }
        let counted = !self
            .client
            .query()
            .table_name(self.table("counts"))
            .key_condition_expression("pk = :k")
            .expression_attribute_values(":k", s(summary::GLOBAL_PK))
            .limit(1)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.err("Query", "counts", e))?
            .items()
            .is_empty();
        if counted {
            return Err(rows::counted_without_mode(&self.table("counts")));
        }
        let Some(m) = claim else { return Ok(None) };
        let r = self
            .meta_put(&key, "mode", m.as_str())
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(Some(m)),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                // Another process claimed it first: its claim stands.
                let item = self.get("counts", key).await?;
                item.as_ref().map(mode_of).transpose()
            }
            Err(e) => Err(self.err("PutItem", "counts", e)),
        }
    }

    /// A `PutItem` of the `#meta` item `key` holding `name` = `value`.
    fn meta_put(
        &self,
        key: &HashMap<String, AttributeValue>,
        name: &str,
        value: &str,
    ) -> aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder {
        let item = key.clone().into_iter().chain([(name.to_owned(), s(value))]);
        self.client
            .put_item()
            .table_name(self.table("counts"))
            .set_item(Some(item.collect()))
    }

    /// The stream the store is counted from; with `claim`, set to it when none is named yet
    /// (a conditional put: the first claim wins, and is what is answered).
    pub(super) async fn stream_claim(&self, claim: Option<&str>) -> PortResult<Option<String>> {
        let key = meta_key(edge::STREAM_SK);
        let named = |item: &HashMap<String, AttributeValue>| {
            rows::meta_value(&row_of(item), &self.meta_item(edge::STREAM_SK))
        };
        if let Some(item) = self.get("counts", key.clone()).await? {
            return named(&item).map(Some);
        }
        let Some(want) = claim else { return Ok(None) };
        let r = self
            .meta_put(&key, "v", want)
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(Some(want.to_owned())),
            Err(SdkError::ServiceError(se))
                if matches!(se.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                // Another process claimed it first: its claim stands.
                let item = self.get("counts", key).await?;
                item.as_ref().map(named).transpose()
            }
            Err(e) => Err(self.err("PutItem", "counts", e)),
        }
    }

    /// The regions the tables are replicated to (a global table's replicas), by `DescribeTable`
    /// of each of the counter's tables.
    pub(super) async fn replicas(&self) -> PortResult<Vec<String>> {
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

    /// The source of a rebuild under way into the store (`None`: none).
    pub(super) async fn rebuild_source(&self) -> PortResult<Option<String>> {
        let item = self.get("counts", meta_key(edge::REBUILDING_SK)).await?;
        item.map(|i| rows::meta_value(&row_of(&i), &self.meta_item(edge::REBUILDING_SK)))
            .transpose()
    }

    /// Records a rebuild from `source` under way (a rerun of it writes the same again), or
    /// (`None`) that it finished: the item deleted.
    pub(super) async fn set_rebuild_source(&self, source: Option<&str>) -> PortResult<()> {
        let key = meta_key(edge::REBUILDING_SK);
        match source {
            Some(v) => self
                .meta_put(&key, "v", v)
                .send()
                .await
                .map(drop)
                .map_err(|e| self.err("PutItem", "counts", e)),
            None => self
                .client
                .delete_item()
                .table_name(self.table("counts"))
                .set_key(Some(key))
                .send()
                .await
                .map(drop)
                .map_err(|e| self.err("DeleteItem", "counts", e)),
        }
    }

    /// The `#meta` item `sk`, named in errors.
    fn meta_item(&self, sk: &str) -> String {
        format!("{} {}/{sk}", self.table("counts"), edge::MODE_PK)
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
