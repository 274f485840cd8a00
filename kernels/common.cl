// common.cl: prepended to every program. Storage access and rounding for the
// three storage dtypes, selected by one of -DSTORE_F32 / -DSTORE_F16 /
// -DSTORE_BF16, plus -DACC_NATIVE, -DSOFTMAX_NATIVE and -DHAS_FP16.
//
// Values are always computed in f32 registers. Storage:
//   f32  float
//   f16  half, converted by vload_half*/vstore_half*_rte (core OpenCL: works
//        without cl_khr_fp16) or the exact integer emulation below
//   bf16 ushort words: the upper half of an f32, rounded to nearest even.
//
// Native accumulation (op_args.hpp) rounds every partial sum to the storage
// dtype. Its arithmetic is emulated here in f32 with exact rounding (integer
// bit operations, or the core conversions vstore_half*_rte, which round to
// nearest even and keep subnormals in OpenCL's full profile) even when the
// device has cl_khr_fp16: a device's half adder may flush subnormals or differ
// in other details, and the point of native mode is a result that is the same
// on every device (and bit-equal to the reference backend).
//
// Helpers in every .cl file are `static inline`: PoCL compiles programs with
// -Dinline=, so a plain `inline` helper is an external function that its
// front end emits and optimises in every program, used or not (about 0.2 s
// of each program's build on a 2-core host; bench/README.md, cold start).
// Helpers that reach a barrier are also always_inline: PoCL needs every
// barrier in the kernel's own body, and a static helper it left uninlined
// broke the emulated tensor-core attention.

#ifdef HAS_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
#ifdef HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// clang (PoCL and others) warns at every float16 helper that passing 512-bit
// vectors without AVX-512 changes the ABI: irrelevant for inlined helpers.
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
#endif

// Inline PTX (NVIDIA only: the half units, the tensor cores): NVIDIA's OpenCL
// compiler takes `asm` (checked on an H200), which the backend passes as
// -DNS_ASM=asm; clang, which checks these kernels for the NVIDIA target
// offline (tools/gpu/check_mma_ptx.sh), spells it __asm__.
#ifndef NS_ASM
#define NS_ASM __asm__
#endif

// The CPU family's kernels that run one work-item per group (launch_util.cpp
// runs_whole_blocks, and the attention kernels launched with groups of 1)
// declare it: their work-group function is then built for that size once. The
// backend turns PoCL's per-launch specialization off (device.cpp,
// pocl_environment), so the version in the program binary is the one every
// launch runs, with no compile at a first launch.
#if defined(CPU_KERNELS)
#define CPU_ONE_ITEM __attribute__((reqd_work_group_size(1, 1, 1)))
#else
#define CPU_ONE_ITEM
#endif

// The emulation below relies on every f32 operation being rounded on its own.
#pragma OPENCL FP_CONTRACT OFF

#if defined(STORE_F16)
typedef half store_t;
#elif defined(STORE_BF16)
typedef ushort store_t;
#else
#ifndef STORE_F32
#define STORE_F32
#endif
typedef float store_t;
#endif

// The rest by concept, in kernels/common/ (spliced in here at build time:
// cmake/embed_kernels_script.cmake): rounding to the storage dtype and exactly
// rounded sums; the native-mode primitives (nat_add, nat_fma, the half units);
// loads and stores; the tensor cores' warp operations; softmax, exp, erf and
// GELU; norm statistics; GEMM panel offsets and Winograd's transforms.
#include "common/rounding.cl"
#include "common/native_ops.cl"
#include "common/memory.cl"
#include "common/mma.cl"
#include "common/math.cl"
#include "common/norm_stats.cl"
#include "common/panels.cl"
