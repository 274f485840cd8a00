// f16 and bf16 conversions (engine/core/dtype.hpp) bit for bit against PyTorch:
// every one of the 65,536 patterns decoded, and ~1.6M float32 values encoded
// (every f16/bf16 value, every midpoint between neighbours and the floats just
// beside it, the overflow and subnormal boundaries, NaNs with payloads, and 1M
// random bit patterns). Plus round_to_from_double, whose single rounding from
// double is checked on hand-made double-rounding traps and against a
// brute-force nearest-even search.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/dtype.hpp"
#include "io/safetensors.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

constexpr std::uint64_t kRandomSeed = 0x5eed0f16;
constexpr int kRandomPatterns = 1 << 20;

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

bool f16_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Midpoints of consecutive finite values of a 16-bit type (both signs), and the
// floats just below and above each: the ties and near-ties RNE must get right.
void add_midpoints(std::vector<float>& out, float (*decode)(std::uint16_t), std::uint16_t max_finite) {
  for (std::uint32_t p = 0; p < max_finite; ++p) {
    const float a = decode(static_cast<std::uint16_t>(p));
    const float b = decode(static_cast<std::uint16_t>(p + 1));
    const float mid = a + (b - a) * 0.5f;  // exact: one more significant bit than the 16-bit type has
    for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  }
}

std::vector<float> encode_inputs() {
  std::vector<float> x;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    x.push_back(f16_bits_to_f32(static_cast<std::uint16_t>(p)));
    x.push_back(bf16_bits_to_f32(static_cast<std::uint16_t>(p)));
  }
  add_midpoints(x, f16_bits_to_f32, 0x7bff);
  add_midpoints(x, bf16_bits_to_f32, 0x7f7f);
  const float specials[] = {65504.0f,
                            std::nextafter(65520.0f, 0.0f),
                            65520.0f,
                            std::nextafter(65520.0f, INFINITY),
                            65536.0f,
                            1e5f,
                            std::numeric_limits<float>::max(),
                            from_bits(0x7f7f7fffu),
                            from_bits(0x7f7f8000u),
                            from_bits(0x7f7f8001u),
                            0x1p-24f,
                            0x1p-25f,
                            std::nextafter(0x1p-25f, 0.0f),
                            std::nextafter(0x1p-25f, 1.0f),
                            3 * 0x1p-25f,
                            0x1p-26f,
                            0x1p-14f,
                            std::nextafter(0x1p-14f, 0.0f),
                            0x1p-14f - 0x1p-25f,
                            0x1p-149f,
                            std::numeric_limits<float>::min(),
                            0.0f,
                            INFINITY};
  for (const float v : specials) {
    x.push_back(v);
    x.push_back(-v);
  }
  for (const std::uint32_t nan :
       {0x7f800001u, 0x7fc00000u, 0x7fbfffffu, 0x7f802000u, 0x7fffe000u, 0x7f801fffu, 0x7fc00001u, 0x7fd55555u}) {
    x.push_back(from_bits(nan));
    x.push_back(from_bits(nan | 0x80000000u));
  }
  std::mt19937_64 rng(kRandomSeed);
  for (int i = 0; i < kRandomPatterns; ++i) x.push_back(from_bits(static_cast<std::uint32_t>(rng())));
  return x;
}

struct TorchResults {
  std::vector<float> x;
  std::vector<float> f16_decoded, bf16_decoded;
  std::vector<std::uint16_t> x_f16, x_bf16;
};

// One oracle run for the whole file: python start-up and the torch import cost seconds.
const TorchResults& torch_results() {
  static const TorchResults r = [] {
    TorchResults t;
    t.x = encode_inputs();
    test::TempDir dir;
    io::write_safetensors(dir / "in.safetensors",
                          {{"x", HostTensor::from_f32({static_cast<std::int64_t>(t.x.size())}, t.x)}});
    test::run_oracle("dtype_oracle.py", {(dir / "in.safetensors").string(), (dir / "out.safetensors").string()});
    const auto f = io::SafetensorsFile::open(dir / "out.safetensors");
    t.f16_decoded = f.read("f16_decoded", DType::f32).to_f32();
    t.bf16_decoded = f.read("bf16_decoded", DType::f32).to_f32();
    for (const char* name : {"x_f16", "x_bf16"}) {
      const io::TensorEntry* e = f.find(name);
      if (!e || e->file_dtype != io::FileDType::I16)
        throw std::runtime_error(std::string("oracle output lacks I16 ") + name);
      const auto raw = f.bytes(*e);
      std::vector<std::uint16_t> v(raw.size() / 2);
      std::memcpy(v.data(), raw.data(), raw.size());
      (std::string(name) == "x_f16" ? t.x_f16 : t.x_bf16) = std::move(v);
    }
    return t;
  }();
  return r;
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

void check_decode(const char* type, float (*decode)(std::uint16_t), const std::vector<float>& torch_values) {
  ASSERT_EQ(torch_values.size(), 65536u);
  int failures = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const float ours = decode(static_cast<std::uint16_t>(p));
    const float theirs = torch_values[p];
    const bool ok = std::isnan(theirs) ? std::isnan(ours) && std::signbit(ours) == std::signbit(theirs)
                                       : bits(ours) == bits(theirs);
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << type << " pattern " << hex(p) << ": ours " << ours << " (" << hex(bits(ours)) << "), torch "
                    << theirs << " (" << hex(bits(theirs)) << ")";
    }
  }
  EXPECT_EQ(failures, 0) << type << " decode mismatches";
}

void check_encode(const char* type, std::uint16_t (*encode)(float), bool (*is_nan)(std::uint16_t),
                  const std::vector<std::uint16_t>& torch_bits, bool torch_keeps_nan_sign) {
  const auto& x = torch_results().x;
  ASSERT_EQ(torch_bits.size(), x.size());
  int failures = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint16_t ours = encode(x[i]);
    const std::uint16_t theirs = torch_bits[i];
    bool ok = ours == theirs;
    if (std::isnan(x[i])) {  // NaN: both NaN, payload free, sign kept
      ok = is_nan(ours) && is_nan(theirs) && (ours & 0x8000u) == (bits(x[i]) >> 16 & 0x8000u) &&
           (!torch_keeps_nan_sign || (ours & 0x8000u) == (theirs & 0x8000u));
    }
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << type << " of " << x[i] << " (f32 " << hex(bits(x[i])) << ", input " << i << ", random seed "
                    << hex(static_cast<std::uint32_t>(kRandomSeed)) << "): ours " << hex(ours) << ", torch "
                    << hex(theirs);
    }
  }
  EXPECT_EQ(failures, 0) << type << " encode mismatches over " << x.size() << " inputs";
}

TEST(DTypeVsTorch, F16DecodeEveryPattern) {
  NANSCOPE_REQUIRE_PYTHON();
  check_decode("f16", f16_bits_to_f32, torch_results().f16_decoded);
}

TEST(DTypeVsTorch, BF16DecodeEveryPattern) {
  NANSCOPE_REQUIRE_PYTHON();
  check_decode("bf16", bf16_bits_to_f32, torch_results().bf16_decoded);
}

TEST(DTypeVsTorch, F16EncodeBitForBit) {
  NANSCOPE_REQUIRE_PYTHON();
  check_encode("f32->f16", f32_to_f16_bits, f16_is_nan, torch_results().x_f16, true);
}

TEST(DTypeVsTorch, BF16EncodeBitForBit) {
  NANSCOPE_REQUIRE_PYTHON();
  // PyTorch turns every NaN into the positive 0x7fc0; we keep the sign (as f16 does), so only NaN-ness is compared.
  check_encode("f32->bf16", f32_to_bf16_bits, bf16_is_nan, torch_results().x_bf16, false);
}

TEST(DType, KnownValues) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00u);
  EXPECT_EQ(f32_to_f16_bits(-1e5f), 0xfc00u);
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000u);  // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16_bits(3 * 0x1p-25f), 0x0002u);  // tie between 1 and 2 units: even is 2
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80u);  // tie: down to even
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82u);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7f8000u)), 0x7f80u);  // past bf16 max: Inf
  EXPECT_EQ(dtype_max(DType::f16), 65504.0f);
  EXPECT_EQ(round_to(DType::f32, 0.1f), 0.1f);
}

// convert_elements (the loader's bulk path, F16C instructions where the CPU has
// them) against the scalar conversions above, bit for bit: every 61st f32
// pattern (70M, every exponent and sign, NaN payloads, subnormals), every f16
// value's neighbourhood (the midpoints to the next value and the floats beside
// them: the ties), every 16-bit pattern decoded, and lengths that leave a tail
// after the 8-wide blocks.
TEST(DType, BulkConversionMatchesTheScalarOnes) {
  std::vector<float> f;
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += 61) f.push_back(from_bits(static_cast<std::uint32_t>(b)));
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
    const std::uint32_t mid = (bits(f16_bits_to_f32(static_cast<std::uint16_t>(h))) + (h < 0x400u ? 0u : 0x1000u));
    for (const std::uint32_t x : {mid - 1, mid, mid + 1}) {
      f.push_back(from_bits(x));
      f.push_back(-from_bits(x));
    }
  }
  for (std::uint32_t h = 0; h < 0x400u; ++h) {  // subnormal halves: midpoints at (h + 1/2) * 2^-24
    const float mid = (static_cast<float>(h) + 0.5f) * 0x1p-24f;
    for (const float x : {std::nextafter(mid, 0.0f), mid, std::nextafter(mid, 1.0f)}) f.push_back(x);
  }
  for (const std::size_t n : {f.size(), std::size_t{13}, std::size_t{8}, std::size_t{7}, std::size_t{0}}) {
    std::vector<std::uint16_t> h(n + 1, 0xabcd), b(n + 1, 0xabcd);
    convert_elements(f.data(), DType::f32, h.data(), DType::f16, n);
    convert_elements(f.data(), DType::f32, b.data(), DType::bf16, n);
    std::size_t bad_h = 0, bad_b = 0, first_h = n, first_b = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (h[i] != f32_to_f16_bits(f[i]) && bad_h++ == 0) first_h = i;
      if (b[i] != f32_to_bf16_bits(f[i]) && bad_b++ == 0) first_b = i;
    }
    EXPECT_EQ(bad_h, 0u) << "f32->f16, n " << n << ", first at " << std::hex << bits(f[first_h % f.size()]);
    EXPECT_EQ(bad_b, 0u) << "f32->bf16, n " << n << ", first at " << std::hex << bits(f[first_b % f.size()]);
    EXPECT_EQ(h[n], 0xabcdu) << "wrote past the end";
    EXPECT_EQ(b[n], 0xabcdu) << "wrote past the end";
  }
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536u; ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> out(all.size());
  std::vector<std::uint16_t> across(all.size());
  for (const DType t : {DType::f16, DType::bf16}) {
    convert_elements(all.data(), t, out.data(), DType::f32, all.size());
    const DType other = t == DType::f16 ? DType::bf16 : DType::f16;
    convert_elements(all.data(), t, across.data(), other, all.size());
    for (std::uint32_t i = 0; i < 65536u; ++i) {
      const auto p = static_cast<std::uint16_t>(i);
      const float v = t == DType::f16 ? f16_bits_to_f32(p) : bf16_bits_to_f32(p);
      ASSERT_EQ(bits(out[i]), bits(v)) << dtype_name(t) << " pattern " << std::hex << i;
      const std::uint16_t want = other == DType::f16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
      ASSERT_EQ(across[i], want) << dtype_name(t) << " -> " << dtype_name(other) << " pattern " << std::hex << i;
    }
  }
}

// The correctly rounded 16-bit value of d, found by search: the neighbours lo <= |d| <= hi
// among all finite values, the nearer one, and on a tie the one with the even pattern.
float nearest_even(DType t, double d) {
  if (std::isnan(d)) return NAN;
  const auto decode = [t](std::uint32_t p) {
    return static_cast<double>(t == DType::f16 ? f16_bits_to_f32(static_cast<std::uint16_t>(p))
                                               : bf16_bits_to_f32(static_cast<std::uint16_t>(p)));
  };
  const std::uint32_t max_finite = t == DType::f16 ? 0x7bffu : 0x7f7fu;
  const std::uint32_t inf = max_finite + 1;
  const double a = std::fabs(d);
  // The value "one step past max" in the type's own exponent: where rounding to Inf starts halfway to.
  const double past_max = t == DType::f16 ? 65536.0 : 0x1p128;
  std::uint32_t lo = 0, hi = inf;  // invariant: value(lo) <= a < value(hi), value(inf) = past_max
  if (a >= past_max) {
    lo = hi = inf;
  } else {
    while (hi - lo > 1) {
      const std::uint32_t mid = (lo + hi) / 2;
      (decode(mid) <= a ? lo : hi) = mid;
    }
  }
  std::uint32_t pick = lo;
  if (lo != hi) {
    const double vlo = decode(lo), vhi = hi == inf ? past_max : decode(hi);
    const double dl = a - vlo, dh = vhi - a;  // exact: a lies within a factor 2 of both (or vlo is 0)
    pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  }
  const std::uint32_t sign = std::signbit(d) ? 0x8000u : 0u;
  const float v = t == DType::f16 ? f16_bits_to_f32(static_cast<std::uint16_t>(sign | pick))
                                  : bf16_bits_to_f32(static_cast<std::uint16_t>(sign | pick));
  return v;
}

TEST(DType, RoundFromDoubleHandMadeTraps) {
  struct Trap {
    DType t;
    double d;
    double want;
    const char* why;
  };
  const Trap traps[] = {
      {DType::f16, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-10,
       "just above an f16 tie; via f32 it lands on the tie and rounds down"},
      {DType::f16, 1.0 + 3 * 0x1p-11 - 0x1p-40, 1.0 + 0x1p-10, "just below a tie that RNE would round up"},
      {DType::f16, -(1.0 + 0x1p-11 + 0x1p-40), -(1.0 + 0x1p-10), "the same, negative"},
      {DType::f16, 65520.0 - 0x1p-10, 65504.0, "just below the overflow tie: finite"},
      {DType::f16, 65520.0 + 0x1p-10, INFINITY, "just above it: Inf"},
      {DType::f16, 65520.0, INFINITY, "the overflow tie itself rounds to Inf (even)"},
      {DType::f16, 0x1p-25 + 0x1p-60, 0x1p-24, "just above the smallest subnormal tie"},
      {DType::f16, 0x1p-25, 0.0, "the smallest subnormal tie rounds to 0"},
      {DType::f16, 3 * 0x1p-25 - 0x1p-70, 0x1p-24, "below the tie between 1 and 2 subnormal units"},
      {DType::bf16, 1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-7, "just above a bf16 tie"},
      {DType::bf16, 1.0 + 3 * 0x1p-8 - 0x1p-40, 1.0 + 0x1p-7, "just below a bf16 tie that RNE would round up"},
      {DType::bf16, 1e39, INFINITY, "past f32 range"},
      {DType::f32, 1.0 + 0x1p-24 + 0x1p-40, 1.0 + 0x1p-23, "f32 is a single rounding anyway"},
      {DType::f16, 0.1, 0.0999755859375, "plain value"},
  };
  for (const auto& trap : traps) {
    const float got = round_to_from_double(trap.t, trap.d);
    EXPECT_EQ(bits(got), bits(static_cast<float>(trap.want)))
        << dtype_name(trap.t) << " " << trap.why << ": d = " << trap.d << " got " << got << " want " << trap.want;
  }
  EXPECT_TRUE(std::isnan(round_to_from_double(DType::f16, NAN)));
  EXPECT_TRUE(std::isnan(round_to_from_double(DType::bf16, -NAN)));
}

TEST(DType, RoundFromDoubleMatchesNearestEvenSearch) {
  constexpr std::uint64_t kSeed = 0xd0b1e;
  std::mt19937_64 rng(kSeed);
  for (const DType t : {DType::f16, DType::bf16}) {
    const std::uint32_t max_finite = t == DType::f16 ? 0x7bffu : 0x7f7fu;
    int failures = 0;
    for (int i = 0; i < 200000; ++i) {
      // Around a random tie: offsets of a few double ulps, a fraction of an f32 ulp, or none.
      const auto p = static_cast<std::uint32_t>(rng() % max_finite);
      const auto value = [t](std::uint32_t q) {
        return static_cast<double>(t == DType::f16 ? f16_bits_to_f32(static_cast<std::uint16_t>(q))
                                                   : bf16_bits_to_f32(static_cast<std::uint16_t>(q)));
      };
      const double tie = (value(p) + value(p + 1)) / 2;
      const int kind = static_cast<int>(rng() % 4);
      const double ulp = tie > 0 ? std::nextafter(tie, INFINITY) - tie : 0x1p-1074;
      const double offset = kind == 0   ? 0.0
                            : kind == 1 ? static_cast<double>(static_cast<int>(rng() % 9) - 4) * ulp
                            : kind == 2
                                ? static_cast<double>(static_cast<int>(rng() % 2001) - 1000) * ulp * 0x1p20
                                : (static_cast<double>(rng() >> 11) * 0x1p-53 - 0.5) * (value(p + 1) - value(p));
      const double d = (rng() & 1 ? -1.0 : 1.0) * (tie + offset);
      const float got = round_to_from_double(t, d);
      const float want = nearest_even(t, d);
      if (bits(got) != bits(want) && ++failures <= 10) {
        ADD_FAILURE() << dtype_name(t) << " d = " << std::hexfloat << d << ": got " << got << " want " << want
                      << std::defaultfloat << " (seed " << kSeed << ", iteration " << i << ")";
      }
    }
    EXPECT_EQ(failures, 0) << dtype_name(t);
  }
}

}  // namespace
}  // namespace nanscope
