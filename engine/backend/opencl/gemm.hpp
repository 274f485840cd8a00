#pragma once
// The GEMM engine behind matmul, conv2d and attention (kernels/matmul.cl):
// C[b] (M x N) = alpha * A[b] (M x K) . B[b] (K x N) + bias, in the storage
// dtype of the precision, with f32 or native accumulation (op_args.hpp).
//
// Kernel families (launch_util.hpp KernelStyle):
// - cpu: A and B packed into f32 panels, then one register-blocked kernel
//   (gemm_cpu, or gemm_native for native accumulation);
// - gpu: local-memory tiles (gemm_tiled) reading the stored dtype directly;
//   on NVIDIA sm_80+ with f16 storage and f32 accumulation, the same tiles
//   fed to the tensor cores (gemm_mma, tensor_core_tiles());
//   native accumulation uses the panel kernel on every device (it is an
//   emulation whose result must not depend on the device).
// Block sizes come from a small tuning table per device (tuning()).
//
// Hook for pre-packed weights: a caller that keeps B (or A) in panel form
// (pack_b / pack_a into a buffer of b_panel_floats / a_panel_floats floats,
// same tuning, k-blocked by k_block) passes it as Problem::b_panels and
// packing is skipped.
// Internal to engine/backend/opencl/.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"

namespace nanscope::opencl::gemm {

// Block sizes: panel kernels (MR rows x 16*NV columns per work-item, k in
// blocks of about kc so a work-item's B sub-panel stays in the caches for its
// row blocks; one launch walks every k-block) and GPU tiles
// (TS_M x TS_N per work-group, TS_K deep, WPT_M x WPT_N per work-item).
struct Tuning {
  int mr = 6, nv = 1, kc = 256;
  int ts_m = 64, ts_n = 64, ts_k = 16, wpt_m = 4, wpt_n = 4;
  std::string source;  // which table entry, for logs
  int nr() const { return 16 * nv; }
};
const Tuning& tuning(const DeviceInfo& device);
// CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT (0 when the device cannot say): 16 on
// PoCL over AVX-512, 8 over AVX2. The CPU kernels size their register blocks by it.
int native_float_width(const DeviceInfo& device);
// The -D set of a tuning (empty for the kernel file's defaults).
std::string tuning_options(const Tuning& t);

// Element (row, col) of batch b at mem[off + b*bs + row*rs + col*cs] (elements of the storage dtype).
struct Operand {
  cl_mem mem = nullptr;
  std::int64_t off = 0, bs = 0, rs = 0, cs = 0;
};

enum BiasMode : int { kBiasNone = 0, kBiasCol = 1, kBiasRow = 2 };

// What the CPU family's direct-A kernels do with C, where fuses_epilogue() says they can: store it
// (gemm_cpu_direct_a), or GEGLU (gemm_cpu_direct_a_geglu): C's n/2 outputs per row = y * gelu_erf(g) of its
// two halves, B packed in split panels; the same bits as the GEMM followed by the GEGLU op.
// No residual ADD: in the store, the residual's rows read beside C's made the GEMM slower than the two ops at
// every UNet shape (bench_ops, 2-core EPYC: 320 -> 320 at 8192 tokens 4.4 -> 5.0-5.2 ms, even prefetched).
enum class Epilogue : int { store = 0, geglu = 1 };

struct Problem {
  Operand a, b;
  cl_mem b_panels = nullptr;      // B already packed (pre-packed weights or im2col): b is then unused
  std::int64_t b_panels_off = 0;  // floats to the first batch's panel set
  std::int64_t b_panels_bs = 0;   // floats between the panel sets of consecutive batches (0: shared)
  cl_mem c = nullptr;
  std::int64_t c_off = 0, c_bs = 0, ldc = 0;
  cl_mem bias = nullptr;
  std::int64_t bias_off = 0;
  BiasMode bias_mode = kBiasNone;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  // B's buffer when B is a weight the caller keeps unchanged (MatmulArgs::b_weight): the CPU family then packs
  // its panels once and keeps them with it (weight_panels.hpp).
  const Storage* b_weight = nullptr;
  // Epilogue::geglu: C is m x n/2 (ldc its row stride, c_bs its batch stride); n is the product's width.
  Epilogue epilogue = Epilogue::store;
};

// The k-block of panels for a depth k (kernels/matmul.cl's layout): k itself
// when one block does, else about tuning.kc rounded up to a multiple of 16.
std::int64_t k_block(const Tuning& t, std::int64_t k);

// Floats of one batch's panel set.
std::int64_t a_panel_floats(const Tuning& t, std::int64_t m, std::int64_t k);
std::int64_t b_panel_floats(const Tuning& t, std::int64_t n, std::int64_t k);

// Packs `batch` matrices into panels at dst (dst_bs floats apart).
void pack_a(OpenClBackend& be, const Precision& p, const Operand& a, std::int64_t batch, std::int64_t m, std::int64_t k,
            cl_mem dst, std::int64_t dst_bs, const char* op);
// split: 0, or the GEGLU epilogue's column order (kernels/matmul/packing.cl gemm_pack_b; nr/2, n a multiple of nr, B's
// columns contiguous along k).
void pack_b(OpenClBackend& be, const std::string& options, const Operand& b, std::int64_t batch, std::int64_t k,
            std::int64_t n, cl_mem dst, std::int64_t dst_bs, const char* op, std::int64_t split = 0);

// Program options for the GEMM kernels at a precision (precision -D set + tuning).
std::string options(OpenClBackend& be, const Precision& p);

// True when this precision runs the panel (cpu-style) kernels on this device.
bool uses_panels(const OpenClBackend& be, const Precision& p);

// Whether run() does the problem's epilogue inside the GEMM: the CPU family with f32 accumulation reading A where
// it lies, a B shared by the batch whose panels fit the scratch budget whole; for GEGLU also 16 or 32 columns
// per panel (NANSCOPE_GEMM_CPU's 48 are not), n a multiple of them and no per-row bias. Elsewhere the ops run
// the GEMM and the op apart (OpenClBackend::linear_fuses_epilogue).
bool fuses_epilogue(const OpenClBackend& be, const Precision& p, const Problem& pr);

// Runs the problem (packing as needed, in chunks that bound the scratch memory). An epilogue other than store
// only where fuses_epilogue() holds.
void run(OpenClBackend& be, const Precision& p, const Problem& pr, const char* op);

// Packs a weight's kept panels now, as run() would at the first call of a LINEAR at precision p with this B
// operand (k x n, shared by the batch) and a row-major A; nothing where such a call packs no kept panels.
// `geglu`: the panels the GEGLU epilogue multiplies (split order).
void prepare_weight(OpenClBackend& be, const Precision& p, const Operand& b, const Storage* weight, std::int64_t k,
                    std::int64_t n, const char* op, bool geglu = false);

// The "matmul" program options run() builds for a problem of this shape (A
// with unit column stride): the variant the kernel plan lists for a recorded
// call.
std::string run_options(OpenClBackend& be, const Precision& p, std::int64_t batch, std::int64_t m, std::int64_t n,
                        std::int64_t k);

// gemm_tiled (GPU style; A with unit column stride) with the tiles t.
void run_tiled(OpenClBackend& be, const Precision& p, const Problem& pr, const Tuning& t, const char* op);
// The device's key in the tuner's file and the tensor-core failure list: id|name|driver.
std::string device_key(const DeviceInfo& d);

// The tile tuner (`nanscope-cli tune`, gemm_tuner.cpp): GPU-style tile shapes the device can
// run, each timed on one f32 GEMM; the winner is stored per device (id, name,
// driver) in <kernel cache>/gemm-tuning.json and taken by later runs in place
// of the tuning table's tiles. Part of the program cache key through -D.
std::vector<Tuning> tile_candidates(const DeviceInfo& device);
struct TileTiming {
  Tuning tiles;
  double ms = 0;      // median over the repetitions
  double gflops = 0;  // 2*m*n*k / time
  std::string error;  // the candidate could not run here (build or launch failure), else empty
};
TileTiming time_tiles(OpenClBackend& be, const Tuning& tiles, std::int64_t m, std::int64_t n, std::int64_t k, int reps);
// Writes the winner for be's device; returns the file written.
std::string store_tuned_tiles(const OpenClBackend& be, const TileTiming& winner);
// The stored winner for be's device, if any (read once per cache folder and device).
std::optional<Tuning> tuned_tiles(const OpenClBackend& be);

// A convolution's geometry for the implicit GEMM (GPU style, f32 accumulation).
struct ConvShape {
  std::int64_t n, c, h, w, o, kh, kw, stride, padding, oh, ow;
};
// out[img] (o x oh*ow) = w (o x c*kh*kw) . im2col(x[img]) + bias per row, the
// columns read from x on the fly (kernels/matmul/gemm_tiled.cl conv_implicit_gemm, or
// conv_implicit_mma on the tensor cores), k walked in blocks of input channels
// tap by tap: the weights are copied tap-major (w[o][tap][c]) for the call.
void run_implicit_conv(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                       cl_mem out, const char* op);
// The "matmul" program options a convolution takes (the kernel plan's variant
// for a recorded call): run_implicit_conv's choice where the GPU family runs
// it (conv_implicit_mma, or conv_implicit_gemm below 32 input channels, where
// a GEMM of the same size would take the tensor cores), the precision's
// panels program otherwise.
std::string conv_run_options(OpenClBackend& be, const Precision& p, const ConvShape& s);

// CPU family, f32 accumulation (the weights read as gemm_cpu_direct_a reads A): the convolution in one kernel
// whose work-items gather their B sub-panels from the image into local memory (kernels/matmul/conv_cpu.cl conv_cpu), no
// column matrix. runs_cpu_conv: whether it runs here (the precision and device, and its local memory fits).
bool runs_cpu_conv(const OpenClBackend& be, const Precision& p, const ConvShape& s);
void run_cpu_conv(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                  cl_mem out, const char* op);

// CPU family, f32 accumulation, 3x3 stride-1 convolutions (BackendOptions::winograd): Winograd F(4x4, 3x3)
// (kernels/conv2d.cl winograd_*). The weights and the input tiles are transformed to f32, the 36 elementwise
// products summed over input channels as one batched f32 GEMM (gemm_cpu_direct_a, at precision
// kWinogradProduct whatever the storage), and the products transformed back to the output with the bias, in
// chunks of tiles that keep the scratch bounded. runs_winograd: whether a convolution takes it (the device,
// precision, options and the shapes where it is faster, bench_ops --shapes).
inline constexpr Precision kWinogradProduct{DType::f32, Accumulate::f32, SoftmaxPrecision::f32};
bool runs_winograd(const OpenClBackend& be, const Precision& p, const ConvShape& s);
// Whether run_winograd transforms the weights inside the GEMM (kernels/matmul/conv_cpu.cl winograd_fused_cpu: tiles in
// one or two column panels, BackendOptions::winograd_fused_weights) rather than into memory first.
bool fuses_winograd_weights(const OpenClBackend& be, const Precision& p, const ConvShape& s);
void run_winograd(OpenClBackend& be, const Precision& p, const ConvShape& s, cl_mem w, cl_mem x, cl_mem bias,
                  cl_mem out, const char* op);

// NVIDIA tensor cores (kernels/matmul/gemm_mma.cl gemm_mma / conv_implicit_mma, built
// with -DGEMM_MMA): warps_m x warps_n warps of 32, each computing 64 x 32 of C
// with mma.sync m16n8k16 (f16 operands, f32 accumulation).
struct MmaTiles {
  int warps_m = 2, warps_n = 4;
  int tm() const { return 64 * warps_m; }
  int tn() const { return 32 * warps_n; }
  int threads() const { return 32 * warps_m * warps_n; }
  bool operator==(const MmaTiles&) const = default;
};
// What decides whether one GEMM (per batch m x n, depth k) runs on the tensor cores.
struct TensorCoreCase {
  bool gpu_style = false;         // KernelStyle::gpu
  bool allowed = true;            // BackendOptions::tensor_cores, and no earlier build/launch failure
  int nv_compute_capability = 0;  // DeviceInfo (major*10 + minor; 0: not NVIDIA)
  DType dtype = DType::f32;
  bool native_accumulation = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  std::uint32_t compute_units = 0;
  std::size_t max_work_group_size = 0;  // 0: unknown
};
// The tensor-core tiles for the case, or none where gemm_tiled runs it: GPU
// style on sm_80+, f16 storage, f32 accumulation (native accumulation is the
// device-independent emulation), m and n at least 64 and k at least 32 (smaller
// ones stay on gemm_tiled); 128 x 128 blocks (8 warps) where they give every
// compute unit a block, else 64 x 128 (4 warps). ptxas for sm_90: at most 252 registers, no spills
// (tools/gpu/check_mma_ptx.sh).
std::optional<MmaTiles> tensor_core_tiles(const TensorCoreCase& c);
// The options that select the tensor-core primitives of kernels/common.cl:
// inline PTX on NVIDIA (" -DNS_ASM=asm -DMMA_PTX"), or their emulation through
// local memory with BackendOptions::emulate_tensor_cores (" -DMMA_EMULATE").
std::string tensor_core_options(const OpenClBackend& be);
// Whether f16 work with precision p may run on the tensor cores here: GPU
// style, sm_80+ (or emulated), allowed by the options, f16 storage with f32
// accumulation, and no earlier build or launch failure on this device.
bool tensor_cores_for(const OpenClBackend& be, const Precision& p);
// Runs `launch` (build, arguments, enqueue). On an OpenCL error there it notes
// why once, stops using the tensor cores on this device and returns false:
// the caller then runs its CUDA-core kernel, whose numerics are the same
// contract (f32 accumulation, one rounding).
bool try_tensor_cores(OpenClBackend& be, const char* op, const std::function<void()>& launch);

// The program of the packed-A kernels (gemm_pack_a, gemm_cpu) at a precision. The CPU family's
// f32-accumulation programs leave them out (matmul.cl: there gemm_cpu_direct_a reads A where it lies, and only
// the materialised attention's scores pack A), so a default run does not build them: there they are a variant
// of their own (-DGEMM_PACKED_A); elsewhere options().
std::string packed_a_options(OpenClBackend& be, const Precision& p);

// Only the compute step on panels already packed (a_panels and pr.b_panels both set).
void compute_panels(OpenClBackend& be, const Precision& p, cl_mem a_panels, std::int64_t a_panels_off,
                    std::int64_t a_panels_bs, const Problem& pr, const char* op);

// Whether the CPU kernel can read A where it lies (gemm_cpu_direct_a: any
// storage dtype, f32 accumulation, CPU style, unit column stride), skipping
// its packing; then compute_direct_a does what compute_panels does, from `a`
// (offset and batch stride in elements, rs the row stride).
bool reads_a_directly(const OpenClBackend& be, const Precision& p, const Operand& a);
void compute_direct_a(OpenClBackend& be, const Precision& p, const Operand& a, const Problem& pr, const char* op);
// Whether compute_direct_a converts a half-precision A to f32 rows first (gemm_a_rows_to_f32, then
// gemm_cpu_direct_f32a) rather than in the GEMM for each column panel: the same bits either way.
bool converts_a_rows(const OpenClBackend& be, const Precision& p, const Operand& a, const Problem& pr);

// Upper bound of scratch bytes a single GEMM step may use (panels, im2col columns).
std::size_t scratch_budget(const DeviceInfo& device);

}  // namespace nanscope::opencl::gemm
