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

  # Likers most recent first (var.recent_likers_index): liked edges by post and like time. Only a
  # liked edge has `lt`, so only liked edges are in it (tally_core::edge::RECENT_INDEX).
  dynamic "attribute" {
    for_each = each.key == "counts" && var.recent_likers_index ? [1] : []
    content {
      name = "lt"
      type = "N"
    }
  }

  dynamic "global_secondary_index" {
    for_each = each.key == "counts" && var.recent_likers_index ? [1] : []
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

  server_side_encryption {
    enabled     = true
    kms_key_arn = aws_kms_key.tally.arn
  }

  deletion_protection_enabled = true
}
