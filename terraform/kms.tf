resource "aws_kms_key" "tally" {
  description             = "Encrypts tally's stream, tables, logs and alarm topic"
  deletion_window_in_days = 30
  enable_key_rotation     = true
  # Everything tally stores is encrypted with it: losing the key loses the data.
  lifecycle {
    prevent_destroy = true
  }
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsUse"
        Effect    = "Allow"
        Principal = { Service = "logs.${var.region}.amazonaws.com" }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
        Resource  = "*"
        Condition = {
          ArnLike = { "kms:EncryptionContext:aws:logs:arn" = "arn:${data.aws_partition.current.partition}:logs:${var.region}:${data.aws_caller_identity.current.account_id}:log-group:/ecs/${local.name}/*" }
        }
      },
      {
        Sid       = "CloudWatchAlarmsPublish"
        Effect    = "Allow"
        Principal = { Service = "cloudwatch.amazonaws.com" }
        Action    = ["kms:Decrypt", "kms:GenerateDataKey*"]
        Resource  = "*"
      }
      ], local.reads_a_table ? [
      {
        # A source table's changes are put to the stream by DynamoDB (source.tf): a producer of
        # the encrypted stream, which needs GenerateDataKey under this stream's context only.
        Sid       = "DynamoDBStreamsTableChanges"
        Effect    = "Allow"
        Principal = { Service = "dynamodb.amazonaws.com" }
        Action    = ["kms:GenerateDataKey"]
        Resource  = "*"
        Condition = {
          StringEquals = { "kms:EncryptionContext:aws:kinesis:arn" = "arn:${data.aws_partition.current.partition}:kinesis:${var.region}:${data.aws_caller_identity.current.account_id}:stream/${local.stream_name}" }
        }
      }
    ] : [])
  })
}

resource "aws_kms_alias" "tally" {
  name          = "alias/${local.name}"
  target_key_id = aws_kms_key.tally.key_id
}
