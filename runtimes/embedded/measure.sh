#!/usr/bin/env bash
# Prints the footprint of the embedded shell:
#  1. the heap high-water mark of the two-step tool turn (host test over the
#     mock DeepSeek server, counting global allocator on the shell's thread);
#  2. the section sizes of the firmware-style thumbv7em binary that links the
#     shell (examples/firmware, release: opt-level z, LTO, panic=abort).
# Run from anywhere; uses the workspace target dir (the firmware: target/firmware).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

echo "== heap high-water mark (cargo test -p dsh-embedded --test host -- --nocapture)"
cargo test -q -p dsh-embedded --test host -- --nocapture --test-threads 1 2>/dev/null | grep -o 'heap.*'

echo "== firmware .text (cargo build --release --target thumbv7em-none-eabihf, examples/firmware)"
# From the firmware's directory, so cargo reads its .cargo/config.toml.
(cd "$here/examples/firmware" && cargo build -q --release --target thumbv7em-none-eabihf \
  --target-dir "$root/target/firmware")
elf="$root/target/firmware/thumbv7em-none-eabihf/release/dsh-embedded-firmware"
size_tool=""
for t in llvm-size rust-size arm-none-eabi-size; do
  if command -v "$t" >/dev/null 2>&1; then size_tool="$t"; break; fi
done
if [ -z "$size_tool" ]; then
  echo "no llvm-size / rust-size / arm-none-eabi-size found" >&2
  exit 1
fi
"$size_tool" -A "$elf" | grep -E '^(section|\.text|\.rodata|\.data|\.bss|\.vector_table)'
text=$("$size_tool" -A "$elf" | awk '$1==".text" {print $2}')
echo "firmware .text: $text bytes ($size_tool -A $elf)"
