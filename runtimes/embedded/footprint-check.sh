#!/usr/bin/env bash
# Fails when the embedded footprint grows more than 5% over the committed
# baseline (footprint-baseline.txt beside this script): the heap high-water
# mark of the two-step tool turn and the firmware's .text, both as
# measure.sh prints them. Prints the figures, their change against the
# baseline, and a line for the README. Run from anywhere; CI runs it after
# the no_std builds (it needs the thumbv7em-none-eabihf target).
# FOOTPRINT_BASELINE=<file> checks against another baseline file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
baseline="${FOOTPRINT_BASELINE:-$here/footprint-baseline.txt}"
allowed_percent=5

value() {
    local v
    v=$(sed -n "s/^$1=\([0-9][0-9]*\)$/\1/p" "$baseline")
    if [ -z "$v" ]; then
        echo "footprint-check: no '$1=<bytes>' line in $baseline" >&2
        exit 1
    fi
    echo "$v"
}
base_heap=$(value heap_high_water_bytes)
base_text=$(value firmware_text_bytes)

out=$(bash "$here/measure.sh")
echo "$out"
heap=$(echo "$out" | sed -n 's/^heap high-water mark of the two-step tool turn: \([0-9][0-9]*\) bytes$/\1/p')
text=$(echo "$out" | sed -n 's/^firmware \.text: \([0-9][0-9]*\) bytes.*/\1/p')
if [ -z "$heap" ] || [ -z "$text" ]; then
    echo "footprint-check: measure.sh printed no heap or .text figure" >&2
    exit 1
fi

status=0
check() {
    local name=$1 now=$2 base=$3
    # Hundredths of a percent, rounded toward zero.
    local change=$(((now - base) * 10000 / base))
    local sign=+
    if [ "$change" -lt 0 ]; then sign=-; change=$((-change)); fi
    printf '%-28s %9d bytes, baseline %9d (%s%d.%02d%%)' "$name" "$now" "$base" "$sign" $((change / 100)) $((change % 100))
    if [ $((now * 100)) -gt $((base * (100 + allowed_percent))) ]; then
        echo "  FAILED: more than ${allowed_percent}% over the baseline"
        status=1
    else
        echo "  ok"
    fi
}
echo "== footprint against $baseline (fails above +${allowed_percent}%)"
check "heap high-water mark" "$heap" "$base_heap"
check "firmware .text" "$text" "$base_text"
echo "README: heap high-water mark $heap bytes, firmware .text $text bytes ($(date -u +%Y-%m-%d), $(rustc --version | cut -d' ' -f1-2))"
if [ "$status" -ne 0 ]; then
    echo "footprint-check: a figure grew more than ${allowed_percent}% over the baseline; shrink it, or update $baseline in a commit that says why" >&2
fi
exit "$status"
