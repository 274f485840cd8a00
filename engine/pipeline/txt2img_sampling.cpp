// txt2img's passes (Txt2ImgRun, txt2img_run.hpp): the first pass from noise or
// an encoded init image, the hires fix's second pass, and the steps of each:
// the UNet call with CFG, the sampler's step, the inspector's statistics,
// previews and layer traces.

#include <algorithm>
#include <cmath>
#include <string>

#include "config/a1111.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/step_noise.hpp"
#include "pipeline/txt2img_run.hpp"

namespace nanscope::pipeline::txt2img {

namespace fs = std::filesystem;

void Txt2ImgRun::sample(std::uint64_t seed, int img, GeneratedImage& out, RunReport& report, ImageState& state) {
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

std::unique_ptr<NoiseSource> Txt2ImgRun::step_noise(std::uint64_t seed) const {
  if (config_.eta_seed_delta == 0) return nullptr;
  return make_noise(config_.noise, step_noise_seed(seed, config_.eta_seed_delta), config_.torch_cpu_kernel);
}

void Txt2ImgRun::describe_pass(PassReport& pass, SamplerId sampler, ScheduleId schedule, const std::string& prompt,
                               const std::string& negative, double cfg_scale) {
  pass.sampler = std::string(sampler_name(sampler));
  pass.schedule = std::string(schedule_name(schedule));
  pass.prompt = prompt;
  pass.negative_prompt = negative;
  pass.cfg_scale = cfg_scale;
}

SchedulerConfig Txt2ImgRun::scheduler_config(SamplerId sampler, ScheduleId schedule) const {
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

std::vector<float> Txt2ImgRun::encode_image(const HostTensor& image, NoiseSource& noise) {
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

void Txt2ImgRun::hires_pass(std::uint64_t seed, int img, Tensor& latent, GeneratedImage& out, RunReport& report,
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
    x0 = truncate_latent(x0, Shape{1, latent_shape_[1], hires_.upscale_h / f, hires_.upscale_w / f}, hires_.truncate_x,
                         hires_.truncate_y);
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

void Txt2ImgRun::swap_conditioning() {
  std::swap(context_, hires_cond_->context);
  std::swap(added_, hires_cond_->added);
  std::swap(cfg_, hires_cond_->cfg);
  if (sdxl_) fill_time_ids();  // rows follow cfg_
}

void Txt2ImgRun::run_steps(Sampler& sampler_ref, Tensor& latent, NoiseSource* noise_src, PassReport pass, int passes,
                           int img, GeneratedImage& out, RunReport& report, ImageState& state) {
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
    const bool unet_bad = st.noise_cond.all.nonfinite() > 0 ||
                          (st.noise_uncond && st.noise_uncond->all.nonfinite() > 0) ||
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

}  // namespace nanscope::pipeline::txt2img
