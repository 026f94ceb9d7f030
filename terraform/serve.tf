# The read side: `tally serve` as an ECS service behind an internal Application Load Balancer,
# for the apps that show counts (`GET /api/counts?ids=…`, `/api/posts/{id}`; docs/RUNBOOK.md,
# "Reading counts"). Its task role reads the tables and nothing else; its tasks take traffic from
# the load balancer only; it scales on requests per task.

resource "aws_security_group" "serve_lb" {
  name        = "${local.name}-serve-lb"
  description = "tally read side load balancer: the readers' networks in, the serve tasks out"
  vpc_id      = var.vpc_id

  ingress {
    description = "Readers of counts"
    from_port   = local.serve_listener_port
    to_port     = local.serve_listener_port
    protocol    = "tcp"
    cidr_blocks = var.serve_allowed_cidrs
  }
}

resource "aws_security_group" "serve" {
  name        = "${local.name}-serve"
  description = "tally serve tasks: the load balancer in, HTTPS out to AWS APIs"
  vpc_id      = var.vpc_id

  ingress {
    description     = "The read side's load balancer only"
    from_port       = local.serve_port
    to_port         = local.serve_port
    protocol        = "tcp"
    security_groups = [aws_security_group.serve_lb.id]
  }

  egress {
    description = "HTTPS to DynamoDB, Kinesis, CloudWatch Logs and ECR"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

resource "aws_security_group_rule" "serve_lb_to_tasks" {
  description              = "The load balancer reaches the serve tasks"
  type                     = "egress"
  security_group_id        = aws_security_group.serve_lb.id
  source_security_group_id = aws_security_group.serve.id
  from_port                = local.serve_port
  to_port                  = local.serve_port
  protocol                 = "tcp"
}

resource "aws_lb" "serve" {
  # checkov:skip=CKV_AWS_91: access logs need a bucket of the operator's; set serve_access_logs_bucket
  # checkov:skip=CKV2_AWS_28: internal load balancer, reachable from serve_allowed_cidrs only (no WAF in front of a VPC-internal API)
  name                       = "${local.name}-serve"
  internal                   = true
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.serve_lb.id]
  subnets                    = var.subnet_ids
  drop_invalid_header_fields = true
  enable_deletion_protection = true

  dynamic "access_logs" {
    for_each = var.serve_access_logs_bucket == "" ? [] : [var.serve_access_logs_bucket]
    content {
      bucket  = access_logs.value
      prefix  = "${local.name}-serve"
      enabled = true
    }
  }
}

resource "aws_lb_target_group" "serve" {
  name        = "${local.name}-serve"
  port        = local.serve_port
  protocol    = "HTTP"
  target_type = "ip"
  vpc_id      = var.vpc_id
  # A task being replaced finishes its answers; reads are short.
  deregistration_delay = 10

  health_check {
    path                = "/healthz"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

# HTTPS with the operator's certificate; plain HTTP inside the VPC only when none is given.
resource "aws_lb_listener" "serve" {
  # checkov:skip=CKV_AWS_2: HTTPS whenever serve_certificate_arn is set; without one the listener is HTTP on an internal load balancer
  # checkov:skip=CKV_AWS_103: the TLS policy below is TLS 1.2+ when HTTPS is on
  load_balancer_arn = aws_lb.serve.arn
  port              = local.serve_listener_port
  protocol          = var.serve_certificate_arn == "" ? "HTTP" : "HTTPS"
  certificate_arn   = var.serve_certificate_arn == "" ? null : var.serve_certificate_arn
  ssl_policy        = var.serve_certificate_arn == "" ? null : "ELBSecurityPolicy-TLS13-1-2-2021-06"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.serve.arn
  }
}

resource "aws_cloudwatch_log_group" "serve" {
  name              = "/ecs/${local.name}/serve"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.tally.arn
}

resource "aws_iam_role" "serve" {
  name               = "${local.name}-serve-task"
  assume_role_policy = data.aws_iam_policy_document.assume_ecs_tasks.json
}

# Read only: the tables, and the stream's description (the start-up check). Mirrors
# tests/e2e/common/iam.rs KINESIS_SERVE_ACTIONS and DYNAMODB_SERVE_ACTIONS (tests/e2e/terraform.rs checks).
data "aws_iam_policy_document" "serve" {
  statement {
    sid       = "CheckStream"
    actions   = ["kinesis:DescribeStreamSummary"]
    resources = [aws_kinesis_stream.likes.arn]
  }
  statement {
    sid     = "ReadTables"
    actions = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"]
    # The tables, and their indexes (the edges table's `recent`: likers most recent first); with
    # several regions, the other homes' replicas here too.
    resources = concat(flatten([for t in aws_dynamodb_table.tally : [t.arn, "${t.arn}/index/*"]]), local.peer_table_arns)
  }
}

resource "aws_iam_role_policy" "serve" {
  name   = "serve"
  role   = aws_iam_role.serve.id
  policy = data.aws_iam_policy_document.serve.json
}

resource "aws_ecs_task_definition" "serve" {
  family                   = "${local.name}-serve"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.serve_task_size.cpu
  memory                   = var.serve_task_size.memory
  task_role_arn            = aws_iam_role.serve.arn
  execution_role_arn       = aws_iam_role.execution.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  container_definitions = jsonencode([
    {
      name                   = "serve"
      image                  = var.image
      command                = concat(["serve", "--log-json", "--addr", "0.0.0.0:${local.serve_port}"], local.serve_auth_args)
      essential              = true
      readonlyRootFilesystem = true
      portMappings           = [{ containerPort = local.serve_port, protocol = "tcp" }]
      environment            = [for k, v in merge(local.tally_env, local.regions_env) : { name = k, value = v }]
      # The bearer token, handed over by ECS from Secrets Manager (never in the task definition).
      secrets = [for s in aws_secretsmanager_secret.serve_token : { name = local.serve_token_env, valueFrom = s.arn }]
      healthCheck = {
        command     = ["CMD", "/usr/local/bin/tally", "probe", "http://127.0.0.1:${local.serve_port}/healthz"]
        interval    = 30
        timeout     = 5
        retries     = 3
        startPeriod = 15
      }
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = aws_cloudwatch_log_group.serve.name
          awslogs-region        = var.region
          awslogs-stream-prefix = "serve"
        }
      }
    }
  ])
}

resource "aws_ecs_service" "serve" {
  name            = "serve"
  cluster         = aws_ecs_cluster.tally.id
  task_definition = aws_ecs_task_definition.serve.arn
  desired_count   = var.serve_tasks.min
  launch_type     = "FARGATE"

  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.serve.arn
    container_name   = "serve"
    container_port   = local.serve_port
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.serve.id]
    assign_public_ip = false
  }

  lifecycle {
    ignore_changes = [desired_count]
  }

  depends_on = [aws_lb_listener.serve, aws_iam_role_policy.serve, aws_iam_role_policy_attachment.execution, aws_iam_role_policy.execution_secrets, aws_secretsmanager_secret_version.serve_token]
}

resource "aws_appautoscaling_target" "serve" {
  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.tally.name}/${aws_ecs_service.serve.name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.serve_tasks.min
  max_capacity       = var.serve_tasks.max
}

# Reads outnumber likes about a hundred to one: scale on requests per task.
resource "aws_appautoscaling_policy" "serve_requests" {
  name               = "${local.name}-serve-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.serve.service_namespace
  resource_id        = aws_appautoscaling_target.serve.resource_id
  scalable_dimension = aws_appautoscaling_target.serve.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value = var.serve_requests_per_task
    predefined_metric_specification {
      predefined_metric_type = "ALBRequestCountPerTarget"
      resource_label         = "${aws_lb.serve.arn_suffix}/${aws_lb_target_group.serve.arn_suffix}"
    }
    scale_out_cooldown = 60
    scale_in_cooldown  = 300
  }
}

# Provisional counts: the serve tasks ask the counter's workers for their open windows on the
# workers' --http port; nothing else reaches it.
resource "aws_security_group_rule" "serve_to_counter" {
  description              = "tally serve asks the counter workers for their open windows"
  type                     = "egress"
  security_group_id        = aws_security_group.serve.id
  source_security_group_id = aws_security_group.tasks.id
  from_port                = local.health_port
  to_port                  = local.health_port
  protocol                 = "tcp"
}

resource "aws_security_group_rule" "counter_from_serve" {
  description              = "Only the serve tasks reach the workers' --http port"
  type                     = "ingress"
  security_group_id        = aws_security_group.tasks.id
  source_security_group_id = aws_security_group.serve.id
  from_port                = local.health_port
  to_port                  = local.health_port
  protocol                 = "tcp"
}

# Who may read (serve_require_token): the API answers who liked what, so it asks for a bearer
# token. Secrets Manager generates it (the AWS provider's own generator: no other provider in the
# lock file); ECS hands it to the tasks as an environment variable that `tally serve
# --auth-token-env` reads; apps read it by `serve_token_secret_arn`. Rotate by putting a new value
# (`aws secretsmanager put-secret-value`) and redeploying the service (RUNBOOK, "Who may read").
locals {
  serve_token_env = "TALLY_SERVE_TOKEN"
  serve_auth_args = var.serve_require_token ? ["--auth-token-env", local.serve_token_env] : []
}

data "aws_secretsmanager_random_password" "serve_token" {
  count               = var.serve_require_token ? 1 : 0
  password_length     = 48
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret" "serve_token" {
  # checkov:skip=CKV2_AWS_57: rotation is put-secret-value and a redeploy of the read side (RUNBOOK, "Who may read"), not a Lambda
  count                   = var.serve_require_token ? 1 : 0
  name                    = "${local.name}/serve-token"
  description             = "The bearer token tally serve asks every API request for"
  kms_key_id              = aws_kms_key.tally.arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "serve_token" {
  count         = var.serve_require_token ? 1 : 0
  secret_id     = aws_secretsmanager_secret.serve_token[0].id
  secret_string = data.aws_secretsmanager_random_password.serve_token[0].random_password
  # The generator draws a new value at every plan: keep the first (rotation is deliberate).
  lifecycle {
    ignore_changes = [secret_string]
  }
}

# The execution role fetches the token for the container (and decrypts it with tally's key).
data "aws_iam_policy_document" "execution_secrets" {
  count = var.serve_require_token ? 1 : 0
  statement {
    sid       = "ServeToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.serve_token[0].arn]
  }
  statement {
    sid       = "DecryptServeToken"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.tally.arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "execution_secrets" {
  count  = var.serve_require_token ? 1 : 0
  name   = "serve-token"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution_secrets[0].json
}
