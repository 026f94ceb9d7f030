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

# Enhanced fan-out consumers, one per application that reads by "efo". The name is the one tally
# registers (tally_aws::fan_out::consumer_name: "<table prefix>-<app>"; tests/e2e/terraform.rs checks),
# so the workers find this consumer instead of registering their own.
resource "aws_kinesis_stream_consumer" "app" {
  for_each   = { for app, mode in local.read_modes : app => mode if mode == "efo" }
  name       = "${local.table_prefix}-${each.key}"
  stream_arn = aws_kinesis_stream.likes.arn
}
