resource "aws_dynamodb_table" "tally" {
  for_each = local.tables

  name         = "${local.table_prefix}-${each.key}"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = each.value.hash_key
  range_key    = each.value.range_key

  attribute {
    name = each.value.hash_key
    type = "S"
  }

  attribute {
    name = each.value.range_key
    type = "S"
  }

  # Likers most recent first (var.recent_likers_index): the edges table's liked edges by post and
  # like time. Only a liked edge has `lt`, so only liked edges are in it
  # (tally_core::edge::RECENT_INDEX; `tally setup` creates the same).
  dynamic "attribute" {
    for_each = each.key == "edges" && var.recent_likers_index ? [1] : []
    content {
      name = "lt"
      type = "N"
    }
  }

  dynamic "global_secondary_index" {
    for_each = each.key == "edges" && var.recent_likers_index ? [1] : []
    content {
      name            = "recent"
      hash_key        = "pk"
      range_key       = "lt"
      projection_type = "KEYS_ONLY"
    }
  }

  ttl {
    enabled        = each.value.ttl != ""
    attribute_name = each.value.ttl
  }

  point_in_time_recovery {
    enabled = true
  }

  # The edges table's stream is the edges' change log: each change of an edge once, in the edge's
  # order, with its state before and after (both images: tally refuses a stream without them),
  # which the counter's second stage ("changes", tally_aws::edge_log) counts. Always on: without
  # it no like is counted. DynamoDB Streams keeps 24 hours whatever retention_hours says; the
  # `changes-*` alarms (alarms.tf) tell long before that stage falls that far behind.
  # Several regions (var.regions): the counts, edges and leases tables are global tables,
  # replicated to every other region for its reads of the posts homed here. Only this region
  # writes them (docs/REGIONS.md); replication needs the same stream (new and old images).
  stream_enabled   = contains(local.streamed_tables, each.key) ? true : null
  stream_view_type = contains(local.streamed_tables, each.key) ? "NEW_AND_OLD_IMAGES" : null

  dynamic "replica" {
    for_each = contains(local.replicated_tables, each.key) ? var.regions.peers : {}
    content {
      region_name            = replica.value.aws_region != "" ? replica.value.aws_region : replica.key
      kms_key_arn            = replica.value.kms_key_arn
      point_in_time_recovery = true
    }
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = aws_kms_key.tally.arn
  }

  deletion_protection_enabled = true
}
