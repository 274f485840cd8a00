// The OpenCL backend's shared machinery: context and queue on the chosen
// device only, buffers, the precision -D set, kernel lookup and the single
// launch path (with optional profiling). Its programs' options, kernel plan
// and precompile are in program_plan.cpp; each op's host code lives in its
// own file beside this one.
#include "backend/opencl/opencl_backend.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "backend/device.hpp"
#include "backend/opencl/gemm.hpp"
#include "backend/opencl/kernel_sources.hpp"
#include "backend/opencl/launch_util.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/units.hpp"

namespace nanscope::opencl {

// Where guard-buffer checks (BackendOptions::guard_bytes) report: shared with
// the storages, which may outlive their backend.
struct GuardLog {
  std::mutex mu;
  std::vector<std::string> violations;
};

namespace {

constexpr unsigned char kGuardByte = 0xA5;

class ClStorage final : public Storage {
 public:
  ClStorage(cl_mem mem, std::size_t bytes, const Backend* owner, std::shared_ptr<BufferPool> pool)
      : mem_(mem), bytes_(bytes), owner_(owner), pool_(std::move(pool)) {}
  // A buffer with `guard` sentinel bytes after its end, checked on release through `queue`.
  ClStorage(cl_mem mem, std::size_t bytes, const Backend* owner, std::shared_ptr<BufferPool> pool, std::size_t guard,
            cl_command_queue queue, std::shared_ptr<GuardLog> log, std::string what)
      : ClStorage(mem, bytes, owner, std::move(pool)) {
    guard_ = guard;
    queue_ = queue;
    log_ = std::move(log);
    what_ = std::move(what);
    clRetainCommandQueue(queue_);
  }
  ~ClStorage() override {
    if (guard_) check_guard();
    if (panels_) panels_->forget(this);
    pool_->release(mem_, std::max<std::size_t>(bytes_, 1) + guard_);
  }
  // The cache that may keep packed panels of this buffer (a LINEAR weight's): told when it is released.
  void set_panels(std::shared_ptr<WeightPanels> panels) { panels_ = std::move(panels); }
  ClStorage(const ClStorage&) = delete;
  ClStorage& operator=(const ClStorage&) = delete;

  std::size_t bytes() const override { return bytes_; }
  const void* owner() const override { return owner_; }
  cl_mem mem() const { return mem_; }

 private:
  // Never throws (a destructor): a failed read is itself recorded.
  void check_guard() noexcept {
    std::vector<unsigned char> tail(guard_);
    const std::size_t at = std::max<std::size_t>(bytes_, 1);
    const cl_int err = clEnqueueReadBuffer(queue_, mem_, CL_TRUE, at, guard_, tail.data(), 0, nullptr, nullptr);
    clReleaseCommandQueue(queue_);
    std::string problem;
    if (err != CL_SUCCESS) {
      problem = "its guard could not be read back (" + std::string(cl_status_name(err)) + ")";
    } else {
      std::size_t changed = 0, first = guard_;
      for (std::size_t i = 0; i < guard_; ++i) {
        if (tail[i] != kGuardByte) {
          ++changed;
          first = std::min(first, i);
        }
      }
      if (changed == 0) return;
      problem = std::to_string(changed) + " of the " + std::to_string(guard_) +
                " guard bytes after its end were overwritten, the first at byte " + std::to_string(first) +
                " past the end: an out-of-bounds write";
    }
    const std::lock_guard lock(log_->mu);
    log_->violations.push_back("buffer " + what_ + ": " + problem);
  }

  cl_mem mem_;
  std::size_t bytes_;
  const Backend* owner_;
  std::shared_ptr<BufferPool> pool_;  // outlives the backend while tensors do
  std::shared_ptr<WeightPanels> panels_;
  std::size_t guard_ = 0;
  cl_command_queue queue_ = nullptr;  // retained while guarded
  std::shared_ptr<GuardLog> log_;
  std::string what_;
};

// What the buffer pool may keep unused: a quarter of the device's memory, at
// most 4 GiB, unless the options say (0 turns reuse off).
std::size_t pool_limit(const DeviceInfo& info, const BackendOptions& options) {
  if (options.pool_keep_bytes) return static_cast<std::size_t>(*options.pool_keep_bytes);
  const std::uint64_t quarter = info.global_mem_bytes / 4;
  return static_cast<std::size_t>(std::min<std::uint64_t>(quarter ? quarter : (256u << 20), std::uint64_t{4} << 30));
}

// On a CPU device the driver's buffers come from the C library's heap (PoCL allocates them with posix_memalign).
// glibc serves an allocation from mmap only above its mmap threshold, which starts at 128 KiB and rises to the size
// of each mmap-served block freed, up to 32 MiB: after the first few activations are given back, buffers up to
// 32 MiB come from the heap, and what is freed there stays resident, in holes the next sizes do not fit. On a
// 512x512 VAE decode that held 80-240 MB above the live buffers (peak RSS 1083 against 999 MB with the
// threshold fixed). A fixed threshold of 1 MiB sends every buffer of a megabyte or more to mmap and back to the
// system when freed; the pool's reuse and the repeated calls' arena keep that from costing page faults. Left as
// it is where the user set glibc.malloc.mmap_threshold.
void return_freed_buffers_to_the_system(const DeviceInfo& info) {
#if defined(__GLIBC__)
  if (info.kind != DeviceKind::cpu) return;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (tunables != nullptr && std::strstr(tunables, "mmap_threshold") != nullptr) return;
    if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1)
      log::debug("mallopt(M_MMAP_THRESHOLD) refused; freed buffers may stay in the heap");
  });
#else
  (void)info;
#endif
}

// The capacity of the repeated calls' one arena where a buffer takes memory only where it is written (buffer_pool.hpp):
// on a CPU device, whose buffers are host memory from malloc (PoCL), its untouched pages cost nothing. The largest
// buffer the device allows, at most half its memory: an SD 1.5 1024x1024 VAE decode has 2.5 GB alive at once.
// Elsewhere (a GPU commits a buffer's memory when it is made) the arena is sized by its plan.
std::size_t lazy_arena_bytes(const DeviceInfo& info, const BackendOptions& options) {
  if (info.kind != DeviceKind::cpu || !options.first_call_arena) return 0;
  return static_cast<std::size_t>(std::min(info.max_alloc_bytes, info.global_mem_bytes / 2));
}

// LINEAR weights' packed panels kept (weight_panels.hpp): an eighth of the device's memory, at most 4 GiB
// (SD 1.5's linear layers take 0.9 GB in f32). The GPU kernel family reads B where it lies: nothing to keep.
std::size_t weight_panel_budget(const DeviceInfo& info, const BackendOptions& options) {
  if (options.weight_panel_bytes) return static_cast<std::size_t>(*options.weight_panel_bytes);
  return static_cast<std::size_t>(std::min<std::uint64_t>(info.global_mem_bytes / 8, std::uint64_t{4} << 30));
}

std::string sizes_str(cl_uint dims, const size_t* v) {
  if (!v) return "auto";
  std::string s = "[";
  for (cl_uint i = 0; i < dims; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string kernel_name(cl_kernel k) {
  char name[256] = {0};
  if (clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name) - 1, name, nullptr) != CL_SUCCESS) return "?";
  return name;
}

// "OpenCL C 1.2 pocl" -> 1.2; 0 when unparsable.
double opencl_c_version(const std::string& s) {
  const auto pos = s.find_first_of("0123456789");
  return pos == std::string::npos ? 0.0 : std::atof(s.c_str() + pos);
}

}  // namespace

cl_context create_device_context(const DeviceInfo& device, cl_int& err) {
  auto dev = static_cast<cl_device_id>(device.cl_device);
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(device.cl_platform), 0};
  return clCreateContext(device.via_icd_loader ? props : nullptr, 1, &dev, nullptr, nullptr, &err);
}

OpenClBackend::OpenClBackend(const DeviceInfo& device, const BackendOptions& options)
    : info_(limited_device(device, options.memory_limit_bytes, options.max_alloc_limit_bytes)) {
  if (info_.kind == DeviceKind::reference || !info_.cl_device) {
    throw DeviceError("OpenClBackend: device \"" + info_.name + "\" (" + info_.id + ") is not an OpenCL device");
  }
  auto dev = static_cast<cl_device_id>(info_.cl_device);
  const std::string where = "creating an OpenCL context on \"" + info_.name + "\" (" + info_.id + ")";
  cl_int err = CL_SUCCESS;
  // The context holds the chosen device only: work can never land on another one.
  context_ = create_device_context(info_, err);
  if (err != CL_SUCCESS) throw_cl_error(err, "clCreateContext", where);
  // In-order queue; profiling on so launch() can time kernels when asked.
  // On a simulator every buffer has its exact size: an access past a tensor's end is then reported.
  return_freed_buffers_to_the_system(info_);
  pool_ = std::make_shared<BufferPool>(context_, pool_limit(info_, options), info_.kind == DeviceKind::simulator,
                                       options.call_arena, lazy_arena_bytes(info_, options));
  queue_ = clCreateCommandQueue(context_, dev, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS) {
    NS_CL_CHECK_NOTHROW(clReleaseContext(context_));
    throw_cl_error(err, "clCreateCommandQueue", where);
  }
  // Kept buffers the pool gives back are freed once the kernels queued on them have run.
  pool_->set_drain([queue = queue_] { NS_CL_CHECK_NOTHROW(clFinish(queue)); });
  panels_ = std::make_shared<WeightPanels>(pool_, weight_panel_budget(info_, options));
  pool_->set_relief([weak = std::weak_ptr<WeightPanels>(panels_)] {
    const std::shared_ptr<WeightPanels> panels = weak.lock();
    return panels ? panels->clear() : std::size_t{0};
  });

  std::string dir;
  if (options.use_kernel_cache)
    dir = options.kernel_cache_dir.empty() ? ProgramCache::default_dir() : options.kernel_cache_dir;
  programs_ = std::make_unique<ProgramCache>(context_, dev, info_, dir);
  programs_->set_listener(options.on_kernel_build);
  build_listener_ = options.on_kernel_build;

  cl_std_ = opencl_c_version(info_.opencl_c_version) >= 1.2 || info_.opencl_c_version.empty() ? "-cl-std=CL1.2"
                                                                                              : "-cl-std=CL1.1";
  // A simulator builds without optimisation: Oclgrind 21.10 cannot interpret some
  // intrinsics the optimiser forms (llvm.usub.sat.i32 from `n < N ? N - n : 0u`),
  // and the unoptimised code is the kernel as written, which is what it checks.
  if (info_.kind == DeviceKind::simulator) cl_std_ += " -cl-opt-disable";
  profile_ = options.profile;
  profile_grids_ = options.profile && options.profile_grids;
  fail_allocation_ = options.fail_allocation;
  guard_bytes_ = options.guard_bytes;
  tensor_cores_ = options.tensor_cores;
  winograd_ = options.winograd;
  winograd_fused_weights_ = options.winograd_fused_weights;
  emulate_tensor_cores_ = options.tensor_cores && options.emulate_tensor_cores;
  if (options.attention_cpu_rows != 0 && options.attention_cpu_rows != 8 && options.attention_cpu_rows != 16 &&
      options.attention_cpu_rows != 32) {
    throw Error("attention_cpu_rows must be 8, 16 or 32 (0: by the device); got " +
                std::to_string(options.attention_cpu_rows));
  }
  if (options.attention_cpu_lanes != 0 && options.attention_cpu_lanes != 8 && options.attention_cpu_lanes != 16) {
    throw Error("attention_cpu_lanes must be 8 or 16 (0: by the device); got " +
                std::to_string(options.attention_cpu_lanes));
  }
  if (options.attention_cpu_row_blocks < 0 || options.attention_cpu_key_chunk < 0) {
    throw Error("attention_cpu_row_blocks and attention_cpu_key_chunk must be 0 (by the call) or positive");
  }
  attention_cpu_row_blocks_ = options.attention_cpu_row_blocks;
  attention_cpu_key_chunk_ = options.attention_cpu_key_chunk;
  // Resolved once: the device's width does not change (one driver query, not one per attention call).
  attention_cpu_lanes_ = options.attention_cpu_lanes             ? options.attention_cpu_lanes
                         : options.attention_cpu_rows == 8       ? 8
                         : options.attention_cpu_rows == 32      ? 16
                         : gemm::native_float_width(info_) >= 16 ? 16
                                                                 : 8;
  attention_cpu_rows_ = options.attention_cpu_rows ? options.attention_cpu_rows : 2 * attention_cpu_lanes_;
  if (attention_cpu_rows_ != attention_cpu_lanes_ && attention_cpu_rows_ != 2 * attention_cpu_lanes_) {
    throw Error("attention_cpu_rows must be attention_cpu_lanes or twice it (" + std::to_string(attention_cpu_lanes_) +
                " lanes: " + std::to_string(attention_cpu_lanes_) + " or " + std::to_string(2 * attention_cpu_lanes_) +
                " rows); got " + std::to_string(attention_cpu_rows_));
  }
  guard_log_ = std::make_shared<GuardLog>();
  switch (options.kernel_style) {
    case KernelStyleChoice::cpu: style_ = KernelStyle::cpu; break;
    case KernelStyleChoice::gpu: style_ = KernelStyle::gpu; break;
    case KernelStyleChoice::by_device:
      // A simulator runs the GPU kernels: checking their work-groups, local memory and barriers is what it is for.
      style_ =
          info_.kind == DeviceKind::gpu || info_.kind == DeviceKind::accelerator || info_.kind == DeviceKind::simulator
              ? KernelStyle::gpu
              : KernelStyle::cpu;
      break;
  }
  log::debug("OpenCL backend ready on \"{}\" ({}), kernel cache {}{}", info_.name, info_.id, dir.empty() ? "off" : dir,
             profile_ ? ", profiling on" : "");
  probe_half_units(options);
}

OpenClBackend::~OpenClBackend() {
  pool_->set_drain(nullptr);  // the pool outlives the queue while tensors do
  if (queue_) NS_CL_CHECK_NOTHROW(clFinish(queue_));
  if (profile_) {
    try {
      for (const auto& t : profile()) {
        log::info("profile {:<44} {:>6} launches {:>10.2f} ms", t.op, t.launches, t.ms);
      }
    } catch (const std::exception& e) {
      log::warn("profile summary unavailable: {}", e.what());
    }
  }
  for (auto& [op, ev] : pending_events_) NS_CL_CHECK_NOTHROW(clReleaseEvent(ev));
  for (auto& [key, k] : kernels_) NS_CL_CHECK_NOTHROW(clReleaseKernel(k));
  kernels_.clear();
  programs_.reset();  // releases programs before the context
  if (queue_) NS_CL_CHECK_NOTHROW(clReleaseCommandQueue(queue_));
  if (context_) NS_CL_CHECK_NOTHROW(clReleaseContext(context_));
}

Tensor OpenClBackend::empty(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  const std::string what = shape_str(shape) + " " + std::string(dtype_name(dtype)) + " (" + mib_text(bytes) + ")";
  if (info_.max_alloc_bytes && bytes > info_.max_alloc_bytes) {
    throw DeviceError("cannot allocate " + what + " on \"" + info_.name + "\": larger than the device's largest " +
                      "single buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE = " + mib_text(info_.max_alloc_bytes) +
                      "); use a smaller resolution, attention slicing (attention.impl=sliced), or another device");
  }
  cl_int err = CL_SUCCESS;
  cl_mem mem = nullptr;
  if (fail_allocation_ && fail_allocation_(bytes)) {
    err = CL_MEM_OBJECT_ALLOCATION_FAILURE;  // injected (BackendOptions::fail_allocation)
  } else {
    // Zero-sized buffers are invalid in OpenCL; a 1-byte buffer stands in for empty tensors.
    mem = pool_->acquire(std::max<std::size_t>(bytes, 1) + guard_bytes_, err);
  }
  if (err != CL_SUCCESS) {
    throw ClError("cannot allocate " + what + " on \"" + info_.name + "\" (global memory " +
                      mib_text(info_.global_mem_bytes) + "): " + cl_status_name(err) +
                      " in clCreateBuffer; free memory by using a smaller resolution or batch, or pick another device",
                  err);
  }
  std::shared_ptr<ClStorage> storage;
  if (guard_bytes_ == 0) {
    storage = std::make_shared<ClStorage>(mem, bytes, this, pool_);
  } else {
    const cl_int fill = clEnqueueFillBuffer(queue_, mem, &kGuardByte, 1, std::max<std::size_t>(bytes, 1), guard_bytes_,
                                            0, nullptr, nullptr);
    if (fill != CL_SUCCESS) {
      pool_->release(mem, std::max<std::size_t>(bytes, 1) + guard_bytes_);
      throw_cl_error(fill, "clEnqueueFillBuffer", "fill the guard after " + what + " on \"" + info_.name + "\"");
    }
    storage = std::make_shared<ClStorage>(mem, bytes, this, pool_, guard_bytes_, queue_, guard_log_, what);
  }
  storage->set_panels(panels_);  // its weight panels, if a LINEAR keeps some, go back with it
  return Tensor(shape, dtype, std::move(storage));
}

std::vector<std::string> OpenClBackend::take_guard_violations() {
  const std::lock_guard lock(guard_log_->mu);
  return std::exchange(guard_log_->violations, {});
}

std::uint64_t OpenClBackend::allocated_bytes() const { return pool_->in_use_bytes(); }
void OpenClBackend::limit_cache_growth(std::uint64_t bytes) { panels_->limit_growth(bytes); }
std::uint64_t OpenClBackend::cache_bytes() const { return panels_->kept_bytes(); }
std::uint64_t OpenClBackend::release_caches() {
  // The panels go back to the pool (its own kept buffers are not counted as allocated, and it frees them when an
  // allocation needs the room); allocated_bytes drops by the sizes the pool served them with (cache_bytes).
  const std::uint64_t before = allocated_bytes();
  panels_->clear();
  const std::uint64_t after = allocated_bytes();
  return before > after ? before - after : 0;
}
std::vector<KernelBuildRecord> OpenClBackend::kernel_builds() const { return programs_->records(); }
std::string OpenClBackend::kernel_cache_dir() const { return programs_->dir(); }

Tensor OpenClBackend::upload(const HostTensor& host) {
  Tensor t = empty(host.shape, host.dtype);
  if (host.data.size() != t.bytes()) {
    throw OpError("upload: host tensor " + host.describe() + " holds " + std::to_string(host.data.size()) +
                  " bytes, expected " + std::to_string(t.bytes()));
  }
  if (!host.data.empty()) {
    const cl_int err =
        clEnqueueWriteBuffer(queue_, buffer(t), CL_TRUE, 0, host.data.size(), host.data.data(), 0, nullptr, nullptr);
    if (err != CL_SUCCESS)
      throw_cl_error(err, "clEnqueueWriteBuffer", "upload " + host.describe() + " to \"" + info_.name + "\"");
  }
  return t;
}

HostTensor OpenClBackend::download(const Tensor& t) {
  HostTensor host(t.shape(), t.dtype());
  if (!host.data.empty()) {
    // Blocking read: also where an earlier kernel's failure surfaces on most drivers.
    const cl_int err =
        clEnqueueReadBuffer(queue_, buffer(t), CL_TRUE, 0, host.data.size(), host.data.data(), 0, nullptr, nullptr);
    if (err != CL_SUCCESS) {
      throw_cl_error(err, "clEnqueueReadBuffer",
                     "download " + t.describe() + " from \"" + info_.name + "\" (or an earlier kernel failed)");
    }
  }
  return host;
}

void OpenClBackend::synchronize() {
  const cl_int err = clFinish(queue_);
  if (err != CL_SUCCESS) throw_cl_error(err, "clFinish", "waiting for queued kernels on \"" + info_.name + "\"");
}

std::vector<std::string> OpenClBackend::kernel_notes() const {
  std::vector<std::string> notes{
      style_ == KernelStyle::gpu
          ? "kernel family: gpu (local-memory GEMM tiles, implicit-GEMM convolution, flash attention, work-group "
            "reductions)"
          : "kernel family: cpu (register-blocked GEMM panels, per-work-item attention and reductions)"};
  if (style_ == KernelStyle::cpu) {
    notes.push_back(winograd_ ? "3x3 stride-1 convolutions with f32 accumulation as Winograd F(4x4, 3x3) where it is "
                                "faster (NANSCOPE_WINOGRAD=0 keeps every convolution direct)"
                              : "every convolution direct (Winograd off by NANSCOPE_WINOGRAD=0)");
  }
  if (!half_units_.empty()) {
    notes.push_back("half storage; native half arithmetic (accumulate=native, softmax=native) on the " + half_units_);
  } else if (!half_units_note_.empty()) {
    notes.push_back("half storage; " + half_units_note_);
  } else {
    notes.push_back(info_.fp16 ? "half storage; native half accumulation emulated exactly (the device has cl_khr_fp16)"
                               : "half storage; native half accumulation emulated exactly (no half units reachable)");
  }
  if (style_ == KernelStyle::gpu && emulate_tensor_cores_) {
    notes.push_back(
        "tensor-core kernels with mma.sync emulated through local memory (test setting NANSCOPE_TENSOR_CORES=emulate)");
  } else if (style_ == KernelStyle::gpu && info_.nv_compute_capability >= 80) {
    const std::string sm = "sm_" + std::to_string(info_.nv_compute_capability);
    notes.push_back(tensor_cores_
                        ? "f16 GEMMs, convolutions and flash attention with f32 accumulation on the tensor cores (" +
                              sm + ", mma.sync m16n8k16; NANSCOPE_TENSOR_CORES=0 keeps them on the CUDA cores)"
                        : "tensor cores (" + sm + ") off by NANSCOPE_TENSOR_CORES=0: f16 work on the CUDA cores");
  }
  std::lock_guard lock(notes_mutex_);
  notes.insert(notes.end(), fallbacks_.begin(), fallbacks_.end());
  return notes;
}

bool OpenClBackend::native_half_in_hardware(const Precision& p) const {
  return !half_units_.empty() && p.dtype == DType::f16 && (p.native_accumulation() || p.native_softmax());
}

void OpenClBackend::note_fallback(const std::string& note) {
  {
    std::lock_guard lock(notes_mutex_);
    if (std::find(fallbacks_.begin(), fallbacks_.end(), note) != fallbacks_.end()) return;
    fallbacks_.push_back(note);
  }
  log::info("\"{}\": {}", info_.name, note);
}

std::string OpenClBackend::precision_options(const Precision& p) const {
  std::string o = cl_std_;
  switch (p.dtype) {
    case DType::f32: o += " -DSTORE_F32"; break;
    case DType::f16: o += " -DSTORE_F16"; break;
    case DType::bf16: o += " -DSTORE_BF16"; break;
  }
  // Only when it changes the arithmetic: f32 storage with native accumulation is plain f32.
  if (p.native_accumulation()) o += " -DACC_NATIVE";
  if (p.native_softmax()) o += " -DSOFTMAX_NATIVE";
  // Probed, never assumed from the name. No -cl-fast-relaxed-math / -cl-mad-enable: IEEE behaviour is the point.
  if (info_.fp16) o += " -DHAS_FP16";
  // Native half arithmetic on the half units, once the probe passed (half_units.cpp).
  if (native_half_in_hardware(p)) o += " " + half_unit_options_;
  // GPU style: scalar f16 loads and stores through the conversion instructions (common.cl).
  if (style_ == KernelStyle::gpu && p.dtype == DType::f16) o += " -DF16_CVT";
  return o;
}

cl_kernel OpenClBackend::kernel(std::string_view program, std::string_view name, const std::string& options) {
  std::string key;
  key.reserve(program.size() + name.size() + options.size() + 2);
  key.append(program).append("|").append(name).append("|").append(options);
  if (auto it = kernels_.find(key); it != kernels_.end()) return it->second;

  cl_program prog = programs_->get(std::string(program), options);
  cl_int err = CL_SUCCESS;
  const std::string kname(name);
  cl_kernel k = clCreateKernel(prog, kname.c_str(), &err);
  if (err != CL_SUCCESS) {
    throw_cl_error(
        err, "clCreateKernel",
        "kernel " + kname + " of program " + std::string(program) + " [" + options + "] on \"" + info_.name + "\"");
  }
  if (detail::runs_whole_blocks(kname)) whole_block_kernels_.insert(k);
  kernels_.emplace(std::move(key), k);
  return k;
}

void OpenClBackend::launch(cl_kernel k, std::string_view op, cl_uint dims, const size_t* global, const size_t* local) {
  size_t chosen[3] = {1, 1, 1};
  if (local == nullptr && dims <= 3) {
    // Whole-block kernels run in groups of one: on CPUs always, and on any device running the CPU family,
    // whose programs declare that size (common.cl CPU_ONE_ITEM). Other kernels on CPUs get groups that
    // divide the grid.
    const bool whole_block = whole_block_kernels_.count(k) != 0;
    if (info_.kind == DeviceKind::cpu || (whole_block && style_ == KernelStyle::cpu)) {
      if (!whole_block) chosen[0] = detail::cpu_group_size(global[0]);
      local = chosen;
    }
  }
  cl_event ev = nullptr;
  const cl_int err =
      clEnqueueNDRangeKernel(queue_, k, dims, nullptr, global, local, 0, nullptr, profile_ ? &ev : nullptr);
  if (err != CL_SUCCESS) {
    throw_cl_error(err, "clEnqueueNDRangeKernel",
                   std::string(op) + " kernel " + kernel_name(k) + " global " + sizes_str(dims, global) + " local " +
                       sizes_str(dims, local) + " on \"" + info_.name + "\"");
  }
  if (ev) {
    // Timed per op and kernel ("CONV2D conv_im2col_panels"): which part of an op costs what; with
    // profile_grids per launch geometry too: which of its shapes.
    std::string key = std::string(op) + " " + kernel_name(k);
    if (profile_grids_) key += " global " + sizes_str(dims, global);
    pending_events_.emplace_back(std::move(key), ev);
    // Bound the number of live events in long runs.
    if (pending_events_.size() >= 4096) collect_profile();
  }
}

void OpenClBackend::collect_profile() {
  if (pending_events_.empty()) return;
  synchronize();
  for (auto& [op, ev] : pending_events_) {
    cl_ulong start = 0, end = 0;
    if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr) == CL_SUCCESS &&
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr) == CL_SUCCESS) {
      auto& t = timings_[op];
      t.op = op;
      t.launches += 1;
      t.ms += static_cast<double>(end - start) * 1e-6;
    }
    NS_CL_CHECK_NOTHROW(clReleaseEvent(ev));
  }
  pending_events_.clear();
}

std::vector<OpTiming> OpenClBackend::profile() {
  collect_profile();
  std::vector<OpTiming> out;
  for (const auto& [op, t] : timings_) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTiming& a, const OpTiming& b) { return a.ms > b.ms; });
  return out;
}

bool OpenClBackend::streams_output(std::size_t bytes) const {
  // From 32 MB: past most CPUs' last-level cache; smaller outputs may still be in the cache when the next op
  // reads them.
  constexpr std::size_t kStreamBytes = std::size_t{32} << 20;
  return info_.kind == DeviceKind::cpu && bytes >= kStreamBytes;
}

cl_mem OpenClBackend::buffer(const Tensor& t) const {
  if (!t.defined()) throw OpError("OpenCL backend on \"" + info_.name + "\": tensor has no buffer");
  if (!owns(t)) {
    throw OpError("tensor " + t.describe() + " does not live on \"" + info_.name + "\" (" + info_.id +
                  "); tensors never move between devices implicitly: upload it to this device first");
  }
  return static_cast<const ClStorage*>(t.storage())->mem();
}

void OpenClBackend::set_arg(cl_kernel k, cl_uint i, const cl_mem& m) {
  const cl_int err = clSetKernelArg(k, i, sizeof(cl_mem), &m);
  if (err != CL_SUCCESS)
    throw_cl_error(err, "clSetKernelArg", "buffer argument " + std::to_string(i) + " of kernel " + kernel_name(k));
}

void OpenClBackend::set_arg(cl_kernel k, cl_uint i, const LocalMem& m) {
  const cl_int err = clSetKernelArg(k, i, m.bytes, nullptr);
  if (err != CL_SUCCESS) {
    throw_cl_error(err, "clSetKernelArg",
                   "__local argument " + std::to_string(i) + " (" + std::to_string(m.bytes) + " bytes) of kernel " +
                       kernel_name(k));
  }
}

}  // namespace nanscope::opencl
