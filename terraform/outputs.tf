output "stream_arn" {
  description = "The like-event stream."
  value       = aws_kinesis_stream.likes.arn
}

output "table_names" {
  description = "The DynamoDB tables."
  value       = [for t in aws_dynamodb_table.tally : t.name]
}

output "producer_policy_arn" {
  description = "Attach to whatever puts like events."
  value       = aws_iam_policy.producer.arn
}

output "alarm_topic_arn" {
  description = "Subscribe to be told about lag, throttling and missing tasks."
  value       = aws_sns_topic.alarms.arn
}
