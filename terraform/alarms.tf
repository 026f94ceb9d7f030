resource "aws_sns_topic" "alarms" {
  name              = "${local.name}-alarms"
  kms_master_key_id = aws_kms_key.tally.id
}

# A consumer falls behind: records wait longer than the threshold before they are read.
resource "aws_cloudwatch_metric_alarm" "iterator_age" {
  alarm_name          = "${local.name}-iterator-age"
  namespace           = "AWS/Kinesis"
  metric_name         = "GetRecords.IteratorAgeMilliseconds"
  dimensions          = { StreamName = aws_kinesis_stream.likes.name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  threshold           = var.iterator_age_alarm_ms
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

# Producers are throttled: the stream needs more shards.
resource "aws_cloudwatch_metric_alarm" "write_throttled" {
  alarm_name          = "${local.name}-write-throttled"
  namespace           = "AWS/Kinesis"
  metric_name         = "WriteProvisionedThroughputExceeded"
  dimensions          = { StreamName = aws_kinesis_stream.likes.name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 5
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

# Consumers are throttled reading.
resource "aws_cloudwatch_metric_alarm" "read_throttled" {
  alarm_name          = "${local.name}-read-throttled"
  namespace           = "AWS/Kinesis"
  metric_name         = "ReadProvisionedThroughputExceeded"
  dimensions          = { StreamName = aws_kinesis_stream.likes.name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 3
  threshold           = 100
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

# A table throttles or fails requests.
resource "aws_cloudwatch_metric_alarm" "table_throttled" {
  for_each            = aws_dynamodb_table.tally
  alarm_name          = "${local.name}-${each.key}-throttled"
  namespace           = "AWS/DynamoDB"
  metric_name         = "ThrottledRequests"
  dimensions          = { TableName = each.value.name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 5
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

resource "aws_cloudwatch_metric_alarm" "table_errors" {
  for_each            = aws_dynamodb_table.tally
  alarm_name          = "${local.name}-${each.key}-system-errors"
  namespace           = "AWS/DynamoDB"
  metric_name         = "SystemErrors"
  dimensions          = { TableName = each.value.name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 5
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

# Fewer tasks running than desired (Container Insights).
resource "aws_cloudwatch_metric_alarm" "tasks_running" {
  for_each            = local.services
  alarm_name          = "${local.name}-${each.key}-tasks"
  namespace           = "ECS/ContainerInsights"
  metric_name         = "RunningTaskCount"
  dimensions          = { ClusterName = aws_ecs_cluster.tally.name, ServiceName = aws_ecs_service.service[each.key].name }
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = 5
  threshold           = each.value.tasks
  comparison_operator = "LessThanThreshold"
  treat_missing_data  = "breaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
}

# Leases lost by the counter (stolen while a worker was stalled, or expired): counted from its logs.
resource "aws_cloudwatch_log_metric_filter" "lease_lost" {
  name           = "${local.name}-lease-lost"
  log_group_name = aws_cloudwatch_log_group.service["counter"].name
  pattern        = "\"lease lost\""
  metric_transformation {
    name      = "LeasesLost"
    namespace = "tally"
    value     = "1"
  }
}
