# Each consumer scales on how far behind it is (its own IteratorAgeMs, the maximum over its
# shards), between its *_tasks variable and the shard count: a task beyond one per shard would
# hold no lease.
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
      namespace   = var.metrics_namespace
      metric_name = "IteratorAgeMs"
      dimensions {
        name  = "App"
        value = each.key
      }
      statistic = "Maximum"
    }
    # Out quickly when behind; in slowly, since every scale-in moves leases.
    scale_out_cooldown = 60
    scale_in_cooldown  = 600
  }
}
