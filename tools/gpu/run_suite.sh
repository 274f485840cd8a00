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
#   pipeline   the whole-pipeline suites (their oracles need diffusers 0.31 /
#              transformers 4.47, as tools/setup.sh installs)
#   scenarios  generate on the embedded model, then R0-R4 and their fixed twins
#   bench      bench_unet at latent 64 and 128, f32 and f16, on the GPU, with
#              PyTorch CUDA (diffusers) on the same weights as the baseline
# Stage time limits are set by STAGE_LIMIT (seconds, default 240).
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
# oracles, which are written for the versions tools/setup.sh installs.
stage_pipeline() {
  step pipeline
  local t
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

# One UNet call under NANSCOPE_PROFILE: DTYPE LATENT ROWS (the slowest ROWS ops);
# dev and unet are stage_bench's.
profile_call() {
  local log=$out/profile-$1-$2.log
  NANSCOPE_PROFILE=1 timeout "$limit" "$ns/bin/bench_unet" --child "$1" --device "$dev" --model "$unet" --size "$2" \
    --runs 1 > "$log" 2>&1
  grep ' profile ' "$log" | awk '{print $(NF-1), $0}' | sort -rn | head -"$3" | cut -d' ' -f2-
}

stage_bench() {
  step bench
  local dev=${GPU_DEVICE:-NVIDIA} unet=$ns/sd15-unet
  python3 "$repo/bench/make_sd15_unet.py" "$unet" 2>&1 | tail -2
  # Where the time goes: one profiled call each (kernel time per op).
  profile_call f16 64 30
  profile_call f32 128 12
  local size
  for size in ${BENCH_SIZES:-64 128}; do
    echo "--- latent $size"
    timeout "$limit" "$ns/bin/bench_unet" --device "$dev" --model "$unet" --size "$size" --runs 3 \
      --dtypes f32,f16 --torch-device cuda 2>&1 | tail -25
  done
}

stage_env
for s in "$@"; do
  case "$s" in
    env) ;;
    devices|ops|pipeline|scenarios|bench) "stage_$s" 2>&1 | tee "$out/$s.log" | tee -a "$dest/all.log" ;;
    *) echo "unknown stage $s" ;;
  esac
done
