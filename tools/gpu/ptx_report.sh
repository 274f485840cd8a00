#!/usr/bin/env bash
# Registers, stack frame and spills of every kernel NVIDIA's OpenCL compiler
# built, read from NaNscope's kernel cache: on NVIDIA a cached program binary
# (*.bin) is a short header followed by the PTX the driver's compiler
# generated, and the *.json beside it names the program and its build
# options. Each PTX goes through ptxas for the GPU's architecture (the CUDA
# toolkit's ptxas of the driver's CUDA version stands in for the driver's own
# PTX-to-machine-code step). Not a GPU tool: run it here on the cache that
# tools/gpu/run_suite.sh brings back (kernel-cache.tar.xz).
# usage: tools/gpu/ptx_report.sh CACHE_DIR|kernel-cache.tar.xz [ARCH (sm_90)] [PROGRAM_FILTER (regex)]
set -euo pipefail
src=${1:?usage: ptx_report.sh CACHE_DIR|kernel-cache.tar.xz [ARCH] [PROGRAM_FILTER]}
arch=${2:-sm_90}
filter=${3:-.}
command -v ptxas >/dev/null || { echo "ptxas not found (CUDA toolkit)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$src" ]; then
  tar -C "$tmp" -xJf "$src"
  src=$(dirname "$(find "$tmp" -name '*.json' | head -1)")
fi
printf '%-10s %-28s %5s %6s %6s  %s\n' program kernel regs stack spills options
for meta in "$src"/*.json; do
  bin=${meta%.json}.bin
  [ -f "$bin" ] || continue
  read -r program options < <(/usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d.get("program", "?"), d.get("options", ""))' "$meta")
  [[ $program =~ $filter ]] || continue
  # The PTX starts at its banner; binaries of other vendors have none.
  /usr/bin/python3 -c 'import sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"//\n// Generated")
sys.exit(1) if i < 0 else open(sys.argv[2], "wb").write(d[i:].rstrip(b"\0"))' "$bin" "$tmp/p.ptx" || continue
  ptxas -arch="$arch" -v -c "$tmp/p.ptx" -o "$tmp/p.o" 2>&1 | awk -v prog="$program" -v opts="$options" '
    /Compiling entry function/ { k = $0; sub(/.*function .?/, "", k); sub(/.? for .*/, "", k) }
    /bytes stack frame/ { stack = $1; spill = $5 + $9 }
    /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "registers,") r = $i
                              printf "%-10s %-28s %5s %6s %6s  %s\n", prog, k, r, stack, spill, opts }'
done
