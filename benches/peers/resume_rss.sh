#!/usr/bin/env bash
# Peak RSS of `dsh chat --resume` on a generated long session, by
# /usr/bin/time -v: resume alone (stdin at EOF: the recap, then
# exit) and resume plus one turn against benches/peers/mock.py.
#
#   bash benches/peers/resume_rss.sh DSH_BINARY [EVENTS]   (EVENTS: 100000, ~18 MB)
set -euo pipefail
dsh=$(realpath "$1")
events=${2:-100000}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$repo/testdata/bench/gen_workloads.py" --out "$work/gen" --chunks 200 --events "$events" >/dev/null
log="$work/gen/session.jsonl"
read -r id cwd < <(python3 -c 'import json,sys; h=json.loads(open(sys.argv[1]).readline()); print(h["id"], h.get("cwd") or "")' "$log")
key=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import bench; print(bench.project_key(sys.argv[2]))' "$here" "$cwd")
bytes=$(stat -c %s "$log")
turns=$(grep -c '"type":"turn/end"' "$log")
coproc MOCK { python3 "$here/mock.py" --workload resume; }
read -r url <&"${MOCK[0]}"
measure() { # $1: label, $2: stdin text
  local home="$work/home-$1"
  mkdir -p "$home/store/sessions/$key/$id" "$home/ws"
  cp "$log" "$home/store/sessions/$key/$id/session.jsonl"
  (cd "$home/ws" && printf '%s' "$2" | env -i PATH="$PATH" HOME="$home" XDG_CONFIG_HOME="$home/.config" \
    DEEPSEEK_API_KEY=sk-bench DEEPSEEK_BASE_URL="$url" \
    /usr/bin/time -v "$dsh" chat --store-dir "$home/store" --resume "$id" \
    >"$home/out.log" 2>"$home/time.log") || { echo "$1: dsh failed"; tail -5 "$home/out.log" "$home/time.log"; return; }
  local kib
  kib=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$home/time.log")
  python3 -c 'import sys; k=int(sys.argv[2]); b=int(sys.argv[3]); print("%-16s peak RSS %6.1f MiB = %.2fx the log (%.1f MiB)" % (sys.argv[1], k/1024, k*1024/b, b/1048576))' "$1" "$kib" "$bytes"
}
echo "session: $turns turns, $events events, $bytes bytes"
measure resume ""
measure resume+turn $'One more turn.\n'
exec {MOCK[1]}>&-
wait
