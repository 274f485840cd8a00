#!/usr/bin/env bash
# The Debian package, end to end: CPack makes the .deb from this build, lintian
# (when installed) finds no errors, and the programs run from the package's
# files extracted into an empty temporary folder, with no build tree and no
# source tree in the picture: each run's own log names the model and presets
# it used, and those must lie inside the extracted tree (never the source tree
# the build came from, its fallback).
#   test_package.sh BUILD_DIR SOURCE_DIR
# Exit 77 (CTest: skipped) when dpkg-deb or cpack is missing.
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
command -v dpkg-deb >/dev/null || skip "dpkg-deb is missing (not a Debian system)"
command -v cpack >/dev/null || skip "cpack is missing"

work=$(mktemp -d "${TMPDIR:-/tmp}/nanscope-package-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
step() { echo "== [$(($(date +%s) - t0)) s] $*"; }

# --- the package ---
step "cpack -G DEB"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/cpack" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
debs=("$work"/cpack/nanscope_*.deb)
[ -f "${debs[0]}" ] || { cat "$work/cpack.log"; fail "cpack wrote no nanscope_*.deb"; }
deb=${debs[0]}
dpkg-deb --info "$deb"
fields=$(dpkg-deb --field "$deb" Package Version Section Maintainer Depends)
grep -q '^Package: nanscope$' <<<"$fields" || fail "package name: $fields"
grep -q '^Section: science$' <<<"$fields" || fail "section: $fields"
grep -q '^Depends: .*libqt5widgets5' <<<"$fields" || fail "Depends from dpkg-shlibdeps lacks Qt: $fields"
grep -q '^Depends: .*libopencl1\|^Depends: .*ocl-icd-libopencl1' <<<"$fields" || fail "Depends lacks OpenCL: $fields"

if [ "${NANSCOPE_PACKAGE_LINTIAN:-1}" = 1 ] && command -v lintian >/dev/null; then
  step "lintian"
  lintian --fail-on error "$deb" || fail "lintian found errors"
else
  echo "lintian: not run (not installed, or NANSCOPE_PACKAGE_LINTIAN=0)"
fi

# --- extracted into an empty folder, then moved: nothing may point at where it was made ---
step "dpkg-deb -x"
dpkg-deb -x "$deb" "$work/extract"
mv "$work/extract" "$work/root"
root=$work/root
for f in usr/bin/nanscope usr/bin/nanscope-cli \
  usr/share/nanscope/models/nanscope-tiny/model_index.json \
  usr/share/nanscope/models/nanscope-tiny/unet/diffusion_pytorch_model.safetensors \
  usr/share/nanscope/models/nanscope-tiny/tokenizer/vocab.json \
  usr/share/nanscope/presets/R0.json usr/share/nanscope/presets/R2-fixed.json \
  usr/share/applications/nanscope.desktop usr/share/metainfo/io.github.nanscope.nanscope.metainfo.xml \
  usr/share/icons/hicolor/scalable/apps/nanscope.svg usr/share/icons/hicolor/48x48/apps/nanscope.png \
  usr/share/icons/hicolor/128x128/apps/nanscope.png usr/share/icons/hicolor/256x256/apps/nanscope.png \
  usr/share/man/man1/nanscope.1.gz usr/share/man/man1/nanscope-cli.1.gz \
  usr/share/bash-completion/completions/nanscope-cli usr/share/bash-completion/completions/nanscope \
  usr/share/doc/nanscope/copyright usr/share/doc/nanscope/changelog.gz; do
  [ -e "$root/$f" ] || fail "the package lacks $f"
done
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$root/usr/share/applications/nanscope.desktop" || fail "desktop-file-validate"
fi
if command -v appstreamcli >/dev/null; then
  appstreamcli validate --no-net "$root/usr/share/metainfo/io.github.nanscope.nanscope.metainfo.xml" ||
    fail "appstreamcli validate"
fi
zcat "$root/usr/share/man/man1/nanscope-cli.1.gz" | grep -q 'nanscope-cli generate' || fail "man page lacks the subcommands"
zcat "$root/usr/share/man/man1/nanscope.1.gz" | grep -q -- 'screenshot' || fail "nanscope.1 lacks the options"

# The completion names every subcommand and option that --help lists.
cli=$root/usr/bin/nanscope-cli
completion=$root/usr/share/bash-completion/completions/nanscope-cli
words_of() { "$cli" "$@" --help | sed -n 's/^  \(-[^ ]*\).*/\1/p' | tr ',' '\n'; }
subs=$("$cli" --help | sed -n '/^Subcommands:/,$p' | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p')
[ -n "$subs" ] || fail "no subcommands in nanscope-cli --help"
for s in $subs "" "scenario run" "scenario list" "config keys" "cache list" "cache verify" "cache clear"; do
  # shellcheck disable=SC2086
  for w in $(words_of $s); do
    grep -q -- "\\(^\\|[ \"]\\)$w\\([ \")]\\|$\\)" "$completion" || fail "the bash completion lacks '$w' ($s)"
  done
done
for s in $subs; do grep -q "\\b$s\\b" "$completion" || fail "the bash completion lacks the subcommand $s"; done
bash -c "source /usr/share/bash-completion/bash_completion 2>/dev/null; source '$completion'; complete -p nanscope-cli" ||
  fail "the bash completion does not load"
# The workbench's completion names every option of `nanscope --help`.
gui_completion=$root/usr/share/bash-completion/completions/nanscope
gui_words=$(QT_QPA_PLATFORM=offscreen "$root/usr/bin/nanscope" --help | sed -n 's/^  \(-.*\)/\1/p' | sed 's/   .*//' |
  grep -o -- '-\{1,2\}[a-z][a-z-]*')
[ -n "$gui_words" ] || fail "no options in nanscope --help"
for w in $gui_words; do
  grep -q -- "\\(^\\|[ \"]\\)$w\\([ \")]\\|$\\)" "$gui_completion" || fail "the nanscope completion lacks '$w'"
done
bash -c "source /usr/share/bash-completion/bash_completion 2>/dev/null; source '$gui_completion'; complete -p nanscope" ||
  fail "the nanscope completion does not load"

# A clean environment: no NANSCOPE_* but the kernel cache (compiled programs
# are keyed by source and device, so the tests' cache is safe to share).
home=$work/home
mkdir -p "$home"
kernels=${NANSCOPE_KERNEL_CACHE:-$home/kernels}
run() {
  env -i PATH=/usr/bin:/bin HOME="$home" XDG_CACHE_HOME="$home/.cache" XDG_CONFIG_HOME="$home/.config" \
    NANSCOPE_KERNEL_CACHE="$kernels" ${OCL_ICD_VENDORS:+OCL_ICD_VENDORS=$OCL_ICD_VENDORS} "$@"
}
# Every log line that names a place must name the extracted tree, never the source or build tree.
check_paths() {  # log file, what
  if grep -F -e "$src" -e "$build" "$1" | grep -vF "$kernels"; then fail "$2 used the source or build tree (lines above)"; fi
}

step "nanscope-cli --version"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
run "$cli" --version | tee "$work/version.txt"
grep -q "^nanscope-cli $version\\( (git [0-9a-f]*)\\)\\?$" "$work/version.txt" || fail "--version: $(cat "$work/version.txt")"
run "$root/usr/bin/nanscope" --version | grep -q "^nanscope $version" || fail "nanscope --version"
# Built from a git checkout: the programs name the commit (tests see none; core/version.hpp).
commit=""
if [ -e "$src/.git" ] && command -v git >/dev/null && git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(sed -n 's/.*(git \([0-9a-f]*\))$/\1/p' "$work/version.txt")
  [ -n "$commit" ] || fail "built from git, but --version names no commit"
  git -C "$src" rev-parse --verify -q "$commit^{commit}" >/dev/null || fail "--version names $commit, not a commit here"
  # (Each program names the commit of its own last link: after a commit, ctest without a build may see two.)
  gui_commit=$(run "$root/usr/bin/nanscope" --version | sed -n 's/.*(git \([0-9a-f]*\))$/\1/p')
  [ -n "$gui_commit" ] || fail "built from git, but nanscope --version names no commit"
  git -C "$src" rev-parse --verify -q "$gui_commit^{commit}" >/dev/null || fail "nanscope --version names $gui_commit"
fi
json_commit=null
[ -z "$commit" ] || json_commit="\"$commit\""

step "nanscope-cli devices"
run "$cli" devices >"$work/devices.txt" 2>&1 || { cat "$work/devices.txt"; fail "devices"; }
cat "$work/devices.txt"

step "nanscope-cli generate (embedded model, 64x64, 2 steps)"
run "$cli" -v generate -p "a red circle on a blue background" --size 64x64 --steps 2 --seed 1 \
  -o "$work/out.png" >"$work/generate.txt" 2>&1 || { cat "$work/generate.txt"; fail "generate"; }
grep -E "embedded default model|loaded|out.png" "$work/generate.txt"
grep -qF "the embedded default model: $root/usr/share/nanscope/models/nanscope-tiny (installed" "$work/generate.txt" ||
  fail "generate did not use the installed embedded model"
check_paths "$work/generate.txt" generate
[ -s "$work/out.png" ] || fail "generate wrote no image"
run "$cli" info "$work/out.png" >"$work/info.txt"
grep -q "written by NaNscope $version${commit:+ (git $commit)}" "$work/info.txt" ||
  { cat "$work/info.txt"; fail "info: no Software text naming the version and commit"; }
grep -q "\"nanscope_commit\": $json_commit" "$work/info.txt" ||
  { cat "$work/info.txt"; fail "info: the nanscope chunk does not name the commit"; }

step "nanscope-cli scenario run R2"
rc=0
run "$cli" -v scenario run R2 --json "$work/r2.json" >"$work/r2.txt" 2>&1 || rc=$?
grep -E "^(verdict|summary|origin):|presets|embedded model" "$work/r2.txt" || true
[ -s "$work/r2.json" ] || { cat "$work/r2.txt"; fail "scenario run R2 wrote no report (exit $rc)"; }
grep -q '"verdict": "non-finite"' "$work/r2.json" || { cat "$work/r2.txt"; fail "R2: not non-finite"; }
grep -q "\"nanscope_version\": \"$version\"" "$work/r2.json" || fail "R2 report: no nanscope_version"
grep -q "\"nanscope_commit\": $json_commit" "$work/r2.json" || fail "R2 report: nanscope_commit"
grep -qF "scenario presets: $root/usr/share/nanscope/presets (installed" "$work/r2.txt" ||
  fail "scenario run did not use the installed presets"
check_paths "$work/r2.txt" "scenario run R2"

step "nanscope (the workbench) --scenario R2 --run --screenshot"
if command -v xvfb-run >/dev/null; then
  gui=(xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb)
else
  echo "xvfb-run is missing: Qt's offscreen platform instead"
  gui=(env QT_QPA_PLATFORM=offscreen)
fi
rc=0
run NANSCOPE_LOG=debug NANSCOPE_GUI_SETTINGS_SCOPE=nanscope-package-test "${gui[@]}" "$root/usr/bin/nanscope" \
  --scenario R2 --fixed --run --screenshot "$work/workbench.png" >"$work/gui.txt" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$work/gui.txt"; fail "the workbench exited with $rc"; }
grep -E "workbench.png|embedded default model|presets" "$work/gui.txt" || true
[ -s "$work/workbench.png" ] || { cat "$work/gui.txt"; fail "no screenshot"; }
grep -qF "the embedded default model: $root/usr/share/nanscope/models/nanscope-tiny (installed" "$work/gui.txt" ||
  { cat "$work/gui.txt"; fail "the workbench did not use the installed embedded model"; }
check_paths "$work/gui.txt" "the workbench"

step "ok"
