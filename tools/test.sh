#!/usr/bin/env bash
# The README's second command: installs everything (incl. the Python oracle
# venv), builds, and runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
build_dir=${NANSCOPE_BUILD_DIR:-build}
export HF_HUB_OFFLINE=1
# A private kernel cache so tests never depend on (or pollute) the user's.
export NANSCOPE_KERNEL_CACHE=${NANSCOPE_KERNEL_CACHE:-$PWD/$build_dir/test-kernel-cache}
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@"
