output "stream_name" {
  description = "The like-event stream (TALLY_STREAM / --stream)."
  value       = aws_kinesis_stream.likes.name
}

output "stream_arn" {
  description = "The like-event stream."
  value       = aws_kinesis_stream.likes.arn
}

output "table_prefix" {
  description = "Prefix of the tables (TALLY_TABLE_PREFIX / --table-prefix)."
  value       = local.table_prefix
}

output "table_names" {
  description = "The DynamoDB tables."
  value       = [for t in aws_dynamodb_table.tally : t.name]
}

output "edges_stream_arn" {
  description = "The edges table's change stream (DynamoDB Streams, new and old images): the likers' change log the counter's second stage (\"changes\") counts; what to inspect with `aws dynamodbstreams describe-stream`."
  value       = aws_dynamodb_table.tally["edges"].stream_arn
}

output "cluster_name" {
  description = "The ECS cluster."
  value       = aws_ecs_cluster.tally.name
}

output "service_names" {
  description = "The ECS services, by application."
  value       = { for k, s in aws_ecs_service.service : k => s.name }
}

output "log_groups" {
  description = "The CloudWatch log groups of the services, by application."
  value       = { for k, g in aws_cloudwatch_log_group.service : k => g.name }
}

output "task_role_arns" {
  description = "The task roles, by application."
  value       = { for k, r in aws_iam_role.task : k => r.arn }
}

output "execution_role_arn" {
  description = "The task execution role (image pull, logs)."
  value       = aws_iam_role.execution.arn
}

output "kms_key_arn" {
  description = "The key that encrypts the stream, tables, logs and topic."
  value       = aws_kms_key.tally.arn
}

output "producer_policy_arn" {
  description = "Attach to whatever puts like events."
  value       = aws_iam_policy.producer.arn
}

output "operator_policy_arn" {
  description = "Attach to whoever runs the reading commands (leases, dead-letters, query, serve …)."
  value       = aws_iam_policy.operator.arn
}

output "alarm_topic_arn" {
  description = "Where the alarms go (alarm_emails are subscribed; add others)."
  value       = aws_sns_topic.alarms.arn
}

output "dashboard_name" {
  description = "The CloudWatch dashboard of the fleet."
  value       = aws_cloudwatch_dashboard.tally.dashboard_name
}

output "security_group_id" {
  description = "The tasks' security group (one-off operator tasks can use it too)."
  value       = aws_security_group.tasks.id
}

output "fan_out_consumers" {
  description = "Enhanced fan-out consumers by application (those with read mode \"efo\")."
  value       = { for app, c in aws_kinesis_stream_consumer.app : app => c.arn }
}

output "serve_token_secret_arn" {
  description = "The Secrets Manager secret holding the bearer token `tally serve` asks for (null when serve_require_token is false): apps read it with secretsmanager:GetSecretValue and kms:Decrypt on tally's key, and send `Authorization: Bearer <token>`."
  value       = one(aws_secretsmanager_secret.serve_token[*].arn)
}

output "serve_url" {
  description = "Where apps read counts: the read side's internal load balancer (GET /api/counts?ids=…)."
  value       = "${var.serve_certificate_arn == "" ? "http" : "https"}://${aws_lb.serve.dns_name}"
}

output "backfill_policy_arn" {
  description = "With source_table_name: the policy `tally backfill` needs on the source table (attach it with producer_policy_arn); null otherwise."
  value       = local.reads_a_table ? aws_iam_policy.backfill[0].arn : null
}
