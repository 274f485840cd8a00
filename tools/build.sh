#!/usr/bin/env bash
# Configures and builds NaNscope into build/ (Release with debug info).
# Usage: tools/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${NANSCOPE_BUILD_DIR:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build "$build_dir" -j "$(nproc)"
