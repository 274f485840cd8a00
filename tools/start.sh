#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and starts
# NaNscope on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --no-python
tools/build.sh
build_dir=${NANSCOPE_BUILD_DIR:-build}
"$build_dir/cli/nanscope-cli" devices
"$build_dir/cli/nanscope-cli" demo
