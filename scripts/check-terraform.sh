#!/usr/bin/env bash
# Offline checks of terraform/ (Terraform itself cannot run here): checkov's policies, plus the
# drift test (cargo test --test terraform) that scripts/test.sh runs.
# checkov is pinned and installed into .tools/checkov (its own venv: it ships a conflicting hcl2).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.tools/checkov
CHECKOV_VERSION=3.3.30
have=""
[ -x "$VENV/bin/pip" ] && have=$("$VENV/bin/pip" show checkov 2>/dev/null || true)
if [[ "$have" != *"Version: $CHECKOV_VERSION"* ]]; then
  echo "check-terraform: installing checkov==$CHECKOV_VERSION" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION" >&2
fi
BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=true CKV_PARSE_ERROR_FAIL=true \
  "$VENV/bin/checkov" --quiet --compact --skip-download --framework terraform -d terraform "$@"
