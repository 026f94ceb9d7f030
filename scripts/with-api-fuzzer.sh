#!/usr/bin/env bash
# Runs a command with schemathesis (the property-based API fuzzer, from PyPI, pinned) on PATH,
# installed once into .tools/api-fuzzer. Used by tests/e2e/openapi.rs to fuzz `tally serve`
# against its OpenAPI document (serve/src/openapi.json).
# Usage: scripts/with-api-fuzzer.sh COMMAND [ARGS...]   e.g. scripts/with-api-fuzzer.sh st run URL
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="4.32.5"
VENV="$root/.tools/api-fuzzer"
mkdir -p "$root/.tools"
exec 9>"$root/.tools/api-fuzzer.lock"
flock 9
if [ "$("$VENV/bin/st" --version 2>/dev/null || true)" != "st, version $VERSION" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$VERSION" >&2
fi
flock -u 9
exec 9>&-
export PATH="$VENV/bin:$PATH"
exec "$@"
