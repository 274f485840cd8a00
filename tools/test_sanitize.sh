#!/usr/bin/env bash
# Builds the suites that fit CI's time under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, CMAKE_BUILD_TYPE=Sanitize) and runs them:
# the file parsers (safetensors, PNG, presets, the settings table, the CLIP
# tokenizer), dtypes, the kernel cache, the buffer pool, the inspector, the
# device reductions, the memory plan and the fault tests (out of memory
# mid-run, cancel at every phase). Usage: tools/test_sanitize.sh [ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build_dir=${NANSCOPE_SANITIZE_BUILD_DIR:-build-asan}
suites=(test_safetensors test_png test_run_config test_settings_table test_clip_tokenizer test_dtype
        test_program_cache test_buffer_pool test_inspect test_sizes test_device_inspect test_faults)
tools/configure_sanitize.sh "$build_dir"
cmake --build "$build_dir" -j "$(nproc)" --target nanscope-cli "${suites[@]}"
export HF_HUB_OFFLINE=1
export NANSCOPE_KERNEL_CACHE=${NANSCOPE_KERNEL_CACHE:-$PWD/$build_dir/test-kernel-cache}
# Leaks are not checked: PoCL's LLVM keeps allocations until exit. Any other
# finding ends the test with an error.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
# These suites check NaNscope's own code: Oclgrind (an uninstrumented LLVM
# interpreter the normal build loads beside PoCL, docs/oclgrind.md) stays out.
export NANSCOPE_OCLGRIND=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
labels="^($(IFS='|'; echo "${suites[*]}"))$"
cd "$build_dir"
# Only the chosen executables' tests, by label (the rest of the tree is not built here).
# SizeRange runs whole generations up to 1024x1024 through the CLI: the normal build covers it.
ctest --output-on-failure -j "$(nproc)" -L "$labels" -E '^SizeRange[.]' "$@"
