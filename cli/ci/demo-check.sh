#!/usr/bin/env bash
# The README's fresh-machine demo, checked cheaply for CI (which runs in a fresh
# clone): `cargo run -p dsh-cli -- demo` reuses the debug build that
# `cargo test --workspace` made, with no key, no network and a private data dir;
# then the printed session log must pass `dsh log check` and `dsh replay --check`.
set -euo pipefail
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
dsh() { cargo run -q -p dsh-cli -- "$@"; }
env -u DEEPSEEK_API_KEY -u DEEPSEEK_BASE_URL XDG_DATA_HOME="$TMP/data" \
    cargo run -q -p dsh-cli -- demo --no-color --workspace "$TMP/ws" </dev/null | tee "$TMP/out"
LOG=$(sed -n 's/^check the log: *dsh log check //p' "$TMP/out")
if [ ! -f "$LOG" ]; then
    echo "demo-check: the demo printed no session log path" >&2
    exit 1
fi
grep -q '^Hello from dsh!$' "$TMP/ws/hello.txt"
dsh log check "$LOG"
dsh replay --check "$LOG"
echo "demo-check: ok"
