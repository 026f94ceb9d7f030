resource "aws_kinesis_stream" "likes" {
  name             = var.stream_name
  shard_count      = var.shard_count
  retention_period = var.retention_hours
  encryption_type  = "KMS"
  kms_key_id       = aws_kms_key.tally.arn

  stream_mode_details {
    stream_mode = "PROVISIONED"
  }

  shard_level_metrics = ["IncomingRecords", "IteratorAgeMilliseconds", "ReadProvisionedThroughputExceeded", "WriteProvisionedThroughputExceeded"]
}
