//! What each role may call on AWS: Terraform grants exactly these (`terraform.rs` compares the
//! two, and checks them against the SDK calls in the AWS adapter's source, so that an unused grant
//! fails too). A TransactWriteItems needs the actions of its parts (here Put and Update).

/// Kinesis calls the consumers make (both applications), polling or by enhanced fan-out.
pub const KINESIS_CONSUMER_ACTIONS: &[&str] = &[
    "kinesis:DescribeStreamSummary",
    "kinesis:ListShards",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
    "kinesis:RegisterStreamConsumer",
    "kinesis:DescribeStreamConsumer",
    "kinesis:SubscribeToShard",
];
/// Kinesis calls a producer makes (`produce`, `replay`).
pub const KINESIS_PRODUCER_ACTIONS: &[&str] = &[
    "kinesis:DescribeStreamSummary",
    "kinesis:ListShards",
    "kinesis:PutRecords",
];
/// Kinesis calls of the router on the other regions' streams (several regions), besides a
/// consumer's on its own: the puts of the likes of posts homed there.
pub const KINESIS_ROUTER_PUT_ACTIONS: &[&str] = &["kinesis:PutRecords"];
/// DynamoDB calls of the counter's workers: leases and checkpoints, summary items, likers' edges
/// and their change log, dedup records, dead letters (written, never listed: listing is the
/// operator's Scan).
pub const DYNAMODB_COUNTER_ACTIONS: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    // A lease row's creation checks its shard's tombstone in the same transaction.
    "dynamodb:ConditionCheckItem",
    // The edges' change log (DynamoDB Streams on the edges table), read by the likers
    // counter's second stage.
    "dynamodb:DescribeStream",
    "dynamodb:GetShardIterator",
    "dynamodb:GetRecords",
];
/// DynamoDB calls of the analytics workers (leases, snapshots as a transaction of Puts, dedup):
/// today the counter's set, so both roles share one policy document in Terraform.
pub const DYNAMODB_ANALYTICS_ACTIONS: &[&str] = DYNAMODB_COUNTER_ACTIONS;
/// DynamoDB actions a producer needs (the start-up check that the tables exist).
pub const DYNAMODB_PRODUCER_ACTIONS: &[&str] = &["dynamodb:DescribeTable"];
/// What `tally serve` calls on Kinesis: the start-up check only (the read side reads no records).
pub const KINESIS_SERVE_ACTIONS: &[&str] = &["kinesis:DescribeStreamSummary"];
/// DynamoDB reads of `tally serve`: counts, totals, leases, analytics, and dead letters (Scan).
pub const DYNAMODB_SERVE_ACTIONS: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    // A feed page's viewer likes: up to 100 edges in one call.
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
];
/// What an operator's reading commands call on Kinesis (`record` reads the stream by polling).
pub const KINESIS_OPERATOR_ACTIONS: &[&str] = &[
    "kinesis:DescribeStreamSummary",
    "kinesis:ListShards",
    "kinesis:GetShardIterator",
    "kinesis:GetRecords",
];
/// DynamoDB reads of the operator's commands; `Scan` lists dead letters.
pub const DYNAMODB_OPERATOR_ACTIONS: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    // A feed page's viewer likes: up to 100 edges in one call.
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    // `tally verify` counting likers: the edges' change log not counted yet.
    "dynamodb:DescribeStream",
    "dynamodb:GetShardIterator",
    "dynamodb:GetRecords",
];
/// DynamoDB calls of `tally backfill` on the application's own table (beside the producer's on
/// the stream): is its change stream on, its key, its items.
pub const DYNAMODB_BACKFILL_ACTIONS: &[&str] = &[
    "dynamodb:DescribeTable",
    "dynamodb:DescribeKinesisStreamingDestination",
    "dynamodb:Scan",
];
