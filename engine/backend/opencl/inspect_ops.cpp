// The inspector's reductions on the device (kernels/inspect.cl). The
// reductions leave their inputs where they are and read back only their
// results: for a 4 x 64 x 64 latent 8.4 KB of statistics and 16 KB of preview
// pixels (backend/map_reduce.hpp), after one wait for the whole step.

#include <algorithm>
#include <chrono>
#include <cstring>
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
  std::string opts;  // the storage dtype's program options
  cl_ulong base = 0;
  cl_uint c = 0, h = 0, w = 0;  // c stays 0 where the map has no lines: nothing to reduce
  float near = 0, over = 0;
  std::size_t cells = 0;
  std::vector<float> lines, chf;
  std::vector<cl_uint> chu;
  std::vector<std::unique_ptr<detail::ScratchBuffer>> scratch;
};

// Up to three maps of one shape and dtype, reduced by one map_stats_item launch
// into one buffer that comes back in one read.
constexpr std::size_t kMapsPerLaunch = 3;

struct MapGroup {
  std::vector<std::size_t> maps;
  std::vector<cl_uint> words;  // every map's results, as map_stats_item lays them out
  std::unique_ptr<detail::ScratchBuffer> out;
};

std::size_t map_words(const PendingMap& p) { return 2 * std::size_t{p.c} * (p.h + p.w) + 12 * std::size_t{p.c}; }

// Maps that one launch can reduce together, in the batch's order.
std::vector<MapGroup> group_maps(const std::vector<PendingMap>& pending) {
  std::vector<MapGroup> groups;
  for (std::size_t m = 0; m < pending.size(); ++m) {
    const PendingMap& p = pending[m];
    if (p.c == 0) continue;
    auto fits = [&](const MapGroup& g) {
      const PendingMap& q = pending[g.maps.front()];
      return g.maps.size() < kMapsPerLaunch && q.opts == p.opts && q.c == p.c && q.h == p.h && q.w == p.w;
    };
    auto it = std::find_if(groups.begin(), groups.end(), fits);
    if (it == groups.end()) it = groups.insert(groups.end(), MapGroup{});
    it->maps.push_back(m);
  }
  return groups;
}

// The preview between its launch and its pixels.
struct PendingPreview {
  PreviewReduction r;
  std::vector<cl_uchar> px;  // r, g, b and the counts' byte per pixel (inspect.cl latent_preview)
  std::unique_ptr<detail::ScratchBuffer> out;
};

constexpr std::int64_t kPreviewChannels = 4;  // latent_preview's factor arguments: a float4 per colour

// The latent channels the preview's factors cover; throws OpError for a preview the kernel cannot draw. Called
// before anything of the step is queued: a throw after that would free vectors that queued reads still fill.
std::int64_t preview_channels(const LatentPreviewArgs& a) {
  std::int64_t c, h, w;
  map_dims(a.x, a.index, "LATENT_PREVIEW", c, h, w);
  const std::int64_t used = std::min<std::int64_t>(c, static_cast<std::int64_t>(a.factors.size() / 3));
  if (used > kPreviewChannels) {
    throw OpError("LATENT_PREVIEW: factors for " + std::to_string(used) +
                  " latent channels; the device preview takes " + std::to_string(kPreviewChannels) +
                  " (every latent family with preview factors has 4)");
  }
  detail::to_uint(h * w, "LATENT_PREVIEW", "pixels");
  return used;
}

PendingPreview queue_preview(OpenClBackend& be, const LatentPreviewArgs& a, std::int64_t used) {
  std::int64_t c, h, w;
  map_dims(a.x, a.index, "LATENT_PREVIEW", c, h, w);
  PendingPreview p;
  p.r.width = static_cast<int>(w);
  p.r.height = static_cast<int>(h);
  const std::int64_t plane = h * w;
  if (plane == 0) return p;
  cl_float4 f[3] = {};
  for (std::int64_t ch = 0; ch < used; ++ch)
    for (std::size_t k = 0; k < 3; ++k) f[k].s[ch] = a.factors[static_cast<std::size_t>(ch) * 3 + k];
  const cl_float4 bias = {{a.bias[0], a.bias[1], a.bias[2], 0.0f}};
  p.out = std::make_unique<detail::ScratchBuffer>(be, static_cast<std::size_t>(plane) * 4, "preview pixels");
  cl_kernel k = be.kernel("inspect", "latent_preview", inspect_options(be, detail::storage_only(a.x.dtype())));
  OpenClBackend::set_args(k, be.buffer(a.x), static_cast<cl_ulong>(a.index * c * plane), cl_uint(used),
                          detail::to_uint(plane, "LATENT_PREVIEW", "pixels"), f[0], f[1], f[2], bias,
                          static_cast<float>(a.scale), static_cast<float>(a.overshoot), p.out->mem());
  const size_t global[1] = {static_cast<size_t>(plane)};
  be.launch(k, "LATENT_PREVIEW", 1, global, nullptr);
  p.px = read_back<cl_uchar>(be.queue(), p.out->mem(), static_cast<std::size_t>(plane) * 4);
  return p;
}

// After the wait: the pixels and the counts.
PreviewReduction finish_preview(PendingPreview& p) {
  const std::size_t plane = p.px.size() / 4;
  p.r.rgb.resize(plane * 3);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < plane; ++i) {
    const cl_uchar* px = &p.px[4 * i];
    std::copy(px, px + 3, &p.r.rgb[3 * i]);
    bad += px[3] & 3;
    p.r.over += (px[3] >> 2) & 3;
    p.r.clipped += (px[3] >> 4) & 3;
  }
  p.r.finite = static_cast<std::int64_t>(plane) * 3 - bad;
  return std::move(p.r);
}

}  // namespace

StepReductions OpenClBackend::reduce_step(std::span<const MapReduceArgs> maps, const LatentPreviewArgs* preview) {
  // Every map's kernels and reads, and the preview's, are queued before one wait;
  // the mask, needed only where something is non-finite, is a second round for
  // those maps.
  const std::int64_t preview_used = preview ? preview_channels(*preview) : 0;
  std::vector<PendingMap> pending(maps.size());
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
    p.near = static_cast<float>(a.near_limit > 0 ? a.near_limit : std::numeric_limits<double>::infinity());
    p.over = static_cast<float>(a.overshoot);
  }

  std::vector<MapGroup> groups;
  if (kernel_style() == KernelStyle::cpu) {
    groups = group_maps(pending);
    for (MapGroup& g : groups) {
      const PendingMap& p0 = pending[g.maps.front()];
      const std::size_t words = map_words(p0);
      g.out = std::make_unique<detail::ScratchBuffer>(*this, g.maps.size() * words * sizeof(cl_uint), "inspector maps");
      cl_kernel k = kernel("inspect", "map_stats_item", p0.opts);
      for (std::size_t s = 0; s < kMapsPerLaunch; ++s) {
        const std::size_t m = g.maps[std::min(s, g.maps.size() - 1)];  // unused slots repeat the last map
        set_args_from(k, static_cast<cl_uint>(4 * s), buffer(maps[m].x), pending[m].base, pending[m].near,
                      pending[m].over);
      }
      set_args_from(k, static_cast<cl_uint>(4 * kMapsPerLaunch), static_cast<cl_uint>(g.maps.size()), p0.c, p0.h, p0.w,
                    g.out->mem());
      // A work-group per work-item: a few long work-items, spread over the cores.
      const size_t gl[1] = {g.maps.size() * p0.c};
      const size_t ll[1] = {1};
      launch(k, "MAP_REDUCE", 1, gl, ll);
      g.words = read_back<cl_uint>(queue(), g.out->mem(), g.maps.size() * words);
    }
  } else {
    // A work-group per line, then a work-item per channel.
    const size_t local = std::max<size_t>(1, std::min<size_t>(64, detail::reduction_group_size(*this)));
    for (std::size_t m = 0; m < maps.size(); ++m) {
      PendingMap& p = pending[m];
      if (p.c == 0) continue;
      const std::size_t lines = std::size_t{p.c} * (p.h + p.w), rows = std::size_t{p.c} * p.h;
      auto scratch = [&](std::size_t bytes, const char* what) {
        p.scratch.push_back(std::make_unique<detail::ScratchBuffer>(*this, bytes, what));
        return p.scratch.back()->mem();
      };
      const cl_mem lines_buf = scratch(lines * 2 * sizeof(float), "inspector lines");
      const cl_mem rows_f = scratch(rows * 4 * sizeof(float), "inspector rows");
      const cl_mem rows_u = scratch(rows * kCounters * sizeof(cl_uint), "inspector rows");
      const cl_mem ch_f = scratch(std::size_t{p.c} * 4 * sizeof(float), "inspector channels");
      const cl_mem ch_u = scratch(std::size_t{p.c} * kCounters * sizeof(cl_uint), "inspector channels");
      cl_kernel kl = kernel("inspect", "map_lines", p.opts);
      set_args(kl, buffer(maps[m].x), p.base, p.c, p.h, p.w, p.near, p.over, lines_buf, rows_f, rows_u,
               LocalMem{4 * local * sizeof(float)}, LocalMem{kCounters * local * sizeof(cl_uint)});
      const size_t gl[1] = {lines * local};
      const size_t ll[1] = {local};
      launch(kl, "MAP_REDUCE", 1, gl, ll);
      cl_kernel kc = kernel("inspect", "map_channels", p.opts);
      set_args(kc, rows_f, rows_u, p.c, p.h, ch_f, ch_u);
      const size_t gc[1] = {p.c};
      launch(kc, "MAP_REDUCE", 1, gc, nullptr);
      p.lines = read_back<float>(queue(), lines_buf, lines * 2);
      p.chf = read_back<float>(queue(), ch_f, std::size_t{p.c} * 4);
      p.chu = read_back<cl_uint>(queue(), ch_u, std::size_t{p.c} * kCounters);
    }
  }
  PendingPreview pv;
  if (preview) pv = queue_preview(*this, *preview, preview_used);
  wait_for_device();
  for (const MapGroup& g : groups) {
    const std::size_t words = map_words(pending[g.maps.front()]);
    for (std::size_t s = 0; s < g.maps.size(); ++s) {
      PendingMap& p = pending[g.maps[s]];
      const std::size_t lines = std::size_t{p.c} * (p.h + p.w);
      const cl_uint* at = g.words.data() + s * words;
      p.lines.resize(2 * lines);
      p.chf.resize(4 * std::size_t{p.c});
      std::memcpy(p.lines.data(), at, p.lines.size() * sizeof(float));
      std::memcpy(p.chf.data(), at + 2 * lines, p.chf.size() * sizeof(float));
      p.chu.assign(at + 2 * lines + 4 * p.c, at + words);
    }
  }

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
  StepReductions out;
  for (auto& p : pending) out.maps.push_back(std::move(p.r));
  if (preview) out.preview = finish_preview(pv);
  return out;
}

}  // namespace nanscope::opencl
