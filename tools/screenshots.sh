#!/usr/bin/env bash
# Runs the real workbench under Xvfb and saves screenshots for the README into
# docs/screenshots/: the default run on the embedded model, then each field
# report scenario (R0-R4) broken and fixed, and R1's layer trace.
# Usage: tools/screenshots.sh [build-dir]   (default: $NANSCOPE_BUILD_DIR or build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-${NANSCOPE_BUILD_DIR:-build}}
app="$build_dir/gui/nanscope"
[ -x "$app" ] || { echo "screenshots: $app is not built (run tools/build.sh)" >&2; exit 1; }
command -v xvfb-run >/dev/null || { echo "screenshots: xvfb-run is missing (apt-get install xvfb xauth)" >&2; exit 1; }
out=docs/screenshots
mkdir -p "$out"
# A private settings scope: the user's window layout and last settings stay out of the pictures.
export NANSCOPE_GUI_SETTINGS_SCOPE=nanscope-screenshots
rm -f "${XDG_CONFIG_HOME:-$HOME/.config}/NaNscope/nanscope-screenshots.conf"
export QT_QPA_PLATFORM=xcb
shoot() {  # name, then the app's arguments
  local name=$1
  shift
  echo "screenshots: $name"
  xvfb-run -a -s "-screen 0 1600x1000x24" "$app" "$@" --run --screenshot "$out/$name.png"
}

preset_dir=$(mktemp -d)
trap 'rm -rf "$preset_dir"' EXIT
cat > "$preset_dir/default.json" <<'JSON'
{"nanscope_preset": 1, "prompt": "a red circle on a blue background", "steps": 20, "seed": 7}
JSON
shoot workbench --preset "$preset_dir/default.json"
shoot inspector --preset "$preset_dir/default.json" --panel inspector

# The five field reports, broken and fixed, as the Scenarios menu runs them.
for id in R0 R1 R2 R3 R4; do
  shoot "scenario-$id" --scenario "$id"
  shoot "scenario-$id-fixed" --scenario "$id" --fixed
done
shoot scenario-R1-trace --scenario R1 --panel trace
# R2 with nan_policy=retry-layer-f32: only the VAE modules that broke in f32, and the "Apply this fix" offer.
shoot scenario-R2-layer-retry --preset resources/presets/R2-layer-retry.json
# A/B: the same seed with the UNet in f16 (B) against f32 (A).
shoot ab-unet-f16 --preset "$preset_dir/default.json" --ab "unet.dtype=f16"
# The probe window: the device probe's table on the embedded model, and the f16-safety result for R2's VAE in f16.
probe_shot() {  # name, kind, then the app's arguments
  local name=$1 kind=$2
  shift 2
  echo "screenshots: $name"
  xvfb-run -a -s "-screen 0 1600x1000x24" "$app" "$@" --run --probe "$kind" --screenshot "$out/$name.png"
}
probe_shot probe-device device --preset "$preset_dir/default.json"
probe_shot probe-f16-safety f16-safety --preset resources/presets/R2.json
echo "screenshots: written to $out/"
