#include "pipeline/noise.hpp"

#include <bit>
#include <cmath>
#include <numbers>

namespace nanscope::pipeline {
namespace {

// ---- torch 1.13's AVX2 Box-Muller, one lane at a time -------------------------------
// A port of ATen/native/cpu/avx_mathfun.h (Giovanni Garberoglio's AVX version of
// Julien Pommier's sse_mathfun, zlib licence), the Cephes single-precision log and
// sincos that torch's normal_fill_16_AVX2 calls. Written per lane because the result
// must be these polynomials' bits, not a libm's. torch compiles them with GCC's
// default floating-point contraction and -mfma, so a multiply whose result feeds an
// add is one fused multiply-add there (where an add has two products, the earlier
// statement's is fused), and std::fma here. Verified bit-exact on millions of values;
// the unfused variant differs from torch in ~0.1% of them.

inline float madd(float a, float b, float c) { return std::fma(a, b, c); }

float avx_mathfun_log(float x) {
  constexpr float kSqrtHalf = 0.707106781186547524f;
  constexpr float kP[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                           -1.2420140846E-1f, +1.4249322787E-1f, -1.6668057665E-1f,
                           +2.0000714765E-1f, -2.4999993993E-1f, +3.3333331174E-1f};
  constexpr float kQ1 = -2.12194440e-4f;
  constexpr float kQ2 = 0.693359375f;
  const bool invalid = x <= 0.0f;
  x = std::fmax(x, std::bit_cast<float>(0x00800000u));  // no denormals
  auto bits = std::bit_cast<std::uint32_t>(x);
  const auto exponent = static_cast<std::int32_t>(bits >> 23) - 0x7f;
  bits = (bits & ~0x7f800000u) | std::bit_cast<std::uint32_t>(0.5f);  // mantissa in [0.5, 1)
  x = std::bit_cast<float>(bits);
  float e = static_cast<float>(exponent) + 1.0f;
  const bool below = x < kSqrtHalf;  // then x = 2x - 1 and e -= 1
  const float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + tmp;
  const float z = x * x;
  float y = kP[0];
  for (int i = 1; i < 9; ++i) y = madd(y, x, kP[i]);
  y = y * x;
  y = madd(y, z, e * kQ1);  // y*z + e*q1: GCC fuses the first multiply of the two
  y = madd(-z, 0.5f, y);
  x = x + y;
  x = madd(e, kQ2, x);
  return invalid ? std::bit_cast<float>(0xffffffffu) : x;  // NaN, as the vector code's all-ones mask
}

void avx_mathfun_sincos(float x, float* s, float* c) {
  constexpr float kFourOverPi = 1.27323954473516f;
  constexpr float kMinusDp1 = -0.78515625f;
  constexpr float kMinusDp2 = -2.4187564849853515625e-4f;
  constexpr float kMinusDp3 = -3.77489497744594108e-8f;
  constexpr float kSinP0 = -1.9515295891E-4f, kSinP1 = 8.3321608736E-3f, kSinP2 = -1.6666654611E-1f;
  constexpr float kCosP0 = 2.443315711809948E-005f, kCosP1 = -1.388731625493765E-003f, kCosP2 = 4.166664568298827E-002f;
  std::uint32_t sign_sin = std::bit_cast<std::uint32_t>(x) & 0x80000000u;
  x = std::fabs(x);
  float y = x * kFourOverPi;
  // j = (int(y) + 1) & ~1: the octant, rounded to even.
  auto j = static_cast<std::int32_t>(y);
  j = (j + 1) & ~1;
  y = static_cast<float>(j);
  const std::uint32_t swap_sin = static_cast<std::uint32_t>(j & 4) << 29;
  const bool poly_sin = (j & 2) == 0;  // the sine polynomial serves sin in this octant
  // Extended-precision reduction: x = ((x - y*DP1) - y*DP2) - y*DP3.
  x = madd(y, kMinusDp1, x);
  x = madd(y, kMinusDp2, x);
  x = madd(y, kMinusDp3, x);
  const std::uint32_t sign_cos = static_cast<std::uint32_t>(~(j - 2) & 4) << 29;
  sign_sin ^= swap_sin;
  const float z = x * x;
  float yc = madd(kCosP0, z, kCosP1);
  yc = madd(yc, z, kCosP2);
  yc = yc * z;
  yc = madd(yc, z, -(z * 0.5f));  // y*z - z*0.5, likewise
  yc = yc + 1.0f;
  float ys = madd(kSinP0, z, kSinP1);
  ys = madd(ys, z, kSinP2);
  ys = ys * z;
  ys = madd(ys, x, x);
  // The vector code selects with masks and then adds the unselected lane's 0.
  const float sin_part = poly_sin ? ys : yc;
  const float cos_part = poly_sin ? yc : ys;
  *s = std::bit_cast<float>(std::bit_cast<std::uint32_t>(sin_part + 0.0f) ^ sign_sin);
  *c = std::bit_cast<float>(std::bit_cast<std::uint32_t>(cos_part + 0.0f) ^ sign_cos);
}

}  // namespace

// ---- TorchCpuNoise ------------------------------------------------------------------

TorchCpuNoise::Kernel torch_cpu_kernel_of_this_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx2 = false;  // torch's AVX2 kernel exists only on x86: other CPUs use the scalar path
#endif
  return avx2 ? TorchCpuNoise::Kernel::avx2 : TorchCpuNoise::Kernel::scalar;
}

TorchCpuNoise::TorchCpuNoise(std::uint64_t seed, Kernel kernel)
    : engine_(static_cast<std::uint32_t>(seed & 0xffffffffu)), kernel_(kernel) {}

float TorchCpuNoise::uniform_float() {
  return static_cast<float>(engine_() & ((1u << 24) - 1)) * (1.0f / static_cast<float>(1u << 24));
}

double TorchCpuNoise::uniform_double() {
  const std::uint64_t hi = engine_();
  const std::uint64_t lo = engine_();
  const std::uint64_t bits = ((hi << 32) | lo) & ((std::uint64_t{1} << 53) - 1);
  return static_cast<double>(bits) * (1.0 / static_cast<double>(std::uint64_t{1} << 53));
}

float TorchCpuNoise::scalar_normal() {
  if (next_double_normal_) {
    const double v = *next_double_normal_;
    next_double_normal_.reset();
    return static_cast<float>(v);
  }
  const double u1 = uniform_double();
  const double u2 = uniform_double();
  const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
  const double theta = 2.0 * std::numbers::pi * u1;
  next_double_normal_ = r * std::sin(theta);
  return static_cast<float>(r * std::cos(theta));
}

void TorchCpuNoise::transform_block(float* data) const {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];  // [0, 1) -> (0, 1] for the log
    const float u2 = data[j + 8];
    if (kernel_ == Kernel::avx2) {
      const float radius = std::sqrt(-2.0f * avx_mathfun_log(u1));
      const float theta = static_cast<float>(2.0 * std::numbers::pi) * u2;
      float s;
      float c;
      avx_mathfun_sincos(theta, &s, &c);
      data[j] = radius * c;
      data[j + 8] = radius * s;
    } else {
      const float radius = std::sqrt(-2.0f * std::log(u1));
      const auto theta = static_cast<float>(2.0 * std::numbers::pi * static_cast<double>(u2));
      data[j] = radius * std::cos(theta);
      data[j + 8] = radius * std::sin(theta);
    }
  }
}

void TorchCpuNoise::randn(std::span<float> out) {
  const std::size_t n = out.size();
  if (n < 16) {
    for (float& v : out) v = scalar_normal();
    return;
  }
  float* data = out.data();
  for (std::size_t i = 0; i < n; ++i) data[i] = uniform_float();
  for (std::size_t i = 0; i + 16 <= n; i += 16) transform_block(data + i);
  if (n % 16 != 0) {
    float* tail = data + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_float();
    transform_block(tail);
  }
}

// ---- NanscopeNoise ------------------------------------------------------------------

void NanscopeNoise::philox4x32_10(const std::uint32_t c[4], const std::uint32_t k[2], std::uint32_t out[4]) {
  constexpr std::uint64_t kM0 = 0xD2511F53u;
  constexpr std::uint64_t kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u;
  constexpr std::uint32_t kW1 = 0xBB67AE85u;
  std::uint32_t x0 = c[0], x1 = c[1], x2 = c[2], x3 = c[3];
  std::uint32_t k0 = k[0], k1 = k[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const std::uint64_t p0 = kM0 * x0;
    const std::uint64_t p1 = kM1 * x2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    x0 = hi1 ^ x1 ^ k0;
    x1 = lo1;
    x2 = hi0 ^ x3 ^ k1;
    x3 = lo0;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
}

float NanscopeNoise::value(std::uint64_t seed, std::uint64_t draw, std::uint64_t index) {
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const std::uint32_t ctr[4] = {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                                static_cast<std::uint32_t>(draw), static_cast<std::uint32_t>(draw >> 32)};
  std::uint32_t x[4];
  philox4x32_10(ctr, key, x);
  const std::uint64_t a = ((std::uint64_t{x[0]} << 32) | x[1]) >> 11;
  const std::uint64_t b = ((std::uint64_t{x[2]} << 32) | x[3]) >> 11;
  const double u1 = static_cast<double>(a + 1) * 0x1p-53;
  const double u2 = static_cast<double>(b) * 0x1p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void NanscopeNoise::randn(std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value(seed_, draw_, i);
  ++draw_;
}

// ---- TorchCudaNoise -----------------------------------------------------------------

float TorchCudaNoise::value(std::uint64_t seed, std::uint32_t offset, std::uint32_t index) {
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  const std::uint32_t ctr[4] = {offset, 0, index, 0};
  std::uint32_t x[4];
  NanscopeNoise::philox4x32_10(ctr, key, x);
  // curand's constants as float literals: 2.3283064e-10f is 2^-32 exactly.
  constexpr float kInv = 2.3283064e-10f;
  constexpr auto kInv2Pi = static_cast<float>(2.3283064e-10 * 6.2831855);
  const double u = static_cast<double>(x[0]) * static_cast<double>(kInv) + static_cast<double>(kInv / 2);
  const double v = static_cast<double>(x[1]) * static_cast<double>(kInv2Pi) + static_cast<double>(kInv2Pi / 2);
  const double s = std::sqrt(-2.0 * std::log(u));
  return static_cast<float>(s * std::sin(v));
}

void TorchCudaNoise::randn(std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value(seed_, offset_, static_cast<std::uint32_t>(i));
  ++offset_;
}

}  // namespace nanscope::pipeline
