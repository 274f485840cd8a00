// txt2img: tokenize, encode (uncond + cond in one batch), sample with CFG
// (txt2img_sampling.cpp), decode, check the image, apply the NaN policy
// (txt2img_retry.cpp); this file prepares the run and encodes the prompt. The
// latent lives on the run's device while sampling (the samplers' arithmetic
// and the inspector's reductions run there, so a step reads back a few KB of
// statistics); after the last step it is read back and kept
// (GeneratedImage::latent), so a failed decode can be retried with another
// VAE or precision without re-sampling.

#include "pipeline/txt2img_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "config/lora_list.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/kernel_plan.hpp"
#include "pipeline/memory_plan.hpp"

namespace nanscope::pipeline {

namespace fs = std::filesystem;

namespace txt2img {

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

Tensor upload_as(Backend& be, const Shape& shape, std::span<const float> values, DType dtype) {
  return be.upload(HostTensor::from_f32(shape, std::vector<float>(values.begin(), values.end()), dtype));
}

std::vector<float> download_f32(Backend& be, const Tensor& t) { return be.download(t).to_f32(); }

Tensor cast_to(Backend& be, const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  Tensor out = be.empty(x.shape(), to);
  be.cast(CastArgs{x, out});
  return out;
}

void latent_op(Backend& be, LatentOp op, std::int64_t n, const Tensor& x, const Tensor* m, std::int64_t m_off,
               Tensor& out, float c0) {
  be.latent_step(LatentStepArgs{op, n, x, 0, m, m_off, nullptr, nullptr, out, 0, nullptr, {c0}, 0, 0});
}

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

namespace {

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

}  // namespace

std::vector<GeneratedImage> Txt2ImgRun::run() {
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

void Txt2ImgRun::prepare() {
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
  cc_.te = component_context(*be_, config_, Component::text_encoder, cc_.te_policy.get(), te_dtype);
  cc_.unet = component_context(*be_, config_, Component::unet, cc_.unet_policy.get(), unet_dtype_);
  cc_.vae = component_context(*be_, config_, Component::vae, cc_.vae_policy.get(), vae_dtype_);
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
      throw MemoryPlanError("hires fix, pass 2 at " + std::to_string(hires_w_) + "x" + std::to_string(hires_h_) + ": " +
                                e.what() + (resize ? " Lower hires.width and hires.height." : " Lower hires.scale."),
                            e.fix());
    }
  }
  // Report R4: what must be compiled before the run can go, and about how long it takes.
  if (const KernelPlan kp = plan_run_kernels(*be_, config_, calls); kp.to_build > 0) {
    obs_.on_status(kp.describe(be_->device().name));
    be_->build_planned(kp);
  }
}

void Txt2ImgRun::prepare_hires(SdModel& m, bool resize) {
  const int f = static_cast<int>(m.vae->config().downscale());
  hires_ = hires_target(width_, height_, config_.hires_scale, config_.hires_width, config_.hires_height, f);
  hires_w_ = hires_.width;
  hires_h_ = hires_.height;
  const std::string what =
      resize
          ? fmt::format("hires fix size (hires.width {}, hires.height {} from {}x{}: enlarged to {}x{}{})",
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

void Txt2ImgRun::encode_conditionings() {
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

void Txt2ImgRun::set_size(int width, int height) {
  const std::int64_t f = m_->vae->config().downscale();
  width_ = width;
  height_ = height;
  latent_shape_ = Shape{1, m_->unet->config().in_channels, height_ / f, width_ / f};
  latent_n_ = shape_numel(latent_shape_);
  if (sdxl_ && !added_.time_ids.empty()) fill_time_ids();
}

void Txt2ImgRun::fill_time_ids() {
  added_.time_ids.clear();
  const int rows = cfg_ ? 2 : 1;
  for (int r = 0; r < rows; ++r) {
    const float ids6[] = {static_cast<float>(height_), static_cast<float>(width_), 0, 0,
                          static_cast<float>(height_), static_cast<float>(width_)};
    added_.time_ids.insert(added_.time_ids.end(), std::begin(ids6), std::end(ids6));
  }
}

void Txt2ImgRun::encode_prompt(const std::string& prompt_text, const std::string& negative_prompt, bool first_pass) {
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

RunReport Txt2ImgRun::new_report(int img) const {
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

}  // namespace txt2img

using txt2img::Clock;
using txt2img::since;

std::vector<GeneratedImage> Session::generate(const RunConfig& config, RunObserver* observer, FaultEmulator* faults) {
  config.validate();
  RunObserver fallback;
  return txt2img::Txt2ImgRun(*this, config, observer ? *observer : fallback, faults).run();
}

GeneratedImage Session::redecode(const RunConfig& config, const GeneratedImage& image, const fs::path& vae_folder,
                                 DType dtype, DecodeAttempt* attempt, OpTracer* tracer, FaultEmulator* faults,
                                 const CancelProbe* cancel) {
  txt2img::require_faults(inspect_settings(config.inspect), faults);
  SdModel& m = model(config);
  Backend& be = backend(config.device);
  const bool own = vae_folder == m.vae_folder() && dtype == m.dtypes().vae;
  models::Vae& vae = own ? *m.vae : vae_for(be, vae_folder, dtype, m.family());
  ComponentPolicy policy(config, Component::vae, dtype);
  OpContext ctx = component_context(be, config, Component::vae, &policy, dtype);
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
  const Tensor img =
      models::decode_tiled(vae, ctx, txt2img::upload_as(be, image.latent_shape, image.latent, dtype), tiles);
  HostTensor host = be.download(img).converted(DType::f32);
  const std::vector<float> pixels = host.to_f32();
  inspect::ImageStats check = inspect::analyze_image(
      std::span<const float>(pixels).first(static_cast<std::size_t>(3 * host.shape[2] * host.shape[3])), host.shape[2],
      host.shape[3]);
  GeneratedImage out;
  out.config = image.config;
  out.latent_shape = image.latent_shape;
  out.latent = image.latent;
  out.image = txt2img::to_rgb8(host, out.nonfinite_pixels);
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
