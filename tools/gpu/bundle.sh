#!/usr/bin/env bash
# Packs what a remote GPU machine needs to run NaNscope's programs, op tests and
# benches without a build or source tree of its own: stripped binaries, the
# shared libraries they need beyond the C/C++ runtime (including the ICD loader
# ocl-icd, since a driver-only image may ship NVIDIA's OpenCL library without
# one), the Python wheels the PyTorch baselines need beyond torch, and the
# test oracles' versions of diffusers/transformers as wheels (oracle-whl/, for
# the pipeline suites).
#
# usage: tools/gpu/bundle.sh BUILD_DIR OUT_DIR
# Then copy the tree (the repository with OUT_DIR in it) to the GPU machine
# and run tools/gpu/run_suite.sh there (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "$1")
out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/whl" "$out/oracle-whl/fallback"

# The op suite (every test_* built from tests/ops), the device-level suites,
# the pipeline suites and the benches.
bins=(cli/nanscope-cli bench/bench_unet bench/bench_ops)
for src in tests/ops/test_*.cpp; do bins+=("tests/$(basename "$src" .cpp)"); done
bins+=(tests/test_devices tests/test_device_inspect tests/test_probe tests/test_embedded_model
  tests/test_pipeline tests/test_scenarios tests/test_inspect_pipeline tests/test_faults)
for b in "${bins[@]}"; do
  strip -o "$out/bin/$(basename "$b")" "$build/$b"
done
# The kernel-build helper where the programs look for it: <exe dir>/../libexec/nanscope.
mkdir -p "$out/libexec/nanscope"
strip -o "$out/libexec/nanscope/nanscope-kernel-builder" "$build/libexec/nanscope/nanscope-kernel-builder"

# Shared libraries beyond glibc and the C++ runtime (a newer one of each is on
# any machine that can run a current CUDA driver).
for b in "$out"/bin/* "$out"/libexec/nanscope/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl*|librt*|libz.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done

# The diffusers baseline (the GPU image has torch 2.11, transformers 5 and
# huggingface_hub 1.x but not diffusers). diffusers 0.31, the oracle version
# here, does not import against hub 1.x (peft there needs hub 1.x), so the GPU
# baseline uses a diffusers that matches the image: the UNet and its
# attention are the same modules.
py=${NANSCOPE_PYTHON:-/usr/bin/python3}
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any -d "$out/whl" "${GPU_DIFFUSERS:-diffusers==0.42.1}" importlib_metadata==8.5.0

# The test oracles' versions (tests/oracles: diffusers 0.31, transformers 4.47,
# tokenizers 0.21, huggingface_hub 0.26.5, safetensors; pinned in
# tools/setup.sh), with the peft and accelerate that setup.sh pins beside them
# (diffusers 0.31 imports whichever peft and accelerate are installed, and the
# image's need huggingface_hub 1.x), for CPython 3.12 on x86-64 Linux.
# run_suite.sh's pipeline stage installs them into a folder of their own.
pins() { sed -n "s/^  $1=(\(.*\))\$/\1/p" tools/setup.sh; }
oracle_pins=$(pins pins)
oracle_nodeps=$(pins nodeps | tr ' ' '\n' | grep -E '^(peft|accelerate)==' | tr '\n' ' ')
if [ -z "$oracle_pins" ] || [ -z "$oracle_nodeps" ]; then
  echo "bundle.sh: the pins=(...) / nodeps=(...) lines of tools/setup.sh were not found" >&2
  exit 1
fi
wheels_312() {
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform any "$@"
}
# shellcheck disable=SC2086 # the pins are words
wheels_312 -d "$out/oracle-whl" $oracle_pins $oracle_nodeps
# What those versions import that an image with transformers 5 / hub 1.x may
# not have (hub 1.x moved from requests to httpx); run_suite.sh installs each
# only when the image cannot import it.
wheels_312 -d "$out/oracle-whl/fallback" requests==2.32.3 urllib3==2.2.3 idna==3.10 charset_normalizer==3.4.0 \
  certifi==2024.8.30 regex==2024.11.6 psutil==6.1.0 zipp==3.21.0
# Wheels are deflate-compressed zips, which xz cannot shrink further: stored
# (uncompressed) zips are the same wheels to pip, and xz packs them to less
# than half (19 MB of wheels: 8 MB instead of 19).
"$py" - "$out" <<'PY'
import os, sys, zipfile
for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        if name.endswith(".whl"):
            path = os.path.join(root, name)
            with zipfile.ZipFile(path) as src, zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as dst:
                for info in src.infolist():
                    dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_STORED)
            os.replace(path + ".tmp", path)
PY

# The source tree paths compiled into the binaries (kernels are embedded; the
# embedded model, test oracles and bench scripts are found through these).
grep -m1 '^CMAKE_HOME_DIRECTORY' "$build/CMakeCache.txt" | cut -d= -f2 > "$out/source_dir"
echo "$build/cli/nanscope-cli" > "$out/cli_path"
# One compressed file: the tree that travels to the machine is size-limited.
tar -C "$out" -cJf "$out.tar.xz" .
rm -rf "$out"
mkdir -p "$out"
mv "$out.tar.xz" "$out/bundle.tar.xz"
du -sh "$out/bundle.tar.xz"
