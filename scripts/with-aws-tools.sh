#!/usr/bin/env bash
# Runs a command with AWS's own client tools on PATH — boto3 and the AWS CLI from PyPI (pinned),
# installed once into .tools/aws-tools, and jq (Debian's) — so that the examples of
# docs/SENDING-LIKES.md run as a team's producer would. Used by tests/e2e/sending.rs.
# Usage: scripts/with-aws-tools.sh COMMAND [ARGS...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$root/.tools/aws-tools"
mkdir -p "$root/.tools"
exec 9>"$root/.tools/aws-tools.lock"
flock 9
if [ ! -x "$VENV/bin/aws" ] || ! "$VENV/bin/python" -c "import boto3" 2>/dev/null; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "awscli==1.46.3" "boto3==1.44.8" "botocore==1.44.8" >&2
fi
if ! command -v jq >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "with-aws-tools: installing jq" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >&2
  else
    echo "with-aws-tools: the AWS CLI example needs jq: apt-get install jq" >&2
    exit 1
  fi
fi
flock -u 9
exec 9>&-
export PATH="$VENV/bin:$PATH"
exec "$@"
