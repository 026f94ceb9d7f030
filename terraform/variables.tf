variable "region" {
  description = "AWS region of the stack."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as eu-west-1."
  }
}

variable "environment" {
  description = "Environment name (prod, staging, …); part of every resource name, so two environments can share an account."
  type        = string
  default     = "prod"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,15}$", var.environment))
    error_message = "environment must be 1-16 characters of a-z, 0-9 and -, starting with a letter."
  }
}

variable "stream_name" {
  description = "Name of the Kinesis data stream of like events [default: tally-<environment>-likes]."
  type        = string
  default     = null
  validation {
    condition     = var.stream_name == null || can(regex("^[a-zA-Z0-9_.-]{1,128}$", var.stream_name))
    error_message = "stream_name must be 1-128 characters of a-z, A-Z, 0-9, _, . and -."
  }
}

variable "table_prefix" {
  description = "Prefix of the DynamoDB tables: <prefix>-leases, -counts, -edges, -dedup, -dead-letters, -analytics [default: tally-<environment>]."
  type        = string
  default     = null
  validation {
    condition     = var.table_prefix == null || can(regex("^[a-zA-Z0-9_.-]{1,200}$", var.table_prefix))
    error_message = "table_prefix must be 1-200 characters of a-z, A-Z, 0-9, _, . and -."
  }
}

variable "stream_mode" {
  description = "PROVISIONED (shard_count shards, cheapest at a steady rate) or ON_DEMAND (Kinesis scales the shards; no shard_count)."
  type        = string
  default     = "PROVISIONED"
  validation {
    condition     = contains(["PROVISIONED", "ON_DEMAND"], var.stream_mode)
    error_message = "stream_mode must be PROVISIONED or ON_DEMAND."
  }
}

variable "shard_count" {
  description = "Shards of a PROVISIONED stream (1 MB/s or 1,000 records/s of writes each); with ON_DEMAND, the most tasks a consumer scales to."
  type        = number
  default     = 4
  validation {
    condition     = var.shard_count >= 1 && var.shard_count <= 10000 && floor(var.shard_count) == var.shard_count
    error_message = "shard_count must be a whole number from 1 to 10000."
  }
}

variable "retention_hours" {
  description = "How long the stream keeps records: how long a consumer may be down without losing data. Also how long DynamoDB keeps dedup records past their horizon."
  type        = number
  default     = 48
  validation {
    condition     = var.retention_hours >= 24 && var.retention_hours <= 8760
    error_message = "retention_hours must be between 24 and 8760 (Kinesis allows 1 to 365 days)."
  }
}

variable "image" {
  description = "Container image with the tally binary as its entrypoint, pinned by digest: <registry>/tally@sha256:<64 hex>."
  type        = string
  validation {
    condition     = can(regex("@sha256:[0-9a-f]{64}$", var.image))
    error_message = "image must be pinned by digest (…@sha256:<64 hex digits>), so that every task of a deploy runs the same build."
  }
}

variable "cpu_architecture" {
  description = "CPU architecture of the image and the Fargate tasks: X86_64 or ARM64 (Graviton, cheaper per vCPU)."
  type        = string
  default     = "X86_64"
  validation {
    condition     = contains(["X86_64", "ARM64"], var.cpu_architecture)
    error_message = "cpu_architecture must be X86_64 or ARM64."
  }
}

variable "counter_tasks" {
  description = "Fargate tasks of the counter at creation, and the fewest autoscaling keeps; each takes about shards / tasks leases."
  type        = number
  default     = 2
  validation {
    condition     = var.counter_tasks >= 1 && var.counter_tasks <= var.shard_count
    error_message = "counter_tasks must be at least 1 and at most shard_count: a task without a lease only waits."
  }
}

variable "analytics_tasks" {
  description = "Fargate tasks of the analytics consumer at creation, and the fewest autoscaling keeps."
  type        = number
  default     = 1
  validation {
    condition     = var.analytics_tasks >= 1 && var.analytics_tasks <= var.shard_count
    error_message = "analytics_tasks must be at least 1 and at most shard_count."
  }
}

variable "task_size" {
  description = "Fargate CPU units and memory (MiB) per task of each application (the router's, with several regions; absent: analytics' size)."
  type = map(object({
    cpu    = number
    memory = number
  }))
  default = {
    counter   = { cpu = 512, memory = 1024 }
    analytics = { cpu = 256, memory = 512 }
    router    = { cpu = 256, memory = 512 }
  }
  validation {
    condition     = alltrue([for app in ["counter", "analytics"] : contains(keys(var.task_size), app)])
    error_message = "task_size must have an entry for counter and for analytics."
  }
  validation {
    condition     = alltrue([for s in values(var.task_size) : contains([256, 512, 1024, 2048, 4096, 8192, 16384], s.cpu) && s.memory >= 512])
    error_message = "each task_size cpu must be a Fargate size (256 … 16384) and memory at least 512 MiB."
  }
}

variable "stop_timeout_secs" {
  description = "How long ECS waits after SIGTERM before SIGKILL (Fargate allows up to 120). tally flushes within this less 10 s, leaving room to release its leases."
  type        = number
  default     = 60
  validation {
    condition     = var.stop_timeout_secs >= 20 && var.stop_timeout_secs <= 120
    error_message = "stop_timeout_secs must be between 20 and 120 (the Fargate maximum)."
  }
}

variable "scale_on_iterator_age_ms" {
  description = "Autoscaling keeps each application's iterator age near this; the task count stays between its *_tasks variable and shard_count."
  type        = number
  default     = 10000
  validation {
    condition     = var.scale_on_iterator_age_ms >= 1000
    error_message = "scale_on_iterator_age_ms must be at least 1000."
  }
}

variable "vpc_id" {
  description = "VPC of the tasks."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must be a VPC id (vpc-…)."
  }
}

variable "subnet_ids" {
  description = "Private subnets of the tasks, in at least two availability zones (with a NAT gateway, or VPC endpoints for Kinesis, DynamoDB, CloudWatch Logs, ECR and the S3 gateway for image layers)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must list at least two subnets (subnet-…), so that one zone's outage leaves tasks running."
  }
}

variable "alarm_emails" {
  description = "Addresses told when an alarm fires and when it recovers (each confirms the subscription by email)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@ ]+@[^@ ]+\\.[^@ ]+$", e))])
    error_message = "alarm_emails must be email addresses."
  }
}

variable "iterator_age_alarm_ms" {
  description = "Alarm when a consumer falls this far behind the stream."
  type        = number
  default     = 60000
  validation {
    condition     = var.iterator_age_alarm_ms >= 1000
    error_message = "iterator_age_alarm_ms must be at least 1000."
  }
}

variable "log_retention_days" {
  description = "Retention of the tasks' logs."
  type        = number
  default     = 365
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, …, 365, …, 3653)."
  }
}

variable "metrics_namespace" {
  description = "CloudWatch namespace of tally's own metrics (embedded metric format in the task logs)."
  type        = string
  default     = "tally"
  validation {
    condition     = length(var.metrics_namespace) >= 1 && length(var.metrics_namespace) <= 255 && !startswith(var.metrics_namespace, ":")
    error_message = "metrics_namespace must be 1-255 characters, not starting with a colon."
  }
}

variable "leases_lost_alarm" {
  description = "Alarm when an application loses more leases than this in 5 minutes."
  type        = number
  default     = 5
  validation {
    condition     = var.leases_lost_alarm >= 0
    error_message = "leases_lost_alarm must not be negative."
  }
}

variable "like_latency_alarm_ms" {
  description = "Alarm when the p99 time from a like's creation to its processing exceeds this."
  type        = number
  default     = 30000
  validation {
    condition     = var.like_latency_alarm_ms >= 1000
    error_message = "like_latency_alarm_ms must be at least 1000."
  }
}

variable "counter_window_max_ms" {
  description = "At a low rate the counter keeps a window of fewer than 20 records open up to this long (ms), so that its fixed writes are shared by more likes; tally serve shows its likes meanwhile (provisional counts), but apps that read the tables straight (docs/READ-CONTRACT.md) see them only when it closes. 1000 (the window's time) turns it off."
  type        = number
  default     = 10000
  validation {
    condition     = var.counter_window_max_ms >= 1 && var.counter_window_max_ms <= 600000
    error_message = "counter_window_max_ms must be between 1 and 600000."
  }
}

variable "recent_likers_index" {
  description = "Give the edges table its `recent` index (a global secondary index of liked edges by post and like time, keys only), which likers most recent first read (GET /api/posts/{id}/likers/recent; docs/READ-CONTRACT.md). It costs about a write unit per like more (BENCHMARKS.md); without it that route answers 501."
  type        = bool
  default     = false
}

variable "counter_read_mode" {
  description = "How the counter reads the stream: \"polling\" (GetRecords: 5 reads/s and 2 MB/s per shard, shared with analytics) or \"efo\" (enhanced fan-out: 2 MB/s per shard of its own, records pushed; billed per consumer-shard hour and per GB)."
  type        = string
  default     = "polling"
  validation {
    condition     = contains(["polling", "efo"], var.counter_read_mode)
    error_message = "counter_read_mode must be \"polling\" or \"efo\"."
  }
}

variable "analytics_read_mode" {
  description = "How the analytics consumer reads the stream: \"polling\" or \"efo\" (see counter_read_mode)."
  type        = string
  default     = "polling"
  validation {
    condition     = contains(["polling", "efo"], var.analytics_read_mode)
    error_message = "analytics_read_mode must be \"polling\" or \"efo\"."
  }
}

variable "serve_tasks" {
  description = "How many `tally serve` tasks (the read side) run: at least min, scaled up to max on requests per task."
  type = object({
    min = number
    max = number
  })
  default = { min = 2, max = 10 }
  validation {
    condition     = var.serve_tasks.min >= 1 && var.serve_tasks.max >= var.serve_tasks.min
    error_message = "serve_tasks needs min >= 1 and max >= min."
  }
}

variable "serve_task_size" {
  description = "Fargate CPU units and memory (MiB) of a `tally serve` task."
  type = object({
    cpu    = number
    memory = number
  })
  default = { cpu = 256, memory = 512 }
  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.serve_task_size.cpu) && var.serve_task_size.memory >= 512
    error_message = "serve_task_size cpu must be a Fargate size (256 … 16384) and memory at least 512 MiB."
  }
}

variable "serve_requests_per_task" {
  description = "Load balancer requests per minute per `tally serve` task that autoscaling aims at."
  type        = number
  default     = 6000
  validation {
    condition     = var.serve_requests_per_task > 0
    error_message = "serve_requests_per_task must be positive."
  }
}

variable "serve_allowed_cidrs" {
  description = "Networks that may reach the read side's internal load balancer (the apps that show counts)."
  type        = list(string)
  validation {
    condition     = length(var.serve_allowed_cidrs) > 0 && alltrue([for c in var.serve_allowed_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "serve_allowed_cidrs must be one or more CIDR blocks, and not 0.0.0.0/0: the read side is internal."
  }
}

variable "serve_require_token" {
  description = "Whether `tally serve` asks every API request for a bearer token (a generated secret, output serve_token_secret_arn). The API answers who liked what: leave it on unless only trusted networks reach the load balancer."
  type        = bool
  default     = true
}

variable "serve_certificate_arn" {
  description = "ACM certificate of the read side's HTTPS listener; empty: plain HTTP on port 80 inside the VPC."
  type        = string
  default     = ""
  validation {
    condition     = var.serve_certificate_arn == "" || can(regex("^arn:aws[a-z-]*:acm:", var.serve_certificate_arn))
    error_message = "serve_certificate_arn must be an ACM certificate ARN, or empty."
  }
}

variable "serve_access_logs_bucket" {
  description = "S3 bucket for the read side's load balancer access logs; empty: none."
  type        = string
  default     = ""
}

variable "source_table_name" {
  description = "An existing DynamoDB table of likes whose changes tally counts (Kinesis Data Streams for DynamoDB to the stream); \"\" (the default): producers put like events."
  type        = string
  default     = ""
}

variable "source_time_precision" {
  description = "The unit of the table's change records' ApproximateCreationDateTime: \"MILLISECOND\" or \"MICROSECOND\"."
  type        = string
  default     = "MILLISECOND"
  validation {
    condition     = contains(["MILLISECOND", "MICROSECOND"], var.source_time_precision)
    error_message = "source_time_precision must be \"MILLISECOND\" or \"MICROSECOND\"."
  }
}

variable "source_items" {
  description = "Where a like is in the source table's items (tally's [input] settings): the post and user attributes and the prefixes stripped from them, the attribute whose prefix tells like items from the table's others (\"\": every item is a like), and an attribute marking withdrawn likes (\"\": none). The defaults are a single-table design: PK = POST#<post>, SK = LIKE#<user>."
  type = object({
    post_attribute      = optional(string, "PK")
    post_prefix         = optional(string, "POST#")
    user_attribute      = optional(string, "SK")
    user_prefix         = optional(string, "LIKE#")
    like_attribute      = optional(string, "SK")
    like_prefix         = optional(string, "LIKE#")
    withdrawn_attribute = optional(string, "")
  })
  default = {
    post_attribute      = "PK"
    post_prefix         = "POST#"
    user_attribute      = "SK"
    user_prefix         = "LIKE#"
    like_attribute      = "SK"
    like_prefix         = "LIKE#"
    withdrawn_attribute = ""
  }
  validation {
    condition     = var.source_items.post_attribute != "" && var.source_items.user_attribute != ""
    error_message = "source_items needs post_attribute and user_attribute."
  }
  validation {
    condition     = (var.source_items.like_attribute == "") == (var.source_items.like_prefix == "")
    error_message = "source_items: like_attribute and like_prefix are set together (both \"\": every item is a like)."
  }
}

variable "regions" {
  description = "Several regions, each post counted in its home (docs/REGIONS.md): this region, every region in the same order everywhere, and each other region: its stream (its name, and its AWS region when that is not its key), its table prefix (its counts, edges and leases tables are global tables with a replica here, which the read side reads that region's posts from) and its KMS key (that stack's kms_key_arn output: it encrypts the replicas of this region's tables there). Set, this stack runs the router (`tally route`), which puts the likes of posts homed elsewhere to their home's stream, and replicates its counts, edges and leases tables to the other regions; empty (the default): one region."
  type = object({
    this  = string
    homes = list(string)
    peers = map(object({
      stream       = string
      aws_region   = optional(string, "")
      table_prefix = optional(string, "")
      kms_key_arn  = optional(string, "")
    }))
  })
  default = { this = "", homes = [], peers = {} }
  validation {
    condition     = length(var.regions.homes) == 0 || contains(var.regions.homes, var.regions.this)
    error_message = "regions.this must be one of regions.homes."
  }
  validation {
    condition     = alltrue([for r in var.regions.homes : r == var.regions.this || contains(keys(var.regions.peers), r)])
    error_message = "regions.peers must name every other region of regions.homes: where its stream is."
  }
  validation {
    condition     = alltrue([for r, p in var.regions.peers : p.table_prefix != "" && p.kms_key_arn != ""])
    error_message = "each of regions.peers needs table_prefix (that region's tables, replicated here: the read side reads its posts from them) and kms_key_arn (that region's key, for the replicas of this region's tables there)."
  }
}

variable "router_tasks" {
  description = "Router tasks at the start, with several regions (autoscaling takes it from there, as for the consumers)."
  type        = number
  default     = 1
  validation {
    condition     = var.router_tasks >= 1 && var.router_tasks <= var.shard_count
    error_message = "router_tasks must be between 1 and shard_count."
  }
}
