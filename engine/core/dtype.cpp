#include "core/dtype.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define NANSCOPE_X86 1
#endif

namespace nanscope {

std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "fp16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  return std::nullopt;
}

float dtype_max(DType t) {
  switch (t) {
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::f16: return 65504.0f;
    case DType::bf16: return bf16_bits_to_f32(0x7f7f);
  }
  return 0.0f;
}

std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top mantissa bits, force quiet.
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {  // >= 65520 (halfway to 2^16) rounds to Inf; Inf stays Inf.
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero).
    // Value = abs_float; half subnormal unit is 2^-24. Round m * 2^(e) / 2^-24 to nearest even.
    const int exp = static_cast<int>(abs >> 23);             // biased f32 exponent
    if (exp < 102) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to zero (2^-25 exactly ties to 0)
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // f = mant * 2^(exp-127-23); in units of 2^-24: mant * 2^(exp-126)... shift right by (126-exp).
    const int shift = 126 - exp;  // 14..24 for exp in 102..112
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    std::uint32_t r = q;
    if (rem > half || (rem == half && (q & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias exponent and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent (and to Inf): correct.
  return static_cast<std::uint16_t>(sign | h);
}

float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in f32.
      const float v = static_cast<float>(mant) * 0x1p-24f;
      out = sign | std::bit_cast<std::uint32_t>(v);
    }
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

std::uint16_t f32_to_bf16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const std::uint32_t lsb = (x >> 16) & 1u;
  const std::uint32_t rounded = x + 0x7fffu + lsb;  // RNE; overflow carries into Inf correctly
  return static_cast<std::uint16_t>(rounded >> 16);
}

float bf16_bits_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

float round_to(DType t, float f) {
  switch (t) {
    case DType::f32: return f;
    case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(f));
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(f));
  }
  return f;
}

float round_to_from_double(DType t, double d) {
  const float f = static_cast<float>(d);
  if (t == DType::f32 || !std::isfinite(f) || static_cast<double>(f) == d) return round_to(t, f);
  // Rounding double -> f32 -> narrow type double-rounds only when the f32
  // value lands exactly on a halfway point of the narrow type. In that case
  // break the tie by the side on which d really lies.
  const auto to_bits = [t](float v) { return t == DType::f16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v); };
  const auto to_value = [t](std::uint32_t b) -> double {
    if (t == DType::f16 && (b & 0x7fffu) == 0x7c00u) return 65536.0;  // the tie point past 65504 is 65520
    if (t == DType::bf16 && (b & 0x7fffu) == 0x7f80u) return 0x1p128;
    return t == DType::f16 ? f16_bits_to_f32(static_cast<std::uint16_t>(b))
                           : bf16_bits_to_f32(static_cast<std::uint16_t>(b));
  };
  const double a = std::fabs(static_cast<double>(f));
  const std::uint32_t rb = to_bits(static_cast<float>(a)) & 0x7fffu;
  const double rv = to_value(rb);
  if (rv == a) return round_to(t, f);
  const std::uint32_t ob = a > rv ? rb + 1 : rb - 1;
  const double ov = to_value(ob);
  if (a - rv != ov - a) return round_to(t, f);  // not a tie: the single rounding is right
  const double ad = std::fabs(d);
  const std::uint32_t lo = std::min(rb, ob), hi = std::max(rb, ob);
  const std::uint32_t pick = ad > a ? hi : lo;
  const std::uint32_t sign = std::signbit(d) ? 0x8000u : 0u;
  return t == DType::f16 ? f16_bits_to_f32(static_cast<std::uint16_t>(sign | pick))
                         : bf16_bits_to_f32(static_cast<std::uint16_t>(sign | pick));
}

namespace {

#if defined(NANSCOPE_X86)
// VCVTPS2PH with an explicit round-to-nearest-even is IEEE binary16 rounding,
// subnormals, overflow to Inf and NaN payloads (quiet bit set, top mantissa
// bits kept) included: what f32_to_f16_bits computes, eight at a time
// (DType.BulkConversionMatchesTheScalarOnes checks it bit for bit).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, std::uint16_t* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16_bits(src[i]);
}

// VCVTPH2PS: exact, as f16_bits_to_f32, except that it quiets signalling
// NaNs; a block with an Inf or NaN in it goes through the scalar function,
// which keeps every NaN's bits.
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const std::uint16_t* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask)) != 0) {
      for (std::size_t j = i; j < i + 8; ++j) dst[j] = f16_bits_to_f32(src[j]);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// CPUID's AVX and F16C bits, and the OS saving the YMM registers (XCR0 bits 1
// and 2). By hand: clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    if (!(c & bit_AVX) || !(c & bit_F16C) || !(c & bit_OSXSAVE)) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return yes;
}
#endif

void f32_to_f16_n(const float* src, std::uint16_t* dst, std::size_t n) {
#if defined(NANSCOPE_X86)
  if (has_f16c()) return f32_to_f16_f16c(src, dst, n);
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_f16_bits(src[i]);
}

void f16_to_f32_n(const std::uint16_t* src, float* dst, std::size_t n) {
#if defined(NANSCOPE_X86)
  if (has_f16c()) return f16_to_f32_f16c(src, dst, n);
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// Branch-free loops the compiler vectorizes: the bf16 conversions are bit operations.
void f32_to_bf16_n(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
}

void bf16_to_f32_n(const std::uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, std::size_t n) {
  if (n == 0) return;
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  const auto* s16 = static_cast<const std::uint16_t*>(src);
  auto* d16 = static_cast<std::uint16_t*>(dst);
  if (from == DType::f32) {
    const auto* f = static_cast<const float*>(src);
    return to == DType::f16 ? f32_to_f16_n(f, d16, n) : f32_to_bf16_n(f, d16, n);
  }
  if (to == DType::f32) {
    auto* f = static_cast<float*>(dst);
    return from == DType::f16 ? f16_to_f32_n(s16, f, n) : bf16_to_f32_n(s16, f, n);
  }
  // f16 <-> bf16 through f32 (exact from either), a block at a time.
  float buf[1024];
  for (std::size_t i = 0; i < n; i += 1024) {
    const std::size_t m = std::min<std::size_t>(1024, n - i);
    if (from == DType::f16) {
      f16_to_f32_n(s16 + i, buf, m);
      f32_to_bf16_n(buf, d16 + i, m);
    } else {
      bf16_to_f32_n(s16 + i, buf, m);
      f32_to_f16_n(buf, d16 + i, m);
    }
  }
}

}  // namespace nanscope
