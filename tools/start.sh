#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and starts the
# NaNscope workbench on the embedded default model, ready to press Run.
# Without a display it generates one image from the embedded model with the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --no-python
tools/build.sh
build_dir=${NANSCOPE_BUILD_DIR:-build}
if [ -x "$build_dir/gui/nanscope" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
  exec "$build_dir/gui/nanscope" "$@"
fi
echo "start: no display (DISPLAY is not set), so no workbench window: generating one image from the embedded" >&2
echo "start: model with the command-line tool instead (the workbench starts when a display is available)" >&2
"$build_dir/cli/nanscope-cli" devices
"$build_dir/cli/nanscope-cli" generate -p "a red circle on a blue background" --seed 7 -o nanscope-first-image.png
echo "start: wrote $PWD/nanscope-first-image.png"
