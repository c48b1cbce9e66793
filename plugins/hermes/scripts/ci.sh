#!/usr/bin/env bash
# Run the Hermes plugin tests inside the real hermes-agent 0.19.0, in a separate virtualenv.
#
# hermes-agent pins ~65 packages (openai, pydantic, fastapi, uvicorn, cryptography, Pillow, ...)
# and lazily pip-installs more at agent start-up, so it stays out of the main test venv.
#
#   bash plugins/hermes/scripts/ci.sh [extra pytest args]
#
# Environment:
#   ZKR_HERMES_VENV  virtualenv to create/reuse (default: ${TMPDIR:-/tmp}/zkr-hermes-venv)
#   PYTHON           interpreter for a new venv, 3.11-3.13 (default: python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="${ZKR_HERMES_VENV:-${TMPDIR:-/tmp}/zkr-hermes-venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
start=$(date +%s)
# Reinstall only when the pins or the zkr package metadata changed.
stamp="$venv/.zkr-hermes-stamp"
want="$repo $(cat "$repo/plugins/hermes/requirements-test.txt" "$repo/pyproject.toml" | cksum)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r "$repo/plugins/hermes/requirements-test.txt" 2>&1 | grep -v "is ignored" || true
  # The zkr package under test (its real CLI runs behind ZKR_BIN in the tests).
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$repo" 2>&1 \
    | grep -v "is ignored" || true
fi
# Fail loudly if the install is broken, and make sure this venv's zkr is this checkout's.
"$venv/bin/python" - "$repo" <<'PY'
import importlib.metadata, pathlib, sys
import agent.memory_provider, zkr
assert importlib.metadata.version("hermes-agent") == "0.19.0"
assert pathlib.Path(zkr.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[1]).resolve()), zkr.__file__
PY
echo "$want" > "$stamp"
echo "hermes test venv ready in $(( $(date +%s) - start ))s: $venv"

cd "$repo"
exec "$venv/bin/python" -m pytest -p no:cacheprovider tests/plugins/test_hermes.py "$@"
