#!/usr/bin/env bash
# Interop suite: dsh against a real third-party OpenAI-compatible
# (and, on its /anthropic route, Anthropic Messages)
# mock server from PyPI, LLMock (https://pypi.org/project/llmock/), which
# also injects faults (429/500 with Retry-After, disconnects, truncation,
# malformed chunks, stalls, slow first token).
#
# Creates a Python venv, installs llmock, starts it on 127.0.0.1 with a
# bounded lifetime, runs the #[ignore]d tests of cli/tests/interop_llmock.rs
# against it (DSH_INTEROP_URL), and stops it.
#
# Then the LiteLLM proxy (https://pypi.org/project/litellm/): the
# venv .ci/run installs in the background (DSH_LITELLM_VENV; the script waits
# for DSH_LITELLM_STATUS, at most DSH_LITELLM_INSTALL_WAIT seconds), or,
# run alone, an install of its own. The proxy runs on 127.0.0.1 with
# litellm/config.yaml (mock responses, and litellm/upstream.py as the
# upstream of the tool-call models) and a random master key; the
# #[ignore]d tests of cli/tests/litellm_cli.rs run against it
# (DSH_LITELLM_URL, DSH_LITELLM_KEY), and it is stopped.
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
LITELLM_VERSION="${LITELLM_VERSION:-1.108.7}"
server_pid=""
proxy_pid=""
upstream_pid=""

cleanup() {
    local pid
    for pid in "$server_pid" "$proxy_pid" "$upstream_pid"; do
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
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
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""

# ---- LiteLLM proxy ----
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Not running LiteLLM: a failure under CI=true, else SKIPPED (the LLMock
# result stands).
litellm_skip() {
    echo "interop: LiteLLM: cannot run: $*" >&2
    if [[ "${CI:-}" == "true" ]]; then
        echo "interop: FAILED (CI=true: the LiteLLM tests must run)" >&2
        exit 1
    fi
    echo "interop: LiteLLM SKIPPED (not in CI)" >&2
    exit "$status"
}

if [[ -n "${DSH_LITELLM_VENV:-}" && -n "${DSH_LITELLM_STATUS:-}" ]]; then
    # Installed in the background by .ci/run: wait for it, bounded.
    litellm_venv="$DSH_LITELLM_VENV"
    wait_start=$SECONDS
    wait_max="${DSH_LITELLM_INSTALL_WAIT:-900}"
    while [[ ! -s "$DSH_LITELLM_STATUS" ]]; do
        if (( SECONDS - wait_start >= wait_max )); then
            tail -20 "${DSH_LITELLM_LOG:-/dev/null}" >&2 || true
            litellm_skip "the background install did not end within ${wait_max} s"
        fi
        sleep 1
    done
    echo "interop: waited $((SECONDS - wait_start)) s for the background LiteLLM install ($(tail -1 "${DSH_LITELLM_LOG:-/dev/null}" 2>/dev/null))"
    if [[ "$(cat "$DSH_LITELLM_STATUS")" != 0 ]]; then
        tail -20 "${DSH_LITELLM_LOG:-/dev/null}" >&2 || true
        litellm_skip "pip install litellm[proxy]==${LITELLM_VERSION} failed (log: ${DSH_LITELLM_LOG:-?})"
    fi
else
    litellm_venv="$work/litellm-venv"
    python3 -m venv "$litellm_venv" >/dev/null 2>&1 || litellm_skip "python3 -m venv failed"
    "$litellm_venv/bin/pip" install --quiet --disable-pip-version-check "litellm[proxy]==${LITELLM_VERSION}" \
        || litellm_skip "pip install litellm[proxy]==${LITELLM_VERSION} failed"
fi
[[ -x "$litellm_venv/bin/litellm" ]] || litellm_skip "no litellm command in $litellm_venv"

here="$root/adapters/deepseek/interop/litellm"
upstream_port="$(free_port)"
timeout "${LIFETIME_SECS}" python3 "$here/upstream.py" "$upstream_port" >"$work/upstream.log" 2>&1 &
upstream_pid=$!
sed "s/UPSTREAM_PORT/${upstream_port}/g" "$here/config.yaml" >"$work/litellm.yaml"
proxy_port="$(free_port)"
proxy_url="http://127.0.0.1:${proxy_port}"
# A fresh key per run (LiteLLM refuses to start without a strong one); the
# bundled model cost map, so nothing is fetched from the network.
LITELLM_MASTER_KEY="sk-$(python3 -c 'import secrets; print(secrets.token_hex(24))')"
export LITELLM_MASTER_KEY
LITELLM_LOCAL_MODEL_COST_MAP=True timeout "${LIFETIME_SECS}" "$litellm_venv/bin/litellm" \
    --config "$work/litellm.yaml" --host 127.0.0.1 --port "$proxy_port" \
    >"$work/litellm.log" 2>&1 &
proxy_pid=$!

start_wait=$SECONDS
until python3 - "$proxy_url" <<'PY' 2>/dev/null; do
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/health/liveliness", timeout=1).read()
PY
    if ! kill -0 "$proxy_pid" 2>/dev/null; then
        tail -40 "$work/litellm.log" >&2
        litellm_skip "the LiteLLM proxy exited during startup"
    fi
    if (( SECONDS - start_wait >= ${DSH_LITELLM_START_WAIT:-120} )); then
        tail -40 "$work/litellm.log" >&2
        litellm_skip "the LiteLLM proxy did not answer /health/liveliness within ${DSH_LITELLM_START_WAIT:-120} s"
    fi
    sleep 0.5
done
echo "interop: LiteLLM ${LITELLM_VERSION} proxy at ${proxy_url} (up in $((SECONDS - start_wait)) s), upstream stub on port ${upstream_port}"

lstatus=0
DSH_LITELLM_URL="$proxy_url" DSH_LITELLM_KEY="$LITELLM_MASTER_KEY" \
    cargo test -p dsh-cli --test litellm_cli -- --ignored --test-threads=1 || lstatus=$?
if [[ $lstatus -ne 0 ]]; then
    echo "--- litellm log" >&2
    tail -60 "$work/litellm.log" >&2
    status=$lstatus
fi
exit $status
