#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) with clang, ASan
# and UBSan in the sanitizer build (build-asan/, tools/configure_sanitize.sh)
# and runs each over its corpus for a fixed time.
# Fails on any finding (a crash, a sanitizer report, an exception outside the
# engine's error family, a broken check, a leak, a timeout); the input that
# found it is left in build-asan/findings/<target>/ to add to
# tests/fuzz/corpus/<target>/ once fixed.
#
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 20 (CI's budget: README "Tests")
#   TARGET              default: all of them (tests/fuzz/CMakeLists.txt)
# Environment:
#   NANSCOPE_FUZZ_MERGE=1   merge the new inputs that add coverage into
#                           tests/fuzz/corpus/<target>/ (libFuzzer -merge=1)
#   NANSCOPE_FUZZ_JOBS=N    targets run N at a time (default: the core count)
#   NANSCOPE_SANITIZE_BUILD_DIR build folder (default build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
tools/setup.sh --no-python >/dev/null
build_dir=${NANSCOPE_SANITIZE_BUILD_DIR:-build-asan}
corpus_root=tests/fuzz/corpus

all_targets=$(sed -n '/^set(NANSCOPE_FUZZ_TARGETS/,/)/p' tests/fuzz/CMakeLists.txt |
  sed -e 's/set(NANSCOPE_FUZZ_TARGETS//' -e 's/)//' | tr -s ' \n' ' ')
targets=("$@")
[ "${#targets[@]}" -eq 0 ] && read -r -a targets <<<"$all_targets"

tools/configure_sanitize.sh "$build_dir"
start=$(date +%s)
cmake --build "$build_dir" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")
echo "fuzz: built ${#targets[@]} targets in $(($(date +%s) - start)) s"

# Leaks count as findings here (no OpenCL in these programs); UBSan stops at
# the first report (-fno-sanitize-recover=all).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export NANSCOPE_LOG=off
log_dir=$build_dir/fuzz-logs
rm -rf "$log_dir"
mkdir -p "$log_dir"

run_one() {
  local t=$1
  local seeds=$corpus_root/$t new=$build_dir/fuzz-corpus/$t found=$build_dir/findings/$t
  rm -rf "$found"
  mkdir -p "$new" "$found"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
  # New inputs go to build-asan/fuzz-corpus/<t> (first folder); the seeds are read only.
  "$build_dir/tests/fuzz/fuzz_$t" "$new" "$seeds" "${dict[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$found/" >"$log_dir/$t.log" 2>&1
}

jobs=${NANSCOPE_FUZZ_JOBS:-$(nproc)}
pids=()
names=()
status=0
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    if ! wait "${pids[0]}"; then status=1; echo "fuzz: FINDING in ${names[0]}"; fi
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then status=1; echo "fuzz: FINDING in ${names[$i]}"; fi
done

for t in "${targets[@]}"; do
  log=$log_dir/$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  printf 'fuzz: %-17s %4s s  %9s runs  %s\n' "$t" "$seconds" "${execs:-?}" "${cov:-no coverage line}"
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |runtime error:|deadly signal|Test unit written' "$log"; then
    status=1
    echo "fuzz: $t found a bug; its log:" >&2
    grep -E -A40 '==ERROR|runtime error:|uncaught exception|terminate called|deadly signal' "$log" | head -60 >&2 || true
    ls "$build_dir/findings/$t" >&2
  fi
done

if [ "${NANSCOPE_FUZZ_MERGE:-0}" = 1 ]; then
  for t in "${targets[@]}"; do
    before=$(find "$corpus_root/$t" -type f | wc -l)
    # Edges only (no hit counts, no comparison operands): a small corpus that keeps the coverage.
    "$build_dir/tests/fuzz/fuzz_$t" -merge=1 -use_counters=0 -use_cmp=0 "$corpus_root/$t" "$build_dir/fuzz-corpus/$t" \
      >"$log_dir/$t.merge.log" 2>&1
    echo "fuzz: $t corpus $before -> $(find "$corpus_root/$t" -type f | wc -l) files"
  done
fi
[ "$status" = 0 ] && echo "fuzz: no findings"
exit "$status"
