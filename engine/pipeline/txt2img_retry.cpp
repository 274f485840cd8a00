// txt2img's decode and NaN policy (Txt2ImgRun, txt2img_run.hpp): the decode of
// the kept latent, traced when it fails; decoding again in f32 or with another
// VAE; and retry-layer-f32, which upcasts the module of the op that broke and
// redoes the call.

#include <cmath>
#include <cstdio>
#include <string>

#include "core/log.hpp"
#include "pipeline/txt2img_run.hpp"

namespace nanscope::pipeline::txt2img {

namespace fs = std::filesystem;

void Txt2ImgRun::decode_with_policy(GeneratedImage& out, RunReport& report, ImageState&) {
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
    log::warn("decode: image {}x{} has {} non-finite values with the VAE in {} ({})", width_, height_, first.nonfinite,
              dtype_name(vae_dtype_), m.vae_folder().string());
    apply_nan_policy(out, report, first, std::move(first_trace));
  }
  report.decode_seconds = since(t_dec);
}

void Txt2ImgRun::apply_nan_policy(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
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

std::int64_t Txt2ImgRun::count_nonfinite(Backend& be, const Tensor& t) {
  std::int64_t n = 0;
  for (float v : download_f32(be, t)) n += std::isfinite(v) ? 0 : 1;
  return n;
}

void Txt2ImgRun::refresh_contexts() {
  const bool any = !config_.overrides.empty();
  cc_.te.policy = any ? cc_.te_policy.get() : nullptr;
  cc_.unet.policy = any ? cc_.unet_policy.get() : nullptr;
  cc_.vae.policy = any ? cc_.vae_policy.get() : nullptr;
  cc_.te.mixed_precision = config_.has_dtype_overrides(Component::text_encoder);
  cc_.unet.mixed_precision = config_.has_dtype_overrides(Component::unet);
  cc_.vae.mixed_precision = config_.has_dtype_overrides(Component::vae);
}

void Txt2ImgRun::layer_retry(const std::string& call, const std::string& component, std::int64_t bad,
                             std::optional<inspect::LayerTrace> known, RunReport& report,
                             const std::function<void(inspect::LayerTracer&)>& traced,
                             const std::function<std::int64_t(std::optional<inspect::LayerTrace>&)>& redo) {
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

void Txt2ImgRun::retry_decode_layers(GeneratedImage& out, RunReport& report, const DecodeAttempt& first,
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

void Txt2ImgRun::finish_layer_retry(RunReport& report) const {
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
                     std::to_string(lr.attempts.size()) + " redone call" + (lr.attempts.size() == 1 ? "" : "s") + ", " +
                     secs + ": " + (lr.clean ? "clean" : lr.remaining);
  report.outcome += (report.outcome.empty() ? "" : "; ") + line;
  log::info("{}", line);
}

}  // namespace nanscope::pipeline::txt2img
