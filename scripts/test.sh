#!/usr/bin/env bash
# The test command: every unit, conformance and end-to-end test of the workspace, on the embedded
# backend and on the local AWS API peers (kinesis-local and DynamoDB Local, installed and started on
# 127.0.0.1 by scripts/local-aws.sh, and stopped again at the end if this script started them).
#
# Usage: scripts/test.sh [extra cargo test args]
#   NO_LOCAL_AWS=1 scripts/test.sh   embedded only, no Node.js or Java needed
# The dashboard test needs Chromium; as root on Debian this script installs it (apt).
set -euo pipefail
cd "$(dirname "$0")/.."

# The dashboard test drives headless Chromium (Debian's package).
if ! command -v "${CHROMIUM:-chromium}" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test: installing chromium for the dashboard test" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
  else
    echo "test: the dashboard test needs Chromium: apt-get install chromium (or set CHROMIUM=/path)" >&2
    exit 1
  fi
fi

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
# The end-to-end tests mostly wait on the processes they start (the CPU idles through most of
# them): four at a time per test binary instead of one per core.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
cargo test --workspace --all-targets --no-fail-fast "${features[@]}" "$@"
