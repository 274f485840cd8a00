#!/usr/bin/env bash
# Runs NaNscope on a machine with an NVIDIA GPU from a bundle made by
# tools/gpu/bundle.sh (no build tree needed there): makes NVIDIA's OpenCL
# reachable, then runs the stages named on the command line and writes one log
# per stage, packed at the end into $OUT/gpu-run.tar.gz (with all.log beside
# it: the device tool brings back few files).
#
# usage: tools/gpu/run_suite.sh [env] [devices] [ops] [scenarios] [bench] [torch] ...
#   env        the driver, libraries and ICD files found (always runs first)
#   devices    nanscope-cli devices
#   ops        the op suite (tests/ops) and the device suites on the GPU
#   pipeline   the whole-pipeline suites, their oracles on the versions
#              tools/setup.sh pins (diffusers 0.31, transformers 4.47, ...),
#              installed from the bundle into their own folder for this stage
#   scenarios  generate on the embedded model, then R0-R4 and their fixed twins
#   bench      bench_unet, f32 and f16, on the GPU, with PyTorch CUDA (diffusers)
#              on the same weights as the baseline: the SD 1.5 UNet at latent 64
#              and 128, then the SDXL UNet at 128 (1024x1024, its native size)
# Stage time limits are set by STAGE_LIMIT (seconds, default 240). The bench
# stage takes (defaults in brackets):
#   BENCH_SIZES       SD 1.5 latent sizes ["64 128"]; empty: no SD 1.5
#   BENCH_SDXL_SIZES  SDXL latent sizes ["128"]; empty: no SDXL
#   BENCH_SDXL_LIMIT  seconds for making the SDXL folder (10.3 GB), for each
#                     SDXL profiled call and for each SDXL size [240]
#   BENCH_RUNS        timed calls per configuration (the median is printed) [3]
#   BENCH_PREMAKE     models whose folders are made in the background from the
#                     start, e.g. "sd15 sdxl" (while the op suite runs) [none]
#   BENCH_PROFILE     profiled calls, MODEL:DTYPE:LATENT:ROWS each (MODEL sd15 or
#                     sdxl; the slowest ROWS ops' kernel time) ["sd15:f32:128:12"];
#                     empty: none; e.g. "sd15:f16:64:30 sd15:f32:128:12 sdxl:f16:128:20"
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=${OUT:-$repo/gpu-out}
ns=/tmp/nanscope-gpu
out=$ns/out
mkdir -p "$out" "$dest"
limit=${STAGE_LIMIT:-240}
pack() { tar -C "$out" -czf "$dest/gpu-run.tar.gz" .; }
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

# One test executable: full output to its own log, the failures and the
# summary to the stage log.
run_test() {
  local t=$1 name
  name=$(basename "$t")
  echo "--- $name"
  timeout "$limit" "$t" --gtest_brief=1 > "$out/$name.log" 2>&1
  echo "exit $?"
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure$|nmse|worst finite|error:' "$out/$name.log" | head -40
}

stage_ops() {
  step ops
  local t
  for t in "$ns"/bin/test_*; do
    case "$(basename "$t")" in
      test_embedded_model|test_pipeline|test_scenarios|test_inspect_pipeline|test_faults) continue ;;
    esac
    # OPS_TESTS="test_matmul test_attention" runs only those.
    if [ -n "${OPS_TESTS:-}" ] && [[ " $OPS_TESTS " != *" $(basename "$t") "* ]]; then continue; fi
    run_test "$t"
  done
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
  for t in test_embedded_model test_pipeline test_inspect_pipeline test_faults; do run_test "$ns/bin/$t"; done
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

# One model: make its folder (seeded random weights, once), its profiled calls
# (those of BENCH_PROFILE naming it), then bench_unet at each latent size.
# MODEL SIZES LIMIT
bench_model() {
  local model=$1 sizes=$2 lim=$3 p m d l r size
  [ -n "$sizes" ] || return 0
  # A folder being made in the background (BENCH_PREMAKE) is waited for.
  while [ -e "$ns/$model-unet.making" ]; do sleep 1; done
  echo "--- making the $model UNet"
  timeout "$lim" python3 "$repo/bench/make_sd15_unet.py" --config "$model" "$ns/$model-unet" 2>&1 | tail -2
  for p in ${BENCH_PROFILE-sd15:f32:128:12}; do
    IFS=: read -r m d l r <<<"$p"
    if [ "$m" = "$model" ]; then profile_call "$m" "$d" "$l" "${r:-20}" "$lim"; fi
  done
  for size in $sizes; do
    echo "--- $model latent $size"
    timeout "$lim" "$ns/bin/bench_unet" --device "$dev" --model "$ns/$model-unet" --size "$size" \
      --runs "${BENCH_RUNS:-3}" --dtypes f32,f16 --torch-device cuda 2>&1 |
      grep --line-buffered -v -E '\] \[info\] (loaded|built) '  # rows as they come: a cut-short run keeps them
  done
}

stage_bench() {
  step bench
  local dev=${GPU_DEVICE:-NVIDIA}
  bench_model sd15 "${BENCH_SIZES-64 128}" "$limit"
  bench_model sdxl "${BENCH_SDXL_SIZES-128}" "${BENCH_SDXL_LIMIT:-240}"
}

stage_env
# BENCH_PREMAKE="sd15 sdxl": make those UNet folders in the background now (CPU
# work), while the stages before the bench run; bench_model waits for them.
for m in ${BENCH_PREMAKE:-}; do
  touch "$ns/$m-unet.making"
  (python3 "$repo/bench/make_sd15_unet.py" --config "$m" "$ns/$m-unet" > "$out/make-$m.log" 2>&1
   rm -f "$ns/$m-unet.making") &
done
for s in "$@"; do
  case "$s" in
    env) ;;
    devices|ops|pipeline|scenarios|bench) "stage_$s" 2>&1 | tee "$out/$s.log" | tee -a "$dest/all.log" ;;
    *) echo "unknown stage $s" ;;
  esac
done
