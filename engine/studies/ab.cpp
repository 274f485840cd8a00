#include "studies/ab.hpp"

#include <cmath>
#include <limits>

#include "config/preset.hpp"
#include "core/error.hpp"
#include "studies/report_json.hpp"

namespace nanscope::studies {

using namespace inspect;  // the inspector's values and detectors

namespace {

// Keeps each step's latent (run_inspected drops tensors) and forwards.
class LatentKeeper final : public pipeline::RunObserver {
 public:
  explicit LatentKeeper(pipeline::RunObserver* forward) : forward_(forward) {}
  std::vector<std::vector<float>> latents;
  void on_status(std::string_view m) override {
    if (forward_) forward_->on_status(m);
  }
  void on_step(const pipeline::StepReport& s) override {
    if (s.image == 0) latents.push_back(s.latent_values);
    if (forward_) forward_->on_step(s);
  }
  bool wants_latents() const override { return true; }
  void on_image(const pipeline::GeneratedImage& i, const pipeline::RunReport& r) override {
    if (forward_) forward_->on_image(i, r);
  }
  bool cancelled() const override { return forward_ && forward_->cancelled(); }

 private:
  pipeline::RunObserver* forward_;
};

}  // namespace

double relative_l2(std::span<const float> a, std::span<const float> b, double* max_abs) {
  double num = 0, den = 0, mx = 0;
  bool mismatch = false;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
    if (fa != fb) mismatch = true;
    if (!fa || !fb) continue;
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
    mx = std::max(mx, std::fabs(d));
  }
  if (max_abs) *max_abs = mx;
  if (mismatch || a.size() != b.size()) return std::numeric_limits<double>::infinity();
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

AbResult run_ab(const RunConfig& a, const RunConfig& b, double threshold, pipeline::RunObserver* forward,
                const BackendOptions& backend) {
  AbResult r;
  r.threshold = threshold;
  LatentKeeper ka(forward), kb(forward);
  {
    pipeline::Session sa(backend);
    r.a = run_inspected(sa, a, &ka);
  }
  {
    pipeline::Session sb(backend);
    r.b = run_inspected(sb, b, &kb);
  }
  if (!r.a.error.empty() || !r.b.error.empty()) {
    throw DeviceError("A/B: " + (r.a.error.empty() ? "B: " + r.b.error : "A: " + r.a.error));
  }
  if (ka.latents.size() != kb.latents.size()) {
    throw ConfigError("A/B: the runs took " + std::to_string(ka.latents.size()) + " and " +
                      std::to_string(kb.latents.size()) + " steps; compare runs with the same steps and sampler");
  }
  for (std::size_t i = 0; i < ka.latents.size(); ++i) {
    if (ka.latents[i].size() != kb.latents[i].size())
      throw ConfigError("A/B: the latents differ in size; compare runs with the same width and height");
    AbStep s;
    s.step = static_cast<int>(i) + 1;
    s.latent_rel_l2 = relative_l2(ka.latents[i], kb.latents[i], &s.latent_max_abs);
    for (float v : ka.latents[i]) s.nonfinite_a += !std::isfinite(v);
    for (float v : kb.latents[i]) s.nonfinite_b += !std::isfinite(v);
    if (r.first_divergent_step < 0 && !(s.latent_rel_l2 <= threshold)) r.first_divergent_step = s.step;
    r.steps.push_back(s);
  }
  if (!r.a.images.empty() && !r.b.images.empty() &&
      r.a.images[0].image.pixels.size() == r.b.images[0].image.pixels.size()) {
    const auto& pa = r.a.images[0].image.pixels;
    const auto& pb = r.b.images[0].image.pixels;
    std::vector<float> fa(pa.begin(), pa.end()), fb(pb.begin(), pb.end());
    double mx = 0;
    r.image_rel_l2 = relative_l2(fa, fb, &mx);
    r.image_max_diff = static_cast<int>(mx);
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    steps.push_back(
        {{"step", s.step},
         {"latent_rel_l2", std::isfinite(s.latent_rel_l2) ? nlohmann::json(s.latent_rel_l2) : nlohmann::json("inf")},
         {"latent_max_abs", s.latent_max_abs},
         {"nonfinite_a", s.nonfinite_a},
         {"nonfinite_b", s.nonfinite_b}});
  }
  r.report = {
      {"nanscope_ab_report", 1},
      {"threshold", threshold},
      {"first_divergent_step", r.first_divergent_step >= 0 ? nlohmann::json(r.first_divergent_step) : nlohmann::json()},
      {"image_rel_l2", std::isfinite(r.image_rel_l2) ? nlohmann::json(r.image_rel_l2) : nlohmann::json("inf")},
      {"image_max_diff", r.image_max_diff},
      {"steps", std::move(steps)},
      {"a", r.a.report},
      {"b", r.b.report}};
  add_version_fields(r.report);
  return r;
}

}  // namespace nanscope::studies
