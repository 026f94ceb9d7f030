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
  description = "tally tasks: no inbound, HTTPS out to AWS APIs"
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
  cpu                      = 512
  memory                   = 1024
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn

  container_definitions = jsonencode([
    {
      name                   = each.key
      image                  = var.image
      command                = each.value.command
      essential              = true
      readonlyRootFilesystem = true
      # ECS sends SIGTERM, then SIGKILL after stopTimeout: tally flushes, checkpoints and
      # releases its leases well inside it (lease.shutdown_timeout_ms = 20 s).
      stopTimeout = 30
      environment = [for k, v in local.tally_env : { name = k, value = v }]
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

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.tasks.id]
    assign_public_ip = false
  }
}
