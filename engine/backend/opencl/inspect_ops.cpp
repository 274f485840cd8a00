// The inspector's reductions on the device (kernels/inspect.cl). The reductions leave their inputs where they are and
// read back only their results: for a 4 x 64 x 64 latent 8.4 KB of
// statistics and 12 KB of preview pixels (backend/map_reduce.hpp).

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "backend/opencl/launch_util.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"

namespace nanscope::opencl {

namespace {

constexpr int kCounters = 8;  // NS_NSTAT in inspect.cl

// inspect.cl reads maps in their storage dtype; accumulation does not apply.
std::string inspect_options(OpenClBackend& be, const Precision& p) {
  return be.precision_options(detail::storage_only(p.dtype));
}
[[maybe_unused]] const bool kRegisteredInspect = (register_program_options("inspect", inspect_options), true);

// [N, C, H, W] (or [C, H, W]) of a map argument.
void map_dims(const Tensor& x, std::int64_t index, const char* op, std::int64_t& c, std::int64_t& h, std::int64_t& w) {
  const Shape& s = x.shape();
  if (s.size() < 3) throw OpError(std::string(op) + ": expects [N, C, H, W], got " + shape_str(s));
  c = s[s.size() - 3];
  h = s[s.size() - 2];
  w = s[s.size() - 1];
  const std::int64_t n = s.size() == 4 ? s[0] : 1;
  if (index < 0 || index >= n) {
    throw OpError(std::string(op) + ": image " + std::to_string(index) + " of a batch of " + std::to_string(n));
  }
}

// Queues a non-blocking read into a new vector. Its elements must stay where
// they are until the queue is waited for: moving the vector keeps its heap
// block, so returning and move-assigning it is safe; resizing is not.
template <typename T>
std::vector<T> read_back(cl_command_queue q, cl_mem mem, std::size_t count) {
  std::vector<T> v(count);
  if (count) NS_CL_CHECK(clEnqueueReadBuffer(q, mem, CL_FALSE, 0, count * sizeof(T), v.data(), 0, nullptr, nullptr));
  return v;
}

}  // namespace

void OpenClBackend::wait_for_device() {
  const auto t0 = std::chrono::steady_clock::now();
  NS_CL_CHECK(clFinish(queue()));
  inspect_wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

// One map of a batch between its launch and its results.
struct PendingMap {
  MapReduction r;
  std::string opts;
  cl_ulong base = 0;
  cl_uint c = 0, h = 0, w = 0;
  std::size_t cells = 0;
  std::vector<float> lines, chf;
  std::vector<cl_uint> chu;
  std::vector<std::unique_ptr<detail::ScratchBuffer>> scratch;
};

}  // namespace

std::vector<MapReduction> OpenClBackend::map_reduce_batch(std::span<const MapReduceArgs> maps) {
  // Every map's kernels and reads are queued before one wait; the mask, needed
  // only where something is non-finite, is a second round for those maps.
  std::vector<PendingMap> pending(maps.size());
  // GPUs: a work-group per line; CPU-style devices: a work-item per line.
  const bool cpu_style = kernel_style() == KernelStyle::cpu;
  const size_t local = std::max<size_t>(1, std::min<size_t>(64, detail::reduction_group_size(*this)));
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const MapReduceArgs& a = maps[m];
    PendingMap& p = pending[m];
    std::int64_t c, h, w;
    map_dims(a.x, a.index, "MAP_REDUCE", c, h, w);
    p.r.channels = c;
    p.r.height = h;
    p.r.width = w;
    mask_grid(h, w, a.mask_cells, p.r);
    p.cells = static_cast<std::size_t>(p.r.mask_rows) * static_cast<std::size_t>(p.r.mask_cols);
    const std::int64_t lines = c * (h + w);
    if (lines == 0) continue;
    p.opts = inspect_options(*this, detail::storage_only(a.x.dtype()));
    p.base = static_cast<cl_ulong>(a.index * c * h * w);
    p.c = detail::to_uint(c, "MAP_REDUCE", "channels");
    p.h = detail::to_uint(h, "MAP_REDUCE", "height");
    p.w = detail::to_uint(w, "MAP_REDUCE", "width");
    detail::to_uint(lines, "MAP_REDUCE", "lines");
    const auto near = static_cast<float>(a.near_limit > 0 ? a.near_limit : std::numeric_limits<double>::infinity());
    auto scratch = [&](std::size_t bytes, const char* what) {
      p.scratch.push_back(std::make_unique<detail::ScratchBuffer>(*this, bytes, what));
      return p.scratch.back()->mem();
    };
    const cl_mem lines_buf = scratch(static_cast<std::size_t>(lines) * 2 * sizeof(float), "inspector lines");
    const cl_mem rows_f = scratch(static_cast<std::size_t>(c * h) * 4 * sizeof(float), "inspector rows");
    const cl_mem rows_u = scratch(static_cast<std::size_t>(c * h) * kCounters * sizeof(cl_uint), "inspector rows");
    const cl_mem ch_f = scratch(static_cast<std::size_t>(c) * 4 * sizeof(float), "inspector channels");
    const cl_mem ch_u = scratch(static_cast<std::size_t>(c) * kCounters * sizeof(cl_uint), "inspector channels");

    if (cpu_style) {
      cl_kernel kl = kernel("inspect", "map_lines_item", p.opts);
      set_args(kl, buffer(a.x), p.base, p.c, p.h, p.w, near, static_cast<float>(a.overshoot), lines_buf, rows_f, rows_u,
               cl_uint(lines));
      const size_t gl[1] = {static_cast<size_t>(lines)};
      launch(kl, "MAP_REDUCE", 1, gl, nullptr);
    } else {
      cl_kernel kl = kernel("inspect", "map_lines", p.opts);
      set_args(kl, buffer(a.x), p.base, p.c, p.h, p.w, near, static_cast<float>(a.overshoot), lines_buf, rows_f, rows_u,
               LocalMem{4 * local * sizeof(float)}, LocalMem{kCounters * local * sizeof(cl_uint)});
      const size_t gl[1] = {static_cast<size_t>(lines) * local};
      const size_t ll[1] = {local};
      launch(kl, "MAP_REDUCE", 1, gl, ll);
    }
    cl_kernel kc = kernel("inspect", "map_channels", p.opts);
    set_args(kc, rows_f, rows_u, p.c, p.h, ch_f, ch_u);
    const size_t gc[1] = {static_cast<size_t>(c)};
    launch(kc, "MAP_REDUCE", 1, gc, nullptr);
    p.lines = read_back<float>(queue(), lines_buf, static_cast<std::size_t>(lines) * 2);
    p.chf = read_back<float>(queue(), ch_f, static_cast<std::size_t>(c) * 4);
    p.chu = read_back<cl_uint>(queue(), ch_u, static_cast<std::size_t>(c) * kCounters);
  }
  wait_for_device();

  bool masks = false;
  for (std::size_t m = 0; m < maps.size(); ++m) {
    PendingMap& p = pending[m];
    MapReduction& r = p.r;
    r.mask_bad.assign(p.cells, 0);
    if (p.lines.empty()) continue;
    const auto row_lines = static_cast<std::size_t>(r.channels * r.height);
    for (std::size_t i = 0; i < p.lines.size() / 2; ++i) {
      (i < row_lines ? r.row_mean : r.col_mean).push_back(p.lines[2 * i]);
      (i < row_lines ? r.row_std : r.col_std).push_back(p.lines[2 * i + 1]);
    }
    for (std::int64_t ch = 0; ch < r.channels; ++ch) {
      const float* f = p.chf.data() + 4 * ch;
      const cl_uint* u = p.chu.data() + kCounters * ch;
      ChannelReduction cr;
      cr.count = r.height * r.width;
      cr.finite = u[0];
      cr.nan = u[1];
      cr.pos_inf = u[2];
      cr.neg_inf = u[3];
      cr.near_limit = u[4];
      cr.over = u[5];
      cr.clipped = u[6];
      cr.mean = f[0];
      cr.m2 = f[1];
      cr.min = f[2];
      cr.max = f[3];
      r.per_channel.push_back(cr);
    }
    if (!r.any_nonfinite()) continue;
    masks = true;
    p.scratch.push_back(std::make_unique<detail::ScratchBuffer>(*this, p.cells * sizeof(cl_uint), "inspector mask"));
    const cl_mem mask = p.scratch.back()->mem();
    cl_kernel km = kernel("inspect", "map_mask", p.opts);
    set_args(km, buffer(maps[m].x), p.base, p.c, p.h, p.w, cl_uint(r.cell_h), cl_uint(r.cell_w), cl_uint(r.mask_cols),
             cl_uint(p.cells), mask);
    const size_t gm[1] = {p.cells};
    launch(km, "MAP_REDUCE", 1, gm, nullptr);
    NS_CL_CHECK(clEnqueueReadBuffer(queue(), mask, CL_FALSE, 0, p.cells * sizeof(cl_uint), r.mask_bad.data(), 0,
                                    nullptr, nullptr));
  }
  if (masks) wait_for_device();
  std::vector<MapReduction> out;
  for (auto& p : pending) out.push_back(std::move(p.r));
  return out;
}

PreviewReduction OpenClBackend::latent_preview(const LatentPreviewArgs& a) {
  std::int64_t c, h, w;
  map_dims(a.x, a.index, "LATENT_PREVIEW", c, h, w);
  PreviewReduction p;
  p.width = static_cast<int>(w);
  p.height = static_cast<int>(h);
  const std::int64_t plane = h * w;
  if (plane == 0) return p;
  const std::int64_t used = std::min<std::int64_t>(c, static_cast<std::int64_t>(a.factors.size() / 3));
  std::vector<float> factors(a.factors.begin(), a.factors.begin() + used * 3);
  factors.resize(std::max<std::size_t>(factors.size(), 3), 0.0f);  // a __constant buffer may not be empty
  detail::ScratchBuffer fbuf(*this, factors.size() * sizeof(float), "preview factors");
  NS_CL_CHECK(
      clEnqueueWriteBuffer(queue(), fbuf.mem(), CL_FALSE, 0, fbuf.bytes(), factors.data(), 0, nullptr, nullptr));
  detail::ScratchBuffer rgb(*this, static_cast<std::size_t>(plane) * 3, "preview pixels");
  detail::ScratchBuffer counts(*this, 3 * sizeof(cl_uint), "preview counts");
  const cl_uint zero[3] = {0, 0, 0};
  NS_CL_CHECK(clEnqueueWriteBuffer(queue(), counts.mem(), CL_FALSE, 0, sizeof zero, zero, 0, nullptr, nullptr));
  cl_kernel k = kernel("inspect", "latent_preview", inspect_options(*this, detail::storage_only(a.x.dtype())));
  set_args(k, buffer(a.x), static_cast<cl_ulong>(a.index * c * plane), cl_uint(used),
           detail::to_uint(plane, "LATENT_PREVIEW", "pixels"), fbuf.mem(), a.bias[0], a.bias[1], a.bias[2],
           static_cast<float>(a.scale), static_cast<float>(a.overshoot), rgb.mem(), counts.mem());
  const size_t global[1] = {static_cast<size_t>(plane)};
  launch(k, "LATENT_PREVIEW", 1, global, nullptr);
  p.rgb = read_back<std::uint8_t>(queue(), rgb.mem(), static_cast<std::size_t>(plane) * 3);
  const auto cnt = read_back<cl_uint>(queue(), counts.mem(), 3);
  wait_for_device();
  p.finite = plane * 3 - cnt[0];
  p.over = cnt[1];
  p.clipped = cnt[2];
  return p;
}

}  // namespace nanscope::opencl
