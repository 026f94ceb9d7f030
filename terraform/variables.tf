variable "region" {
  description = "AWS region of the stack."
  type        = string
}

variable "environment" {
  description = "Environment name (prod, staging, …); part of every resource name."
  type        = string
  default     = "prod"
}

variable "stream_name" {
  description = "Name of the Kinesis data stream of like events."
  type        = string
  default     = "tally-likes"
}

variable "table_prefix" {
  description = "Prefix of the DynamoDB tables: <prefix>-leases, -counts, -dedup, -dead-letters, -analytics."
  type        = string
  default     = "tally"
}

variable "shard_count" {
  description = "Shards of the stream (1 MB/s or 1,000 records/s of writes each)."
  type        = number
  default     = 4
}

variable "retention_hours" {
  description = "How long the stream keeps records: how long a consumer may be down without losing data."
  type        = number
  default     = 48
}

variable "image" {
  description = "Container image with the tally binary as its entrypoint."
  type        = string
}

variable "counter_tasks" {
  description = "Fargate tasks of the counter; each takes about shards / tasks leases."
  type        = number
  default     = 2
}

variable "analytics_tasks" {
  description = "Fargate tasks of the analytics consumer."
  type        = number
  default     = 1
}

variable "vpc_id" {
  description = "VPC of the tasks."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the tasks (with a NAT gateway or VPC endpoints for Kinesis, DynamoDB, CloudWatch Logs and ECR)."
  type        = list(string)
}

variable "iterator_age_alarm_ms" {
  description = "Alarm when a consumer falls this far behind the stream (GetRecords.IteratorAgeMilliseconds)."
  type        = number
  default     = 60000
}

variable "log_retention_days" {
  description = "Retention of the tasks' logs."
  type        = number
  default     = 365
}

variable "metrics_namespace" {
  description = "CloudWatch namespace of tally's own metrics (embedded metric format in the task logs)."
  type        = string
  default     = "tally"
}

variable "leases_lost_alarm" {
  description = "Alarm when an application loses more leases than this in 5 minutes."
  type        = number
  default     = 5
}

variable "like_latency_alarm_ms" {
  description = "Alarm when the p99 time from a like's creation to its processing exceeds this."
  type        = number
  default     = 30000
}
