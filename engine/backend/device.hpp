#pragma once
// Devices: every OpenCL device found through the ICD loader (and Oclgrind, the
// OpenCL simulator, when it is installed: see enumerate_devices) plus the
// built-in `reference` device (plain C++, f64 accumulation). The user may pin
// one; a pinned device that is missing is an error listing what exists (report R3).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.hpp"

namespace nanscope {

// simulator: a device that interprets kernels instead of running them (Oclgrind,
// docs/oclgrind.md): never the default, and left out of the normal test runs.
enum class DeviceKind : std::uint8_t { gpu, accelerator, cpu, other, reference, simulator };
std::string_view device_kind_name(DeviceKind k);

struct DeviceInfo {
  int index = 0;   // position in the device list (what --device INDEX means)
  std::string id;  // "reference" or "opencl:<platform>:<device>"
  std::string name;
  std::string vendor;
  std::string driver_version;
  std::string device_version;    // CL_DEVICE_VERSION
  std::string opencl_c_version;  // CL_DEVICE_OPENCL_C_VERSION
  std::string platform_name;
  std::string platform_version;
  DeviceKind kind = DeviceKind::other;
  bool fp16 = false;  // cl_khr_fp16: native half arithmetic
  bool fp64 = false;  // cl_khr_fp64
  // NVIDIA's compute capability (major * 10 + minor, e.g. 90 for Hopper) from
  // cl_nv_device_attribute_query; 0 on other devices. Gates the kernels that
  // use inline PTX (hardware half arithmetic, tensor cores), which NVIDIA's
  // OpenCL compiler accepts; each such program is also probed before use.
  int nv_compute_capability = 0;
  std::uint64_t global_mem_bytes = 0;
  std::uint64_t local_mem_bytes = 0;
  std::uint64_t max_alloc_bytes = 0;
  std::uint32_t compute_units = 0;
  std::size_t max_work_group_size = 0;
  std::vector<std::string> extensions;
  bool is_default = false;
  // Why the device is not what it says, when it is not (report R3): a
  // simulator (several device types at once, or the Oclgrind platform) or a
  // software renderer reporting itself as a GPU. Such devices rank last.
  std::string suspect;
  std::string reason;  // one line: why it is or is not the default
  // OpenCL handles as opaque pointers (cl_platform_id, cl_device_id); null for reference.
  void* cl_platform = nullptr;
  void* cl_device = nullptr;
  // false: the platform was loaded from its ICD library by NaNscope, not listed by
  // the ICD loader (Oclgrind without an .icd file); contexts on it are then made
  // without CL_CONTEXT_PLATFORM, which the loader would reject as unknown.
  bool via_icd_loader = true;
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::vector<std::string> notes;  // plain-English notes, e.g. why no OpenCL device was found
};

// Enumerates all devices (OpenCL first in platform/device order, then reference),
// marks the default (GPU > accelerator > CPU OpenCL > software renderer >
// reference; never a simulator) and fills reasons (DeviceInfo::suspect). Never throws for a missing ICD or platform:
// that becomes a note.
//
// Oclgrind: Debian's package installs its ICD library but no
// /etc/OpenCL/vendors/*.icd, so the loader does not list it. When the loader
// has no Oclgrind platform, the library is loaded directly and its platform
// appended after the loader's (ids opencl:<n>:0 with n = the loader's platform
// count, so the real devices keep their ids). NANSCOPE_OCLGRIND=PATH names the
// library (default: /usr/lib/oclgrind/liboclgrind-rt-icd.so, then
// /usr/local/lib/liboclgrind-rt-icd.so); NANSCOPE_OCLGRIND=0 turns this off.
DeviceList enumerate_devices();

// Whether PoCL's CPU driver compiles a work-group function for each launch's
// local size, offset and grid (its POCL_WORK_GROUP_SPECIALIZATION). Before
// it loads, enumerate_devices turns that off unless the user's environment
// set it: every launch then runs the functions compiled into the program
// binaries, and the CPU family's heavy kernels are built for their one
// work-item groups (common.cl CPU_ONE_ITEM). Measured on a 2-core EPYC (AVX2):
// the embedded model's cold start 18.8-20.8 -> 11.9-12.1 s, and an SD 1.5 UNet call
// as fast as with specialization (16.67 s against 16.70 s).
bool pocl_specializes_launches();

// Resolves a pin: empty -> the default device; otherwise an index, an id, an
// exact name, or a unique case-insensitive substring of a name. Throws
// DeviceError listing every device when nothing (or more than one) matches.
const DeviceInfo& select_device(const DeviceList& list, std::string_view pin);

// The pin from the environment variable NANSCOPE_DEVICE ("" when unset).
std::string device_pin_from_env();

class Backend;
// A kernel program starting to load or build, and finishing: live progress
// for front ends while a run waits on the compiler (report R4).
struct KernelBuildEvent {
  std::string program;     // kernel file, e.g. "attention"
  std::string options;     // its build options
  bool finished = false;   // false: started
  bool cache_hit = false;  // finished: loaded from the kernel cache rather than compiled
  double ms = 0.0;         // finished: wall time
  // The cold-start plan (Backend::plan_kernels), when one is active: this
  // build is number plan_index of plan_count programs the run must compile,
  // with about plan_left_ms of building left after it (started: including it).
  // plan == true: the announcement itself (program empty), before any build.
  bool plan = false;
  int plan_index = 0, plan_count = 0;
  double plan_left_ms = 0.0;
  // "building 7 of 12 programs, about 9 s left" ("" when no plan is active).
  std::string progress() const;
};
using KernelBuildListener = std::function<void(const KernelBuildEvent&)>;

// One kernel program a backend loaded from its cache or built (report R4's
// inventory: the workbench's kernel line, the scenario's build time).
struct KernelBuildRecord {
  std::string program;  // kernel file name, e.g. "group_norm"
  std::string options;  // build options
  bool cache_hit = false;
  double ms = 0.0;      // wall time of the build or the load
  std::string note;     // e.g. "cache entry corrupt (checksum mismatch); rebuilt"
  bool failed = false;  // precompile(): the build failed; `error` holds the message with the build log
  std::string error;
};

// A run's GEMM, convolution and attention calls with what chooses their
// kernel variants: on GPU-style backends the tile sizes, the tensor cores and
// the flash tiles follow the shapes, and fused attention never needs the
// softmax program. A dry run of the run's models records them
// (pipeline/memory_plan.hpp) for Backend::plan_kernels; without them
// (`recorded` false) the plan takes each program's default variant in every
// precision, which misses the GPU family's shape-dependent variants.
struct KernelCalls {
  struct Gemm {  // C[m x n] = A[m x k] B[k x n], `batch` times (a 1x1 unpadded stride-1 conv included)
    Precision precision;
    std::int64_t batch = 1, m = 0, n = 0, k = 0;
    friend bool operator==(const Gemm&, const Gemm&) = default;
  };
  struct Conv {  // any other convolution, as the GEMM it is: out_channels x positions, k = c * kh * kw
    Precision precision;
    std::int64_t images = 1, out_channels = 0, positions = 0, k = 0;
    // The geometry that decides between the direct and the Winograd path (gemm::runs_winograd).
    std::int64_t in_channels = 0, kh = 0, kw = 0, stride = 1, oh = 0, ow = 0;
    friend bool operator==(const Conv&, const Conv&) = default;
  };
  struct Attention {
    Precision precision;
    std::int64_t batch = 1, heads = 1, sq = 0, sk = 0, d = 0, dv = 0;
    bool causal = false;
    AttentionImpl impl = AttentionImpl::fused;
    friend bool operator==(const Attention&, const Attention&) = default;
  };
  bool recorded = false;
  std::vector<Gemm> gemm;
  std::vector<Conv> conv;
  std::vector<Attention> attention;
  // Each distinct call once.
  template <class Call>
  static void add(std::vector<Call>& calls, const Call& c) {
    if (std::find(calls.begin(), calls.end(), c) == calls.end()) calls.push_back(c);
  }
};

// The kernel programs a run needs before it starts (report R4's cold-start
// estimate): every program in each precision the run uses, whether it is
// cached, and how long building the rest should take, from past build times
// on this device (the cache's metadata; cache_inventory.hpp).
struct KernelPlanItem {
  std::string program, options;
  bool cached = false;       // built this session or a valid entry in the cache
  double estimate_ms = 0.0;  // when not cached
};
struct KernelPlan {
  std::vector<KernelPlanItem> items;
  std::size_t to_build = 0;
  double estimate_ms = 0.0;         // wall time: the sum over the programs to build, shared by the streams
  unsigned streams = 1;             // builds side by side (helper processes: kernel_builder.hpp)
  std::size_t history_samples = 0;  // past builds the estimate comes from (0: an assumed 1 s each)
  // "7 of 12 kernel programs are not cached on "dev"; building them takes about 9 s (from 30 past builds)".
  std::string describe(const std::string& device) const;
};

// Which kernel family the OpenCL backend runs: chosen by device kind (GPUs and
// accelerators get the work-group/local-memory kernels, CPUs the
// register-blocked ones), or forced, e.g. to test the GPU kernels on PoCL.
enum class KernelStyleChoice { by_device, cpu, gpu };

struct BackendOptions {
  std::string
      kernel_cache_dir;  // empty: $NANSCOPE_KERNEL_CACHE, else $XDG_CACHE_HOME/nanscope/kernels, else ~/.cache/...
  bool use_kernel_cache = true;
  // Use at most this much device memory (0: the device's own): the backend
  // reports min(limit, real) as its global memory and largest allocation, so
  // the memory plan refuses what would not fit a smaller card.
  std::uint64_t memory_limit_bytes = 0;
  // Cap the largest single allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE) at this
  // (0: the device's own), as a card with a smaller allocation limit would
  // report it: tests and `--max-alloc-limit` check the memory plan's advice.
  std::uint64_t max_alloc_limit_bytes = 0;
  // Called on the engine thread for every program load or build (empty: none).
  KernelBuildListener on_kernel_build;
  // Most bytes of released device buffers the OpenCL buffer pool keeps for
  // reuse (unset: a quarter of the device's memory, at most 4 GiB; 0: none).
  std::optional<std::uint64_t> pool_keep_bytes;
  // Repeated calls (a UNet call, a VAE decode) served from one arena planned
  // from the previous call (backend/opencl/memory_pattern.hpp), in sub-buffers;
  // false: every buffer from the pool (to compare, or where a driver's
  // sub-buffers misbehave).
  bool call_arena = true;
  // On a CPU device (buffers take memory where they are written), the arena
  // is made once, large, and a call no plan places yet (a key's first) is
  // served from its free gaps too; false: the first call from the pool, the
  // arena sized by the plan (as on GPUs).
  bool first_call_arena = true;
  // Most bytes of packed LINEAR weights the CPU kernel family keeps with the
  // weights (backend/opencl/weight_panels.hpp; unset: an eighth of the
  // device's memory, at most 4 GiB; 0: none, packed at every call).
  std::optional<std::uint64_t> weight_panel_bytes;
  bool profile = false;  // time every launch per op and kernel (OpenCL events)
  // With profile: time each launch geometry of an op's kernel apart ("MATMUL
  // gemm_cpu_direct_a global [40,16,2]"), to tell which shape of an op costs.
  bool profile_grids = false;
  KernelStyleChoice kernel_style = KernelStyleChoice::by_device;
  // The CPU flash attention's geometry (kernels/attention/flash_cpu.cl): its vector lanes
  // (8 or 16 query rows a vector) and query rows per work-item (one or two
  // vectors' worth): 16 lanes x 32 rows (x 8 keys a block), 16 x 16 (x 16),
  // 8 x 16 (x 6) or 8 x 8 (x 12). 0: by the device's native float vector
  // width, 16 x 32 on AVX-512 and 8 x 16 below; rows alone given (8 or 32)
  // imply their lanes. Tests run every geometry on any CPU.
  int attention_cpu_lanes = 0;
  int attention_cpu_rows = 0;
  // Test setting: the CPU flash attention's blocking over memory, forced (0:
  // by the call's size): query row blocks per work-item, and key blocks per
  // chunk of K and V those row blocks take in turn. The results are the same
  // bit for bit at any blocking.
  int attention_cpu_row_blocks = 0;
  int attention_cpu_key_chunk = 0;
  // Fault injection for tests: called before every device allocation with
  // its size; returning true makes that allocation fail as the driver would
  // (CL_MEM_OBJECT_ALLOCATION_FAILURE). Empty: never.
  std::function<bool(std::size_t bytes)> fail_allocation;
  // Guard buffers for tests (as ggml's test-backend-ops): every device buffer
  // gets this many bytes after its end, filled with a sentinel and checked
  // when the buffer is released; a changed byte is an out-of-bounds write,
  // listed by Backend::take_guard_violations(). 0: none (runs, benches).
  std::size_t guard_bytes = 0;
  // Native half arithmetic (f16 with accumulate=native or softmax=native) on
  // the device's own half units where it has them and they pass the probe
  // (NVIDIA: compute capability 5.3+); false: the exact emulation everywhere.
  bool half_units = true;
  // NVIDIA tensor cores (sm_80+) for f16 GEMMs and convolutions with f32
  // accumulation in the GPU kernel family (kernels/matmul/gemm_mma.cl gemm_mma); false
  // keeps them on the CUDA-core tiles (gemm_tiled), to compare the two.
  bool tensor_cores = true;
  // Test setting: the tensor-core kernels on any device in the GPU style, each
  // mma.sync (and the warp shuffles beside it) emulated through local memory
  // (kernels/common.cl, -DMMA_EMULATE), so PoCL and Oclgrind run their tiling,
  // fragment layouts and bounds; f32 sums in k order. Slow: tests only.
  bool emulate_tensor_cores = false;
  // Winograd F(4x4, 3x3) for the 3x3 stride-1 convolutions of the CPU kernel
  // family with f32 accumulation (kernels/conv2d.cl): 2.25 multiplications
  // per output where the direct convolution takes 9, about twice as fast over
  // a VAE decode. Its sums differ from the direct path's by a few f32 ulps,
  // and a non-finite input makes NaN over the output tiles it touches; false
  // keeps every convolution direct, to compare the two.
  bool winograd = true;
  // Where the Winograd convolution's tiles fill one or two column panels (the
  // SD UNet's 16x16 layers at batch 2), its weights are transformed inside
  // the GEMM, in the caches (kernels/matmul/conv_cpu.cl winograd_fused_cpu); false
  // writes them to memory first (winograd_weights), to compare the two. The
  // same bits either way.
  bool winograd_fused_weights = true;
};

// The options the environment asks for, on top of `base`. The engine reads no
// environment variable for these itself: the front ends (CLI, workbench) call
// this once at start-up.
//   NANSCOPE_POOL_MB=N       pool_keep_bytes = N MiB (0 turns reuse off)
//   NANSCOPE_CALL_ARENA=on|off  call_arena
//   NANSCOPE_FIRST_CALL_ARENA=on|off  first_call_arena
//   NANSCOPE_WEIGHT_PANELS_MB=N  weight_panel_bytes = N MiB (0: LINEAR weights packed at every call)
//   NANSCOPE_PROFILE=1       profile
//   NANSCOPE_PROFILE=grid    profile and profile_grids
//   NANSCOPE_KERNEL_STYLE=cpu|gpu   kernel_style
//   NANSCOPE_MAX_ALLOC_MB=N  max_alloc_limit_bytes = N MiB
//   NANSCOPE_NATIVE_HALF=hardware|emulated   half_units
//   NANSCOPE_TENSOR_CORES=0|1|emulate  tensor_cores (emulate: emulate_tensor_cores)
//   NANSCOPE_WINOGRAD=0|1    winograd
//   NANSCOPE_WINOGRAD_FUSED=0|1  winograd_fused_weights
//   NANSCOPE_ATTENTION_CPU_LANES=8|16  attention_cpu_lanes
//   NANSCOPE_ATTENTION_CPU_ROWS=8|16|32  attention_cpu_rows
// A value that cannot be used is logged as a warning and ignored.
BackendOptions backend_options_from_environment(BackendOptions base = {});
// The device as a backend with options.memory_limit_bytes sees it: global
// memory and largest allocation capped by the limit (unchanged when 0).
// max_alloc_limit_bytes (0: none) caps the largest allocation alone.
DeviceInfo limited_device(DeviceInfo device, std::uint64_t memory_limit_bytes, std::uint64_t max_alloc_limit_bytes = 0);

// Creates the backend for a device (reference or OpenCL).
std::unique_ptr<Backend> make_backend(const DeviceInfo& device, const BackendOptions& options = {});

}  // namespace nanscope
