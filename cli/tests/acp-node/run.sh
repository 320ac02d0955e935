#!/usr/bin/env bash
# The ACP client test with the official TypeScript SDK: installs the pinned
# packages (npm ci, package-lock.json), builds `dsh` unless DSH_BIN names
# one, and runs acp-client.mjs against it. Without node/npm the test is
# skipped, except under CI=true, where any failure to run it fails.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)

unavailable() {
    if [ "${CI:-}" = true ]; then
        echo "FAILED: acp node test: $*" >&2
        exit 1
    fi
    echo "SKIPPED: acp node test: $*"
    exit 0
}

command -v node >/dev/null 2>&1 || unavailable "node is not installed"
command -v npm >/dev/null 2>&1 || unavailable "npm is not installed"

BIN=${DSH_BIN:-}
if [ -z "$BIN" ]; then
    (cd "$ROOT" && cargo build -p dsh-cli --quiet)
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
    BIN="$TARGET/debug/dsh"
fi

cd "$HERE"
npm ci --no-audit --no-fund --loglevel=error || unavailable "npm ci failed"
node acp-client.mjs "$BIN"
