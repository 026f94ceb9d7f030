terraform {
  # 1.9: validations that refer to other variables; 1.10: S3 state locking without DynamoDB.
  required_version = ">= 1.10.0"
  required_providers {
    aws = {
      source = "hashicorp/aws"
      # One release, the one .terraform.lock.hcl holds the published checksums of: `terraform
      # init` verifies the provider it downloads (an upgrade changes both, deliberately).
      version = "6.28.0"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = {
      application = "tally"
      environment = var.environment
    }
  }
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}
