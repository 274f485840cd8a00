#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and starts the
# NaNscope workbench on the embedded default model, ready to press Run.
# Without a display it runs the CLI demo instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --no-python
tools/build.sh
build_dir=${NANSCOPE_BUILD_DIR:-build}
if [ -x "$build_dir/gui/nanscope" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
  exec "$build_dir/gui/nanscope" "$@"
fi
echo "start: no display (DISPLAY is not set): running the command-line demo instead of the workbench" >&2
"$build_dir/cli/nanscope-cli" devices
"$build_dir/cli/nanscope-cli" demo
