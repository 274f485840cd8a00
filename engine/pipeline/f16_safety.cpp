#include "pipeline/f16_safety.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/log.hpp"
#include "inspect/layer_trace.hpp"
#include "ops/ops.hpp"
#include "pipeline/noise.hpp"
#include "pipeline/scheduler.hpp"
#include "pipeline/session.hpp"

namespace nanscope::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kF16Max = 65504.0;

// The layer trace, plus which module reads which other module's largest value:
// a module computed in f32 hands its output on as it is, and the next f16
// module's input cast turns a value past 65504 into Inf.
class SafetyTracer final : public OpTracer {
 public:
  explicit SafetyTracer(std::string component, std::string call)
      : component_(component), trace_(std::move(component), std::move(call)) {}

  void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> inputs,
             const Tensor& output) override {
    trace_.on_op(ctx, op, inputs, output);
    const inspect::OpRecord& r = trace_.ops().back();
    const std::string module = r.full_path();
    double in_max = 0;
    for (const Tensor* in : inputs) {
      if (in == nullptr) continue;
      auto it = made_.find(in->storage_ptr());
      if (it != made_.end() && it->second.first != module) in_max = std::max(in_max, it->second.second);
    }
    made_[output.storage_ptr()] = {module, r.output.max_abs};
    Module& m = modules_[module];
    if (m.order < 0) m.order = static_cast<int>(order_.size()), order_.push_back(module);
    m.input_max = std::max(m.input_max, in_max);
    if (r.output.max_abs >= m.max_abs) {
      m.max_abs = r.output.max_abs;
      m.op = r.op;
    }
  }

  struct Module {
    int order = -1;
    double max_abs = 0, input_max = 0;
    std::string op;
  };
  const std::map<std::string, Module>& modules() const { return modules_; }
  const std::vector<std::string>& order() const { return order_; }
  inspect::LayerTrace trace() const { return trace_.trace(); }

 private:
  std::string component_;
  inspect::LayerTracer trace_;
  std::map<std::weak_ptr<Storage>, std::pair<std::string, double>, std::owner_less<std::weak_ptr<Storage>>> made_;
  std::map<std::string, Module> modules_;
  std::vector<std::string> order_;
};

OpContext f32_context(Backend& be, const RunConfig& config, Component c, OpTracer* tracer, const CancelProbe* cancel) {
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision = Precision{};  // f32, f32 sums, f32 softmax
  ctx.attention = config.component(c).attention;
  ctx.tracer = tracer;
  ctx.cancel = cancel;
  return ctx;
}

bool under(const std::string& path, const std::string& parent) {
  return path == parent ||
         (path.size() > parent.size() && path.compare(0, parent.size(), parent) == 0 && path[parent.size()] == '.');
}

std::string parent_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

}  // namespace

std::vector<std::string> group_f32_overrides(const std::vector<std::string>& flagged,
                                             const std::vector<std::string>& all) {
  std::vector<std::string> set = flagged;
  for (bool changed = true; changed;) {
    changed = false;
    for (const std::string& f : set) {
      const std::string p = parent_of(f);
      // Never a whole component (that is component.dtype), only modules inside one.
      if (p.empty() || p.find('.') == std::string::npos) continue;
      const bool all_flagged = std::all_of(all.begin(), all.end(), [&](const std::string& m) {
        return !under(m, p) || std::any_of(set.begin(), set.end(), [&](const std::string& s) { return under(m, s); });
      });
      const auto children = std::count_if(set.begin(), set.end(), [&](const std::string& s) { return under(s, p); });
      if (!all_flagged || children < 2) continue;
      std::erase_if(set, [&](const std::string& s) { return under(s, p); });
      set.push_back(p);
      changed = true;
      break;
    }
  }
  // In the order the flagged modules ran.
  auto first = [&](const std::string& s) {
    for (std::size_t i = 0; i < flagged.size(); ++i)
      if (under(flagged[i], s)) return i;
    return flagged.size();
  };
  std::stable_sort(set.begin(), set.end(),
                   [&](const std::string& a, const std::string& b) { return first(a) < first(b); });
  std::vector<std::string> out;
  for (const std::string& s : set) out.push_back(s + ".dtype=f32");
  return out;
}

F16SafetyReport check_f16_safety(Session& session, const RunConfig& run, const CancelProbe* cancel) {
  const auto t0 = Clock::now();
  RunConfig config = run;
  for (Component c : kComponents) config.component(c).precision = Precision{};
  config.overrides.clear();
  config.validate();
  SdModel& m = session.model(config);
  Backend& be = session.backend(config.device);
  F16SafetyReport report;
  report.model = m.folder().string();
  report.vae = m.vae_folder().string();
  report.device = be.device().name;
  const int size = m.default_size();
  report.width = config.width > 0 ? config.width : size;
  report.height = config.height > 0 ? config.height : size;
  const std::int64_t f = m.vae->config().downscale();
  m.check_size(report.width, report.height, "f16 safety: size");
  const bool cfg = config.cfg_scale > 1.0;
  const bool sdxl = m.family() == ModelFamily::sdxl;
  const Shape latent_shape{1, m.unet->config().in_channels, report.height / f, report.width / f};
  const std::int64_t n = shape_numel(latent_shape);

  // The prompt, as the run encodes it.
  const OpContext te = f32_context(be, config, Component::text_encoder, nullptr, cancel);
  std::vector<std::vector<int>> ids, ids2;
  if (cfg) ids.push_back(m.tokenizer.encode(config.negative_prompt).ids);
  ids.push_back(m.tokenizer.encode(config.prompt).ids);
  Tensor context;
  models::AddedConditions added;
  if (!sdxl) {
    context = m.text_encoder->forward(te, ids, config.clip_skip).prompt_embeds;
  } else {
    if (cfg) ids2.push_back(m.tokenizer_2->encode(config.negative_prompt).ids);
    ids2.push_back(m.tokenizer_2->encode(config.prompt).ids);
    const auto o1 = m.text_encoder->forward(te, ids);
    const auto o2 = m.text_encoder_2->forward(te, ids2);
    const Tensor parts[] = {o1.penultimate, o2.penultimate};
    context = ops::concat(te, parts, 2);
    added.text_embeds = o2.pooled;
    for (int r = 0; r < (cfg ? 2 : 1); ++r) {
      const float ids6[] = {static_cast<float>(report.height), static_cast<float>(report.width), 0, 0,
                            static_cast<float>(report.height), static_cast<float>(report.width)};
      added.time_ids.insert(added.time_ids.end(), std::begin(ids6), std::end(ids6));
    }
  }

  // The first step's UNet call, traced.
  auto sampler = make_sampler(SchedulerConfig::from_json(
      m.scheduler_config(), config.sampler, (m.folder() / "scheduler" / "scheduler_config.json").string()));
  sampler->set_timesteps(config.steps);
  NanscopeNoise noise(config.seed);
  std::vector<float> init(static_cast<std::size_t>(n));
  noise.randn(init);
  for (float& v : init) v *= sampler->init_noise_sigma();
  Tensor latent = be.upload(HostTensor::from_f32(latent_shape, init));
  const int rows = cfg ? 2 : 1;
  Shape in_shape = latent_shape;
  in_shape[0] = rows;
  Tensor unet_in = be.empty(in_shape, DType::f32);
  for (int r = 0; r < rows; ++r) sampler->scale_model_input(be, latent, unet_in, 0, r * n);
  const float t = sampler->timesteps().front();
  const std::vector<float> ts(static_cast<std::size_t>(rows), t);
  SafetyTracer unet_tracer("unet", "unet step 1 (f16 safety)");
  const Tensor pred = m.unet->forward(f32_context(be, config, Component::unet, &unet_tracer, cancel), unet_in, ts,
                                      context, sdxl ? &added : nullptr);
  Tensor guided = pred;
  if (cfg) {
    guided = be.empty(latent_shape, DType::f32);
    be.latent_step(LatentStepArgs{LatentOp::cfg,
                                  n,
                                  pred,
                                  0,
                                  &pred,
                                  n,
                                  nullptr,
                                  nullptr,
                                  guided,
                                  0,
                                  nullptr,
                                  {static_cast<float>(config.cfg_scale)},
                                  0,
                                  0});
  }
  // The step's prediction of the final latent, decoded, traced.
  Tensor denoised = be.empty(latent_shape, DType::f32);
  sampler->step(be, guided, latent, 0, &noise, &denoised);
  SafetyTracer vae_tracer("vae", "vae decode (f16 safety)");
  m.vae->decode(f32_context(be, config, Component::vae, &vae_tracer, cancel), denoised);

  // Per module: headroom, and what overflows.
  std::vector<std::string> all;
  for (const SafetyTracer* tr : {&unet_tracer, &vae_tracer}) {
    for (const std::string& name : tr->order()) {
      const SafetyTracer::Module& mod = tr->modules().at(name);
      ModuleHeadroom h;
      h.module = name;
      h.op = mod.op;
      h.max_abs = mod.max_abs;
      h.input_max = mod.input_max;
      const double inf = std::numeric_limits<double>::infinity();
      h.headroom_f16 = mod.max_abs > 0 ? kF16Max / mod.max_abs : inf;
      h.headroom_bf16 = mod.max_abs > 0 ? dtype_max(DType::bf16) / mod.max_abs : inf;
      h.overflows_f16 = mod.max_abs > kF16Max;
      h.at_risk = mod.max_abs * kF16RiskHeadroom > kF16Max;
      h.reads_at_risk = mod.input_max * kF16RiskHeadroom > kF16Max;
      (tr == &unet_tracer ? report.unet_max : report.vae_max) =
          std::max(tr == &unet_tracer ? report.unet_max : report.vae_max, mod.max_abs);
      all.push_back(name);
      if (h.flagged()) report.flagged.push_back(name);
      report.modules.push_back(std::move(h));
    }
  }
  // Flagged modules first (a module that only reads a large value can have small outputs), then by |x|.
  std::stable_sort(report.modules.begin(), report.modules.end(), [](const ModuleHeadroom& a, const ModuleHeadroom& b) {
    if (a.flagged() != b.flagged()) return a.flagged();
    return a.max_abs > b.max_abs;
  });
  report.overrides = group_f32_overrides(report.flagged, all);
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  char head[128];
  std::snprintf(head, sizeof head, "largest |x|: unet %.4g, vae %.4g (f16 limit 65504, flagged within %gx of it)",
                report.unet_max, report.vae_max, kF16RiskHeadroom);
  const std::string where = std::to_string(report.width) + "x" + std::to_string(report.height);
  if (report.safe()) {
    report.summary = "f16-safe at " + where + ": no module comes near 65504; " + head;
  } else {
    std::string list;
    for (const std::string& s : report.flagged) list += (list.empty() ? "" : ", ") + s;
    report.summary = std::to_string(report.flagged.size()) + " module" + (report.flagged.size() == 1 ? "" : "s") +
                     " at risk of overflowing f16 at " + where + " (" + list + "); " + head;
  }
  log::info("f16 safety: {} ({:.2f} s)", report.summary, report.seconds);
  return report;
}

nlohmann::json f16_safety_json(const F16SafetyReport& r) {
  using nlohmann::json;
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json modules = json::array();
  for (const ModuleHeadroom& h : r.modules) {
    modules.push_back({{"module", h.module},
                       {"op", h.op},
                       {"max_abs", num(h.max_abs)},
                       {"input_max", num(h.input_max)},
                       {"headroom_f16", num(h.headroom_f16)},
                       {"headroom_bf16", num(h.headroom_bf16)},
                       {"overflows_f16", h.overflows_f16},
                       {"at_risk", h.at_risk},
                       {"reads_at_risk", h.reads_at_risk}});
  }
  return {{"model", r.model},
          {"vae", r.vae},
          {"device", r.device},
          {"width", r.width},
          {"height", r.height},
          {"safe", r.safe()},
          {"flagged", r.flagged},
          {"overrides", r.overrides},
          {"unet_max", num(r.unet_max)},
          {"vae_max", num(r.vae_max)},
          {"seconds", r.seconds},
          {"summary", r.summary},
          {"risk_headroom", kF16RiskHeadroom},
          {"modules", modules}};
}

}  // namespace nanscope::pipeline
