#!/usr/bin/env bash
# Packs what a remote GPU machine needs to run NaNscope's programs, op tests and
# benches without a build or source tree of its own: stripped binaries, the
# shared libraries they need beyond the C/C++ runtime (including the ICD loader
# ocl-icd, since a driver-only image may ship NVIDIA's OpenCL library without
# one), and the Python wheels the PyTorch baselines need beyond torch.
#
# usage: tools/gpu/bundle.sh BUILD_DIR OUT_DIR
# Then copy the tree (the repository with OUT_DIR in it) to the GPU machine
# and run tools/gpu/run_suite.sh there (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "$1")
out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/whl"

# The op suite (every test_* built from tests/ops), the device-level suites,
# the pipeline suites and the benches.
bins=(cli/nanscope-cli bench/bench_unet bench/bench_ops)
for src in tests/ops/test_*.cpp; do bins+=("tests/$(basename "$src" .cpp)"); done
bins+=(tests/test_devices tests/test_device_inspect tests/test_embedded_model
  tests/test_pipeline tests/test_scenarios tests/test_inspect_pipeline tests/test_faults)
for b in "${bins[@]}"; do
  strip -o "$out/bin/$(basename "$b")" "$build/$b"
done

# Shared libraries beyond glibc and the C++ runtime (a newer one of each is on
# any machine that can run a current CUDA driver).
for b in "$out"/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
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
