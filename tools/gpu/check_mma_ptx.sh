#!/usr/bin/env bash
# Checks the tensor-core kernels (kernels/matmul/gemm_mma.cl gemm_mma, conv_implicit_mma;
# kernels/attention/flash_mma.cl attention_flash_mma) without a GPU: PoCL cannot compile
# inline PTX, so the program text is compiled as the backend assembles it
# (common.cl + matmul.cl or attention.cl, f16 storage, GPU style, -DMMA_PTX)
# with clang for the NVIDIA OpenCL target, for both GEMM block shapes gemm.cpp
# uses and the attention head sizes of SD 1.x/2.x/XL; the PTX must hold every
# mma.sync of the unrolled loops. (Their logic runs on any device with the
# emulation: NANSCOPE_TENSOR_CORES=emulate, the op suite's *_tensor_cores cases.)
# Where ptxas is installed (CUDA toolkit) it also reports registers and spills
# for sm_90; the OpenCL builtins are then mapped to PTX special registers and
# bar.sync (prelude below), since clang leaves them as calls that ptxas cannot
# resolve and whose call ABI would distort the register count.
# usage: tools/gpu/check_mma_ptx.sh [CLANG]   (default clang-15)
set -euo pipefail
cd "$(dirname "$0")/../.."
clang=${1:-clang-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat kernels/common.cl kernels/matmul.cl > "$tmp/prog.cl"
cat kernels/common.cl kernels/attention.cl > "$tmp/attn.cl"
cat > "$tmp/pre.cl" <<'CL'
#define barrier(x) __asm__ volatile("bar.sync 0;" ::: "memory")
#define NV_DIM(d, X, Y, Z) ((size_t)((d) == 0 ? X() : (d) == 1 ? Y() : Z()))
#define get_local_id(d) NV_DIM(d, __nvvm_read_ptx_sreg_tid_x, __nvvm_read_ptx_sreg_tid_y, __nvvm_read_ptx_sreg_tid_z)
#define get_group_id(d) NV_DIM(d, __nvvm_read_ptx_sreg_ctaid_x, __nvvm_read_ptx_sreg_ctaid_y, __nvvm_read_ptx_sreg_ctaid_z)
#define get_local_size(d) NV_DIM(d, __nvvm_read_ptx_sreg_ntid_x, __nvvm_read_ptx_sreg_ntid_y, __nvvm_read_ptx_sreg_ntid_z)
#define get_global_id(d) (get_group_id(d) * get_local_size(d) + get_local_id(d))
CL
cat "$tmp/pre.cl" "$tmp/prog.cl" > "$tmp/prog_ptxas.cl"
# The library functions clang leaves as calls (declared before the first entry,
# ending in ';') become .extern for ptxas; functions defined there stay.
cat > "$tmp/extern.awk" <<'AWK'
BEGIN { d = 1 }
/^\.entry|^\.visible|^\/\/ \.globl/ { d = 0 }
d && /^\.func/ { buf = $0; inb = 1; next }
inb {
  buf = buf "\n" $0
  if ($0 ~ /^;/) { sub(/^\.func/, ".extern .func", buf); print buf; inb = 0 }
  else if ($0 ~ /^\{/) { print buf; inb = 0 }
  next
}
{ print }
AWK
cat "$tmp/pre.cl" "$tmp/attn.cl" > "$tmp/attn_ptxas.cl"
cl=(-x cl -I kernels -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -target-cpu -Xclang sm_80 -Xclang -finclude-default-header -O2)
status=0
for warps in "2 4" "1 4"; do
  set -- $warps
  d=(-DSTORE_F16 -DMMA_PTX -DGEMM_MMA -DMMA_WARPS_M="$1" -DMMA_WARPS_N="$2")
  # As the backend builds it (-DF16_CVT: GPU style), warnings are errors.
  "$clang" "${cl[@]}" -Werror "${d[@]}" -DF16_CVT -S -o "$tmp/k.ptx" "$tmp/prog.cl"
  for k in gemm_mma conv_implicit_mma; do
    n=$(awk "/\\.entry $k\\(/,/^}/" "$tmp/k.ptx" | grep -c 'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32' || true)
    echo "warps ${1}x$2 $k: $n mma.sync (expected 32)"
    [ "$n" = 32 ] || status=1
  done
  if command -v ptxas >/dev/null; then
    "$clang" "${cl[@]}" "${d[@]}" -S -o "$tmp/r.ptx" "$tmp/prog_ptxas.cl" 2>/dev/null
    awk -f "$tmp/extern.awk" "$tmp/r.ptx" > "$tmp/rx.ptx"
    ptxas -arch=sm_90 -c -v "$tmp/rx.ptx" -o "$tmp/r.o" 2>&1 |
      grep -A3 -E "Compiling entry function '(gemm_mma|conv_implicit_mma)'" | grep -E "entry|spill|Used" |
      sed "s/^/  /"
  fi
done
# attention_flash_mma per head size (FM_DK: d rounded up to 16, FM_DV: dv to 8):
# FM_BK/8 key blocks x FM_DK/16 steps for Q.K^T; FM_BK/16 key steps x FM_DV/8 blocks for each P.V product, of
# which the kernel has four: P_lo and P_hi where V is finite, and each alone where V holds an Inf or NaN (fm_pv's
# three call sites).
# Tiles of FM_BK keys: 64, 32 above head size 96 (attention.cpp flash_mma_tiles).
for head in "40 48 40 64" "64 64 64 64" "80 80 80 64" "160 160 160 32"; do
  set -- $head
  d=(-DSTORE_F16 -DMMA_PTX -DFM_DK="$2" -DFM_DV="$3" -DFM_BK="$4")
  "$clang" "${cl[@]}" -Werror "${d[@]}" -DF16_CVT -S -o "$tmp/a.ptx" "$tmp/attn.cl"
  n=$(awk '/\.entry attention_flash_mma\(/,/^}/' "$tmp/a.ptx" | grep -c 'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32' || true)
  want=$(($4 / 8 * $2 / 16 + 4 * $4 / 16 * $3 / 8))
  echo "head $1 attention_flash_mma: $n mma.sync (expected $want)"
  [ "$n" = "$want" ] || status=1
  if command -v ptxas >/dev/null; then
    "$clang" "${cl[@]}" "${d[@]}" -DF16_CVT -S -o "$tmp/r.ptx" "$tmp/attn_ptxas.cl" 2>/dev/null
    awk -f "$tmp/extern.awk" "$tmp/r.ptx" > "$tmp/rx.ptx"
    ptxas -arch=sm_90 -c -v "$tmp/rx.ptx" -o "$tmp/r.o" 2>&1 |
      grep -A3 -E "Compiling entry function 'attention_flash_mma'" | grep -E "entry|spill|Used" | sed "s/^/  /"
  fi
done
exit $status
