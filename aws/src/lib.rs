#![warn(missing_docs)]
//! The AWS backend: the ports on Amazon Kinesis and DynamoDB through the official SDK.
//!
//! - [`sdk_config`]: the one function that builds the SDK configuration (region and credentials
//!   from the standard chain, optional endpoint overrides for local API peers, timeouts).
//! - [`kinesis`]: the stream port on Kinesis (ListShards, GetShardIterator, GetRecords,
//!   PutRecords).
//! - [`fan_out`]: enhanced fan-out (RegisterStreamConsumer, SubscribeToShard): the stream port
//!   with records pushed to a consumer registered per application.
//! - [`dynamo`]: the lease, counter and analytics stores on DynamoDB. A window is applied in four
//!   steps: its end recorded as pending in the lease row (a fenced write), each post's summary
//!   items by plain writes conditioned on their markers, the rest likewise, then the checkpoint
//!   (fenced); only a gap and an analytics snapshot use a transaction. The table design is in
//!   ARCHITECTURE.md.
//! - [`edge_log`]: the edges' change log, DynamoDB Streams on the edges table, as the stream
//!   port (DescribeStream, GetShardIterator, GetRecords): what the likers counter's second stage
//!   reads.
//! - [`setup`]: creates the stream and tables for development and tests.
//! - [`errors`]: SDK errors mapped to `PortError`, naming the call and the resource.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod dynamo;
pub mod edge_log;
pub mod errors;
pub mod fan_out;
pub mod kinesis;
mod reader;
pub mod setup;
pub mod source;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::retry::{RetryPartition, TokenBucket};
use tally_core::ports::{PortError, PortResult};

pub use dynamo::DynamoStore;
pub use kinesis::KinesisStream;

/// Settings of the AWS adapters.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    /// The Kinesis stream's name.
    pub stream: String,
    /// Prefix of the DynamoDB tables' names.
    pub table_prefix: String,
    /// Endpoint override for Kinesis (a local API peer), else the regional endpoint.
    pub kinesis_endpoint_url: Option<String>,
    /// Endpoint override for DynamoDB.
    pub dynamodb_endpoint_url: Option<String>,
    /// The stream's retention (hours): dedup records live this long past their horizon.
    pub stream_retention_hours: u32,
    /// Whether `setup` gives the edges table its recent index (likers most recent first).
    pub recent_likers_index: bool,
}

/// Another region's stream, as a router puts to it: `stream` in `region` (the SDK's credentials
/// and settings otherwise), through `endpoint` when given (a local API peer).
pub async fn peer_stream(
    stream: &str,
    region: &str,
    endpoint: Option<String>,
) -> PortResult<KinesisStream> {
    let sdk = sdk_config()
        .await?
        .into_builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build();
    let s = AwsSettings {
        stream: stream.to_owned(),
        table_prefix: String::new(),
        kinesis_endpoint_url: endpoint,
        dynamodb_endpoint_url: None,
        stream_retention_hours: 24,
        recent_likers_index: false,
    };
    Ok(KinesisStream::new(&sdk, &s))
}

/// The tables a home region replicates to the others for their reads: its counts, its edges (a
/// viewer's likes, a post's likers) and the lease rows that say how fresh they are (Terraform's
/// `replicated_tables`). A region counting the edges' change log skips the posts homed
/// elsewhere (`Input::counts_post`): replicated edges are their home's.
pub const REPLICATED_TABLES: &[&str] = &["counts", "edges", "leases"];

/// Another region's tables as they are replicated to this one (a global table's replicas),
/// read by the read side: `s.table_prefix` on this region's DynamoDB, checked to exist (those of
/// [`REPLICATED_TABLES`]: the read side reads nothing else of another home).
pub async fn peer_tables(s: &AwsSettings) -> PortResult<DynamoStore> {
    let t = DynamoStore::new(&sdk_config().await?, s);
    t.check_tables(REPLICATED_TABLES).await?;
    Ok(t)
}

/// The SDK's own retries: a few quick attempts (a lost answer, one throttle) below tally's retry
/// loops, which back off for as long as a fault lasts (`tally_consumer::retry`, the producer's).
pub fn sdk_retries() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(200))
}

/// The retry partition of one client: its own, with no retry quota. The SDK's default partition
/// shares a token bucket of 500 among all of a client's requests (a retry costs 5–14, a first-try
/// success earns 1): near 11 % failed requests it runs dry, and from then on every fault reaches
/// tally at its first failure. tally's loops bound the retrying instead (capped backoff per call),
/// so the SDK's attempts are not rationed.
pub fn retry_partition(service: &'static str) -> RetryPartition {
    RetryPartition::custom(service)
        .token_bucket(TokenBucket::unlimited())
        .build()
}

/// Builds the SDK configuration: region and credentials from the standard chain (environment,
/// profile, ECS task role, instance role), bounded timeouts, the SDK's standard retries
/// ([`sdk_retries`]; each client also takes [`retry_partition`]).
pub async fn sdk_config() -> PortResult<SdkConfig> {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(20))
                .build(),
        )
        .retry_config(sdk_retries())
        .load()
        .await;
    if config.region().is_none() {
        return Err(PortError::Other(
            "no AWS region configured: set AWS_REGION (or a profile's region)".into(),
        ));
    }
    // Credentials are resolved once up front, so that their absence is one clear message
    // rather than a failure of whichever call comes first.
    if let Some(p) = config.credentials_provider() {
        use aws_credential_types::provider::ProvideCredentials;
        if let Err(e) = p.provide_credentials().await {
            return Err(PortError::Other(format!(
                "no AWS credentials found ({}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                 or AWS_PROFILE, or run with an IAM role (on ECS, the task role)",
                errors::root_cause(&e)
            )));
        }
    }
    Ok(config)
}

/// The region of a configuration, for messages.
pub fn region_of(c: &SdkConfig) -> String {
    c.region().map_or_else(|| "?".to_owned(), Region::to_string)
}

/// The AWS backend: a stream and the stores.
#[derive(Clone)]
pub struct Aws {
    /// The Kinesis stream (polling).
    pub stream: KinesisStream,
    /// The DynamoDB tables (every store port).
    pub tables: DynamoStore,
}

impl Aws {
    /// Builds the clients and checks that the stream and tables exist, so that a missing
    /// resource or an unreachable endpoint is reported at once, by name.
    pub async fn connect(s: &AwsSettings) -> PortResult<Aws> {
        let sdk = sdk_config().await?;
        let aws = Aws {
            stream: KinesisStream::new(&sdk, s),
            tables: DynamoStore::new(&sdk, s),
        };
        aws.stream.check().await?;
        aws.tables.check().await?;
        Ok(aws)
    }
}
