#!/usr/bin/env bash
# The test command: every unit, conformance and end-to-end test of the workspace.
# Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets "$@"
