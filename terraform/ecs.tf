resource "aws_ecs_cluster" "tally" {
  name = local.name
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_cloudwatch_log_group" "service" {
  for_each          = local.services
  name              = "/ecs/${local.name}/${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.tally.arn
}

resource "aws_security_group" "tasks" {
  name        = "${local.name}-tasks"
  description = "tally tasks: the serve tasks in on the workers' port, HTTPS out to AWS APIs"
  vpc_id      = var.vpc_id

  egress {
    description = "HTTPS to Kinesis, DynamoDB, CloudWatch Logs and ECR"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

resource "aws_ecs_task_definition" "service" {
  for_each = local.services

  family                   = "${local.name}-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = lookup(var.task_size, each.key, var.task_size["analytics"]).cpu
  memory                   = lookup(var.task_size, each.key, var.task_size["analytics"]).memory
  task_role_arn            = aws_iam_role.task[each.key].arn
  execution_role_arn       = aws_iam_role.execution.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  container_definitions = jsonencode([
    {
      name                   = each.key
      image                  = var.image
      command                = each.value.command
      essential              = true
      readonlyRootFilesystem = true
      # ECS sends SIGTERM, then SIGKILL after stopTimeout: tally flushes, checkpoints and
      # releases its leases inside it (lease.shutdown_timeout_ms is this less 10 s; main.tf).
      stopTimeout = var.stop_timeout_secs
      environment = [for k, v in merge(local.tally_env, local.regions_env) : { name = k, value = v }]
      # The worker's own /healthz (`--http`), asked from inside the task by the same binary.
      healthCheck = {
        command     = ["CMD", "/usr/local/bin/tally", "probe", "http://127.0.0.1:${local.health_port}/healthz"]
        interval    = 30
        timeout     = 5
        retries     = 3
        startPeriod = 30
      }
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = aws_cloudwatch_log_group.service[each.key].name
          awslogs-region        = var.region
          awslogs-stream-prefix = each.key
        }
      }
    }
  ])
}

resource "aws_ecs_service" "service" {
  for_each = local.services

  name            = each.key
  cluster         = aws_ecs_cluster.tally.id
  task_definition = aws_ecs_task_definition.service[each.key].arn
  desired_count   = each.value.tasks
  launch_type     = "FARGATE"

  # Rolling deploys: new tasks start before old ones stop; leases move by release, not expiry.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  # A deploy whose tasks keep failing (health check, crash loop) stops and rolls back by itself…
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  # …and so does one during which the application stops holding leases (the counter: either of
  # its stages, the stream's or the edges' change log's, "changes").
  alarms {
    enable   = true
    rollback = true
    alarm_names = [
      for app in concat([each.key], each.key == "counter" ? ["changes"] : []) :
      aws_cloudwatch_metric_alarm.app["${app}-no-leases-held"].alarm_name
    ]
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.tasks.id]
    assign_public_ip = false
  }

  # Autoscaling owns the task count after creation (autoscaling.tf).
  lifecycle {
    ignore_changes = [desired_count]
  }

  # The tasks' permissions exist before the first task starts (and outlive the last one).
  depends_on = [aws_iam_role_policy.task, aws_iam_role_policy_attachment.execution]
}
