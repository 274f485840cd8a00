#!/usr/bin/env bash
# Runs NaNscope on a machine with an NVIDIA GPU from a bundle made by
# tools/gpu/bundle.sh (no build tree needed there): makes NVIDIA's OpenCL
# reachable, then runs the stages named on the command line and writes one log
# per stage, packed at the end into $OUT/gpu-run.tar.gz (with all.log beside
# it: the device tool brings back few files), and the kernel cache into
# $OUT/kernel-cache.tar.xz (tools/gpu/ptx_report.sh reads it).
#
# usage: tools/gpu/run_suite.sh [env] [devices] [ops] [scenarios] [bench] [torch] ...
#   env        the driver, libraries and ICD files found (always runs first)
#   devices    nanscope-cli devices
#   ops        the op suite (tests/ops) and the device suites on the GPU, OPS_JOBS
#              test programs at a time [6], test_attention split into
#              OPS_SHARDS pieces [4] (NVIDIA's compiler takes seconds per
#              attention program; the pieces compile in parallel), GTEST_FILTER
#              from OPS_FILTER [-*ReferenceVsTorch*: those cases compare the
#              CPU reference with CPU PyTorch, no GPU in them]
#   pipeline   the whole-pipeline suites and test_probe, their oracles on the versions
#              tools/setup.sh pins (diffusers 0.31, transformers 4.47, ...),
#              installed from the bundle into their own folder for this stage
#   scenarios  generate on the embedded model, then R0-R4 and their fixed twins,
#              then the device probe (nanscope-cli probe)
#   coldstart  the embedded model's R4 run (64x64, 20 steps) with an empty
#              kernel cache and an empty NVIDIA compute cache: kernel builds in
#              helper processes, then in-process (NANSCOPE_KERNEL_BUILDER=0),
#              then warm
#   bench      bench_unet, f32 and f16, on the GPU, with PyTorch CUDA (diffusers)
#              on the same weights as the baseline, in the order of BENCH_PLAN
# Stages joined by "+" (ops+pipeline+scenarios) run at the same time and end
# together; GROUP_LIMIT (seconds) stops a group's stragglers [none]. Timings
# belong in a stage of their own (bench).
# Time limits: STAGE_LIMIT (seconds, default 240) for each program a stage
# runs. The bench stage takes (defaults in brackets):
#   BENCH_PLAN        what to measure, in order: MODEL:LATENT for a bench_unet
#                     table (f32 and f16, NaNscope and PyTorch), and
#                     profile:MODEL:DTYPE:LATENT:ROWS for one call under
#                     NANSCOPE_PROFILE (the slowest ROWS ops' kernel time);
#                     MODEL is sd15 or sdxl
#                     ["sd15:128 sd15:64 sdxl:128 profile:sd15:f32:128:12"]
#   BENCH_SDXL_LIMIT  seconds for making the SDXL folder (10.3 GB) and for each
#                     SDXL table or profiled call [240]
#   BENCH_RUNS        timed calls per configuration (the median is printed) [3]
#   BENCH_PREMAKE     models whose folders are made in the background from the
#                     start, e.g. "sd15 sdxl" (while the op suite runs) [none]
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=${OUT:-$repo/gpu-out}
ns=/tmp/nanscope-gpu
out=$ns/out
mkdir -p "$out" "$dest"
limit=${STAGE_LIMIT:-240}
# The logs, and the kernel cache: on NVIDIA its binaries are the driver
# compiler's PTX, for tools/gpu/ptx_report.sh here (registers, spills).
pack() {
  tar -C "$out" -czf "$dest/gpu-run.tar.gz" .
  if [ -d "$ns/kernel-cache" ]; then
    tar -C "$ns" -cJf "$dest/kernel-cache.tar.xz" kernel-cache
    # The device tool brings back files of up to 16 MiB.
    [ "$(stat -c %s "$dest/kernel-cache.tar.xz")" -lt $((15 << 20)) ] || rm -f "$dest/kernel-cache.tar.xz"
  fi
}
trap pack EXIT

step() { echo; echo "=== $* ($(date +%T))"; }

# --- set-up --------------------------------------------------------------
mkdir -p "$ns"
tar -C "$ns" -xJf "$repo/.gpu/bundle.tar.xz"
src=$(cat "$ns/source_dir")
# The binaries look for the embedded model, oracles and bench scripts under
# the source path they were built in.
if [ "$src" != "$repo" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$repo" "$src"; fi
# The CLI where the tests that run it expect it (its build path).
cli_path=$(cat "$ns/cli_path")
if [ ! -e "$cli_path" ]; then mkdir -p "$(dirname "$cli_path")" && ln -s "$ns/bin/nanscope-cli" "$cli_path"; fi

# NVIDIA's OpenCL library comes with the driver; the ICD loader reads vendor
# files from OCL_ICD_VENDORS. Find the driver's library wherever it is mounted.
nvcl=$(ldconfig -p | awk '/libnvidia-opencl.so.1/{print $NF; exit}')
if [ -z "$nvcl" ]; then
  nvcl=$(find /usr/local/nvidia /usr/lib /usr/lib64 /usr/local -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
fi
mkdir -p "$ns/icd"
if [ -n "$nvcl" ]; then echo "$nvcl" > "$ns/icd/nvidia.icd"; fi
export OCL_ICD_VENDORS=$ns/icd
export LD_LIBRARY_PATH=$ns/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NANSCOPE_KERNEL_CACHE=$ns/kernel-cache
export NANSCOPE_PYTHON=${NANSCOPE_PYTHON:-$(command -v python3)}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if ls "$ns"/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$ns/site" "$ns"/whl/*.whl \
    >"$out/pip.log" 2>&1 && export PYTHONPATH=$ns/site${PYTHONPATH:+:$PYTHONPATH}
fi
cli=$ns/bin/nanscope-cli

stage_env() {
  step env
  nvidia-smi || true
  grep PRETTY /etc/os-release
  echo "libnvidia-opencl: ${nvcl:-not found}"
  ls /etc/OpenCL/vendors 2>/dev/null
  ldconfig -p | grep -i -E 'opencl|libcuda.so' || true
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name(0))'
  python3 -c 'import diffusers, huggingface_hub; print("diffusers", diffusers.__version__, "hub", huggingface_hub.__version__)'
  nproc; free -g | head -2
}

stage_devices() {
  step devices
  timeout "$limit" "$cli" -v devices
}

# One test executable (or one shard of it: SHARD/SHARDS): full output to its
# own log, the failures and the summary to the stage log in one piece.
run_test() {
  local t=$1 shard=${2:-} shards=${3:-} name rc
  name=$(basename "$t")${shard:+.$shard}
  if [ -n "$shard" ]; then
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard timeout "$limit" "$t" --gtest_brief=1 > "$out/$name.log" 2>&1
  else
    timeout "$limit" "$t" --gtest_brief=1 > "$out/$name.log" 2>&1
  fi
  rc=$?
  { echo "--- $name: exit $rc"
    grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure$|nmse|worst finite|error:' "$out/$name.log" | head -40; } > "$out/$name.sum"
  cat "$out/$name.sum"
}

stage_ops() {
  step ops
  export GTEST_FILTER=${OPS_FILTER--*ReferenceVsTorch*}
  local t name jobs=() shards=${OPS_SHARDS:-4} i j
  for t in "$ns"/bin/test_*; do
    name=$(basename "$t")
    # OPS_TESTS="test_matmul test_attention" runs only those (any test program
    # of the bundle, e.g. test_scenarios with OPS_FILTER='*R4*').
    if [ -n "${OPS_TESTS:-}" ]; then
      [[ " $OPS_TESTS " == *" $name "* ]] || continue
    else
      case "$name" in
        test_embedded_model|test_pipeline|test_scenarios|test_inspect_pipeline|test_faults|test_probe) continue ;;
      esac
    fi
    if [ "$name" = test_attention ] && [ "$shards" -gt 1 ]; then
      for ((i = 0; i < shards; i++)); do jobs+=("$t $i $shards"); done
    else
      jobs+=("$t")
    fi
  done
  # The longest first: the attention pieces, then the rest.
  for j in "${jobs[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${OPS_JOBS:-6}" ]; do wait -n; done
    # shellcheck disable=SC2086 # program and shard are words
    run_test $j &
  done
  wait
}

# The pipeline suites compare with diffusers/transformers through the test
# oracles, which are written for the versions tools/setup.sh pins (the image's
# transformers 5 / huggingface_hub 1.x lack APIs they use). bundle.sh carries
# those versions as wheels (oracle-whl/, with peft and accelerate, which
# diffusers 0.31 imports when any are installed); they go into their own
# folder, first on PYTHONPATH for this stage only (a stage runs in its own
# subshell: the bench keeps the image's torch with the newer diffusers).
# oracle-whl/fallback/ holds what those versions import and an image may lack
# (requests, regex, psutil, ...): each is installed only when the image
# cannot import it.
stage_pipeline() {
  step pipeline
  local site=$ns/oracle-site t w mod
  if [ ! -d "$site" ] && ls "$ns"/oracle-whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$ns"/oracle-whl/*.whl \
      >"$out/pip-oracle.log" 2>&1 || echo "the oracle wheels did not install: see pip-oracle.log"
    for w in "$ns"/oracle-whl/fallback/*.whl; do
      [ -e "$w" ] || continue
      mod=$(basename "$w")
      mod=${mod%%-*}
      if ! python3 -c "import $mod" 2>/dev/null; then
        echo "installing $mod for the oracles (the image has none)"
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$w" \
          >>"$out/pip-oracle.log" 2>&1 || echo "$mod did not install: see pip-oracle.log"
      fi
    done
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import sys, torch, diffusers, transformers, tokenizers, huggingface_hub, safetensors, peft, accelerate
print("oracles: python", sys.version.split()[0], "torch", torch.__version__, "diffusers", diffusers.__version__,
      "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "hub", huggingface_hub.__version__,
      "safetensors", safetensors.__version__, "peft", peft.__version__, "accelerate", accelerate.__version__)' 2>&1 | tail -3
  for t in test_pipeline test_embedded_model test_inspect_pipeline test_probe test_faults; do run_test "$ns/bin/$t"; done
}

stage_scenarios() {
  step scenarios
  local dev=${GPU_DEVICE:-NVIDIA}
  timeout "$limit" "$cli" --device "$dev" generate --prompt "a lighthouse at dusk" --size 512x512 --steps 20 \
    -o "$out/lighthouse-512.png" 2>&1 | tail -20
  local r
  for r in R0 R1 R2 R3 R4; do
    echo "--- $r"
    timeout "$limit" "$cli" --device "$dev" scenario run "$r" --json "$out/$r.json" 2>&1 | tail -12
    echo "--- $r --fixed"
    timeout "$limit" "$cli" --device "$dev" scenario run "$r" --fixed --json "$out/$r-fixed.json" 2>&1 | tail -12
  done
  echo "--- probe (embedded model, every distinct op against the reference backend)"
  timeout "$limit" "$cli" --device "$dev" probe --json "$out/probe.json" 2>&1 | tail -25
}

# R4's run with both kernel caches empty (ours and NVIDIA's compute cache),
# builds in helper processes and then in-process, then warm.
stage_coldstart() {
  step coldstart
  local dev=${GPU_DEVICE:-NVIDIA} mode dir t0 t1
  for mode in helpers in-process warm; do
    dir=$ns/cold-$mode
    [ "$mode" = warm ] && dir=$ns/cold-helpers
    [ "$mode" = warm ] || rm -rf "$dir"
    mkdir -p "$dir/kernels" "$dir/nv"
    t0=$(date +%s.%N)
    NANSCOPE_KERNEL_CACHE=$dir/kernels CUDA_CACHE_PATH=$dir/nv \
      NANSCOPE_KERNEL_BUILDER=$([ "$mode" = in-process ] && echo 0 || echo "") \
      timeout "$limit" "$cli" --device "$dev" generate --prompt "a red fox" --size 64x64 --steps 20 \
      -o "$out/cold-$mode.png" > "$out/cold-$mode.log" 2>&1
    local rc=$?
    t1=$(date +%s.%N)
    echo "$mode: exit $rc, $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
    grep -i -E 'error|helper|plan' "$out/cold-$mode.log" | head -5
  done
}

# One UNet call under NANSCOPE_PROFILE: MODEL DTYPE LATENT ROWS LIMIT (the slowest
# ROWS ops); dev is stage_bench's.
profile_call() {
  local log=$out/profile-$1-$2-$3.log
  echo "--- profile: $1 $2 latent $3 (kernel time of two calls: the warm-up and the timed one)"
  NANSCOPE_PROFILE=1 timeout "$5" "$ns/bin/bench_unet" --child "$2" --device "$dev" --model "$ns/$1-unet" \
    --size "$3" --runs 1 > "$log" 2>&1
  grep ' profile ' "$log" | awk '{print $(NF-1), $0}' | sort -rn | head -"$4" | cut -d' ' -f2-
}

# A model's folder (seeded random weights), made once; one being made in the
# background (BENCH_PREMAKE) is waited for. MODEL LIMIT
ensure_model() {
  while [ -e "$ns/$1-unet.making" ]; do sleep 1; done
  [ -e "$ns/$1-unet.made" ] && return 0
  echo "--- making the $1 UNet"
  timeout "$2" python3 "$repo/bench/make_sd15_unet.py" --config "$1" "$ns/$1-unet" 2>&1 | tail -2
  touch "$ns/$1-unet.made"
}

stage_bench() {
  step bench
  local dev=${GPU_DEVICE:-NVIDIA} item a b c d e lim
  for item in ${BENCH_PLAN-sd15:128 sd15:64 sdxl:128 profile:sd15:f32:128:12}; do
    IFS=: read -r a b c d e <<<"$item"
    if [ "$a" = profile ]; then
      lim=$limit; [ "$b" = sdxl ] && lim=${BENCH_SDXL_LIMIT:-240}
      ensure_model "$b" "$lim"
      profile_call "$b" "$c" "$d" "${e:-20}" "$lim"
      continue
    fi
    lim=$limit; [ "$a" = sdxl ] && lim=${BENCH_SDXL_LIMIT:-240}
    ensure_model "$a" "$lim"
    echo "--- $a latent $b"
    timeout "$lim" "$ns/bin/bench_unet" --device "$dev" --model "$ns/$a-unet" --size "$b" \
      --runs "${BENCH_RUNS:-3}" --dtypes f32,f16 --torch-device cuda 2>&1 |
      grep --line-buffered -v -E '\] \[info\] (loaded|built) '  # rows as they come: a cut-short run keeps them
  done
}

# A process and everything it started (timeout puts its command in a process
# group of its own, so a group kill would miss them).
kill_tree() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do kill_tree "$c"; done
  kill "$1" 2>/dev/null
}

# Stages joined by "+" at the same time; GROUP_LIMIT stops a straggler with
# everything it started.
run_group() {
  local IFS=+ s p alive end pids=()
  read -r -a stages <<<"$1"
  unset IFS
  for s in "${stages[@]}"; do
    ("stage_$s" 2>&1 | tee "$out/$s.log" | tee -a "$dest/all.log") &
    pids+=($!)
  done
  end=$(($(date +%s) + ${GROUP_LIMIT:-1000000}))
  while :; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "=== $1: GROUP_LIMIT reached, stopping what still runs" | tee -a "$dest/all.log"
      for p in "${pids[@]}"; do kill_tree "$p"; done
      break
    fi
    sleep 2
  done
  wait
}

stage_env
# BENCH_PREMAKE="sd15 sdxl": make those UNet folders in the background now (CPU
# work), while the stages before the bench run; ensure_model waits for them.
for m in ${BENCH_PREMAKE:-}; do
  touch "$ns/$m-unet.making"
  (python3 "$repo/bench/make_sd15_unet.py" --config "$m" "$ns/$m-unet" > "$out/make-$m.log" 2>&1 &&
     touch "$ns/$m-unet.made"
   rm -f "$ns/$m-unet.making") &
done
for s in "$@"; do
  case "$s" in
    env) ;;
    *+*) run_group "$s" ;;
    devices|ops|pipeline|scenarios|coldstart|bench) "stage_$s" 2>&1 | tee "$out/$s.log" | tee -a "$dest/all.log" ;;
    *) echo "unknown stage $s" ;;
  esac
done
