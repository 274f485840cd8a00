#!/usr/bin/env bash
# Builds the Debian package build/nanscope_<version>_<arch>.deb from the normal
# build (configuring and building what the package holds if needed), then checks
# it with lintian when lintian is installed (errors fail; warnings are listed).
# Usage: tools/package.sh [--no-lintian]     (build dir: $NANSCOPE_BUILD_DIR or build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${NANSCOPE_BUILD_DIR:-build}
run_lintian=1
[ "${1:-}" = "--no-lintian" ] && run_lintian=0

if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
# Only what the package holds: the programs, the manual pages, the changelog.
cmake --build "$build_dir" -j "$(nproc)" --target nanscope_package_contents

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
arch=$(dpkg --print-architecture)
deb="$build_dir/nanscope_${version}_${arch}.deb"
rm -f "$deb"
(cd "$build_dir" && cpack -G DEB >cpack.log) || { cat "$build_dir/cpack.log" >&2; exit 1; }
[ -f "$deb" ] || { echo "package: cpack did not write $deb" >&2; cat "$build_dir/cpack.log" >&2; exit 1; }
echo "package: $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Recommends\|Installed-Size\):/  \1:/p'

if [ "$run_lintian" = 1 ]; then
  if command -v lintian >/dev/null; then
    # --fail-on error: warnings are reported, not fatal.
    lintian --fail-on error --info "$deb" || { echo "package: lintian found errors" >&2; exit 1; }
    echo "package: lintian: no errors"
  else
    echo "package: lintian is not installed (apt-get install lintian): not checked"
  fi
fi
