//! An application's own DynamoDB table, read for a backfill: whether its changes stream to the
//! stream tally reads (`DescribeKinesisStreamingDestination`), its key attributes
//! (`DescribeTable`), and its items (a strongly consistent `Scan`), as the JSON a change record
//! carries (`{"S": "…"}`, `{"N": "…"}`, …).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, DestinationStatus};
use aws_sdk_dynamodb::Client;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use base64::Engine;
use serde_json::{json, Value};
use tally_core::ports::{Item, PortResult, Streaming, TableScan};

use crate::errors::{map, Target};
use crate::AwsSettings;

/// The table a backfill reads.
pub struct SourceTable {
    client: Client,
    target: Target,
    name: String,
}

impl SourceTable {
    /// The table `name`, through the settings' DynamoDB endpoint.
    pub async fn new(s: &AwsSettings, name: &str) -> PortResult<SourceTable> {
        // The same client tally's own tables are reached by: endpoint, retries, messages.
        let tables = crate::dynamo::DynamoStore::new(&crate::sdk_config().await?, s);
        Ok(SourceTable {
            client: tables.client().clone(),
            target: tables.target().clone(),
            name: name.to_owned(),
        })
    }
}

#[async_trait]
impl tally_core::ports::SourceTable for SourceTable {
    async fn streams_to(&self, stream: &str) -> PortResult<Streaming> {
        let call = "DescribeKinesisStreamingDestination";
        let out = match self
            .client
            .describe_kinesis_streaming_destination()
            .table_name(&self.name)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                let code = e.as_service_error().and_then(|s| s.code()).unwrap_or("");
                if matches!(
                    code,
                    "UnknownOperationException" | "UnrecognizedClientException"
                ) || e.as_service_error().is_none()
                    && e.raw_response().is_some_and(|r| r.status().as_u16() == 400)
                {
                    return Ok(Streaming::Unknown);
                }
                return Err(map(&self.target, call, &self.name, e));
            }
        };
        let mut seen = Vec::new();
        for d in out.kinesis_data_stream_destinations() {
            let arn = d.stream_arn().unwrap_or("");
            let status = d.destination_status().cloned();
            if arn.rsplit('/').next() == Some(stream) && status == Some(DestinationStatus::Active) {
                return Ok(Streaming::Active);
            }
            seen.push(format!(
                "{arn} ({})",
                status.as_ref().map_or("no status", |s| s.as_str())
            ));
        }
        Ok(Streaming::Not(if seen.is_empty() {
            "no Kinesis streaming destination".into()
        } else {
            seen.join(", ")
        }))
    }

    async fn key_attributes(&self) -> PortResult<Vec<String>> {
        let out = self
            .client
            .describe_table()
            .table_name(&self.name)
            .send()
            .await
            .map_err(|e| map(&self.target, "DescribeTable", &self.name, e))?;
        Ok(out
            .table()
            .map(|t| {
                t.key_schema()
                    .iter()
                    .map(|k| k.attribute_name().to_owned())
                    .collect()
            })
            .unwrap_or_default())
    }

    fn scan(&self) -> Box<dyn TableScan + '_> {
        Box::new(Scan {
            table: self,
            start: None,
            done: false,
        })
    }
}

/// A strongly consistent scan of a table.
struct Scan<'t> {
    table: &'t SourceTable,
    start: Option<std::collections::HashMap<String, AttributeValue>>,
    done: bool,
}

#[async_trait]
impl TableScan for Scan<'_> {
    async fn next(&mut self) -> PortResult<Option<Vec<Item>>> {
        if self.done {
            return Ok(None);
        }
        let t = self.table;
        let out = t
            .client
            .scan()
            .table_name(&t.name)
            .consistent_read(true)
            .set_exclusive_start_key(self.start.take())
            .send()
            .await
            .map_err(|e| map(&t.target, "Scan", &t.name, e))?;
        self.start = out.last_evaluated_key().cloned();
        self.done = self.start.is_none();
        Ok(Some(out.items().iter().map(item_json).collect()))
    }
}

/// An item as DynamoDB JSON.
pub fn item_json(item: &std::collections::HashMap<String, AttributeValue>) -> Item {
    item.iter()
        .map(|(k, v)| (k.clone(), value_json(v)))
        .collect()
}

fn value_json(v: &AttributeValue) -> Value {
    let b64 =
        |b: &aws_smithy_types::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::B(b) => json!({ "B": b64(b) }),
        AttributeValue::Ss(s) => json!({ "SS": s }),
        AttributeValue::Ns(n) => json!({ "NS": n }),
        AttributeValue::Bs(b) => json!({ "BS": b.iter().map(b64).collect::<Vec<_>>() }),
        AttributeValue::L(l) => json!({ "L": l.iter().map(value_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        _ => json!({ "NULL": true }),
    }
}
