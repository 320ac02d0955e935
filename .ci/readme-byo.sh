#!/usr/bin/env bash
# Runs the README's "From `cargo new` to a resumed second turn" as a new
# embedder would: the sh block after `<!-- byo:commands -->`, in an empty
# folder whose `dsh` is this checkout, then checks the program's output:
# two completed turns, and every message id printed once.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The first ```sh block after the marker.
awk '/<!-- byo:commands -->/ {m=1; next}
     m==1 && /^```sh/ {m=2; next}
     m==2 && /^```/ {exit}
     m==2 {print}' "$ROOT/README.md" >"$WORK/commands.sh"
if ! grep -q '^cargo new ' "$WORK/commands.sh"; then
    echo "readme-byo: no byo:commands block with 'cargo new' in README.md" >&2
    exit 1
fi

ln -s "$ROOT" "$WORK/dsh"
# A user's fresh crate: its own target folder unless one is given.
export CARGO_TARGET_DIR="${BYO_TARGET_DIR:-$WORK/target}"
(cd "$WORK" && bash -euo pipefail commands.sh) >"$WORK/out.txt" 2>"$WORK/err.txt" || {
    echo "readme-byo: the README's commands failed" >&2
    tail -n 40 "$WORK/err.txt" >&2
    exit 1
}
cat "$WORK/out.txt"

completed=$(grep -c '^turn [12] ended Some(Completed)$' "$WORK/out.txt" || true)
if [ "$completed" != 2 ]; then
    echo "readme-byo: expected 'turn 1' and 'turn 2 ended Some(Completed)', found $completed" >&2
    exit 1
fi
ids=$(grep -E '^  (user|assistant) ' "$WORK/out.txt" | awk '{print $2}')
total=$(printf '%s\n' "$ids" | grep -c . || true)
unique=$(printf '%s\n' "$ids" | sort -u | grep -c . || true)
if [ "$total" -lt 4 ] || [ "$total" != "$unique" ]; then
    echo "readme-byo: expected at least 4 message ids, all distinct; got $total ($unique distinct)" >&2
    exit 1
fi
echo "readme-byo: ok (2 turns completed, $total message ids, all distinct)"
