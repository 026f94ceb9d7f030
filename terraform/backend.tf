# State lives in S3, locked by a lock object beside it (Terraform >= 1.10), never in the working
# copy. The bucket, key and region come from a file at init:
#   terraform init -backend-config=backend.hcl      (see backend.hcl.example)
terraform {
  backend "s3" {}
}
