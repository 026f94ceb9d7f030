locals {
  name = "tally-${var.environment}"

  # The DynamoDB tables: suffix => keys and TTL attribute. Mirrors tally_aws::dynamo::TABLES
  # (tests/terraform.rs fails on drift).
  tables = {
    "leases"       = { hash_key = "app", range_key = "shard_id", ttl = "" }
    "counts"       = { hash_key = "pk", range_key = "sk", ttl = "" }
    "dedup"        = { hash_key = "pk", range_key = "sk", ttl = "expires_at" }
    "dead-letters" = { hash_key = "shard_id", range_key = "seq", ttl = "" }
    "analytics"    = { hash_key = "pk", range_key = "sk", ttl = "expires_at" }
  }

  # The environment every tally task gets (each key is a tally setting; tests/terraform.rs checks).
  tally_env = {
    TALLY_BACKEND                    = "aws"
    TALLY_STREAM                     = var.stream_name
    TALLY_TABLE_PREFIX               = var.table_prefix
    TALLY_LEASE__SHUTDOWN_TIMEOUT_MS = "20000"
    TALLY_METRICS__EMF               = "true"
    TALLY_METRICS__NAMESPACE         = var.metrics_namespace
    AWS_REGION                       = var.region
  }

  # The consumer applications as ECS services.
  services = {
    counter   = { command = ["count", "--log-json"], tasks = var.counter_tasks }
    analytics = { command = ["analytics", "--log-json"], tasks = var.analytics_tasks }
  }
}
