#!/usr/bin/env bash
# CI gate for the OpenClaw plugin: pinned Bun from npm, frozen install,
# format check, typecheck, bun test (including the tests against the real
# zkr CLI of this repository), and the bundle build. Exits non-zero on any
# failure. Network: the npm registry only.
#
# Environment:
#   ZKR_TEST_COMMAND  zkr executable for the real-CLI tests
#                     (default: test/fixtures/zkr-python.sh, which runs
#                     `python -m zkr` from ../../src with ../../.venv or $ZKR_PYTHON)
#   ZKR_PYTHON        interpreter for that wrapper
#   ZKR_OPENCLAW_LOADER_CHECK=1  also run scripts/loader-check.sh (real OpenClaw
#                     loader under Node 24; about one more minute)
set -euo pipefail
plugin_dir=$(CDPATH= cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$plugin_dir"
# shellcheck source=ensure-bun.sh
source scripts/ensure-bun.sh
chmod +x test/fixtures/* 2>/dev/null || true

step() { printf '\n== %s\n' "$*"; }

step "bun install --frozen-lockfile"
"$BUN" install --frozen-lockfile

step "format (prettier --check)"
"$BUN" run format

step "typecheck (tsc --noEmit)"
"$BUN" run typecheck

step "bun test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$BUN" test 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
pass=$(sed -n 's/^ *\([0-9][0-9]*\) pass$/\1/p' "$log" | tail -1)
fail=$(sed -n 's/^ *\([0-9][0-9]*\) fail$/\1/p' "$log" | tail -1)
echo "openclaw-plugin: ${pass:-0} passed, ${fail:-0} failed"
if [ "$status" -ne 0 ] || [ "${pass:-0}" -eq 0 ]; then
  echo "bun test failed (exit $status)" >&2
  exit 1
fi

step "build (bun build -> dist/index.js)"
"$BUN" run build
test -s dist/index.js

if [ "${ZKR_OPENCLAW_LOADER_CHECK:-0}" = "1" ]; then
  step "loader check (real OpenClaw under Node 24)"
  bash scripts/loader-check.sh
fi

echo "openclaw plugin CI: ok"
