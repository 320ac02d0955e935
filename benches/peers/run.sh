#!/usr/bin/env bash
# dsh and its peers side by side (issue 34, point 5). Not run in CI.
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
if [ ! -x "$dir/npm/node_modules/.bin/codex" ] || [ ! -e "$dir/npm/node_modules/@deepseek-ai/dsh/lib/bin.js" ]; then
  echo "installing @openai/codex@$CODEX_VERSION and @deepseek-ai/dsh@$REFERENCE_VERSION into $dir/npm" >&2
  mkdir -p "$dir/npm"
  npm install --prefix "$dir/npm" --no-audit --no-fund --loglevel=error \
    "@openai/codex@$CODEX_VERSION" "@deepseek-ai/dsh@$REFERENCE_VERSION" >&2 \
    || echo "npm install failed (see above)" >&2
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

exec python3 "$here/bench.py" --dsh "$DSH_BIN" --npm-prefix "$dir/npm" --venv "$dir/venv" \
  --n "$n" ${extra[@]+"${extra[@]}"}
