#!/usr/bin/env bash
# Aggregates NDJSON (stdin) into KPL records with AWS's aggregator from PyPI (pinned), installed
# once into .tools/kpl; used by tests/e2e/kpl.rs. Usage: scripts/kpl-aggregate.sh RECORDS_PER_AGGREGATE
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.tools/kpl
# Tests run in parallel: one installs while the others wait for it.
mkdir -p .tools
exec 9>.tools/kpl.lock
flock 9
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import aws_kinesis_agg.aggregator" 2>/dev/null; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "aws-kinesis-agg==1.2.3" "six==1.17.0" "protobuf==7.36.2" >&2
fi
flock -u 9
exec 9>&-
exec "$VENV/bin/python" tests/kpl/aggregate.py "$@"
