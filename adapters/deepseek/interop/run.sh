#!/usr/bin/env bash
# Interop suite (issues 16, 32): dsh against a real third-party OpenAI-compatible
# (and, on its /anthropic route, Anthropic Messages)
# mock server from PyPI, LLMock (https://pypi.org/project/llmock/), which
# also injects faults (429/500 with Retry-After, disconnects, truncation,
# malformed chunks, stalls, slow first token).
#
# Creates a Python venv, installs llmock, starts it on 127.0.0.1 with a
# bounded lifetime, runs the #[ignore]d tests of cli/tests/interop_llmock.rs
# against it (DSH_INTEROP_URL), and stops it.
#
# Under CI=true any step that cannot run FAILS the script; elsewhere a
# missing python3 or an unreachable PyPI prints SKIPPED and exits 0.
#
# Usage: adapters/deepseek/interop/run.sh   (from anywhere in the repo)
set -euo pipefail

LLMOCK_VERSION="${LLMOCK_VERSION:-0.2.2}"
LIFETIME_SECS="${DSH_INTEROP_LIFETIME:-600}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/dsh-interop.XXXXXX")"
server_pid=""

cleanup() {
    if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

cannot_run() {
    echo "interop: cannot run: $*" >&2
    if [[ "${CI:-}" == "true" ]]; then
        echo "interop: FAILED (CI=true: this step must run)" >&2
        exit 1
    fi
    echo "interop: SKIPPED (not in CI)" >&2
    exit 0
}

command -v python3 >/dev/null || cannot_run "python3 not found"
python3 -m venv "$work/venv" >/dev/null 2>&1 || cannot_run "python3 -m venv failed (install python3-venv)"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "llmock==${LLMOCK_VERSION}" \
    || cannot_run "pip install llmock==${LLMOCK_VERSION} failed"

# A free loopback port.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:${port}"

# Loopback only, deterministic text, no automatic tool calls (the tests
# script them), and a hard bound on the server's lifetime.
timeout "${LIFETIME_SECS}" "$work/venv/bin/llmock" serve --host 127.0.0.1 --port "$port" \
    --tool-mode off --response-style static --log-level warning \
    >"$work/llmock.log" 2>&1 &
server_pid=$!

for _ in $(seq 1 100); do
    if python3 - "$url" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/health", timeout=1).read()
PY
    if ! kill -0 "$server_pid" 2>/dev/null; then
        cat "$work/llmock.log" >&2
        echo "interop: FAILED: llmock exited during startup" >&2
        exit 1
    fi
    sleep 0.2
done
python3 - "$url" <<'PY' || { cat "$work/llmock.log" >&2; echo "interop: FAILED: llmock did not answer /health" >&2; exit 1; }
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).read()
PY
echo "interop: llmock ${LLMOCK_VERSION} at ${url}"

cd "$root"
status=0
DSH_INTEROP_URL="$url" cargo test -p dsh-cli --test interop_llmock -- --ignored --test-threads=1 || status=$?
if [[ $status -ne 0 ]]; then
    echo "--- llmock log" >&2
    tail -50 "$work/llmock.log" >&2
fi
exit $status
