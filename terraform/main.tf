locals {
  name = "tally-${var.environment}"

  # Names default to the environment's, so that two environments can share an account.
  stream_name  = coalesce(var.stream_name, "tally-${var.environment}-likes")
  table_prefix = coalesce(var.table_prefix, "tally-${var.environment}")

  # The DynamoDB tables: suffix => keys and TTL attribute. Mirrors tally_aws::dynamo::TABLES
  # (tests/e2e/terraform.rs fails on drift).
  tables = {
    "leases"       = { hash_key = "app", range_key = "shard_id", ttl = "" }
    "counts"       = { hash_key = "pk", range_key = "sk", ttl = "" }
    "edges"        = { hash_key = "pk", range_key = "sk", ttl = "" }
    "dedup"        = { hash_key = "pk", range_key = "sk", ttl = "expires_at" }
    "dead-letters" = { hash_key = "shard_id", range_key = "seq", ttl = "" }
    "analytics"    = { hash_key = "pk", range_key = "sk", ttl = "expires_at" }
  }

  # Where each worker serves /healthz (and /metrics) inside its task: the container health check
  # asks it there; nothing outside the task can reach it (no inbound rule).
  health_port = 9100

  # The read side: the port `tally serve` listens on in its task, and the load balancer's.
  serve_port          = 8080
  serve_listener_port = var.serve_certificate_arn == "" ? 80 : 443

  # The environment every tally task gets (each key is a tally setting; tests/e2e/terraform.rs checks).
  # One value decides both when ECS kills a task and how long tally flushes before it gives up:
  # the flush gets the stop timeout less 10 s, which leaves room to release the leases.
  tally_env = {
    TALLY_BACKEND                    = "aws"
    TALLY_STREAM                     = local.stream_name
    TALLY_TABLE_PREFIX               = local.table_prefix
    TALLY_STREAM_RETENTION_HOURS     = tostring(var.retention_hours)
    TALLY_RECENT_LIKERS_INDEX        = tostring(var.recent_likers_index)
    TALLY_LEASE__SHUTDOWN_TIMEOUT_MS = tostring((var.stop_timeout_secs - 10) * 1000)
    TALLY_METRICS__EMF               = "true"
    TALLY_METRICS__NAMESPACE         = var.metrics_namespace
    TALLY_COUNTER__READ_MODE         = var.counter_read_mode
    TALLY_COUNTER__WINDOW_MAX_MS     = tostring(var.counter_window_max_ms)
    TALLY_ANALYTICS__READ_MODE       = var.analytics_read_mode
    AWS_REGION                       = var.region
    # What the records are: like events, or a source table's change records (source.tf).
    TALLY_INPUT__FORMAT              = var.source_table_name != "" ? "dynamodb" : "events"
    TALLY_INPUT__POST_ATTRIBUTE      = var.source_items.post_attribute
    TALLY_INPUT__POST_PREFIX         = var.source_items.post_prefix
    TALLY_INPUT__USER_ATTRIBUTE      = var.source_items.user_attribute
    TALLY_INPUT__USER_PREFIX         = var.source_items.user_prefix
    TALLY_INPUT__LIKE_ATTRIBUTE      = var.source_items.like_attribute
    TALLY_INPUT__LIKE_PREFIX         = var.source_items.like_prefix
    TALLY_INPUT__WITHDRAWN_ATTRIBUTE = var.source_items.withdrawn_attribute
    TALLY_INPUT__TIME_PRECISION      = var.source_time_precision == "MICROSECOND" ? "microsecond" : "millisecond"
  }

  # Several regions (var.regions; docs/REGIONS.md): each post counted in its home; the router
  # puts the likes of posts homed elsewhere to their home's stream. Set only then: an empty
  # TALLY_REGIONS__HOMES would read as a list of one empty name.
  routes = length(var.regions.homes) > 0
  regions_env = local.routes ? merge(
    {
      TALLY_REGIONS__THIS  = var.regions.this
      TALLY_REGIONS__HOMES = join(",", var.regions.homes)
    },
    { for r, p in var.regions.peers : "TALLY_REGIONS__PEERS__${upper(r)}__STREAM" => p.stream },
    { for r, p in var.regions.peers : "TALLY_REGIONS__PEERS__${upper(r)}__AWS_REGION" => p.aws_region if p.aws_region != "" },
    { for r, p in var.regions.peers : "TALLY_REGIONS__PEERS__${upper(r)}__TABLE_PREFIX" => p.table_prefix },
  ) : {}
  # With several regions, the tables the read side reads in every region are global tables, each
  # written by its home region alone (dynamodb.tf): the counts, the likers' edges (a post's
  # likers and a feed page's viewer likes are read from its home's edges), and the lease rows
  # that stamp how fresh they are. The edges are replicated exactly when the counts are.
  # (tally_aws::REPLICATED_TABLES: what the read side checks of another home; it does not list
  # the edges, which it reads there too: tests/e2e/terraform.rs holds this list to both.)
  replicated        = ["counts", "edges", "leases"]
  replicated_tables = local.routes ? local.replicated : []
  # The tables with a change stream (new and old images): the edges always, since their change
  # log is what the counter's second stage counts; and the replicated ones, which global tables
  # replicate through it.
  streamed_tables = distinct(concat(["edges"], local.replicated_tables))
  # The other homes' replicas in this region, as ARNs (and their indexes): what the read side
  # reads the posts homed elsewhere from.
  peer_table_arns = flatten([
    for r, p in var.regions.peers : [
      for t in local.replicated : [
        "arn:${data.aws_partition.current.partition}:dynamodb:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:table/${p.table_prefix}-${t}",
        "arn:${data.aws_partition.current.partition}:dynamodb:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:table/${p.table_prefix}-${t}/index/*",
      ]
    ]
  ])
  # Each other region's stream, as an ARN: what the router puts to.
  peer_stream_arns = [
    for r, p in var.regions.peers :
    "arn:${data.aws_partition.current.partition}:kinesis:${p.aws_region != "" ? p.aws_region : r}:${data.aws_caller_identity.current.account_id}:stream/${p.stream}"
  ]

  # Reading a table's change stream (source.tf).
  reads_a_table = var.source_table_name != ""

  # How each application reads the stream: "polling" (GetRecords, shared by both) or "efo"
  # (enhanced fan-out: a consumer of its own, kinesis.tf).
  read_modes = {
    counter   = var.counter_read_mode
    analytics = var.analytics_read_mode
  }

  # The consumer applications as ECS services; each has its own task role (iam.tf). The router
  # only with several regions.
  services = merge(local.consumers, local.routes ? {
    router = {
      command = ["route", "--log-json", "--http", "127.0.0.1:${local.health_port}"]
      tasks   = var.router_tasks
    }
  } : {})
  # The applications whose workers report tally's metrics (dimension `App`): each service's, and
  # "changes" (tally_core::apps::CHANGES), the counter's second stage, which reads the edges'
  # change log (DynamoDB Streams on the edges table) in the counter's own tasks, with leases of
  # its own: alarms and the dashboard watch it as an application of its own.
  worker_apps = concat(keys(local.services), ["changes"])

  consumers = {
    counter = {
      # On every interface of the task: `tally serve` asks it for its open windows (provisional
      # counts; the worker advertises its task IP with its leases). Only the serve tasks may
      # connect (serve.tf, aws_security_group_rule.serve_to_counter).
      command = ["count", "--log-json", "--http", "0.0.0.0:${local.health_port}"]
      tasks   = var.counter_tasks
    }
    analytics = {
      command = ["analytics", "--log-json", "--http", "127.0.0.1:${local.health_port}"]
      tasks   = var.analytics_tasks
    }
  }
}
