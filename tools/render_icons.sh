#!/usr/bin/env bash
# Renders packaging/icons/nanscope.svg into the PNG sizes the package installs
# (packaging/icons/<N>x<N>/nanscope.png, committed so a build needs no SVG
# renderer). Run after editing the SVG; needs rsvg-convert (librsvg2-bin).
set -euo pipefail
cd "$(dirname "$0")/../packaging/icons"
for n in 48 128 256; do
  mkdir -p "${n}x${n}"
  rsvg-convert -w "$n" -h "$n" nanscope.svg -o "${n}x${n}/nanscope.png"
  echo "packaging/icons/${n}x${n}/nanscope.png"
done
