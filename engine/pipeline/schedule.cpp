#include "pipeline/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "core/error.hpp"

namespace nanscope::pipeline::schedule {

std::vector<float> torch_linspace_f32(float start, float end, std::int64_t steps) {
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(steps, 0)));
  if (steps <= 0) return out;
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const std::int64_t halfway = steps / 2;
  // The scalar formula, as compiled into torch: one rounding (FMA) per value.
  auto value_at = [&](std::int64_t idx) {
    return idx < halfway ? std::fma(step, static_cast<float>(idx), start)
                         : std::fma(-step, static_cast<float>(steps - idx - 1), end);
  };
  // torch's vectorised loop: pairs of 8-lane blocks while 16 values remain, lane k =
  // base + k*step (separately rounded); then the scalar formula for the tail.
  constexpr std::int64_t kLanes = 8;
  const std::int64_t vector_end = steps / (2 * kLanes) * (2 * kLanes);
  for (std::int64_t i = 0; i < vector_end; i += kLanes) {
    const float base = value_at(i);
    for (std::int64_t k = 0; k < kLanes; ++k) {
      const float lane_offset = static_cast<float>(k) * step;
      out[static_cast<std::size_t>(i + k)] = base + lane_offset;
    }
  }
  for (std::int64_t i = vector_end; i < steps; ++i) out[static_cast<std::size_t>(i)] = value_at(i);
  return out;
}

std::vector<double> numpy_linspace(double start, double stop, std::int64_t num) {
  std::vector<double> y(static_cast<std::size_t>(std::max<std::int64_t>(num, 0)));
  const std::int64_t div = num - 1;
  const double delta = stop - start;
  const double step = div > 0 ? delta / static_cast<double>(div) : 0.0;
  for (std::int64_t i = 0; i < num; ++i) {
    double v;
    if (div <= 0) {
      v = static_cast<double>(i) * delta;
    } else if (step == 0.0) {
      v = static_cast<double>(i) / static_cast<double>(div) * delta;
    } else {
      v = static_cast<double>(i) * step;
    }
    y[static_cast<std::size_t>(i)] = v + start;
  }
  if (num > 1) y.back() = stop;
  return y;
}

std::vector<double> numpy_arange(double start, double stop, double step) {
  const double len = std::ceil((stop - start) / step);
  std::vector<double> out(len > 0 ? static_cast<std::size_t>(len) : 0);
  if (out.empty()) return out;
  out[0] = start;
  if (out.size() > 1) out[1] = start + step;
  const double delta = (start + step) - start;
  for (std::size_t i = 2; i < out.size(); ++i) out[i] = start + static_cast<double>(i) * delta;
  return out;
}

double numpy_round(double x) { return std::nearbyint(x); }  // default rounding mode: half to even

namespace {

// Zero terminal SNR (Lin et al. 2023, algorithm 1) in float32, as diffusers' torch code does it.
std::vector<float> rescale_zero_terminal_snr(const std::vector<float>& betas) {
  const std::size_t n = betas.size();
  std::vector<float> sqrt_bar(n);
  double acc = 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    acc *= static_cast<double>(1.0f - betas[i]);
    sqrt_bar[i] = std::sqrt(static_cast<float>(acc));
  }
  const float first = sqrt_bar.front();
  const float last = sqrt_bar.back();
  const float scale = first / (first - last);
  std::vector<float> bar(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float s = (sqrt_bar[i] - last) * scale;
    bar[i] = s * s;
  }
  std::vector<float> out(n);
  out[0] = 1.0f - bar[0];
  for (std::size_t i = 1; i < n; ++i) out[i] = 1.0f - bar[i] / bar[i - 1];
  return out;
}

double alpha_bar_cosine(double t) {
  const double c = std::cos((t + 0.008) / 1.008 * std::numbers::pi / 2);
  return c * c;
}

}  // namespace

std::vector<float> betas(const SchedulerConfig& config) {
  const std::int64_t n = config.num_train_timesteps;
  std::vector<float> b;
  if (!config.trained_betas.empty()) {
    b = config.trained_betas;
  } else if (config.beta_schedule == BetaSchedule::linear) {
    b = torch_linspace_f32(static_cast<float>(config.beta_start), static_cast<float>(config.beta_end), n);
  } else if (config.beta_schedule == BetaSchedule::scaled_linear) {
    b = torch_linspace_f32(static_cast<float>(std::pow(config.beta_start, 0.5)),
                           static_cast<float>(std::pow(config.beta_end, 0.5)), n);
    for (float& v : b) v = v * v;
  } else {
    b.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const double t1 = static_cast<double>(i) / static_cast<double>(n);
      const double t2 = static_cast<double>(i + 1) / static_cast<double>(n);
      b[static_cast<std::size_t>(i)] =
          static_cast<float>(std::min(1 - alpha_bar_cosine(t2) / alpha_bar_cosine(t1), 0.999));
    }
  }
  if (config.rescale_betas_zero_snr) b = rescale_zero_terminal_snr(b);
  return b;
}

std::vector<float> alphas_cumprod(const SchedulerConfig& config, bool clamp_zero_terminal) {
  const std::vector<float> b = betas(config);
  std::vector<float> out(b.size());
  double acc = 1.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    acc *= static_cast<double>(1.0f - b[i]);
    out[i] = static_cast<float>(acc);
  }
  // Zero terminal SNR makes the last alpha_bar 0 and its sigma infinite; diffusers
  // keeps it finite (sigma_max = 4096) for the samplers that divide by it.
  if (config.rescale_betas_zero_snr && clamp_zero_terminal) out.back() = 0x1p-24f;
  return out;
}

std::vector<float> training_sigmas(const std::vector<float>& alphas_cumprod) {
  std::vector<float> out(alphas_cumprod.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float a = alphas_cumprod[i];
    out[i] = std::sqrt((1.0f - a) / a);
  }
  return out;
}

double interp(double x, const std::vector<float>& table) {
  const std::size_t n = table.size();
  if (std::isnan(x)) return x;
  if (x < 0.0) return table.front();
  if (x >= static_cast<double>(n - 1)) return table.back();
  const auto j = static_cast<std::size_t>(std::floor(x));
  const double xj = static_cast<double>(j);
  const double yj = table[j];
  if (x == xj) return yj;
  const double slope = (static_cast<double>(table[j + 1]) - yj) / (static_cast<double>(j + 1) - xj);
  double r = slope * (x - xj) + yj;
  if (std::isnan(r)) {
    r = slope * (x - static_cast<double>(j + 1)) + static_cast<double>(table[j + 1]);
    if (std::isnan(r) && table[j] == table[j + 1]) r = yj;
  }
  return r;
}

std::vector<double> karras_sigmas(double sigma_min, double sigma_max, std::int64_t n) {
  constexpr double kRho = 7.0;
  const std::vector<double> ramp = numpy_linspace(0.0, 1.0, n);
  const double min_inv_rho = std::pow(sigma_min, 1 / kRho);
  const double max_inv_rho = std::pow(sigma_max, 1 / kRho);
  std::vector<double> out(ramp.size());
  for (std::size_t i = 0; i < ramp.size(); ++i) {
    out[i] = std::pow(max_inv_rho + ramp[i] * (min_inv_rho - max_inv_rho), kRho);
  }
  return out;
}

std::vector<float> log_sigmas(const std::vector<float>& training_sigmas) {
  std::vector<float> out(training_sigmas.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(std::log(static_cast<double>(training_sigmas[i])));
  }
  return out;
}

double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
  // numpy 1.24's value-based casting keeps the scalar-with-float32-array arithmetic of
  // diffusers' code in float32: log(sigma) is rounded to float, the interpolation
  // weight computed in float, and only the final blend is float64.
  const auto log_sigma = static_cast<float>(std::log(std::max(sigma, 1e-10)));
  // Index of the last table entry <= log_sigma (0 when there is none), at most n-2.
  std::size_t low = 0;
  for (std::size_t i = 0; i < log_sigmas.size(); ++i) {
    const float dist = log_sigma - log_sigmas[i];
    if (dist >= 0) low = i;
  }
  low = std::min(low, log_sigmas.size() - 2);
  const float lo = log_sigmas[low];
  const float hi = log_sigmas[low + 1];
  const float num = lo - log_sigma;
  const float span = lo - hi;
  const float w = std::clamp(num / span, 0.0f, 1.0f);
  const float keep = 1.0f - w;
  return static_cast<double>(keep) * static_cast<double>(low) + static_cast<double>(w) * static_cast<double>(low + 1);
}

float t_to_sigma(float t, const std::vector<float>& log_sigmas) {
  t = std::clamp(t, 0.0f, static_cast<float>(log_sigmas.size() - 1));
  const auto low = static_cast<std::size_t>(std::floor(t));
  const auto high = static_cast<std::size_t>(std::ceil(t));
  const float w = t - std::floor(t);
  const float a = (1.0f - w) * log_sigmas[low];
  const float b = w * log_sigmas[high];
  return std::exp(a + b);
}

std::vector<double> exponential_sigmas(double sigma_min, double sigma_max, std::int64_t n) {
  std::vector<double> out;
  for (float v :
       torch_linspace_f32(static_cast<float>(std::log(sigma_max)), static_cast<float>(std::log(sigma_min)), n))
    out.push_back(std::exp(v));
  return out;
}

std::vector<double> kdiffusion_sigmas(ScheduleId schedule, int n, const std::vector<float>& sigmas) {
  const std::vector<float> logs = log_sigmas(sigmas);
  const auto size = static_cast<std::int64_t>(sigmas.size());
  std::vector<double> out;
  switch (schedule) {
    case ScheduleId::normal:
      for (float t : torch_linspace_f32(static_cast<float>(size - 1), 0.0f, n)) out.push_back(t_to_sigma(t, logs));
      break;
    case ScheduleId::sgm_uniform: {
      const auto start = static_cast<float>(sigma_to_t(sigmas.back(), logs));
      const auto end = static_cast<float>(sigma_to_t(sigmas.front(), logs));
      std::vector<float> t = torch_linspace_f32(start, end, n + 1);
      t.pop_back();
      for (float v : t) out.push_back(t_to_sigma(v, logs));
      break;
    }
    case ScheduleId::simple: {
      const double ss = static_cast<double>(size) / n;
      for (int x = 0; x < n; ++x) {
        out.push_back(sigmas[static_cast<std::size_t>(size - 1 - static_cast<std::int64_t>(x * ss))]);
      }
      break;
    }
    case ScheduleId::ddim_uniform: {
      const std::int64_t ss = std::max<std::int64_t>(size / n, 1);
      for (std::int64_t x = 1; x < size; x += ss) out.push_back(sigmas[static_cast<std::size_t>(x)]);
      std::reverse(out.begin(), out.end());
      break;
    }
    case ScheduleId::exponential: return exponential_sigmas(sigmas.front(), sigmas.back(), n);
    case ScheduleId::class_default:
    case ScheduleId::karras: break;
  }
  return out;
}

std::vector<double> solve_vandermonde(const std::vector<double>& r, const std::vector<double>& b, std::size_t n) {
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1));
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t q = 0; q < n; ++q) m[j][q] = std::pow(r[q], static_cast<double>(j));
    m[j][n] = b[j];
  }
  for (std::size_t col = 0; col < n; ++col) {
    std::size_t piv = col;
    for (std::size_t row = col + 1; row < n; ++row) {
      if (std::fabs(m[row][col]) > std::fabs(m[piv][col])) piv = row;
    }
    std::swap(m[col], m[piv]);
    for (std::size_t row = 0; row < n; ++row) {
      if (row == col) continue;
      const double f = m[row][col] / m[col][col];
      for (std::size_t q = col; q <= n; ++q) m[row][q] -= f * m[col][q];
    }
  }
  std::vector<double> out(n);
  for (std::size_t j = 0; j < n; ++j) out[j] = m[j][n] / m[j][j];
  return out;
}

}  // namespace nanscope::pipeline::schedule
