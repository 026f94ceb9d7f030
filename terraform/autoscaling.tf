# Each consumer scales on how far behind it is (IteratorAgeMs, the maximum over its shards),
# between its *_tasks variable and the shard count: a task beyond one per shard would hold no
# lease. The counter's tasks run two applications (the stream's `counter` and the edges' change
# log's `changes`, tally_core::apps): they scale on the more behind of the two.
locals {
  scaled_on = { for k, _ in local.services : k => k == "counter" ? ["counter", "changes"] : [k] }
}

resource "aws_appautoscaling_target" "service" {
  for_each           = local.services
  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.tally.name}/${aws_ecs_service.service[each.key].name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = each.value.tasks
  max_capacity       = var.shard_count
}

resource "aws_appautoscaling_policy" "iterator_age" {
  for_each           = local.services
  name               = "${local.name}-${each.key}-iterator-age"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.service[each.key].service_namespace
  resource_id        = aws_appautoscaling_target.service[each.key].resource_id
  scalable_dimension = aws_appautoscaling_target.service[each.key].scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value = var.scale_on_iterator_age_ms
    customized_metric_specification {
      dynamic "metrics" {
        for_each = local.scaled_on[each.key]
        content {
          id          = "age_${metrics.value}"
          return_data = false
          metric_stat {
            metric {
              namespace   = var.metrics_namespace
              metric_name = "IteratorAgeMs"
              dimensions {
                name  = "App"
                value = metrics.value
              }
            }
            stat = "Maximum"
          }
        }
      }
      metrics {
        id          = "behind"
        label       = "IteratorAgeMs of ${join(" or ", local.scaled_on[each.key])}, the more behind"
        expression  = "MAX([${join(", ", [for a in local.scaled_on[each.key] : "age_${a}"])}])"
        return_data = true
      }
    }
    # Out quickly when behind; in slowly, since every scale-in moves leases.
    scale_out_cooldown = 60
    scale_in_cooldown  = 600
  }
}
