// txt2img: tokenize, encode (uncond + cond in one batch), sample with CFG,
// decode, check the image, apply the NaN policy. The latent lives on the
// run's device while sampling (the samplers' arithmetic and the inspector's
// reductions run there, so a step reads back a few KB of statistics); after
// the last step it is read back and kept (GeneratedImage::latent), so a failed
// decode can be retried with another VAE or precision without re-sampling.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>

#include "config/a1111.hpp"
#include "config/inspect_settings.hpp"
#include "config/lora_list.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "inspect/fault_emulation.hpp"
#include "inspect/layer_trace.hpp"
#include "pipeline/img2img.hpp"
#include "pipeline/kernel_plan.hpp"
#include "pipeline/memory_plan.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "pipeline/session.hpp"
#include "pipeline/step_noise.hpp"

namespace nanscope::pipeline {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Per-module overrides within one component: accumulation, softmax,
// attention, and the dtype a module computes in (its weights stay stored in
// the component's dtype and are cast on use; OpContext::mixed_precision).
// `base`: the component's dtype in this call (a decode retried in f32 passes f32).
class ComponentPolicy final : public PrecisionPolicy {
 public:
  ComponentPolicy(const RunConfig& config, Component c, DType base) : config_(config), component_(c), base_(base) {}
  void resolve(std::string_view path, Precision& p, AttentionConfig& a) const override {
    p = config_.resolve(component_, path);
    p.dtype = config_.override_dtype(component_, path).value_or(base_);
    a = config_.resolve_attention(component_, path);
  }

 private:
  const RunConfig& config_;
  Component component_;
  DType base_;
};

struct ComponentContexts {
  std::unique_ptr<ComponentPolicy> te_policy, unet_policy, vae_policy;
  OpContext te, unet, vae;
};

// The context of a component's root in `dtype`, with the policy that
// resolves each module's precision when the config has overrides.
OpContext make_context(Backend& be, const RunConfig& config, Component c, const ComponentPolicy* policy, DType dtype) {
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = config.component(c).precision;
  ctx.precision.dtype = dtype;
  ctx.attention = config.component(c).attention;
  if (!config.overrides.empty()) ctx.policy = policy;
  ctx.mixed_precision = config.has_dtype_overrides(c);
  return ctx;
}

std::unique_ptr<NoiseSource> make_noise(NoiseKind kind, std::uint64_t seed, TorchCpuKernel torch_kernel) {
  if (kind == NoiseKind::torch_cpu) {
    TorchCpuNoise::Kernel k = torch_cpu_kernel_of_this_cpu();
    if (torch_kernel == TorchCpuKernel::avx2) k = TorchCpuNoise::Kernel::avx2;
    if (torch_kernel == TorchCpuKernel::scalar) k = TorchCpuNoise::Kernel::scalar;
    return std::make_unique<TorchCpuNoise>(seed, k);
  }
  if (kind == NoiseKind::torch_cuda) return std::make_unique<TorchCudaNoise>(seed);
  return std::make_unique<NanscopeNoise>(seed);
}

// diffusers' postprocess: (x / 2 + 0.5).clamp(0, 1) * 255, rounded to nearest
// even (numpy). Non-finite pixels become 0 and are counted.
io::RgbImage to_rgb8(const HostTensor& img, std::int64_t& nonfinite) {
  const int h = static_cast<int>(img.shape[2]), w = static_cast<int>(img.shape[3]);
  io::RgbImage out;
  out.width = w;
  out.height = h;
  out.pixels.resize(static_cast<std::size_t>(w) * h * 3);
  nonfinite = 0;
  const std::int64_t plane = static_cast<std::int64_t>(w) * h;
  for (int c = 0; c < 3; ++c) {
    for (std::int64_t i = 0; i < plane; ++i) {
      const float v = img.get(c * plane + i);
      std::uint8_t byte = 0;
      if (std::isfinite(v)) {
        const float x = std::clamp(v / 2.0f + 0.5f, 0.0f, 1.0f) * 255.0f;
        byte = static_cast<std::uint8_t>(std::nearbyint(x));
      } else {
        ++nonfinite;
      }
      out.pixels[static_cast<std::size_t>(i) * 3 + static_cast<std::size_t>(c)] = byte;
    }
  }
  return out;
}

Tensor upload_as(Backend& be, const Shape& shape, std::span<const float> values, DType dtype) {
  return be.upload(HostTensor::from_f32(shape, std::vector<float>(values.begin(), values.end()), dtype));
}

std::vector<float> download_f32(Backend& be, const Tensor& t) { return be.download(t).to_f32(); }

// x in dtype `to` (x itself when it already is): RNE, as an upload of its values in that dtype would round them.
Tensor cast_to(Backend& be, const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  Tensor out = be.empty(x.shape(), to);
  be.cast(CastArgs{x, out});
  return out;
}

// One LATENT_STEP over n values: out = op(x, m[m_off..]) with scalar c0.
void latent_op(Backend& be, LatentOp op, std::int64_t n, const Tensor& x, const Tensor* m, std::int64_t m_off,
               Tensor& out, float c0) {
  be.latent_step(LatentStepArgs{op, n, x, 0, m, m_off, nullptr, nullptr, out, 0, nullptr, {c0}, 0, 0});
}

// Which latent -> RGB preview factors fit this model: the embedded model's
// VAE (block_out_channels 16, 32, 64 with 4 latent channels) has its own fit;
// others use their family's.
std::string preview_family(const SdModel& m) {
  const auto& vc = m.vae->config();
  if (vc.latent_channels == 4 && vc.block_out_channels == std::vector<std::int64_t>{16, 32, 64}) return "nanscope-tiny";
  switch (m.family()) {
    case ModelFamily::sd1: return "sd1";
    case ModelFamily::sd2: return "sd2";
    case ModelFamily::sdxl: return "sdxl";
  }
  return "";
}

// The run's verdict, origin and one-line summary, from its steps (already in
// report.inspection), its decodes and its layer traces.
void finish_inspection(RunReport& report, const std::string& first_bad_note, const FaultEmulator* emulator) {
  inspect::RunInspection& ri = report.inspection;
  const inspect::Verdict steps_verdict = ri.verdict;
  if (!report.decodes.empty()) {
    ri.image = report.decodes.back().image;
    if (report.decodes.size() > 1) ri.first_decode = report.decodes.front().image;
    ri.verdict = inspect::worst(ri.verdict, ri.image->map.verdict);
  }
  for (const auto& t : ri.traces) {
    if (ri.origin.empty() && t.origin_op()) {
      ri.origin = t.origin_op()->full_path();
      ri.origin_op = t.origin_op()->op;
    }
    if (ri.near_limit_origin.empty() && t.near_limit_op()) ri.near_limit_origin = t.near_limit_op()->full_path();
  }
  // No op went non-finite, but an emulated fault altered one: that op is where it broke.
  for (const auto& t : ri.traces) {
    if (!ri.origin.empty()) break;
    for (const auto& op : t.ops) {
      if (op.emulated_fault) {
        ri.origin = op.full_path();
        ri.origin_op = op.op;
        break;
      }
    }
  }
  // A LoRA merged into a weight past the storage dtype's range left Inf in that
  // module's weight: its op has a non-finite input (the weight), so the rule
  // above names no origin. The first op that went non-finite is then that module.
  std::string lora_note;
  for (const auto& t : ri.traces) {
    if (!ri.origin.empty()) break;
    const auto bad = std::find_if(t.ops.begin(), t.ops.end(), [](const auto& op) { return op.output.nonfinite() > 0; });
    if (bad == t.ops.end()) continue;
    for (const auto& l : report.loras) {
      if (std::find(l.overflow_modules.begin(), l.overflow_modules.end(), bad->full_path()) == l.overflow_modules.end())
        continue;
      ri.origin = bad->full_path();
      ri.origin_op = bad->op;
      lora_note =
          " (its weight overflowed when LoRA " + l.name + " was merged into it; lora.mode=unmerged keeps it apart)";
      break;
    }
  }
  std::string s(inspect::verdict_name(ri.verdict));
  if (ri.image && ri.image->map.verdict != inspect::Verdict::clean &&
      (first_bad_note.empty() || static_cast<int>(ri.image->map.verdict) > static_cast<int>(steps_verdict))) {
    s += ": image: " + ri.image->map.note;
  } else if (!first_bad_note.empty()) {
    s += ": " + first_bad_note;
  }
  const LayerRetryReport& lr = report.layer_retry;
  const bool first_decode_bad = ri.first_decode && ri.first_decode->map.verdict != inspect::Verdict::clean;
  if (lr.active) {
    s += lr.clean ? "; recovered by retry-layer-f32 (" + std::to_string(lr.upcast.size()) + " module" +
                        (lr.upcast.size() == 1 ? "" : "s") + " in f32" +
                        (first_decode_bad ? "; first decode: " + ri.first_decode->map.note : std::string()) + ")"
                  : "; retry-layer-f32 did not recover: " + lr.remaining;
  } else if (first_decode_bad) {
    s += std::string(ri.verdict == inspect::Verdict::clean ? "; recovered" : "") +
         " (first decode: " + ri.first_decode->map.note + "; " + report.outcome + ")";
  }
  if (!ri.origin.empty()) s += "; origin " + ri.origin + " (" + ri.origin_op + ")" + lora_note;
  if (!ri.near_limit_origin.empty() && ri.near_limit_origin != ri.origin)
    s += "; first op near the dtype limit " + ri.near_limit_origin;
  if (emulator) {
    ri.emulation_note = emulator->describe();
    s = "[EMULATION] " + s;
  }
  ri.summary = s;
}

}  // namespace

namespace {

// Refuses a size the device cannot hold before any work: the memory plan
// (memory_plan.hpp) names the buffer, and the message the largest size that fits.
// `encoder`: the VAE with its encoder when the pass first encodes an image of its size (img2img, Lanczos hires).
// `calls`: receives the pass's GEMM, convolution and attention calls (text encoders included) for the kernel plan.
void require_memory(const SdModel& m, const ComponentContexts& cc, int width, int height, bool cfg,
                    const RunConfig& config, const models::Vae* encoder, KernelCalls& calls) {
  PlanRequest r{&m, cc.unet, cc.vae, width, height, cfg, cc.unet.be().allocated_bytes()};
  r.text_encoder = &cc.te;
  if (encoder) {
    r.encoder = encoder;
    r.encode_width = width;
    r.encode_height = height;
  }
  // vae.tiling=on tiles every decode; auto tiles when the whole decode would not fit: plan the tiled one.
  if (config.vae_tiling != "off") {
    r.vae_tiles = models::vae_tiles(config.vae_tile_size, config.vae_tile_overlap, m.vae->config().downscale());
  }
  r.tile_overlap_px = config.vae_tile_overlap;
  // Kept weight panels (from an earlier run) count as resident; when the size fits without them they are given
  // back, and a size that fits a fresh session is never refused because a smaller run came first.
  Backend& be = cc.unet.be();
  PlanRequest without = r;
  without.resident_bytes -= std::min(be.cache_bytes(), r.resident_bytes);
  const MemoryPlan plan = [&] {
    if (without.resident_bytes < r.resident_bytes) {
      PlanRequest quiet = r;
      quiet.advise = false;  // the tiling advice only for the plan that refuses
      MemoryPlan with_panels = plan_memory(quiet, &calls);
      if (with_panels.fits()) return with_panels;
      without.advise = false;
      if (plan_memory(without).fits()) {
        const std::uint64_t freed = be.release_caches();
        log::info("memory plan {}x{}: gave back {} of packed weights kept from earlier runs to make room", width,
                  height, mib_text(freed));
        r.resident_bytes = be.allocated_bytes();
      }
    }
    return plan_memory(r, &calls);
  }();
  log::debug("memory plan {}x{} on \"{}\": largest buffer {}, peak {} ({}), resident {}", width, height, plan.device,
             plan.largest.describe(), mib_text(plan.peak_bytes), plan.peak_component, mib_text(plan.resident_bytes));
  if (plan.fits()) {
    // What the run leaves free of the device's memory is all the backends may add to their caches (kept weight
    // panels) during it.
    const std::uint64_t used = plan.peak_bytes + plan.resident_bytes;
    if (plan.global_mem_bytes > 0) {
      const std::uint64_t room = plan.global_mem_bytes > used ? plan.global_mem_bytes - used : 0;
      for (const OpContext* c : {&cc.te, &cc.unet, &cc.vae}) c->be().limit_cache_growth(room);
    }
    return;
  }
  // A run at a smaller size gives the panels back if it needs their room.
  const int largest = largest_square_size(without, static_cast<int>(m.size_multiple()), std::min(width, height));
  throw MemoryPlanError(plan.refusal + (largest > 0 ? " The largest square size that fits is " +
                                                          std::to_string(largest) + "x" + std::to_string(largest) + "."
                                                    : ""),
                        plan.fix);
}

// A config that asks for fault emulation needs the emulator from its caller:
// the pipeline never makes one up (inspect::make_fault_emulator).
void require_faults(const inspect::InspectSettings& insp, const FaultEmulator* faults) {
  if (insp.emulate_r0 && faults == nullptr) {
    throw ConfigError(
        "inspect.emulate=r0: this run was started without a fault emulator; the program that starts "
        "it must pass inspect::make_fault_emulator(settings) to Session::generate");
  }
}

// One generate() call, in the stages a reader expects: resolve the size and
// contexts, encode the prompt, then per image sample, decode and apply the
// NaN policy. The run's state lives here, not in the Session.
class Txt2ImgRun {
 public:
  Txt2ImgRun(Session& session, const RunConfig& config, RunObserver& obs, FaultEmulator* faults)
      : session_(session), config_(config), obs_(obs), faults_(faults), insp_(inspect_settings(config.inspect)) {}

  // A Cancel stops the run within one op (OpContext::cancel): before the
  // first image nothing is reported; during an image, that image is reported
  // as cancelled with what it had (the latent, when sampling had finished).
  std::vector<GeneratedImage> run() {
    require_faults(insp_, faults_);
    std::vector<GeneratedImage> images;
    try {
      prepare();
      encode_conditionings();
    } catch (const Cancelled&) {
      log::info("cancelled before sampling");
      return images;
    }
    const auto seeds = config_.image_seeds();
    for (std::size_t img = 0; img < seeds.size(); ++img) {
      if (obs_.cancelled()) break;
      RunReport report = new_report(static_cast<int>(img));
      GeneratedImage out;
      out.config = config_.image_config(img);
      out.latent_shape = latent_shape_;
      ImageState state;
      try {
        sample(seeds[img], static_cast<int>(img), out, report, state);
        if (!report.cancelled && !report.stopped) decode_with_policy(out, report, state);
      } catch (const Cancelled& e) {
        log::info("image {}: {}", img + 1, e.what());
        report.cancelled = true;
      }
      if (report.cancelled) report.outcome = "cancelled";
      finish_layer_retry(report);
      report.kernel_notes = be_->kernel_notes();
      finish_inspection(report, state.first_bad_note, faults_);
      obs_.on_image(out, report);
      images.push_back(std::move(out));
      if (report.cancelled) break;
    }
    return images;
  }

 private:
  // The observer's Cancel, asked before every op.
  struct ObserverCancel final : CancelProbe {
    explicit ObserverCancel(const RunObserver& o) : obs(o) {}
    bool cancelled() const override { return obs.cancelled(); }
    const RunObserver& obs;
  };

  // What one image's stages hand each other beyond the report.
  struct ImageState {
    std::string first_bad_note;
    bool traced_unet = false;
  };

  // Loads the model, resolves each component's precision context and the size,
  // and checks that the run fits the device.
  void prepare() {
    const auto t_load = Clock::now();
    if (insp_.f16_safety) {
      // Before the run's own model loads: the probe loads the model in f32.
      obs_.on_status("f16 safety: one UNet call and one decode in f32");
      f16_safety_ = check_f16_safety(session_, config_, &cancel_);
    }
    obs_.on_status("loading model");
    m_ = &session_.model(config_);
    be_ = &session_.backend(config_.device);
    load_seconds_ = since(t_load);
    SdModel& m = *m_;

    unet_dtype_ = config_.component(Component::unet).precision.dtype;
    vae_dtype_ = config_.component(Component::vae).precision.dtype;
    const DType te_dtype = config_.component(Component::text_encoder).precision.dtype;
    cc_.te_policy = std::make_unique<ComponentPolicy>(config_, Component::text_encoder, te_dtype);
    cc_.unet_policy = std::make_unique<ComponentPolicy>(config_, Component::unet, unet_dtype_);
    cc_.vae_policy = std::make_unique<ComponentPolicy>(config_, Component::vae, vae_dtype_);
    cc_.te = make_context(*be_, config_, Component::text_encoder, cc_.te_policy.get(), te_dtype);
    cc_.unet = make_context(*be_, config_, Component::unet, cc_.unet_policy.get(), unet_dtype_);
    cc_.vae = make_context(*be_, config_, Component::vae, cc_.vae_policy.get(), vae_dtype_);
    cc_.te.faults = cc_.unet.faults = cc_.vae.faults = faults_;
    cc_.te.cancel = cc_.unet.cancel = cc_.vae.cancel = &cancel_;

    const int size = m.default_size();
    width_ = config_.width > 0 ? config_.width : size;
    height_ = config_.height > 0 ? config_.height : size;
    const std::int64_t multiple = m.size_multiple();
    if (!config_.init_image.empty()) {
      // img2img: the init image, at the run's size; without one, at its own size (rounded down to what the model
      // takes).
      const io::RgbImage probe = io::read_png(config_.init_image).image;
      auto fit = [multiple](int v) {
        return static_cast<int>(std::max<std::int64_t>(v / multiple * multiple, multiple));
      };
      if (config_.width <= 0) width_ = fit(probe.width);
      if (config_.height <= 0) height_ = fit(probe.height);
    }
    m.check_size(width_, height_, "size");
    hires_w_ = hires_h_ = 0;
    const bool resize = config_.hires_width > 0 || config_.hires_height > 0;
    if (config_.hires() && !resize && config_.hires_scale < 1) {
      throw ConfigError("key \"hires.scale\": " + fmt::format("{}", config_.hires_scale) +
                        ": the hires fix enlarges; use 1 to 8, or 0 for off");
    }
    if (config_.hires() && !config_.init_image.empty()) {
      throw ConfigError(
          "key \"hires.scale\": the hires fix is a second pass of txt2img (as in A1111); with init_image set, run "
          "img2img at the larger size instead (set width and height), or clear init_image");
    }
    if (config_.hires()) prepare_hires(m, resize);
    base_w_ = width_;
    base_h_ = height_;
    if (!config_.init_image.empty()) {
      init_note_.clear();
      init_image_ = load_init_image(config_.init_image, width_, height_, &init_note_);
      if (!init_note_.empty()) log::info("{}", init_note_);
    }
    set_size(width_, height_);
    if (faults_) faults_->begin_run(latent_shape_[2], latent_shape_[3]);
    cfg_ = config_.cfg_scale > 1.0;
    cfg_scale_ = config_.cfg_scale;
    sdxl_ = m.family() == ModelFamily::sdxl;
    const bool lanczos = config_.hires() && config_.hires_upscaler == HiresUpscaler::lanczos;
    const models::Vae* encoder = init_image_ || lanczos ? &session_.encoder_vae(config_) : nullptr;
    KernelCalls calls;
    require_memory(m, cc_, width_, height_, cfg_, config_, init_image_ ? encoder : nullptr, calls);
    if (config_.hires()) {
      try {
        require_memory(m, cc_, hires_w_, hires_h_, config_.hires_cfg_or_first() > 1.0, config_,
                       lanczos ? encoder : nullptr, calls);
      } catch (const MemoryPlanError& e) {
        throw MemoryPlanError("hires fix, pass 2 at " + std::to_string(hires_w_) + "x" + std::to_string(hires_h_) +
                                  ": " + e.what() +
                                  (resize ? " Lower hires.width and hires.height." : " Lower hires.scale."),
                              e.fix());
      }
    }
    // Report R4: what must be compiled before the run can go, and about how long it takes.
    if (const KernelPlan kp = plan_run_kernels(*be_, config_, calls); kp.to_build > 0) {
      obs_.on_status(kp.describe(be_->device().name));
      be_->build_planned(kp);
    }
  }

  // The hires fix's second pass, checked before any work: its size (A1111's
  // calculate_target_resolution, pipeline/img2img.hpp hires_target), its
  // sampler and schedule, and its prompt's LoRA tags.
  void prepare_hires(SdModel& m, bool resize) {
    const int f = static_cast<int>(m.vae->config().downscale());
    hires_ = hires_target(width_, height_, config_.hires_scale, config_.hires_width, config_.hires_height, f);
    hires_w_ = hires_.width;
    hires_h_ = hires_.height;
    const std::string what =
        resize ? fmt::format(
                     "hires fix size (hires.width {}, hires.height {} from {}x{}: enlarged to {}x{}{})",
                     config_.hires_width, config_.hires_height, width_, height_, hires_.upscale_w, hires_.upscale_h,
                     hires_.truncate_x || hires_.truncate_y
                         ? fmt::format(", {}x{} latent columns x rows cut", hires_.truncate_x, hires_.truncate_y)
                         : std::string())
               : "hires fix size (hires.scale " + fmt::format("{}", config_.hires_scale) + ")";
    if (hires_w_ <= 0 || hires_h_ <= 0) throw ConfigError(what + ": the second pass would be empty");
    m.check_size(hires_w_, hires_h_, what);
    if (config_.hires_upscaler == HiresUpscaler::lanczos &&
        (hires_.upscale_w != hires_w_ || hires_.upscale_h != hires_h_)) {
      // Lanczos decodes, resizes to the enlarged size and encodes it before the crop.
      m.check_size(hires_.upscale_w, hires_.upscale_h, what + ", encoded before the crop with hires.upscaler=lanczos");
    }
    // The second pass's sampler with its schedule (an impossible pair fails here, naming the keys).
    try {
      scheduler_config(config_.hires_sampler_or_first(), config_.hires_schedule_or_first());
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("hires.sampler {} with hires.schedule {}: {}",
                                    sampler_name(config_.hires_sampler_or_first()),
                                    schedule_name(config_.hires_schedule_or_first()), e.what()));
    }
    // One set of LoRAs is merged into the model for both passes: a hires prompt
    // must name the same <lora:...> tags as the prompt (A1111 would switch them).
    if (!config_.hires_prompt.empty()) {
      auto tags = [](const std::string& p) {
        std::vector<std::string> out;
        for (const auto& l : prompt_loras(p)) out.push_back(fmt::format("{}:{}:{}", l.name, l.weight, l.unet()));
        std::sort(out.begin(), out.end());
        return out;
      };
      if (tags(config_.hires_prompt) != tags(config_.prompt)) {
        throw ConfigError(
            "key \"hires.prompt\": its <lora:...> tags differ from the prompt's; NaNscope merges one set of LoRAs "
            "into the model for both passes, so give the hires prompt the same tags (or none of them in either)");
      }
    }
  }

  // The conditioning of each pass: the first pass's in context_/added_/cfg_,
  // the hires pass's kept apart when its prompts or guidance differ.
  void encode_conditionings() {
    hires_cond_.reset();
    if (config_.hires()) {
      const double g2 = config_.hires_cfg_or_first();
      const bool same_text = config_.hires_prompt_or_first() == config_.prompt &&
                             config_.hires_negative_or_first() == config_.negative_prompt;
      if (!same_text || (g2 > 1.0) != cfg_) {
        cfg_ = g2 > 1.0;
        encode_prompt(config_.hires_prompt_or_first(), config_.hires_negative_or_first(), false);
        hires_cond_ = Conditioning{context_, added_, cfg_};
        cfg_ = config_.cfg_scale > 1.0;
      }
    }
    encode_prompt(config_.prompt, config_.negative_prompt, true);
  }

  // The size the current pass samples at (the first pass's, or the hires fix's).
  void set_size(int width, int height) {
    const std::int64_t f = m_->vae->config().downscale();
    width_ = width;
    height_ = height;
    latent_shape_ = Shape{1, m_->unet->config().in_channels, height_ / f, width_ / f};
    latent_n_ = shape_numel(latent_shape_);
    if (sdxl_ && !added_.time_ids.empty()) fill_time_ids();
  }

  // SDXL's micro-conditioning: original size, crop and target size, per CFG row.
  void fill_time_ids() {
    added_.time_ids.clear();
    const int rows = cfg_ ? 2 : 1;
    for (int r = 0; r < rows; ++r) {
      const float ids6[] = {static_cast<float>(height_), static_cast<float>(width_), 0, 0,
                            static_cast<float>(height_), static_cast<float>(width_)};
      added_.time_ids.insert(added_.time_ids.end(), std::begin(ids6), std::end(ids6));
    }
  }

  // Text: [uncond, cond] in one batch when guidance is on (diffusers' order).
  void encode_prompt(const std::string& prompt_text, const std::string& negative_prompt, bool first_pass) {
    SdModel& m = *m_;
    Backend& be = *be_;
    obs_.on_status(first_pass ? "encoding the prompt" : "encoding the hires pass's prompt");
    const auto t_text = Clock::now();
    std::vector<std::vector<int>> ids, ids2;
    const std::string prompt = strip_lora_tags(prompt_text);  // <lora:...> is no text (A1111)
    if (cfg_) ids.push_back(m.tokenizer.encode(negative_prompt).ids);
    ids.push_back(m.tokenizer.encode(prompt).ids);
    if (!sdxl_) {
      context_ = m.text_encoder->forward(cc_.te, ids, config_.clip_skip).prompt_embeds;
    } else {
      if (config_.clip_skip != 0) throw ConfigError("clip_skip: SDXL already conditions on the penultimate layer");
      if (cfg_) ids2.push_back(m.tokenizer_2->encode(negative_prompt).ids);
      ids2.push_back(m.tokenizer_2->encode(prompt).ids);
      const auto o1 = m.text_encoder->forward(cc_.te, ids);
      const auto o2 = m.text_encoder_2->forward(cc_.te, ids2);
      const Tensor parts[] = {o1.penultimate, o2.penultimate};
      context_ = ops::concat(cc_.te, parts, 2);
      added_.text_embeds = o2.pooled;
      if (cfg_ && negative_prompt.empty() && m.force_zeros_for_empty_prompt()) {
        // SDXL: an empty negative prompt means zero embeddings, not the encoded "".
        HostTensor ctx_h = be.download(context_), pooled_h = be.download(added_.text_embeds);
        std::memset(ctx_h.data.data(), 0, ctx_h.data.size() / 2);
        std::memset(pooled_h.data.data(), 0, pooled_h.data.size() / 2);
        context_ = be.upload(ctx_h);
        added_.text_embeds = be.upload(pooled_h);
      }
      fill_time_ids();
    }
    if (context_.dtype() != unet_dtype_) context_ = ops::cast(cc_.te.child("to_unet"), context_, unet_dtype_);
    if (sdxl_ && added_.text_embeds.dtype() != unet_dtype_)
      added_.text_embeds = ops::cast(cc_.te.child("to_unet"), added_.text_embeds, unet_dtype_);
    if (first_pass) obs_.on_text_embeddings(be.download(context_));
    text_seconds_ += since(t_text);
  }

  RunReport new_report(int img) const {
    RunReport report;
    report.device = be_->device().name;
    report.model = m_->folder().string();
    report.family = std::string(models::model_family_name(m_->family()));
    report.image = img;
    report.load_seconds = load_seconds_;
    report.text_seconds = text_seconds_;
    report.inspection.emulation = faults_ != nullptr;
    report.loras = m_->loras();
    report.lora_unmerged = config_.lora_unmerged;
    report.f16_safety = f16_safety_;
    return report;
  }

  // The sampling loop of one image: the latent lives on the device from here
  // to the decode (the samplers' arithmetic runs there, kernels/latent.cl, and
  // the inspector reduces it there, so a step reads back a few KB of
  // statistics, and the full latent only for an observer that asks for it).
  // Leaves the final latent in out.latent.
  void sample(std::uint64_t seed, int img, GeneratedImage& out, RunReport& report, ImageState& state) {
    Backend& be = *be_;
    set_size(base_w_, base_h_);
    if (faults_) faults_->begin_run(latent_shape_[2], latent_shape_[3]);
    auto noise = make_noise(config_.noise, seed, config_.torch_cpu_kernel);
    auto sampler = make_sampler(scheduler_config());
    sampler->set_timesteps(config_.steps);
    const auto t_sample = Clock::now();
    PassReport pass;
    pass.pass = 1;
    pass.width = width_;
    pass.height = height_;
    pass.schedule_steps = config_.steps;
    describe_pass(pass, config_.sampler, config_.schedule, config_.prompt, config_.negative_prompt, config_.cfg_scale);
    Tensor latent;
    if (init_image_) {
      // diffusers' img2img: the posterior sample takes the generator's first draw, add_noise the next.
      const PartialSchedule ps = img2img_schedule(config_.steps, config_.strength);
      pass.kind = "img2img";
      pass.start_step = ps.start;
      pass.note = fmt::format("img2img: {} encoded, {} of {} steps (strength {})", config_.init_image, ps.run_steps(),
                              ps.schedule_steps, config_.strength);
      if (!init_note_.empty()) pass.note += "; " + init_note_;
      latent = be.upload(HostTensor::from_f32(latent_shape_, encode_image(*init_image_, *noise)));
      std::vector<float> z(static_cast<std::size_t>(latent_n_));
      noise->randn(z);
      obs_.on_initial_noise(img, latent_shape_, z);
      // A sampler of order 2 (two model calls per step) starts at call start * 2, as diffusers does (timesteps[t_start
      // * order:]).
      sampler->start_at(be, latent, be.upload(HostTensor::from_f32(latent_shape_, z)),
                        ps.start * sampler->calls_per_step());
    } else {
      pass.kind = "txt2img";
      std::vector<float> initial(static_cast<std::size_t>(latent_n_));
      noise->randn(initial);
      obs_.on_initial_noise(img, latent_shape_, initial);
      latent = be.upload(HostTensor::from_f32(latent_shape_, initial));
      latent_op(be, LatentOp::mul, latent_n_, latent, nullptr, 0, latent, sampler->init_noise_sigma());
    }
    const int passes = config_.hires() ? 2 : 1;
    auto ensd = step_noise(seed);
    run_steps(*sampler, latent, ensd ? ensd.get() : noise.get(), pass, passes, img, out, report, state);
    if (passes == 2 && !report.stopped && !report.cancelled) hires_pass(seed, img, latent, out, report, state);
    report.sampling_seconds = since(t_sample);
    out.latent = download_f32(be, latent);
    out.latent_shape = latent_shape_;
  }

  // noise.eta_seed_delta (A1111's ENSD, pipeline/step_noise.hpp): the per-step noise's own
  // generator, seeded seed + delta; null when the delta is 0 (the steps continue `noise`).
  std::unique_ptr<NoiseSource> step_noise(std::uint64_t seed) const {
    if (config_.eta_seed_delta == 0) return nullptr;
    return make_noise(config_.noise, step_noise_seed(seed, config_.eta_seed_delta), config_.torch_cpu_kernel);
  }

  // What a pass ran with, for its report.
  static void describe_pass(PassReport& pass, SamplerId sampler, ScheduleId schedule, const std::string& prompt,
                            const std::string& negative, double cfg_scale) {
    pass.sampler = std::string(sampler_name(sampler));
    pass.schedule = std::string(schedule_name(schedule));
    pass.prompt = prompt;
    pass.negative_prompt = negative;
    pass.cfg_scale = cfg_scale;
  }

  SchedulerConfig scheduler_config() const { return scheduler_config(config_.sampler, config_.schedule); }
  SchedulerConfig scheduler_config(SamplerId sampler, ScheduleId schedule) const {
    SchedulerConfig sc = SchedulerConfig::from_json(m_->scheduler_config(), sampler,
                                                    (m_->folder() / "scheduler" / "scheduler_config.json").string())
                             .with_schedule(schedule)
                             .with_unipc(config_);
    if (sc.clip_sample && !sdxl_) {
      // diffusers' StableDiffusionPipeline and StableDiffusionImg2ImgPipeline (SD 1.x/2.x, not SDXL) set
      // clip_sample=False on their scheduler ("clip_sample not set" deprecation in their __init__), so DDIM
      // never clips x0 inside them.
      log::debug("{}: clip_sample=True is turned off, as diffusers' Stable Diffusion pipelines do", sc.origin);
      sc.clip_sample = false;
    }
    return sc;
  }

  // The run's VAE encoder on an image [1, 3, H, W] in [-1, 1]: a sample of the
  // posterior drawn from `noise`, times scaling_factor (diffusers' retrieve_latents).
  std::vector<float> encode_image(const HostTensor& image, NoiseSource& noise) {
    obs_.on_status("encoding the image with the VAE");
    models::Vae& vae = session_.encoder_vae(config_);
    const Tensor x = upload_as(*be_, image.shape, image.to_f32(), vae_dtype_);
    const Tensor moments = vae.encode_moments(cc_.vae, x);
    const std::vector<float> mom = download_f32(*be_, moments);
    std::vector<float> eps(mom.size() / 2);
    noise.randn(eps);
    return sample_posterior(mom, vae.config().latent_channels, eps, vae.config().scaling_factor,
                            vae.config().shift_factor);
  }

  // The hires fix's second pass (A1111's sample_hr_pass): `latent` (the first
  // pass's, at the base size) enlarged to the hires size, re-noised from a new
  // generator seeded as the first, and sampled again for hires.steps steps.
  void hires_pass(std::uint64_t seed, int img, Tensor& latent, GeneratedImage& out, RunReport& report,
                  ImageState& state) {
    Backend& be = *be_;
    const Shape low_shape = latent_shape_;
    const int low_w = width_, low_h = height_;
    const std::vector<float> low = download_f32(be, latent);
    auto noise = make_noise(config_.noise, seed, config_.torch_cpu_kernel);
    const HiresUpscaler up = config_.hires_upscaler;
    const std::int64_t f = m_->vae->config().downscale();
    std::vector<float> x0;
    PassReport pass;
    pass.pass = 2;
    pass.kind = "hires";
    if (up == HiresUpscaler::lanczos) {
      // Decode, resize the 8-bit image with Lanczos, encode again (drawing the posterior sample first).
      obs_.on_status("hires fix: decoding the first pass");
      GeneratedImage first;
      first.config = out.config;
      first.latent_shape = low_shape;
      first.latent = low;
      const GeneratedImage decoded =
          session_.redecode(config_, first, m_->vae_folder(), vae_dtype_, nullptr, nullptr, faults_, &cancel_);
      // Resized to the enlarged size (the target's, unless the aspect changes) and encoded there.
      set_size(hires_w_, hires_h_);
      x0 = encode_image(rgb_to_tensor(resize_lanczos(decoded.image, hires_.upscale_w, hires_.upscale_h)), *noise);
    } else {
      set_size(hires_w_, hires_h_);
      x0 = interpolate_latent(low, low_shape, hires_.upscale_h / f, hires_.upscale_w / f, up);
    }
    if (hires_.truncate_x > 0 || hires_.truncate_y > 0) {
      // A1111 crops the enlarged latent's middle to the target's aspect (processing.py sample_hr_pass).
      x0 = truncate_latent(x0, Shape{1, latent_shape_[1], hires_.upscale_h / f, hires_.upscale_w / f},
                           hires_.truncate_x, hires_.truncate_y);
    }
    if (faults_) faults_->begin_run(latent_shape_[2], latent_shape_[3]);
    const int steps = config_.hires_steps > 0 ? config_.hires_steps : config_.steps;
    const PartialSchedule ps = hires_schedule(steps, config_.hires_denoise);
    const SamplerId sampler_id = config_.hires_sampler_or_first();
    const ScheduleId schedule_id = config_.hires_schedule_or_first();
    SchedulerConfig hires_config = scheduler_config(sampler_id, schedule_id);
    hires_config.unipc_hires_pass = true;  // A1111's UniPC counts this pass's steps its own way
    auto sampler = make_sampler(hires_config);
    sampler->set_timesteps(ps.schedule_steps);
    pass.width = width_;
    pass.height = height_;
    pass.schedule_steps = ps.schedule_steps;
    pass.start_step = ps.start;
    describe_pass(pass, sampler_id, schedule_id, config_.hires_prompt_or_first(), config_.hires_negative_or_first(),
                  config_.hires_cfg_or_first());
    const std::string enlarged =
        hires_.truncate_x || hires_.truncate_y
            ? fmt::format(" (enlarged to {}x{}, the middle kept)", hires_.upscale_w, hires_.upscale_h)
            : std::string();
    pass.note =
        fmt::format("hires: {} {}x{} -> {}x{}{}, {} of {} steps (denoise {})", hires_upscaler_a1111_name(up), low_w,
                    low_h, width_, height_, enlarged, ps.run_steps(), ps.schedule_steps, config_.hires_denoise);
    // Say what the second pass runs with where it is not the first's (A1111's "Use same ..." otherwise).
    if (sampler_id != config_.sampler || schedule_id != config_.schedule)
      pass.note += fmt::format(", sampler {} ({} schedule)", sampler_name(sampler_id), schedule_name(schedule_id));
    if (config_.hires_cfg_or_first() != config_.cfg_scale)
      pass.note += fmt::format(", CFG {}", config_.hires_cfg_or_first());
    if (config_.hires_prompt_or_first() != config_.prompt) pass.note += ", its own prompt";
    if (config_.hires_negative_or_first() != config_.negative_prompt) pass.note += ", its own negative prompt";
    log::info("{}", pass.note);
    std::vector<float> z(static_cast<std::size_t>(latent_n_));
    noise->randn(z);
    latent = be.upload(HostTensor::from_f32(latent_shape_, x0));
    // A sampler of order 2 (two model calls per step) starts at call start * 2, as diffusers does (timesteps[t_start *
    // order:]).
    sampler->start_at(be, latent, be.upload(HostTensor::from_f32(latent_shape_, z)),
                      ps.start * sampler->calls_per_step());
    auto ensd = step_noise(seed);
    // The second pass's conditioning and guidance, swapped in for its steps.
    const double first_scale = cfg_scale_;
    cfg_scale_ = config_.hires_cfg_or_first();
    if (hires_cond_) swap_conditioning();
    try {
      run_steps(*sampler, latent, ensd ? ensd.get() : noise.get(), pass, 2, img, out, report, state);
    } catch (...) {
      if (hires_cond_) swap_conditioning();
      cfg_scale_ = first_scale;
      throw;
    }
    if (hires_cond_) swap_conditioning();
    cfg_scale_ = first_scale;
  }

  void swap_conditioning() {
    std::swap(context_, hires_cond_->context);
    std::swap(added_, hires_cond_->added);
    std::swap(cfg_, hires_cond_->cfg);
    if (sdxl_) fill_time_ids();  // rows follow cfg_
  }

  // The steps of one pass, from the sampler's first step to its last, on `latent` (at latent_shape_).
  void run_steps(Sampler& sampler_ref, Tensor& latent, NoiseSource* noise_src, PassReport pass, int passes, int img,
                 GeneratedImage& out, RunReport& report, ImageState& state) {
    SdModel& m = *m_;
    Backend& be = *be_;
    Sampler* const sampler = &sampler_ref;
    if (sampler->brownian_noise_elsewhere() && report.reproducibility.empty()) {
      report.reproducibility = (pass.pass > 1 ? "the hires pass's " : "") + pass.sampler +
                               ": A1111 and ComfyUI (k-diffusion) draw this sampler's per-step noise from a "
                               "Brownian tree (torchsde), which no seed reproduces elsewhere; NaNscope draws it from "
                               "the run's noise source (" +
                               std::string(noise_src->name()) +
                               "), so the image matches theirs only in its initial noise";
      if (img == 0) log::warn("{}", report.reproducibility);
    }
    const auto preview_factors = inspect::latent_rgb_factors(preview_family(m));
    const double unet_limit = dtype_max(unet_dtype_);
    const bool final_pass = pass.pass == passes;
    // "step 3", or "pass 2 step 3" in a hires run.
    auto step_name = [&](int k) {
      return (passes > 1 ? "pass " + std::to_string(pass.pass) + " step " : std::string("step ")) + std::to_string(k);
    };
    obs_.on_status(passes > 1 ? "sampling, pass " + std::to_string(pass.pass) + " of " + std::to_string(passes)
                              : std::string("sampling"));
    const auto t_pass = Clock::now();
    const int rows = cfg_ ? 2 : 1;
    const int steps = sampler->num_steps();
    const int first = sampler->first_step();
    pass.steps = steps - first;
    Shape in_shape = latent_shape_;
    in_shape[0] = rows;
    inspect::RunInspection& ri = report.inspection;
    NoiseSource* noise = noise_src;
    for (int i = first; i < steps; ++i) {
      if (obs_.cancelled()) {
        report.cancelled = true;
        break;
      }
      const auto t_step = Clock::now();
      const int k = i - first;  // the step within this pass
      // [uncond, cond] rows of the scaled latent, in the UNet's dtype.
      Tensor batch_in = be.empty(in_shape, DType::f32);
      for (int r = 0; r < rows; ++r) sampler->scale_model_input(be, latent, batch_in, i, r * latent_n_);
      const Tensor unet_in = cast_to(be, batch_in, unet_dtype_);
      const float t = sampler->timesteps()[static_cast<std::size_t>(i)];
      const std::vector<float> ts(static_cast<std::size_t>(rows), t);
      Tensor pred = m.unet->forward(cc_.unet, unet_in, ts, context_, sdxl_ ? &added_ : nullptr);
      if (layer_retry_on()) {
        // retry-layer-f32: a UNet output with NaN/Inf is redone from the same inputs before the sampler uses it.
        const std::int64_t bad = count_nonfinite(be, pred);
        if (bad > 0) {
          std::int64_t left = bad;
          layer_retry(
              "unet " + step_name(k + 1), "unet", bad, std::nullopt, report,
              [&](inspect::LayerTracer& tracer) {
                OpContext tctx = cc_.unet;
                tctx.tracer = &tracer;
                m.unet->forward(tctx, unet_in, ts, context_, sdxl_ ? &added_ : nullptr);
              },
              [&](std::optional<inspect::LayerTrace>&) {
                pred = m.unet->forward(cc_.unet, unet_in, ts, context_, sdxl_ ? &added_ : nullptr);
                left = count_nonfinite(be, pred);
                return left;
              });
          // Still broken: its trace is in the report already, the one below would repeat it.
          if (left > 0) state.traced_unet = true;
        }
      }
      const Tensor pred32 = cast_to(be, pred, DType::f32);
      Tensor guided = pred32;
      if (cfg_) {
        // uncond + g * (cond - uncond)
        guided = be.empty(latent_shape_, DType::f32);
        latent_op(be, LatentOp::cfg, latent_n_, pred32, &pred32, latent_n_, guided, static_cast<float>(cfg_scale_));
      }
      const bool decode_preview = insp_.decode_every > 0 && (k + 1) % insp_.decode_every == 0 && i + 1 < steps;
      Tensor denoised;
      if (decode_preview) denoised = be.empty(latent_shape_, DType::f32);
      sampler->step(be, guided, latent, i, noise, decode_preview ? &denoised : nullptr);

      StepReport sr;
      sr.image = img;
      sr.index = k;
      sr.steps = steps - first;
      sr.pass = pass.pass;
      sr.passes = passes;
      sr.sampler_step = sampler->step_of_call(i);
      sr.sampler_steps = sampler->step_of_call(steps - 1) + 1;
      sr.call_in_step = i % sampler->calls_per_step();
      sr.timestep = t;
      sr.sigma = sampler->model_sigma(i);
      sr.latent_shape = latent_shape_;
      const auto& sigmas = sampler->sigmas();
      const double sigma_after =
          static_cast<std::size_t>(i + 1) < sigmas.size() ? sigmas[static_cast<std::size_t>(i + 1)] : 0.0;
      if (insp_.stats_every > 0 && ((k + 1) % insp_.stats_every == 0 || i + 1 == steps)) {
        // The inspector's kernels queue behind the step's; its reads wait for both. inspect_seconds
        // is the inspector's own time: the call's wall time less what it waited for the device.
        const auto t_inspect = Clock::now();
        const double waited = be.inspect_wait_seconds();
        sr.stats = inspect::analyze_step(be, latent, pred, cfg_ ? 1 : 0, cfg_ ? 0 : -1, unet_limit,
                                         preview_factors ? &*preview_factors : nullptr, sigma_after, &sr.inspect_bytes);
        sr.inspect_seconds = std::max(0.0, since(t_inspect) - (be.inspect_wait_seconds() - waited));
        sr.latent = sr.stats.latent.all;
        sr.noise_cond = sr.stats.noise_cond.all;
        if (sr.stats.noise_uncond) sr.noise_uncond = sr.stats.noise_uncond->all;
      } else {
        sr.stats.sigma_after = sigma_after;
        be.synchronize();  // the step's time is its kernels' time
      }
      if (obs_.wants_latents()) sr.latent_values = download_f32(be, latent);
      if (decode_preview) {
        // The picture the run is heading for: x0 predicted at this step, through the run's own VAE and precision.
        const auto t_preview = Clock::now();
        GeneratedImage x0;
        x0.config = out.config;
        x0.latent_shape = latent_shape_;
        x0.latent = download_f32(be, denoised);
        const GeneratedImage d =
            session_.redecode(config_, x0, m.vae_folder(), vae_dtype_, nullptr, nullptr, faults_, &cancel_);
        sr.stats.decoded.width = d.image.width;
        sr.stats.decoded.height = d.image.height;
        sr.stats.decoded.rgb = d.image.pixels;
        sr.decode_seconds = since(t_preview);
      }
      sr.seconds = since(t_step);

      // Run-level view: the first bad step and, on demand, the layer trace of
      // this step's UNet call (re-run with the tracer: the call is deterministic).
      const inspect::StepStats& st = sr.stats;
      ri.verdict = inspect::worst(ri.verdict, st.verdict);
      if (ri.first_bad_step < 0 && static_cast<int>(st.verdict) >= static_cast<int>(inspect::Verdict::saturated)) {
        ri.first_bad_step = k;
        ri.first_bad_pass = pass.pass;
        const inspect::MapStats* bad = &st.latent;
        ri.first_bad_branch = "latent";
        if (st.noise_uncond && st.noise_uncond->verdict == st.verdict) {
          bad = &*st.noise_uncond;
          ri.first_bad_branch = "noise_uncond";
        }
        if (st.noise_cond.verdict == st.verdict) {
          bad = &st.noise_cond;
          ri.first_bad_branch = "noise_cond";
        }
        state.first_bad_note = step_name(k + 1) + " " + ri.first_bad_branch + ": " + bad->note;
        if (passes > 1) state.first_bad_note += " (" + pass.note + ")";
      }
      const bool unet_bad =
          st.noise_cond.all.nonfinite() > 0 || (st.noise_uncond && st.noise_uncond->all.nonfinite() > 0) ||
          st.noise_cond.all.near_limit > 0 || (st.noise_uncond && st.noise_uncond->all.near_limit > 0);
      const bool step_bad = static_cast<int>(st.verdict) >= static_cast<int>(inspect::Verdict::saturated);
      const bool last = i + 1 == steps && final_pass;
      if (!state.traced_unet && insp_.trace != inspect::TraceMode::off &&
          (unet_bad || step_bad || (last && insp_.trace == inspect::TraceMode::always))) {
        obs_.on_status("tracing the UNet call of " + step_name(k + 1));
        inspect::LayerTracer tracer("unet", "unet " + step_name(k + 1));
        OpContext tctx = cc_.unet;
        tctx.tracer = &tracer;
        m.unet->forward(tctx, unet_in, ts, context_, sdxl_ ? &added_ : nullptr);
        ri.traces.push_back(tracer.trace());
        state.traced_unet = true;
      }
      obs_.on_step(sr);
      if (sr.latent.nonfinite() > 0 && report.first_nonfinite_step < 0) {
        report.first_nonfinite_step = k;
        report.first_nonfinite_pass = pass.pass;
        log::warn("{}: the latent holds {} non-finite values (NaN {}, +Inf {}, -Inf {})", step_name(k + 1),
                  sr.latent.nonfinite(), sr.latent.nan, sr.latent.pos_inf, sr.latent.neg_inf);
        if (config_.nan_policy.kind == NanPolicy::Kind::stop) {
          report.stopped = true;
          report.outcome = "stopped at " + step_name(k + 1) + ": the latent went non-finite";
          break;
        }
      }
    }
    pass.seconds = since(t_pass);
    report.passes.push_back(std::move(pass));
  }

  // The decode of the kept latent, traced when it fails (or always, on
  // request), then the NaN policy: decode the kept latent again in f32 or with
  // another VAE when the first decode went non-finite.
  void decode_with_policy(GeneratedImage& out, RunReport& report, ImageState&) {
    SdModel& m = *m_;
    inspect::RunInspection& ri = report.inspection;
    obs_.on_status("decoding");
    const auto t_dec = Clock::now();
    DecodeAttempt first;
    std::optional<inspect::LayerTracer> decode_tracer;
    if (insp_.trace == inspect::TraceMode::always) decode_tracer.emplace("vae", "vae decode");
    GeneratedImage decoded = session_.redecode(config_, out, m.vae_folder(), vae_dtype_, &first,
                                               decode_tracer ? &*decode_tracer : nullptr, faults_, &cancel_);
    if (!decode_tracer && insp_.trace == inspect::TraceMode::automatic &&
        (first.nonfinite > 0 ||
         static_cast<int>(first.image.map.verdict) >= static_cast<int>(inspect::Verdict::saturated))) {
      // Re-run the failing decode with the tracer to name the op that broke.
      obs_.on_status("tracing the decode");
      decode_tracer.emplace("vae", "vae decode");
      session_.redecode(config_, out, m.vae_folder(), vae_dtype_, nullptr, &*decode_tracer, faults_, &cancel_);
    }
    std::optional<inspect::LayerTrace> first_trace;
    if (decode_tracer) {
      first_trace = decode_tracer->trace();
      ri.traces.push_back(*first_trace);
    }
    report.decodes.push_back(first);
    out.image = std::move(decoded.image);
    out.nonfinite_pixels = decoded.nonfinite_pixels;
    if (first.nonfinite == 0) {
      report.outcome = report.first_nonfinite_step >= 0 ? "the latent went non-finite during sampling" : "clean";
    } else {
      report.outcome = "decode gave " + std::to_string(first.nonfinite) + " non-finite values (VAE " +
                       std::string(dtype_name(vae_dtype_)) + ")";
      log::warn("decode: image {}x{} has {} non-finite values with the VAE in {} ({})", width_, height_,
                first.nonfinite, dtype_name(vae_dtype_), m.vae_folder().string());
      apply_nan_policy(out, report, first, std::move(first_trace));
    }
    report.decode_seconds = since(t_dec);
  }

  void apply_nan_policy(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
                        std::optional<inspect::LayerTrace> first_trace) {
    const NanPolicy& policy = config_.nan_policy;
    if (policy.kind == NanPolicy::Kind::retry_layer_f32) {
      retry_decode_layers(out, report, first, std::move(first_trace));
      return;
    }
    std::optional<std::pair<fs::path, DType>> retry;
    if (policy.kind == NanPolicy::Kind::retry_vae_f32 && vae_dtype_ != DType::f32) {
      retry.emplace(m_->vae_folder(), DType::f32);
    } else if (policy.kind == NanPolicy::Kind::retry_vae) {
      retry.emplace(policy.vae_path, vae_dtype_);
    }
    if (!retry) return;
    obs_.on_status("decoding again");
    DecodeAttempt second;
    GeneratedImage again =
        session_.redecode(config_, out, retry->first, retry->second, &second, nullptr, faults_, &cancel_);
    report.decodes.push_back(second);
    report.outcome += "; decoded the kept latent again with " + retry->first.filename().string() + " in " +
                      std::string(dtype_name(retry->second)) + ": " +
                      (second.nonfinite == 0 ? "clean" : std::to_string(second.nonfinite) + " non-finite");
    log::info("{}", report.outcome);
    out.image = std::move(again.image);
    out.nonfinite_pixels = again.nonfinite_pixels;
  }

  bool layer_retry_on() const { return config_.nan_policy.kind == NanPolicy::Kind::retry_layer_f32; }

  static std::int64_t count_nonfinite(Backend& be, const Tensor& t) {
    std::int64_t n = 0;
    for (float v : download_f32(be, t)) n += std::isfinite(v) ? 0 : 1;
    return n;
  }

  // The contexts follow config_'s overrides (the retry policy adds some).
  void refresh_contexts() {
    const bool any = !config_.overrides.empty();
    cc_.te.policy = any ? cc_.te_policy.get() : nullptr;
    cc_.unet.policy = any ? cc_.unet_policy.get() : nullptr;
    cc_.vae.policy = any ? cc_.vae_policy.get() : nullptr;
    cc_.te.mixed_precision = config_.has_dtype_overrides(Component::text_encoder);
    cc_.unet.mixed_precision = config_.has_dtype_overrides(Component::unet);
    cc_.vae.mixed_precision = config_.has_dtype_overrides(Component::vae);
  }

  // retry-layer-f32 for one failed call (`bad` non-finite values in its
  // output): trace it (or use `known`, a trace of it as it is now), upcast the
  // module of the op that broke to f32, redo it from the same inputs, and go
  // on with the next origin until it is clean or the limit is reached.
  // `traced(tracer)` runs the call with a tracer; `redo(trace)` runs it again
  // and returns its non-finite count (setting `trace` when it traced itself).
  template <class Traced, class Redo>
  void layer_retry(const std::string& call, const std::string& component, std::int64_t bad,
                   std::optional<inspect::LayerTrace> known, RunReport& report, Traced traced, Redo redo) {
    LayerRetryReport& lr = report.layer_retry;
    lr.active = true;
    lr.limit = insp_.layer_retry_limit;
    auto stop = [&](const std::string& why) {
      if (lr.remaining.empty()) lr.remaining = why;
      log::warn("retry-layer-f32: {}", why);
    };
    while (bad > 0) {
      const std::string still = call + " still gives " + std::to_string(bad) + " non-finite values";
      if (static_cast<int>(lr.attempts.size()) >= lr.limit) {
        lr.limit_reached = true;
        stop(still + ": the limit of " + std::to_string(lr.limit) +
             " upcast modules per image (inspect.layer_retry_limit) is reached");
        return;
      }
      LayerRetryAttempt a;
      a.call = call;
      a.nonfinite_before = bad;
      if (!known) {
        obs_.on_status("tracing " + call + " to find the layer that broke");
        const auto t_trace = Clock::now();
        inspect::LayerTracer tracer(component, call);
        traced(tracer);
        known = tracer.trace();
        a.trace_seconds = since(t_trace);
        report.inspection.traces.push_back(*known);
      }
      const inspect::OpRecord* origin = known->origin_op();
      if (origin == nullptr) {
        stop(still +
             ", but its layer trace names no op that turned finite inputs into non-finite output, so there "
             "is no module to upcast");
        return;
      }
      a.origin = origin->full_path();
      a.origin_op = origin->op;
      if (origin->path.empty()) {
        stop(still + ": the op that breaks (" + a.origin_op + ") belongs to no module inside " + component +
             ", so only the whole component can be upcast (" + component + ".dtype=f32)");
        return;
      }
      if (origin->dtype == DType::f32) {
        stop(still + ": " + a.origin + " (" + a.origin_op + ") breaks in f32 already, so upcasting cannot fix it");
        return;
      }
      a.upcast = a.origin;
      config_.set(a.upcast + ".dtype", "f32");
      refresh_contexts();
      upcast_.push_back(a.upcast);
      obs_.on_status("redoing " + call + " with " + a.upcast + " in f32");
      known.reset();
      const auto t_redo = Clock::now();
      bad = redo(known);
      a.redo_seconds = since(t_redo);
      a.nonfinite_after = bad;
      log::info("retry-layer-f32: {}: {} ({}) broke; computed it in f32 and redid the call: {} ({:.3f} s)", call,
                a.origin, a.origin_op, bad == 0 ? "clean" : std::to_string(bad) + " non-finite values left",
                a.trace_seconds + a.redo_seconds);
      lr.attempts.push_back(std::move(a));
    }
  }

  // retry-layer-f32 for a failed decode: each redo decodes the kept latent
  // again with the modules found so far in f32 (traced too with inspect.trace=always).
  void retry_decode_layers(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
                           std::optional<inspect::LayerTrace> first_trace) {
    const fs::path vae = m_->vae_folder();
    layer_retry(
        "vae decode", "vae", first.nonfinite, std::move(first_trace), report,
        [&](inspect::LayerTracer& tracer) {
          session_.redecode(config_, out, vae, vae_dtype_, nullptr, &tracer, faults_, &cancel_);
        },
        [&](std::optional<inspect::LayerTrace>& trace) {
          DecodeAttempt again;
          std::optional<inspect::LayerTracer> tracer;
          if (insp_.trace == inspect::TraceMode::always) tracer.emplace("vae", "vae decode");
          GeneratedImage img =
              session_.redecode(config_, out, vae, vae_dtype_, &again, tracer ? &*tracer : nullptr, faults_, &cancel_);
          if (tracer) {
            trace = tracer->trace();
            report.inspection.traces.push_back(*trace);
          }
          report.decodes.push_back(again);
          out.image = std::move(img.image);
          out.nonfinite_pixels = img.nonfinite_pixels;
          return again.nonfinite;
        });
  }

  // The image's layer-retry report: the modules upcast so far in the run,
  // whether it came out clean, and a line in the outcome.
  void finish_layer_retry(RunReport& report) const {
    LayerRetryReport& lr = report.layer_retry;
    if (!lr.active) return;
    lr.upcast = upcast_;
    if (report.cancelled && lr.remaining.empty()) lr.remaining = "the run was cancelled before the retries finished";
    lr.clean = lr.remaining.empty();
    std::string modules;
    for (const auto& u : lr.upcast) modules += (modules.empty() ? "" : ", ") + u;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f s", lr.seconds());
    std::string line = "retry-layer-f32 computed " + std::to_string(lr.upcast.size()) + " module" +
                       (lr.upcast.size() == 1 ? "" : "s") + " in f32 (" + (modules.empty() ? "none" : modules) + "), " +
                       std::to_string(lr.attempts.size()) + " redone call" + (lr.attempts.size() == 1 ? "" : "s") +
                       ", " + secs + ": " + (lr.clean ? "clean" : lr.remaining);
    report.outcome += (report.outcome.empty() ? "" : "; ") + line;
    log::info("{}", line);
  }

  Session& session_;
  RunConfig config_;  // the run's config; retry-layer-f32 adds dtype overrides to it
  RunObserver& obs_;
  FaultEmulator* faults_;
  const inspect::InspectSettings insp_;
  const ObserverCancel cancel_{obs_};

  SdModel* m_ = nullptr;
  Backend* be_ = nullptr;
  ComponentContexts cc_;
  double load_seconds_ = 0, text_seconds_ = 0;
  int width_ = 0, height_ = 0;            // the current pass's size
  int base_w_ = 0, base_h_ = 0;           // the first pass's
  int hires_w_ = 0, hires_h_ = 0;         // the hires fix's second pass's (0: no hires fix)
  std::optional<HostTensor> init_image_;  // img2img: the init image at the first pass's size, in [-1, 1]
  std::string init_note_;                 // how it was resized, if it was
  Shape latent_shape_;
  std::int64_t latent_n_ = 0;
  bool cfg_ = false, sdxl_ = false;
  double cfg_scale_ = 0;  // the current pass's guidance scale
  HiresTarget hires_;     // the hires fix's sizes (A1111's hr_upscale_to, truncate)
  // The hires pass's conditioning, when its prompts or guidance differ from the first pass's.
  struct Conditioning {
    Tensor context;
    models::AddedConditions added;
    bool cfg = false;
  };
  std::optional<Conditioning> hires_cond_;
  DType unet_dtype_ = DType::f32, vae_dtype_ = DType::f32;
  Tensor context_;
  models::AddedConditions added_;
  std::vector<std::string> upcast_;  // modules retry-layer-f32 set to f32 in this run, in order
  // inspect.f16_safety: the probe's result, in every image's report.
  std::optional<F16SafetyReport> f16_safety_;
};

}  // namespace

std::vector<GeneratedImage> Session::generate(const RunConfig& config, RunObserver* observer, FaultEmulator* faults) {
  config.validate();
  RunObserver fallback;
  return Txt2ImgRun(*this, config, observer ? *observer : fallback, faults).run();
}

GeneratedImage Session::redecode(const RunConfig& config, const GeneratedImage& image, const fs::path& vae_folder,
                                 DType dtype, DecodeAttempt* attempt, OpTracer* tracer, FaultEmulator* faults,
                                 const CancelProbe* cancel) {
  require_faults(inspect_settings(config.inspect), faults);
  SdModel& m = model(config);
  Backend& be = backend(config.device);
  const bool own = vae_folder == m.vae_folder() && dtype == m.dtypes().vae;
  models::Vae& vae = own ? *m.vae : vae_for(be, vae_folder, dtype, m.family());
  ComponentPolicy policy(config, Component::vae, dtype);
  OpContext ctx = make_context(be, config, Component::vae, &policy, dtype);
  ctx.tracer = tracer;
  ctx.faults = faults;
  ctx.cancel = cancel;
  if (faults) faults->begin_run(image.latent_shape[2], image.latent_shape[3]);
  const auto t0 = Clock::now();
  // vae.tiling: on always; auto when the whole decode would not fit the device (the memory plan's answer).
  models::VaeTiles tiles;
  const auto whole_decode_fits = [&] {
    const std::uint64_t resident = be.allocated_bytes();
    if (decode_fits(vae, ctx, image.latent_shape, resident)) return true;
    // Kept weight panels count as resident. When the decode fits whole without them they are given back (a fresh
    // session would not tile it: the same image), and none are kept for the rest of the run, or every preview
    // decode would find them again.
    const std::uint64_t cached = std::min(be.cache_bytes(), resident);
    if (cached == 0 || !decode_fits(vae, ctx, image.latent_shape, resident - cached)) return false;
    log::info("VAE decode: gave back {} of packed weights to decode the image whole", mib_text(be.release_caches()));
    be.limit_cache_growth(0);
    return decode_fits(vae, ctx, image.latent_shape, be.allocated_bytes());
  };
  if (config.vae_tiling == "on" || (config.vae_tiling == "auto" && !whole_decode_fits())) {
    tiles = models::vae_tiles(config.vae_tile_size, config.vae_tile_overlap, vae.config().downscale());
    log::info("decoding in VAE tiles of {} latent pixels (overlap {})", tiles.tile, tiles.overlap);
  }
  const Tensor img = models::decode_tiled(vae, ctx, upload_as(be, image.latent_shape, image.latent, dtype), tiles);
  HostTensor host = be.download(img).converted(DType::f32);
  const std::vector<float> pixels = host.to_f32();
  inspect::ImageStats check = inspect::analyze_image(
      std::span<const float>(pixels).first(static_cast<std::size_t>(3 * host.shape[2] * host.shape[3])), host.shape[2],
      host.shape[3]);
  GeneratedImage out;
  out.config = image.config;
  out.latent_shape = image.latent_shape;
  out.latent = image.latent;
  out.image = to_rgb8(host, out.nonfinite_pixels);
  if (attempt) {
    attempt->vae = vae_folder.string();
    attempt->dtype = dtype;
    attempt->nonfinite = out.nonfinite_pixels;
    attempt->seconds = since(t0);
    attempt->image = std::move(check);
  }
  return out;
}

}  // namespace nanscope::pipeline
