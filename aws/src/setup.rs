//! `tally setup` on AWS: the stream and tables, created if missing, waited on until active. For
//! development and tests; production uses Terraform (`terraform/`).

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_kinesis::types::StreamStatus;
use tally_core::edge;
use tally_core::ports::{PortError, PortResult};

use crate::dynamo::{DynamoStore, TABLES};
use crate::edge_log::change_stream;
use crate::kinesis::KinesisStream;
use crate::{sdk_config, AwsSettings};

/// How long to wait for a resource to become active.
const WAIT: Duration = Duration::from_secs(120);

/// Creates what is missing and waits until everything is active; returns a summary.
pub async fn setup(s: &AwsSettings, shards: usize) -> PortResult<String> {
    let sdk = sdk_config().await?;
    let stream = KinesisStream::new(&sdk, s);
    let tables = DynamoStore::new(&sdk, s);
    let mut created = Vec::new();

    match stream.summary().await {
        Ok(_) => {}
        Err(PortError::NotFound { .. }) => {
            let k = stream.client();
            k.create_stream()
                .stream_name(stream.name())
                .shard_count(shards as i32)
                .send()
                .await
                .map_err(|e| stream.err("CreateStream", e))?;
            created.push(format!("stream {} ({shards} shards)", stream.name()));
        }
        Err(e) => return Err(e),
    }

    let d = tables.client();
    for (suffix, pk, sk, ttl) in TABLES {
        let name = tables.table(suffix);
        let edges = *suffix == "edges";
        let recent = s.recent_likers_index && edges;
        match d.describe_table().table_name(&name).send().await {
            Ok(_) => {
                complete(&tables, suffix, recent, &mut created).await?;
                continue;
            }
            Err(e) => {
                let e = tables.err("DescribeTable", suffix, e);
                if !matches!(e, PortError::NotFound { .. }) {
                    return Err(e);
                }
            }
        }
        let attr = |n: &str| {
            AttributeDefinition::builder()
                .attribute_name(n)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let key = |n: &str, t| {
            KeySchemaElement::builder()
                .attribute_name(n)
                .key_type(t)
                .build()
        };
        let mut create = d
            .create_table()
            .table_name(&name)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attr(pk).map_err(|e| PortError::Invalid(e.to_string()))?)
            .attribute_definitions(attr(sk).map_err(|e| PortError::Invalid(e.to_string()))?)
            .key_schema(key(pk, KeyType::Hash).map_err(|e| PortError::Invalid(e.to_string()))?)
            .key_schema(key(sk, KeyType::Range).map_err(|e| PortError::Invalid(e.to_string()))?);
        if edges {
            create = create.stream_specification(change_log_stream()?);
        }
        if recent {
            create = create
                .attribute_definitions(liked_at_attr()?)
                .global_secondary_indexes(recent_index()?);
        }
        let made = match create
            .send()
            .await
            .map_err(|e| tables.err("CreateTable", suffix, e))
        {
            Ok(_) => true,
            // Created meanwhile: by another setup, or by this one when the answer to its
            // CreateTable was lost and the SDK sent it again.
            Err(PortError::Conflict(_)) => false,
            Err(e) => return Err(e),
        };
        wait_table(&tables, suffix).await?;
        if made {
            created.push(format!("table {name}"));
            if edges {
                created.push(format!("stream of table {name}"));
            }
            if recent {
                created.push(format!("index {} of table {name}", edge::RECENT_INDEX));
            }
        } else {
            // Made as another setup asked: its stream and index checked as for a table found.
            complete(&tables, suffix, recent, &mut created).await?;
        }
        if let Some(attr) = ttl {
            if ttl_enabled(&tables, suffix).await? {
                continue;
            }
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(*attr)
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            d.update_time_to_live()
                .table_name(&name)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(|e| tables.err("UpdateTimeToLive", suffix, e))?;
        }
    }
    wait_stream(&stream).await?;
    for (suffix, ..) in TABLES {
        wait_table(&tables, suffix).await?;
    }
    Ok(if created.is_empty() {
        "everything already exists and is active".to_owned()
    } else {
        format!("created and active: {}", created.join(", "))
    })
}

/// Whether `suffix`'s table has its time to live on (or being turned on) already.
async fn ttl_enabled(tables: &DynamoStore, suffix: &str) -> PortResult<bool> {
    let d = tables
        .client()
        .describe_time_to_live()
        .table_name(tables.table(suffix))
        .send()
        .await
        .map_err(|e| tables.err("DescribeTimeToLive", suffix, e))?;
    Ok(d.time_to_live_description()
        .and_then(|t| t.time_to_live_status())
        .is_some_and(|s| matches!(s, TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)))
}

/// The attribute the recent index sorts by: a liked edge's like time, a number.
fn liked_at_attr() -> PortResult<AttributeDefinition> {
    AttributeDefinition::builder()
        .attribute_name(edge::LIKED_AT_ATTR)
        .attribute_type(ScalarAttributeType::N)
        .build()
        .map_err(|e| PortError::Invalid(e.to_string()))
}

/// The edges table's change log: DynamoDB Streams with each change's item before and after
/// (`crate::edge_log` reads a change's likes from them).
fn change_log_stream() -> PortResult<StreamSpecification> {
    StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewAndOldImages)
        .build()
        .map_err(|e| PortError::Invalid(e.to_string()))
}

/// A table found (or made meanwhile by another setup) given what this setup asks of it: the edges
/// table its change stream, and the recent index when `recent`; each added is listed. The table
/// is waited for first (another setup may be making or changing it), and an addition another
/// setup made first ("in use") is taken as made once the table says so.
async fn complete(
    tables: &DynamoStore,
    suffix: &str,
    recent: bool,
    created: &mut Vec<String>,
) -> PortResult<()> {
    let name = tables.table(suffix);
    let t = wait_table(tables, suffix).await?;
    if suffix == "edges" && change_stream(&name, Some(&t))?.is_none() {
        match add_change_stream(tables, suffix).await {
            Ok(()) => created.push(format!("stream of table {name}")),
            Err(PortError::Conflict(_))
                if change_stream(&name, Some(&wait_table(tables, suffix).await?))?.is_some() => {}
            Err(e) => return Err(e),
        }
    }
    if recent && !has_recent_index(&t) {
        match add_recent_index(tables, suffix).await {
            Ok(()) => created.push(format!("index {} of table {name}", edge::RECENT_INDEX)),
            Err(PortError::Conflict(_)) if has_recent_index(&wait_table(tables, suffix).await?) => {
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Turns the change log on for an existing edges table and waits until it is active: changes
/// from then on are logged (an edge written before is counted once it changes again, or by a
/// rebuild).
async fn add_change_stream(tables: &DynamoStore, suffix: &str) -> PortResult<()> {
    let name = tables.table(suffix);
    tables
        .client()
        .update_table()
        .table_name(&name)
        .stream_specification(change_log_stream()?)
        .send()
        .await
        .map_err(|e| tables.err("UpdateTable", suffix, e))?;
    wait_table(tables, suffix).await.map(drop)
}

/// The edges table's recent index (`edge::RECENT_INDEX`): liked edges by post (`pk`) and like
/// time, keys only — an edge without a like time (not liked) is not in it.
fn recent_index() -> PortResult<GlobalSecondaryIndex> {
    let key = |n: &str, t| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .map_err(|e| PortError::Invalid(e.to_string()))
    };
    GlobalSecondaryIndex::builder()
        .index_name(edge::RECENT_INDEX)
        .key_schema(key("pk", KeyType::Hash)?)
        .key_schema(key(edge::LIKED_AT_ATTR, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(|e| PortError::Invalid(e.to_string()))
}

fn has_recent_index(t: &TableDescription) -> bool {
    t.global_secondary_indexes()
        .iter()
        .any(|i| i.index_name() == Some(edge::RECENT_INDEX))
}

/// Adds the recent index to an existing edges table and waits until it is active: DynamoDB
/// fills it from the edges already stored.
async fn add_recent_index(tables: &DynamoStore, suffix: &str) -> PortResult<()> {
    let name = tables.table(suffix);
    let create = CreateGlobalSecondaryIndexAction::builder()
        .index_name(edge::RECENT_INDEX)
        .set_key_schema(Some(recent_index()?.key_schema))
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(|e| PortError::Invalid(e.to_string()))?;
    tables
        .client()
        .update_table()
        .table_name(&name)
        .attribute_definitions(liked_at_attr()?)
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder().create(create).build(),
        )
        .send()
        .await
        .map_err(|e| tables.err("UpdateTable", suffix, e))?;
    wait_table(tables, suffix).await.map(drop)
}

/// The stream's open shards, or `None` when it does not exist.
pub async fn open_shard_count(s: &AwsSettings) -> PortResult<Option<usize>> {
    let sdk = sdk_config().await?;
    let stream = KinesisStream::new(&sdk, s);
    match stream.summary().await {
        Ok(d) => Ok(Some(d.open_shard_count as usize)),
        Err(PortError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn wait_stream(stream: &KinesisStream) -> PortResult<()> {
    let start = tokio::time::Instant::now();
    loop {
        if stream.summary().await?.stream_status == StreamStatus::Active {
            return Ok(());
        }
        if start.elapsed() > WAIT {
            return Err(PortError::Timeout(format!(
                "stream {} is not active after {WAIT:?}",
                stream.name()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `suffix`'s table and its indexes are active, and answers its description then. A
/// table not there yet, or an error worth retrying (throttled, unavailable), is waited through;
/// any other error is the answer.
async fn wait_table(tables: &DynamoStore, suffix: &str) -> PortResult<TableDescription> {
    let name = tables.table(suffix);
    let active = |t: &TableDescription| {
        t.table_status() == Some(&TableStatus::Active)
            && t.global_secondary_indexes()
                .iter()
                .all(|i| i.index_status() == Some(&IndexStatus::Active))
    };
    let (start, mut last) = (tokio::time::Instant::now(), String::new());
    loop {
        let describe = tables.client().describe_table().table_name(&name).send();
        match describe
            .await
            .map_err(|e| tables.err("DescribeTable", suffix, e))
        {
            Ok(r) => match r.table().filter(|t| active(t)) {
                Some(t) => return Ok(t.clone()),
                None => last.clear(),
            },
            Err(e) if e.is_retryable() || matches!(e, PortError::NotFound { .. }) => {
                last = format!(" (last: {e})");
            }
            Err(e) => return Err(e),
        }
        if start.elapsed() > WAIT {
            return Err(PortError::Timeout(format!(
                "table {name} is not active after {WAIT:?}{last}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Splits an open shard at the middle of its hash-key range and waits until the stream is
/// active again; returns the children's ids.
pub async fn split_shard(s: &AwsSettings, shard_id: &str) -> PortResult<Vec<String>> {
    let sdk = sdk_config().await?;
    let stream = KinesisStream::new(&sdk, s);
    let k = stream.client();
    let resp = k
        .list_shards()
        .stream_name(stream.name())
        .send()
        .await
        .map_err(|e| stream.err("ListShards", e))?;
    let shard = resp
        .shards()
        .iter()
        .find(|x| x.shard_id() == shard_id)
        .ok_or_else(|| PortError::NotFound {
            what: format!("shard {shard_id} of stream {}", stream.name()),
            hint: String::new(),
        })?;
    let range = shard
        .hash_key_range()
        .ok_or_else(|| PortError::Other(format!("shard {shard_id} has no hash-key range")))?;
    let (lo, hi): (u128, u128) = match (
        range.starting_hash_key().parse(),
        range.ending_hash_key().parse(),
    ) {
        (Ok(lo), Ok(hi)) => (lo, hi),
        _ => {
            return Err(PortError::Other(format!(
                "shard {shard_id} has a hash-key range that is not decimal"
            )))
        }
    };
    let mid = lo + (hi - lo) / 2 + 1;
    k.split_shard()
        .stream_name(stream.name())
        .shard_to_split(shard_id)
        .new_starting_hash_key(mid.to_string())
        .send()
        .await
        .map_err(|e| stream.err("SplitShard", e))?;
    wait_stream(&stream).await?;
    let shards = tally_core::ports::Stream::list_shards(&stream).await?;
    Ok(shards
        .into_iter()
        .filter(|x| x.parents.iter().any(|p| p == shard_id))
        .map(|x| x.shard_id)
        .collect())
}

/// Deletes the stream and the tables, whichever exist; returns a summary. For development and
/// tests (the counterpart of [`setup`]); production resources belong to Terraform.
pub async fn teardown(s: &AwsSettings) -> PortResult<String> {
    let sdk = sdk_config().await?;
    let stream = KinesisStream::new(&sdk, s);
    let tables = DynamoStore::new(&sdk, s);
    let mut deleted = deregister_consumers(&stream, &s.table_prefix).await?;
    match stream
        .client()
        .delete_stream()
        .stream_name(stream.name())
        .enforce_consumer_deletion(true)
        .send()
        .await
        .map_err(|e| stream.err("DeleteStream", e))
    {
        Ok(_) => deleted.push(format!("stream {}", stream.name())),
        Err(PortError::NotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    for (suffix, ..) in TABLES {
        let name = tables.table(suffix);
        match tables
            .client()
            .delete_table()
            .table_name(&name)
            .send()
            .await
            .map_err(|e| tables.err("DeleteTable", suffix, e))
        {
            Ok(_) => deleted.push(format!("table {name}")),
            Err(PortError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(if deleted.is_empty() {
        "nothing to delete".to_owned()
    } else {
        format!("deleted: {}", deleted.join(", "))
    })
}

/// Deregisters the applications' enhanced fan-out consumers, whichever exist (deleting the stream
/// would remove them too, but a teardown says what it removed).
async fn deregister_consumers(stream: &KinesisStream, prefix: &str) -> PortResult<Vec<String>> {
    let arn = match stream.arn().await {
        Ok(a) => a,
        Err(PortError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut gone = Vec::new();
    for app in [tally_core::apps::COUNTER, tally_core::apps::ANALYTICS] {
        let name = crate::fan_out::consumer_name(prefix, app);
        match stream
            .client()
            .deregister_stream_consumer()
            .stream_arn(&arn)
            .consumer_name(&name)
            .send()
            .await
            .map_err(|e| {
                let resource = format!("consumer {name} of stream {}", stream.name());
                stream.err_on("DeregisterStreamConsumer", &resource, e)
            }) {
            Ok(_) => gone.push(format!("consumer {name}")),
            Err(PortError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(gone)
}
