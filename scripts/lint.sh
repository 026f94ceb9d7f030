#!/usr/bin/env bash
# Lints: rustfmt, and clippy with every warning an error (missing_docs included) on each feature
# set the tests build — without features, and with `aws-local` (the tests against the local AWS
# API peers) — so a helper used by one set only cannot hide a warning in the other.
#
# Usage: scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
for features in "" "--features aws-local"; do
  echo "lint: cargo clippy --workspace --all-targets ${features}" >&2
  # shellcheck disable=SC2086
  cargo clippy --workspace --all-targets ${features} -- -D warnings
done
