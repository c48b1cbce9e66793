# shellcheck shell=bash
# Sourced by ci.sh and loader-check.sh: makes the pinned Bun (package.json
# "packageManager") available as $BUN and on PATH. Uses a bun already on PATH
# when its version matches; otherwise installs the `bun` package from the npm
# registry into ./.tools (ignored by git). Needs npm; no other network.
plugin_dir=${plugin_dir:-$(CDPATH= cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)}
bun_version=$(sed -n 's/^[[:space:]]*"packageManager":[[:space:]]*"bun@\([^"]*\)".*/\1/p' "$plugin_dir/package.json")
if [ -z "$bun_version" ]; then
  echo "ensure-bun: no bun@VERSION packageManager in package.json" >&2
  return 1 2>/dev/null || exit 1
fi
tools_dir="$plugin_dir/.tools"
if command -v bun >/dev/null 2>&1 && [ "$(bun --version 2>/dev/null)" = "$bun_version" ]; then
  BUN=$(command -v bun)
else
  if [ ! -x "$tools_dir/node_modules/.bin/bun" ] || [ "$("$tools_dir/node_modules/.bin/bun" --version 2>/dev/null)" != "$bun_version" ]; then
    echo "ensure-bun: installing bun@$bun_version from npm into $tools_dir" >&2
    mkdir -p "$tools_dir"
    [ -f "$tools_dir/package.json" ] || printf '{"private":true}\n' >"$tools_dir/package.json"
    npm install --prefix "$tools_dir" --no-audit --no-fund --no-save --loglevel=error "bun@$bun_version" >&2
  fi
  BUN="$tools_dir/node_modules/.bin/bun"
  PATH="$tools_dir/node_modules/.bin:$PATH"
  export PATH
fi
export BUN
echo "ensure-bun: using $BUN ($("$BUN" --version))" >&2
