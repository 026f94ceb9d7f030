# Least privilege: each statement lists exactly the API calls the code makes (the lists mirror
# tally_aws::KINESIS_CONSUMER_ACTIONS, KINESIS_PRODUCER_ACTIONS and DYNAMODB_ACTIONS;
# tests/terraform.rs fails on drift), on the stream and the tables only.

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

# The consumers (counter and analytics tasks).
data "aws_iam_policy_document" "consumer" {
  statement {
    sid       = "ReadStream"
    actions   = ["kinesis:DescribeStreamSummary", "kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid       = "Tables"
    actions   = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem", "dynamodb:Query", "dynamodb:Scan"]
    resources = [for t in aws_dynamodb_table.tally : t.arn]
  }
  statement {
    sid       = "EncryptionKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.tally.arn]
  }
}

# Producers (attach to whatever puts like events; not an ECS service of this stack).
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

resource "aws_iam_role" "task" {
  name               = "${local.name}-task"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
}

resource "aws_iam_role_policy" "consumer" {
  name   = "consumer"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.consumer.json
}

resource "aws_iam_policy" "producer" {
  name   = "${local.name}-producer"
  policy = data.aws_iam_policy_document.producer.json
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
