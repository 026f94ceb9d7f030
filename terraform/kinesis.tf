resource "aws_kinesis_stream" "likes" {
  name             = local.stream_name
  shard_count      = var.stream_mode == "PROVISIONED" ? var.shard_count : null
  retention_period = var.retention_hours
  encryption_type  = "KMS"
  kms_key_id       = aws_kms_key.tally.arn

  stream_mode_details {
    stream_mode = var.stream_mode
  }

  shard_level_metrics = ["IncomingRecords", "IteratorAgeMilliseconds", "ReadProvisionedThroughputExceeded", "WriteProvisionedThroughputExceeded"]

  # The stream holds the likes not yet counted: deleting it loses them.
  lifecycle {
    prevent_destroy = true
  }
}
