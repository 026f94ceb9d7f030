#!/usr/bin/env bash
# The test command: every unit, conformance and end-to-end test of the workspace, on the embedded
# backend and on the local AWS API peers (kinesis-local and DynamoDB Local, installed and started on
# 127.0.0.1 by scripts/local-aws.sh, and stopped again at the end if this script started them).
#
# Usage: scripts/test.sh [extra cargo test args]
#   NO_LOCAL_AWS=1 scripts/test.sh   embedded only, no Node.js or Python needed
set -euo pipefail
cd "$(dirname "$0")/.."

features=()
if [ "${NO_LOCAL_AWS:-}" != 1 ]; then
  # Stop the peers at the end only if this script started them.
  status=$(scripts/local-aws.sh status)
  if [[ "$status" != *"kinesis: running"* || "$status" != *"dynamodb: running"* ]]; then
    trap 'scripts/local-aws.sh stop' EXIT
  fi
  scripts/local-aws.sh start
  eval "$(scripts/local-aws.sh env)"
  features=(--features aws-local)
fi
cargo test --workspace --all-targets --no-fail-fast "${features[@]}" "$@"
