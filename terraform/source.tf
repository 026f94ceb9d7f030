# Optional: count an existing DynamoDB table's likes from its change stream (Kinesis Data Streams
# for DynamoDB). With `source_table_name` set, the table's item changes go to tally's stream,
# the consumers read them as change records (TALLY_INPUT__*, main.tf), and a `backfill` policy
# lets an operator put the items the table held before (`tally backfill --table <name>`,
# RUNBOOK.md "Counting an existing likes table").

data "aws_dynamodb_table" "source" {
  count = local.reads_a_table ? 1 : 0
  name  = var.source_table_name
}

resource "aws_dynamodb_kinesis_streaming_destination" "source" {
  count      = local.reads_a_table ? 1 : 0
  table_name = var.source_table_name
  stream_arn = aws_kinesis_stream.likes.arn
  # The unit of each record's ApproximateCreationDateTime: tally orders an item's changes by it
  # (TALLY_INPUT__TIME_PRECISION says the same).
  approximate_creation_date_time_precision = var.source_time_precision
}

# What `tally backfill` calls on the table (DYNAMODB_BACKFILL_ACTIONS in tests/e2e/common/iam.rs;
# tests/e2e/terraform.rs checks). Attach it with the producer policy, which puts the records.
data "aws_iam_policy_document" "backfill" {
  statement {
    sid       = "ReadSourceTable"
    actions   = ["dynamodb:DescribeTable", "dynamodb:DescribeKinesisStreamingDestination", "dynamodb:Scan"]
    resources = [local.reads_a_table ? data.aws_dynamodb_table.source[0].arn : "arn:${data.aws_partition.current.partition}:dynamodb:${var.region}:${data.aws_caller_identity.current.account_id}:table/none"]
  }
}

resource "aws_iam_policy" "backfill" {
  count  = local.reads_a_table ? 1 : 0
  name   = "${local.name}-backfill"
  policy = data.aws_iam_policy_document.backfill.json
}
