#include "support/random.hpp"

#include <cmath>
#include <numbers>

namespace nanscope::test {

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform01();  // (0, 1]
  const double u2 = uniform01();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

std::uint64_t seed_from(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::vector<float> normal_values(Rng& rng, std::int64_t n, double mean, double stddev) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<float>(mean + stddev * rng.normal());
  return v;
}

std::vector<float> uniform_values(Rng& rng, std::int64_t n, double lo, double hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

HostTensor random_normal(Rng& rng, const Shape& shape, DType dtype, double mean, double stddev) {
  return HostTensor::from_f32(shape, normal_values(rng, shape_numel(shape), mean, stddev), dtype);
}

HostTensor random_uniform(Rng& rng, const Shape& shape, DType dtype, double lo, double hi) {
  return HostTensor::from_f32(shape, uniform_values(rng, shape_numel(shape), lo, hi), dtype);
}

}  // namespace nanscope::test
