#include "pipeline/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "backend/dry_run_backend.hpp"
#include "pipeline/sd_model.hpp"

namespace nanscope::pipeline {

namespace {

// Stands in for the run's backend (backend/dry_run_backend.hpp): same device
// limits, it accepts the real backend's tensors (the weights) as its own, and
// every op is a no-op; it names the largest buffer and the first too long one.
class PlanBackend final : public DryRunBackend {
 public:
  explicit PlanBackend(const Backend& real) : DryRunBackend(real) {}

  Tensor empty(const Shape& shape, DType dtype) override {
    Tensor t = DryRunBackend::empty(shape, dtype);
    const std::uint64_t bytes = t.bytes();
    if (bytes > largest_.bytes) {
      largest_ = PlannedBuffer{component_, "", "", shape, dtype, bytes};
      largest_storage_ = t.storage_ptr();
    }
    if (shape_numel(shape) > kMaxKernelElements && !too_long_) {
      too_long_ = PlannedBuffer{component_, "", "", shape, dtype, bytes};
      too_long_storage_ = t.storage_ptr();
    }
    return t;
  }

  // The GEMM, convolution and attention calls, when asked for (the kernel plan's; KernelCalls).
  void record_calls(KernelCalls* calls) { calls_ = calls; }
  void matmul(const MatmulArgs& a) override {
    if (calls_) KernelCalls::add(calls_->gemm, {a.precision, a.batch, a.m, a.n, a.k});
  }
  void conv2d(const Conv2dArgs& a) override {
    if (!calls_) return;
    if (a.is_gemm()) {
      KernelCalls::add(calls_->gemm, {a.precision, a.n, a.o, a.oh * a.ow, a.c});
    } else {
      KernelCalls::add(calls_->conv,
                       {a.precision, a.n, a.o, a.oh * a.ow, a.c * a.kh * a.kw, a.c, a.kh, a.kw, a.stride, a.oh, a.ow});
    }
  }
  void attention(const AttentionArgs& a) override {
    if (calls_) {
      KernelCalls::add(calls_->attention,
                       {a.precision, a.batch, a.heads, a.sq, a.sk, a.d, a.dv, a.causal, a.config.impl});
    }
  }

  // Names the largest buffer when it turns out to be an op's output.
  void on_output(const OpContext& ctx, std::string_view op, const Tensor& out) {
    if (largest_.op.empty() && out.storage() == largest_storage_.lock().get()) {
      largest_.op = std::string(op);
      largest_.module = ctx.path;
    }
    if (too_long_ && too_long_->op.empty() && out.storage() == too_long_storage_.lock().get()) {
      too_long_->op = std::string(op);
      too_long_->module = ctx.path;
    }
  }
  void set_component(std::string component) {
    component_ = std::move(component);
    reset_peak();
  }
  const PlannedBuffer& largest() const { return largest_; }
  const std::optional<PlannedBuffer>& too_long() const { return too_long_; }

 private:
  std::string component_;
  PlannedBuffer largest_;
  std::weak_ptr<Storage> largest_storage_;
  std::optional<PlannedBuffer> too_long_;  // the first buffer with more elements than the kernels index
  std::weak_ptr<Storage> too_long_storage_;
  KernelCalls* calls_ = nullptr;
};

class PlanTracer final : public OpTracer {
 public:
  explicit PlanTracer(PlanBackend& be) : be_(be) {}
  void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const>, const Tensor& out) override {
    be_.on_output(ctx, op, out);
  }
  // Names buffers only: the plan follows the untraced call's ops and buffers.
  bool needs_each_module() const override { return false; }

 private:
  PlanBackend& be_;
};

OpContext on_plan(const OpContext& run, PlanBackend& be, PlanTracer& tracer) {
  OpContext c = run;
  c.backend = &be;
  c.tracer = &tracer;
  c.faults = nullptr;
  return c;
}

MemoryPlan plan_memory_impl(const PlanRequest& r, KernelCalls* calls = nullptr);

// When the decode is what does not fit: the largest VAE tile (a multiple of
// 8 latent pixels, or any size on a small latent) whose plan fits, found by
// bisection on the same plan; its settings become plan.fix.
void advise_tiling(const PlanRequest& r, MemoryPlan& plan, const std::optional<PlannedBuffer>& too_long) {
  const bool vae_buffer =
      too_long ? too_long->component == "vae"
               : plan.largest.component == "vae" && plan.max_alloc_bytes && plan.largest.bytes > plan.max_alloc_bytes;
  const bool vae_peak = plan.peak_component == "vae" && plan.global_mem_bytes &&
                        plan.peak_bytes + plan.resident_bytes > plan.global_mem_bytes;
  if (!vae_buffer && !vae_peak) return;
  const std::int64_t f = r.model->vae->config().downscale();
  const std::int64_t lh = r.height / f, lw = r.width / f;
  const std::int64_t side = std::max(lh, lw);
  const std::int64_t unit = side >= 64 ? 8 : 1;  // latent pixels per step of the search
  PlanRequest t = r;
  t.advise = false;
  auto tiles_of = [&](std::int64_t units) {
    models::VaeTiles v;
    v.tile = units * unit;
    v.overlap = std::clamp<std::int64_t>(r.tile_overlap_px / f, 0, (v.tile - 1) / 2);
    return v;
  };
  auto fits = [&](std::int64_t units) {
    t.vae_tiles = tiles_of(units);
    return plan_memory_impl(t).fits();
  };
  // Tiles smaller than this many latent pixels stop paying for themselves (the overlap dominates).
  const std::int64_t lo_units = std::max<std::int64_t>(1, 8 / unit);
  std::int64_t hi = (side - 1) / unit;  // a tile as large as the latent is the untiled decode, which does not fit
  if (hi < lo_units || !fits(lo_units)) return;
  std::int64_t lo = lo_units;  // fits
  while (hi > lo) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const models::VaeTiles best = tiles_of(lo);
  t.vae_tiles = best;
  const MemoryPlan tiled = plan_memory_impl(t);
  const int tile_px = static_cast<int>(best.tile * f), overlap_px = static_cast<int>(best.overlap * f);
  plan.fix = {"vae.tiling=on", "vae.tile_size=" + std::to_string(tile_px)};
  if (overlap_px != r.tile_overlap_px) plan.fix.push_back("vae.tile_overlap=" + std::to_string(overlap_px));
  plan.fix_note = "Decoding in VAE tiles of " + std::to_string(tile_px) + "x" + std::to_string(tile_px) +
                  " pixels (overlap " + std::to_string(overlap_px) + ") fits: the largest buffer is then " +
                  tiled.largest.describe() + ", and at most " + mib_text(tiled.peak_bytes) + " is live at once (" +
                  tiled.peak_component + "). Set " +
                  [&] {
                    std::string s;
                    for (const auto& a : plan.fix) s += (s.empty() ? "" : " ") + a;
                    return s;
                  }() +
                  " (the largest tile that fits; smaller tiles fit too).";
  plan.refusal += " " + plan.fix_note;
}

}  // namespace

std::string PlannedBuffer::describe() const {
  std::string s = op.empty() ? "a buffer" : op;
  s += " " + component;
  if (!module.empty()) s += " " + module;
  s += op.empty() ? "" : " output";
  return s + " " + shape_str(shape) + " " + std::string(dtype_name(dtype)) + " (" + mib_text(bytes) + ")";
}

MemoryPlan plan_memory(const PlanRequest& r, KernelCalls* calls) { return plan_memory_impl(r, calls); }

namespace {

MemoryPlan plan_memory_impl(const PlanRequest& r, KernelCalls* calls) {
  const SdModel& m = *r.model;
  Backend& real = r.unet.be();
  const DeviceInfo& dev = real.device();
  PlanBackend be(real);
  PlanTracer tracer(be);
  be.record_calls(calls);
  MemoryPlan plan;
  plan.width = r.width;
  plan.height = r.height;
  plan.resident_bytes = r.resident_bytes;
  plan.max_alloc_bytes = dev.max_alloc_bytes;
  plan.global_mem_bytes = dev.global_mem_bytes;
  plan.device = dev.name;

  const std::int64_t f = m.vae->config().downscale();
  const Shape latent{1, m.unet->config().in_channels, r.height / f, r.width / f};
  const std::int64_t rows = r.cfg ? 2 : 1;
  const auto& uc = m.unet->config();
  const DType unet_dtype = r.unet.precision.dtype, vae_dtype = r.vae.precision.dtype;

  // What the run keeps on the device through sampling: the text embeddings,
  // the latent, the sampler's state and a step's inputs and outputs.
  be.set_component("unet");
  const Tensor context = be.empty({rows, 77, uc.cross_attention_dim.front()}, unet_dtype);
  models::AddedConditions added;
  if (uc.text_time) {
    added.text_embeds =
        be.empty({rows, uc.projection_class_embeddings_input_dim - 6 * uc.addition_time_embed_dim}, unet_dtype);
    added.time_ids.assign(static_cast<std::size_t>(rows * 6), 0.0f);
  }
  std::vector<Tensor> run_state;
  run_state.reserve(5);
  for (int i = 0; i < 4; ++i) run_state.push_back(be.empty(latent, DType::f32));  // latent, guided, denoised, sampler
  Shape in = latent;
  in[0] = rows;
  run_state.push_back(be.empty(in, DType::f32));
  const Tensor unet_in = be.empty(in, unet_dtype);
  const std::vector<float> ts(static_cast<std::size_t>(rows), 999.0f);
  // The text encoders' calls, for the kernel plan only (their buffers are
  // small and gone before the UNet runs).
  if (calls && r.text_encoder) {
    be.set_component("text encoder");
    const std::vector<std::vector<int>> ids(static_cast<std::size_t>(rows), std::vector<int>(77, 0));
    const OpContext te = on_plan(*r.text_encoder, be, tracer);
    if (m.text_encoder) m.text_encoder->forward(te, ids);
    if (m.text_encoder_2) m.text_encoder_2->forward(te, ids);
    be.set_component("unet");
  }
  std::uint64_t peak = 0;
  {
    const Tensor pred =
        m.unet->forward(on_plan(r.unet, be, tracer), unet_in, ts, context, uc.text_time ? &added : nullptr);
    peak = be.peak();
    plan.peak_component = "unet";
  }

  // The decode: the latent in the VAE's dtype through the decoder.
  be.set_component("vae");
  {
    const Tensor z = be.empty(latent, vae_dtype);
    const std::int64_t tile = r.vae_tiles.tile;
    if (r.vae_tiles.enabled() && (tile < latent[2] || tile < latent[3])) {
      // Tiled (models/vae_tiling.hpp): one tile's decode at a time, the blend on the host, the image uploaded
      // at the end. Planned as the largest tile's decode with the whole image already live (conservative by
      // one image), not tile by tile: a 16384x16384 plan must not hold the blend's host arrays.
      const std::int64_t f = m.vae->config().downscale();
      const Tensor img = be.empty({1, m.vae->config().out_channels, latent[2] * f, latent[3] * f}, vae_dtype);
      const Tensor part = be.empty({1, latent[1], std::min(tile, latent[2]), std::min(tile, latent[3])}, vae_dtype);
      const Tensor out = m.vae->decode(on_plan(r.vae, be, tracer), part);
    } else {
      const Tensor img = m.vae->decode(on_plan(r.vae, be, tracer), z);
    }
    if (be.peak() > peak) {
      peak = be.peak();
      plan.peak_component = "vae";
    }
  }
  // The encode (img2img, the Lanczos hires upscale): the image in the VAE's dtype through the encoder, whole.
  if (r.encoder && r.encode_width > 0 && r.encode_height > 0) {
    be.set_component("vae encoder");
    const Tensor image = be.empty({1, r.encoder->config().in_channels, r.encode_height, r.encode_width}, vae_dtype);
    const Tensor moments = r.encoder->encode_moments(on_plan(r.vae, be, tracer), image);
    if (be.peak() > peak) {
      peak = be.peak();
      plan.peak_component = "vae encoder";
    }
  }
  if (calls) calls->recorded = true;
  plan.largest = be.largest();
  const std::optional<PlannedBuffer> too_long = be.too_long();
  plan.peak_bytes = peak;

  const std::string size = std::to_string(r.width) + "x" + std::to_string(r.height);
  const std::string helps = "Use a smaller width and height" +
                            std::string(dev.kind == DeviceKind::reference ? "" : ", or a device with more memory") +
                            ".";
  const std::string encode_note = " The VAE encoder encodes the image (" + std::to_string(r.encode_width) + "x" +
                                  std::to_string(r.encode_height) + ") whole: VAE tiling tiles the decode only.";
  if (too_long) {
    plan.refusal = size + " does not fit \"" + dev.name + "\": " + too_long->describe() + " has " +
                   std::to_string(shape_numel(too_long->shape)) +
                   " elements, more than the 4294967295 that NaNscope's kernels can index. " + helps;
  } else if (dev.max_alloc_bytes && plan.largest.bytes > dev.max_alloc_bytes) {
    plan.refusal = size + " does not fit \"" + dev.name + "\": " + plan.largest.describe() +
                   " is larger than the device's largest single buffer (" + mib_text(dev.max_alloc_bytes) +
                   ", CL_DEVICE_MAX_MEM_ALLOC_SIZE). " + helps;
  } else if (dev.global_mem_bytes && plan.peak_bytes + plan.resident_bytes > dev.global_mem_bytes) {
    plan.refusal = size + " does not fit \"" + dev.name + "\": the " + plan.peak_component + " needs " +
                   mib_text(plan.peak_bytes) + " live at once on top of " + mib_text(plan.resident_bytes) +
                   " of weights, more than the device's " + mib_text(dev.global_mem_bytes) +
                   " of memory (its largest buffer: " + plan.largest.describe() + "). " +
                   (r.cfg ? "Guidance off (cfg_scale 1) halves the UNet's part. " : "") + helps;
  }
  const bool encoder_decides = too_long ? too_long->component == "vae encoder"
                               : (dev.max_alloc_bytes && plan.largest.bytes > dev.max_alloc_bytes)
                                   ? plan.largest.component == "vae encoder"
                                   : plan.peak_component == "vae encoder";
  if (!plan.fits() && encoder_decides) plan.refusal += encode_note;
  if (!plan.fits() && r.advise) advise_tiling(r, plan, too_long);
  return plan;
}

}  // namespace

bool decode_fits(const models::Vae& vae, const OpContext& ctx, const Shape& latent_shape,
                 std::uint64_t resident_bytes) {
  Backend& real = ctx.be();
  const DeviceInfo& dev = real.device();
  PlanBackend be(real);
  PlanTracer tracer(be);
  be.set_component("vae");
  {
    const Tensor z = be.empty(latent_shape, ctx.precision.dtype);
    const Tensor img = vae.decode(on_plan(ctx, be, tracer), z);
  }
  if (be.too_long()) return false;
  if (dev.max_alloc_bytes && be.largest().bytes > dev.max_alloc_bytes) return false;
  return !(dev.global_mem_bytes && be.peak() + resident_bytes > dev.global_mem_bytes);
}

int largest_square_size(const PlanRequest& request, int multiple, int limit) {
  PlanRequest r = request;
  r.advise = false;
  auto fits = [&](int s) {
    r.width = r.height = s;
    return plan_memory(r).fits();
  };
  int lo = 0, hi = limit / multiple;  // in units of `multiple`; lo fits (0 trivially), answer in [lo, hi]
  if (hi > 0 && fits(hi * multiple)) return hi * multiple;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid * multiple) ? lo : hi) = mid;
  }
  return lo * multiple;
}

}  // namespace nanscope::pipeline
