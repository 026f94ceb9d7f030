//! [`BaselineWriters`] on the counts and dedup tables, under keys of their own
//! (`bench#<run>#<post>` and `bench#<run>`): the patterns tally is measured against.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use tally_baselines::BaselineWriters;
use tally_core::clock::now_ms;
use tally_core::ports::{PortError, PortResult};

use super::{n, s, DynamoStore};

fn count_key(run: &str, post_id: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s(format!("bench#{run}#{post_id}"))),
        ("sk".to_owned(), s("T")),
    ])
}

impl DynamoStore {
    fn baseline_add(&self, run: &str, post_id: &str, delta: i64) -> PortResult<Update> {
        Update::builder()
            .table_name(self.table("counts"))
            .set_key(Some(count_key(run, post_id)))
            .update_expression("ADD #n :d")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":d", n(delta))
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))
    }
}

#[async_trait]
impl BaselineWriters for DynamoStore {
    async fn update_per_like(&self, run: &str, post_id: &str, delta: i64) -> PortResult<()> {
        self.client
            .update_item()
            .table_name(self.table("counts"))
            .set_key(Some(count_key(run, post_id)))
            .update_expression("ADD #n :d")
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(":d", n(delta))
            .send()
            .await
            .map_err(|e| self.err("UpdateItem", "counts", e))?;
        Ok(())
    }

    async fn transaction_per_like(
        &self,
        run: &str,
        event_id: &str,
        post_id: &str,
        delta: i64,
    ) -> PortResult<bool> {
        let id = Put::builder()
            .table_name(self.table("dedup"))
            .item("pk", s(format!("bench#{run}")))
            .item("sk", s(event_id))
            .item("expires_at", n(now_ms() / 1000 + 86_400))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))?;
        let items = vec![
            TransactWriteItem::builder().put(id).build(),
            TransactWriteItem::builder()
                .update(self.baseline_add(run, post_id, delta)?)
                .build(),
        ];
        let whose = format!("bench#{run}");
        match self.transact((&whose, event_id), items).await {
            Ok(()) => Ok(true),
            // The idempotency item exists: the event was applied before.
            Err(PortError::Fenced { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn edge_per_like(
        &self,
        run: &str,
        post_id: &str,
        user_id: &str,
        like: bool,
    ) -> PortResult<bool> {
        let pk = format!("bench#{run}#{post_id}");
        let sk = format!("E#{user_id}");
        let invalid = |e: aws_sdk_dynamodb::error::BuildError| PortError::Invalid(e.to_string());
        let edge = if like {
            TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(self.table("counts"))
                        .item("pk", s(&pk))
                        .item("sk", s(&sk))
                        .condition_expression("attribute_not_exists(pk)")
                        .build()
                        .map_err(invalid)?,
                )
                .build()
        } else {
            TransactWriteItem::builder()
                .delete(
                    Delete::builder()
                        .table_name(self.table("counts"))
                        .key("pk", s(&pk))
                        .key("sk", s(&sk))
                        .condition_expression("attribute_exists(pk)")
                        .build()
                        .map_err(invalid)?,
                )
                .build()
        };
        let items = vec![
            edge,
            TransactWriteItem::builder()
                .update(self.baseline_add(run, post_id, if like { 1 } else { -1 })?)
                .build(),
        ];
        match self.transact((&pk, &sk), items).await {
            Ok(()) => Ok(true),
            // Liked already, or nothing to unlike.
            Err(PortError::Fenced { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn baseline_count(&self, run: &str, post_id: &str) -> PortResult<i64> {
        let item = format!("{} {run}#{post_id}", self.table("counts"));
        match self.get("counts", count_key(run, post_id)).await? {
            Some(i) => tally_baselines::count_of(&super::row_of(&i), &item),
            None => Ok(0),
        }
    }
}
