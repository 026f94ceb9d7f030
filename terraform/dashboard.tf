# One page for the fleet: how far behind each application is (the counter's second stage,
# "changes", too), its leases and tasks, the like latency, the stream's traffic and throttling,
# and the tables' throttling.
locals {
  # The services, for their tasks (how far behind and leases: local.worker_apps).
  apps = keys(local.services)
  dashboard_widgets = [
    {
      type = "metric", x = 0, y = 0, width = 12, height = 6
      properties = {
        title   = "Iterator age per application (ms)", region = var.region, stat = "Maximum", period = 60
        metrics = [for app in local.worker_apps : [var.metrics_namespace, "IteratorAgeMs", "App", app]]
      }
    },
    {
      type = "metric", x = 12, y = 0, width = 12, height = 6
      properties = {
        title = "Leases held and lost", region = var.region, period = 60
        metrics = concat(
          [for app in local.worker_apps : [var.metrics_namespace, "LeasesHeld", "App", app, { stat = "Maximum" }]],
          [for app in local.worker_apps : [var.metrics_namespace, "LeasesLost", "App", app, { stat = "Sum" }]]
        )
      }
    },
    {
      type = "metric", x = 0, y = 6, width = 12, height = 6
      properties = {
        title = "Like latency, creation to processing (ms)", region = var.region, period = 60
        metrics = [
          [var.metrics_namespace, "CreationToProcessingP50Ms", "App", "analytics", { stat = "Maximum" }],
          [var.metrics_namespace, "CreationToProcessingP99Ms", "App", "analytics", { stat = "Maximum" }],
        ]
      }
    },
    {
      type = "metric", x = 12, y = 6, width = 12, height = 6
      properties = {
        title   = "Running tasks", region = var.region, stat = "Minimum", period = 60
        metrics = [for app in local.apps : ["ECS/ContainerInsights", "RunningTaskCount", "ClusterName", aws_ecs_cluster.tally.name, "ServiceName", app]]
      }
    },
    {
      type = "metric", x = 0, y = 12, width = 12, height = 6
      properties = {
        title = "Stream: records in, throttling", region = var.region, stat = "Sum", period = 60
        metrics = [
          ["AWS/Kinesis", "IncomingRecords", "StreamName", aws_kinesis_stream.likes.name],
          ["AWS/Kinesis", "WriteProvisionedThroughputExceeded", "StreamName", aws_kinesis_stream.likes.name],
          ["AWS/Kinesis", "ReadProvisionedThroughputExceeded", "StreamName", aws_kinesis_stream.likes.name],
        ]
      }
    },
    {
      type = "metric", x = 12, y = 12, width = 12, height = 6
      properties = {
        title = "Tables: throttle events", region = var.region, stat = "Sum", period = 60
        metrics = concat(
          [for t in aws_dynamodb_table.tally : ["AWS/DynamoDB", "ReadThrottleEvents", "TableName", t.name]],
          [for t in aws_dynamodb_table.tally : ["AWS/DynamoDB", "WriteThrottleEvents", "TableName", t.name]]
        )
      }
    },
  ]
}

resource "aws_cloudwatch_dashboard" "tally" {
  dashboard_name = local.name
  dashboard_body = jsonencode({ widgets = local.dashboard_widgets })
}
