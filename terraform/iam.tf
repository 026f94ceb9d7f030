# Least privilege: one task role per application, each statement listing exactly the API calls
# the applications make (the lists mirror tests/e2e/common/iam.rs: KINESIS_CONSUMER_ACTIONS,
# DYNAMODB_COUNTER_ACTIONS, DYNAMODB_ANALYTICS_ACTIONS, the producer's and the operator's;
# tests/e2e/terraform.rs fails on drift either way), on the stream, the tables, the edges
# table's change stream and the key only.

data "aws_iam_policy_document" "assume_ecs_tasks" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:ecs:${var.region}:${data.aws_caller_identity.current.account_id}:*"]
    }
  }
}

# The workers' tasks. The counter and analytics make the same calls today
# (iam.rs: DYNAMODB_COUNTER_ACTIONS = DYNAMODB_ANALYTICS_ACTIONS, the edges' change log
# included), so one document serves both roles; if they diverge, this becomes one document per
# application.
data "aws_iam_policy_document" "worker" {
  statement {
    sid       = "ReadStream"
    actions   = ["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  # Enhanced fan-out (read_mode "efo"): register the app's consumer if Terraform has not, then
  # subscribe through it. Only tally's own consumers, by name.
  statement {
    sid       = "RegisterFanOutConsumer"
    actions   = ["kinesis:RegisterStreamConsumer"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid       = "ReadFanOut"
    actions   = ["kinesis:DescribeStreamConsumer", "kinesis:SubscribeToShard"]
    resources = ["${aws_kinesis_stream.likes.arn}/consumer/${local.table_prefix}-*"]
  }
  statement {
    sid       = "Tables"
    actions   = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"]
    resources = [for t in aws_dynamodb_table.tally : t.arn]
  }
  # The edges' change log, which the counter's second stage ("changes") reads: DynamoDB Streams
  # on the edges table (its ARN from DescribeTable above, then its shards, iterators and
  # records). These act on the stream, not the table: the table's ARN and /stream/<label>, a new
  # label whenever the stream is turned off and on, hence the wildcard there and nowhere else.
  statement {
    sid       = "ReadEdgeChangeLog"
    actions   = ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"]
    resources = ["${aws_dynamodb_table.tally["edges"].arn}/stream/*"]
  }
  # Reading a KMS-encrypted stream decrypts; the tables' encryption (and their change streams')
  # is DynamoDB's own grant.
  statement {
    sid       = "EncryptionKey"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.tally.arn]
  }
}

# Producers (attach to whatever puts like events; not an ECS service of this stack). Writing to a
# KMS-encrypted stream generates data keys.
data "aws_iam_policy_document" "producer" {
  statement {
    sid       = "WriteStream"
    actions   = ["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:PutRecords"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid       = "CheckTables"
    actions   = ["dynamodb:DescribeTable"]
    resources = [for t in aws_dynamodb_table.tally : t.arn]
  }
  statement {
    sid       = "EncryptionKey"
    actions   = ["kms:GenerateDataKey"]
    resources = [aws_kms_key.tally.arn]
  }
}

# Operators: the reading commands (`tally leases`, `dead-letters`, `query`, `total`, `top`,
# `latency`, `serve`, `record`, `verify`), e.g. as one-off ECS tasks or from a workstation. Read
# only.
data "aws_iam_policy_document" "operator" {
  statement {
    sid       = "ReadStream"
    actions   = ["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid     = "ReadTables"
    actions = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"]
    # The tables, and their indexes (the edges table's `recent`: likers most recent first); with
    # several regions, the other homes' replicas here too.
    resources = concat(flatten([for t in aws_dynamodb_table.tally : [t.arn, "${t.arn}/index/*"]]), local.peer_table_arns)
  }
  # `tally verify` counting likers adds the edges' changes the counter has not counted yet.
  statement {
    sid       = "ReadEdgeChangeLog"
    actions   = ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"]
    resources = ["${aws_dynamodb_table.tally["edges"].arn}/stream/*"]
  }
  statement {
    sid       = "EncryptionKey"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.tally.arn]
  }
}

resource "aws_iam_role" "task" {
  for_each           = local.services
  name               = "${local.name}-${each.key}-task"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
}

resource "aws_iam_role_policy" "task" {
  for_each = local.services
  name     = each.key
  role     = aws_iam_role.task[each.key].id
  policy   = data.aws_iam_policy_document.worker.json
}

# The router (several regions): besides what a worker does, it puts to the other regions'
# streams (tests/e2e/common/iam.rs: KINESIS_ROUTER_PUT_ACTIONS), encrypted there with those regions' keys.
data "aws_iam_policy_document" "router" {
  statement {
    sid       = "PutToHomeStreams"
    actions   = ["kinesis:PutRecords"]
    resources = length(local.peer_stream_arns) > 0 ? local.peer_stream_arns : [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid       = "EncryptForHomeStreams"
    actions   = ["kms:GenerateDataKey"]
    resources = ["arn:${data.aws_partition.current.partition}:kms:*:${data.aws_caller_identity.current.account_id}:key/*"]
    condition {
      test     = "StringLike"
      variable = "kms:ViaService"
      values   = ["kinesis.*.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "router" {
  count  = local.routes ? 1 : 0
  name   = "router-puts"
  role   = aws_iam_role.task["router"].id
  policy = data.aws_iam_policy_document.router.json
}

resource "aws_iam_policy" "producer" {
  name   = "${local.name}-producer"
  policy = data.aws_iam_policy_document.producer.json
}

resource "aws_iam_policy" "operator" {
  name   = "${local.name}-operator"
  policy = data.aws_iam_policy_document.operator.json
}

# The task execution role: pull the image, write logs.
resource "aws_iam_role" "execution" {
  name               = "${local.name}-execution"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}
