#pragma once
// The OpenCL backend. Shared machinery (buffers, kernel lookup, the precision
// -D set, the single launch path) lives here; each op's host side lives in
// engine/backend/opencl/<op>.cpp as a member of OpenClBackend.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/opencl/buffer_pool.hpp"
#include "backend/opencl/cl_check.hpp"
#include "backend/opencl/program_cache.hpp"
#include "backend/opencl/weight_panels.hpp"

namespace nanscope::opencl {

enum class KernelStyle { cpu, gpu };

// A __local kernel argument of `bytes` bytes (set_args(k, LocalMem{n * sizeof(float)}, ...)).
struct LocalMem {
  size_t bytes;
};

// Kernel time per op name, from profiling events (NANSCOPE_PROFILE=1).
struct OpTiming {
  std::string op;
  std::uint64_t launches = 0;
  double ms = 0.0;
};

class OpenClBackend;
struct GuardLog;  // opencl_backend.cpp
// Build options of a program at a precision, where an op builds with more than
// precision_options() (tuning table, exact-math flags). Register once per
// program so precompile() builds exactly the variants runs will ask for.
// matmul and conv2d (gemm::options) are registered by opencl_backend.cpp.
using ProgramOptionsFn = std::string (*)(OpenClBackend& be, const Precision& p);
void register_program_options(const std::string& program, ProgramOptionsFn fn);
// Programs some of whose kernels an op builds in another variant at the same
// precision (the CPU family's packed-A GEMM kernels, its f32 attention_fused):
// precompile() builds those too.
using ProgramMoreVariantsFn = std::vector<std::string> (*)(OpenClBackend& be, const Precision& p);
void register_program_more_variants(const std::string& program, ProgramMoreVariantsFn fn);

// Build options per program, each once.
using ProgramVariants = std::map<std::string, std::vector<std::string>>;
// Adds `options` to the program's list unless it is there.
void add_variant(ProgramVariants& variants, const std::string& program, std::string options);
// The "attention" variants a run's recorded attention calls need (flash tiles
// or fused row buffers per head size), and for calls that run materialised
// (bmm, sliced, heads above 512) "softmax" and their GEMMs' "matmul" variants
// (attention.cpp; OpenClBackend::plan_kernels).
void attention_call_variants(OpenClBackend& be, const KernelCalls& calls, ProgramVariants& out);

// The calls `nanscope-cli precompile` plans for beyond the precision grid, so
// that a first run after it builds nothing: on GPUs the GEMM tiles, the tensor
// cores' blocks and the flash tiles follow a call's shape, so every precision
// gets calls of each kind those choices tell apart (GEMMs too small to fill
// the device and large ones; 3x3 convolutions of 4 and of 320 input channels,
// stride 1 and 2; attention in each implementation at the head sizes of SD
// 1.x/2.x/XL, their text encoders and VAEs, and the embedded model, causal
// and not, with few and many queries). On CPUs they take the precision's
// programs: nothing is added.
KernelCalls precompile_calls();

// A context holding only this device (err: the status; null unless CL_SUCCESS).
// A platform the ICD loader did not list (Oclgrind loaded directly) is not named
// in the properties: the loader rejects it; the device alone finds it.
cl_context create_device_context(const DeviceInfo& device, cl_int& err);

class OpenClBackend final : public Backend {
 public:
  OpenClBackend(const DeviceInfo& device, const BackendOptions& options);
  ~OpenClBackend() override;

  const DeviceInfo& device() const override { return info_; }
  Tensor empty(const Shape& shape, DType dtype) override;
  Tensor upload(const HostTensor& host) override;
  HostTensor download(const Tensor& t) override;
  void synchronize() override;
  std::uint64_t allocated_bytes() const override;
  void limit_cache_growth(std::uint64_t bytes) override;
  std::uint64_t cache_bytes() const override;
  std::uint64_t release_caches() override;
  void begin_repeated_call(const std::string& key) override { pool_->begin_repeat(key); }
  void end_repeated_call(bool completed) override { pool_->end_repeat(completed); }

  void matmul(const MatmulArgs& args) override;
  void prepare_linear_weight(const Tensor& weight, const Precision& p, bool geglu) override;
  void conv2d(const Conv2dArgs& args) override;
  void group_norm(const GroupNormArgs& args) override;
  void layer_norm(const LayerNormArgs& args) override;
  void unary(const UnaryArgs& args) override;
  void geglu(const GegluArgs& args) override;
  void softmax(const SoftmaxArgs& args) override;
  void upsample_nearest2x(const UpsampleArgs& args) override;
  void binary(const BinaryArgs& args) override;
  void concat(const ConcatArgs& args) override;
  void slice(const SliceArgs& args) override;
  void permute(const PermuteArgs& args) override;
  void cast(const CastArgs& args) override;
  void timestep_embedding(const TimestepEmbeddingArgs& args) override;
  void attention(const AttentionArgs& args) override;
  void latent_step(const LatentStepArgs& args) override;
  StepReductions reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) override;
  double inspect_wait_seconds() const override { return inspect_wait_; }

  // --- machinery for the op files ---
  // The -D set for a precision: -DSTORE_F16 / -DSTORE_BF16 / -DSTORE_F32,
  // -DACC_NATIVE, -DSOFTMAX_NATIVE, -DHAS_FP16 (when cl_khr_fp16 is present).
  std::string precision_options(const Precision& p) const;
  // A kernel from a program built with the given options (cached per key).
  cl_kernel kernel(std::string_view program, std::string_view name, const std::string& options);
  // The one launch path: enqueues, records the op name for profiling, checks errors
  // (the thrown ClError names the op). local may be null.
  void launch(cl_kernel k, std::string_view op, cl_uint dims, const size_t* global, const size_t* local);
  // Whether a kernel that writes `bytes` of output stores them around the caches (common.cl,
  // st16_stream): on CPU devices, outputs past most last-level caches, which the next op reads
  // from memory either way.
  bool streams_output(std::size_t bytes) const;
  // The cl_mem of a tensor owned by this backend (throws OpError otherwise).
  cl_mem buffer(const Tensor& t) const;
  cl_context context() const { return context_; }
  BufferPool& pool() const { return *pool_; }
  // LINEAR weights' packed panels, kept with the weights (weight_panels.hpp).
  WeightPanels& weight_panels() const { return *panels_; }
  cl_command_queue queue() const { return queue_; }
  ProgramCache& programs() { return *programs_; }
  // The kernel family this backend runs: `cpu` (each work-item owns a register
  // block, no barriers: what PoCL and other CPU drivers run well) or `gpu`
  // (work-groups sharing local-memory tiles). Chosen by device kind unless
  // BackendOptions::kernel_style forces one (to test the GPU kernels on a CPU).
  KernelStyle kernel_style() const { return style_; }
  // The CPU flash attention's vector lanes (8 or 16) and query rows per work-item (the lanes or twice
  // them): BackendOptions::attention_cpu_lanes and attention_cpu_rows, else by the device's native float
  // vector width.
  int attention_cpu_lanes() const { return attention_cpu_lanes_; }
  int attention_cpu_rows() const { return attention_cpu_rows_; }
  // BackendOptions::attention_cpu_row_blocks and attention_cpu_key_chunk (0: by the call).
  int attention_cpu_row_blocks() const { return attention_cpu_row_blocks_; }
  int attention_cpu_key_chunk() const { return attention_cpu_key_chunk_; }
  // BackendOptions::tensor_cores: whether the GEMM may use NVIDIA's tensor cores (gemm.hpp).
  bool tensor_cores_allowed() const { return tensor_cores_; }
  // BackendOptions::emulate_tensor_cores: the tensor-core kernels with mma.sync emulated (tests).
  bool tensor_cores_emulated() const { return emulate_tensor_cores_; }
  // BackendOptions::winograd: whether 3x3 stride-1 convolutions may run as Winograd F(4x4, 3x3) (gemm.hpp).
  bool winograd_allowed() const { return winograd_; }
  bool winograd_fuses_weights() const { return winograd_fused_weights_; }  // BackendOptions::winograd_fused_weights
  std::vector<KernelBuildRecord> kernel_builds() const override;
  std::string kernel_cache_dir() const override;
  std::vector<std::string> kernel_notes() const override;
  bool conv2d_winograd(const Conv2dArgs& args) const override;
  bool linear_fuses_epilogue(MatmulEpilogue e, const Precision& p, std::int64_t m, std::int64_t n, std::int64_t k,
                             bool bias) const override;
  std::vector<std::string> take_guard_violations() override;
  bool native_half_in_hardware(const Precision& p) const override;
  // The half units native half arithmetic runs on, in words ("" when it is
  // emulated: no half units reachable, turned off, or the probe failed).
  const std::string& half_units() const { return half_units_; }
  // The build options that select them (-DHW_HALF_PTX ..., -DHW_HALF_CL), added to
  // precision_options() where native_half_in_hardware() holds.
  const std::string& half_unit_options() const { return half_unit_options_; }
  // Records a fallback (logged once, listed by kernel_notes()).
  void note_fallback(const std::string& note);

  // Builds every program in every precision variant the ops use; returns one record per
  // program variant built or loaded here (failed builds included, with failed = true).
  std::vector<BuildRecord> precompile();
  // How many streams build `jobs` programs side by side (1 unless helper processes can take them).
  unsigned build_streams(std::size_t jobs) const;
  // The PoCL work-group specializations a helper builds into a program's binary ("" for none).
  std::string binary_specializations(const std::string& program) const;
  // The build options the ops use for a program at a precision (its registered option function).
  std::string program_options(const std::string& program, const Precision& p);
  KernelPlan plan_kernels(std::span<const Precision> precisions, const KernelCalls& calls) override;
  void build_planned(const KernelPlan& plan) override;
  // The option strings precompile() builds for a program: one per distinct
  // precision variant, and those the calls of precompile_calls() take.
  std::vector<std::string> precompile_variants(const std::string& program);
  // As above, with call_variants(precompile_calls()) already at hand (precompile() makes it once for every program).
  std::vector<std::string> precompile_variants(const std::string& program, const ProgramVariants& shaped);
  // The GEMM, convolution, attention and softmax programs' variants that
  // these calls take (the ops' own choice functions; plan_kernels' for a dry
  // run's calls).
  ProgramVariants call_variants(const KernelCalls& calls);

  // True when NANSCOPE_PROFILE=1 was set at construction: launch() then keeps an event per launch.
  bool profiling() const { return profile_; }
  // Kernel time per op so far, sorted by time (waits for queued work). Empty unless profiling().
  std::vector<OpTiming> profile();

  template <typename... Args>
  static void set_args(cl_kernel k, const Args&... args) {
    set_args_from(k, 0, args...);
  }
  // The arguments from index `first` on (kernels that share a tail of arguments).
  template <typename... Args>
  static void set_args_from(cl_kernel k, cl_uint first, const Args&... args) {
    cl_uint i = first;
    (set_arg(k, i++, args), ...);
  }

 private:
  static void set_arg(cl_kernel k, cl_uint i, const cl_mem& m);
  static void set_arg(cl_kernel k, cl_uint i, const LocalMem& m);
  template <typename T>
  static void set_arg(cl_kernel k, cl_uint i, const T& v) {
    NS_CL_CHECK(clSetKernelArg(k, i, sizeof(T), &v));
  }

  DeviceInfo info_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::unique_ptr<ProgramCache> programs_;
  // Builds (program, options) jobs on a few streams, longest first; returns the failed ones as records.
  std::vector<BuildRecord> build_in_parallel(std::vector<std::pair<std::string, std::string>> jobs);
  KernelBuildListener build_listener_;    // BackendOptions::on_kernel_build (plan_kernels() announces through it)
  std::shared_ptr<BufferPool> pool_;      // device buffers kept for reuse (buffer_pool.hpp)
  std::shared_ptr<WeightPanels> panels_;  // shared with the storages, which tell it when they are released
  std::unordered_map<std::string, cl_kernel> kernels_;
  std::unordered_set<cl_kernel> whole_block_kernels_;  // detail::runs_whole_blocks: one work-item per group on CPUs
  std::string
      cl_std_;  // "-cl-std=CL1.2" (or CL1.1 on devices that only speak OpenCL C 1.1; simulators: -cl-opt-disable)
  bool profile_ = false;
  bool profile_grids_ = false;  // BackendOptions::profile_grids
  KernelStyle style_ = KernelStyle::cpu;
  bool tensor_cores_ = true;  // BackendOptions::tensor_cores
  bool emulate_tensor_cores_ = false;
  bool winograd_ = true;  // BackendOptions::winograd
  bool winograd_fused_weights_ = true;
  int attention_cpu_lanes_ = 8, attention_cpu_rows_ = 16;
  int attention_cpu_row_blocks_ = 0, attention_cpu_key_chunk_ = 0;
  mutable std::mutex notes_mutex_;
  std::vector<std::string> fallbacks_;                            // note_fallback()
  std::function<bool(std::size_t)> fail_allocation_;              // BackendOptions::fail_allocation
  std::size_t guard_bytes_ = 0;                                   // BackendOptions::guard_bytes
  std::shared_ptr<GuardLog> guard_log_;                           // shared with the guarded storages
  double inspect_wait_ = 0;                                       // inspect_wait_seconds()
  void wait_for_device();                                         // clFinish, timed into inspect_wait_
  std::vector<std::pair<std::string, cl_event>> pending_events_;  // (op, event) not yet read
  std::map<std::string, OpTiming> timings_;
  void collect_profile();
  // Native half arithmetic on the device's half units (half_units.cpp).
  std::string half_unit_options_;  // the -D set that selects them (kernels/common.cl)
  std::string half_units_;         // half_units()
  std::string half_units_note_;    // why they are not used, when the user turned them off
  void probe_half_units(const BackendOptions& options);
};

// Runs the known-answer probe of native half arithmetic (kernels/half_probe.cl)
// with these build options; "" when every answer is right, else the first
// wrong one in words. expect_hardware: the program must report running the
// half units (-DHW_HALF_PTX) rather than the emulation. For tests and
// probe_half_units().
std::string run_half_probe(OpenClBackend& be, const std::string& options, bool expect_hardware);

}  // namespace nanscope::opencl
