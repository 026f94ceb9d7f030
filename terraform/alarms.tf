resource "aws_sns_topic" "alarms" {
  name              = "${local.name}-alarms"
  kms_master_key_id = aws_kms_key.tally.id
}

# Who is told: each address confirms its subscription by email.
resource "aws_sns_topic_subscription" "alarm_email" {
  for_each  = toset(var.alarm_emails)
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

# Alarms on AWS's own metrics of the stream and of each table, one spec each. Every alarm tells
# the topic when it fires and when it recovers.
locals {
  alarm_actions = [aws_sns_topic.alarms.arn]

  stream_alarms = {
    # A consumer falls behind: records wait longer than the threshold before they are read.
    "iterator-age" = {
      metric    = "GetRecords.IteratorAgeMilliseconds", statistic = "Maximum", period = 60, periods = 5,
      threshold = var.iterator_age_alarm_ms
    }
    # Producers are throttled: the stream needs more shards.
    "write-throttled" = {
      metric    = "WriteProvisionedThroughputExceeded", statistic = "Sum", period = 60, periods = 5,
      threshold = 0
    }
    # Consumers are throttled reading.
    "read-throttled" = {
      metric    = "ReadProvisionedThroughputExceeded", statistic = "Sum", period = 300, periods = 3,
      threshold = 100
    }
  }

  # A table throttles reads or writes: these two are published per table (ThrottledRequests
  # only per operation, so an alarm on it with the table alone would never see data).
  table_alarm_metrics = { "read-throttled" = "ReadThrottleEvents", "write-throttled" = "WriteThrottleEvents" }
  table_alarms = {
    for pair in setproduct(keys(aws_dynamodb_table.tally), keys(local.table_alarm_metrics)) :
    "${pair[0]}-${pair[1]}" => { table = aws_dynamodb_table.tally[pair[0]].name, metric = local.table_alarm_metrics[pair[1]] }
  }

  # SystemErrors is published per table *and operation*: the alarm sums the operations tally
  # calls (the DYNAMODB_*_ACTIONS of tests/e2e/common/iam.rs, and TransactWriteItems;
  # tests/e2e/terraform.rs checks).
  # The reads of the edges' change log (DynamoDB Streams) are not summed: the `changes`
  # application's own alarms below see them fail, as its iterator age growing or its leases gone.
  dynamodb_operations = ["GetItem", "BatchGetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "TransactWriteItems"]
}

resource "aws_cloudwatch_metric_alarm" "stream" {
  for_each            = local.stream_alarms
  alarm_name          = "${local.name}-${each.key}"
  namespace           = "AWS/Kinesis"
  metric_name         = each.value.metric
  dimensions          = { StreamName = aws_kinesis_stream.likes.name }
  statistic           = each.value.statistic
  period              = each.value.period
  evaluation_periods  = each.value.periods
  threshold           = each.value.threshold
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

resource "aws_cloudwatch_metric_alarm" "table" {
  for_each            = local.table_alarms
  alarm_name          = "${local.name}-${each.key}"
  namespace           = "AWS/DynamoDB"
  metric_name         = each.value.metric
  dimensions          = { TableName = each.value.table }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 5
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# A table fails requests on DynamoDB's side: the sum over the operations tally calls.
resource "aws_cloudwatch_metric_alarm" "table_system_errors" {
  for_each            = aws_dynamodb_table.tally
  alarm_name          = "${local.name}-${each.key}-system-errors"
  comparison_operator = "GreaterThanThreshold"
  evaluation_periods  = 5
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "errors"
    expression  = "SUM([${join(", ", [for i, _ in local.dynamodb_operations : "op${i}"])}])"
    label       = "SystemErrors over tally's operations"
    return_data = true
  }

  dynamic "metric_query" {
    for_each = local.dynamodb_operations
    content {
      id = "op${metric_query.key}"
      metric {
        namespace   = "AWS/DynamoDB"
        metric_name = "SystemErrors"
        dimensions  = { TableName = each.value.name, Operation = metric_query.value }
        stat        = "Sum"
        period      = 60
      }
    }
  }
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
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# The applications' own metrics: CloudWatch embedded metric format lines in their logs
# (`metrics.emf`), one per worker and per held shard every `metrics.interval_ms`. Each alarm below
# exists once per application (local.worker_apps: counter, analytics, the router with several
# regions, and changes, the counter's second stage, whose records DynamoDB Streams keeps only 24
# hours); tests/e2e/terraform.rs checks the metric names and the applications.
locals {
  app_alarms = {
    # No worker of the application holds a lease: its shards are not being read (all tasks
    # down, or every worker failing to take leases).
    "no-leases-held" = {
      metric    = "LeasesHeld", statistic = "Maximum", period = 60, periods = 3,
      threshold = 1, comparison = "LessThanThreshold", missing = "breaching"
    }
    # The application falls behind on some shard (the stream-wide Kinesis metric mixes both).
    "iterator-age" = {
      metric    = "IteratorAgeMs", statistic = "Maximum", period = 60, periods = 5,
      threshold = var.iterator_age_alarm_ms, comparison = "GreaterThanThreshold", missing = "notBreaching"
    }
    # Records were lost to the stream's retention before they were applied (the counter recorded
    # a gap; `tally dead-letters` lists it with its sequence range): counts are short.
    "gaps" = {
      metric    = "Gaps", statistic = "Sum", period = 300, periods = 1,
      threshold = 0, comparison = "GreaterThanThreshold", missing = "notBreaching"
    }
    # Leases lost (stolen while a worker stalled past its lease, or expired): churn worth a look.
    "leases-lost" = {
      metric    = "LeasesLost", statistic = "Sum", period = 300, periods = 1,
      threshold = var.leases_lost_alarm, comparison = "GreaterThanThreshold", missing = "notBreaching"
    }
  }
  app_alarm_instances = {
    for pair in setproduct(local.worker_apps, keys(local.app_alarms)) :
    "${pair[0]}-${pair[1]}" => merge(local.app_alarms[pair[1]], { app = pair[0] })
  }
}

resource "aws_cloudwatch_metric_alarm" "app" {
  for_each            = local.app_alarm_instances
  alarm_name          = "${local.name}-${each.key}"
  namespace           = var.metrics_namespace
  metric_name         = each.value.metric
  dimensions          = { App = each.value.app }
  statistic           = each.value.statistic
  period              = each.value.period
  evaluation_periods  = each.value.periods
  threshold           = each.value.threshold
  comparison_operator = each.value.comparison
  treat_missing_data  = each.value.missing
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}

# Likes take too long from creation to processing (the analytics app's per-window p99).
resource "aws_cloudwatch_metric_alarm" "like_latency" {
  alarm_name          = "${local.name}-like-latency-p99"
  namespace           = var.metrics_namespace
  metric_name         = "CreationToProcessingP99Ms"
  dimensions          = { App = "analytics" }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 5
  threshold           = var.like_latency_alarm_ms
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
}
