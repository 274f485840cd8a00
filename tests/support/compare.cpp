#include "support/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

namespace nanscope::test {

namespace {

struct Observed {
  double nmse = 0.0;
  double max_abs_rel = 0.0;
  int cases = 0;
};

std::mutex& observed_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Observed>& observed() {
  static std::map<std::string, Observed> m;
  return m;
}

void print_report() {
  std::lock_guard lock(observed_mutex());
  std::fprintf(stderr, "\n[nanscope] worst observed errors per tolerance cell (nmse, max_abs/max|want|, cases):\n");
  for (const auto& [key, o] : observed()) {
    std::fprintf(stderr, "  %-48s nmse %.3g  max_abs %.3g  (%d)\n", key.c_str(), o.nmse, o.max_abs_rel, o.cases);
  }
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::string multi_index(const Shape& shape, std::int64_t i) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = i % n;
    i /= n;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
  return s + "]";
}

CompareStats compare_stats(const HostTensor& got, const HostTensor& want) {
  CompareStats s;
  double err2 = 0.0, ref2 = 0.0, ref_max = 0.0;
  const std::int64_t n = std::min(got.numel(), want.numel());
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = got.get(i), w = want.get(i);
    s.nan_got += std::isnan(g);
    s.nan_want += std::isnan(w);
    s.inf_got += std::isinf(g);
    s.inf_want += std::isinf(w);
    if (std::isfinite(g) && std::isfinite(w)) {
      ++s.finite;
      const double e = std::fabs(g - w);
      err2 += e * e;
      ref2 += w * w;
      ref_max = std::max(ref_max, std::fabs(w));
      if (s.worst < 0 || e > s.max_abs) {
        s.max_abs = e;
        s.worst = i;
      }
      continue;
    }
    // Not both finite: the classes must agree (NaN with NaN, Inf with Inf of the same sign).
    const bool same = (std::isnan(g) && std::isnan(w)) || (std::isinf(g) && std::isinf(w) && (g > 0) == (w > 0));
    if (!same) {
      ++s.nonfinite_mismatches;
      if (s.first_mismatch < 0) s.first_mismatch = i;
    }
  }
  s.nmse = ref2 > 0.0 ? err2 / ref2 : (err2 > 0.0 ? INFINITY : 0.0);
  s.max_abs_rel = ref_max > 0.0 ? s.max_abs / ref_max : (s.max_abs > 0.0 ? INFINITY : 0.0);
  return s;
}

void record_observation(std::string_view key, const CompareStats& stats) {
  if (key.empty() || !std::getenv("NANSCOPE_TOL_REPORT")) return;
  std::lock_guard lock(observed_mutex());
  auto& table = observed();
  // Registered after the table exists, so the report runs before the table's destructor.
  static const bool registered = [] { return std::atexit(print_report) == 0; }();
  (void)registered;
  auto& o = table[std::string(key)];
  o.nmse = std::max(o.nmse, stats.nmse);
  o.max_abs_rel = std::max(o.max_abs_rel, stats.max_abs_rel);
  ++o.cases;
}

::testing::AssertionResult tensors_close(const HostTensor& got, const HostTensor& want, const Tolerance& tol,
                                         bool expect_nonfinite, std::string_view key) {
  if (got.shape != want.shape) {
    return ::testing::AssertionFailure() << "shape mismatch: got " << got.describe() << ", want " << want.describe();
  }
  const CompareStats s = compare_stats(got, want);
  record_observation(key, s);
  std::ostringstream why;
  bool ok = true;
  const auto at = [&](std::int64_t i) {
    return multi_index(want.shape, i) + " got " + fmt(got.get(i)) + " want " + fmt(want.get(i));
  };
  if (!expect_nonfinite && (s.nan_got || s.nan_want)) {
    ok = false;
    std::int64_t first = -1;
    for (std::int64_t i = 0; i < got.numel() && first < 0; ++i) {
      if (std::isnan(got.get(i)) || std::isnan(want.get(i))) first = i;
    }
    why << "\n  NaN: " << s.nan_got << " in output, " << s.nan_want << " in reference; first at " << at(first);
  }
  if (s.nonfinite_mismatches) {
    ok = false;
    why << "\n  non-finite pattern differs at " << s.nonfinite_mismatches << " positions; first at "
        << at(s.first_mismatch) << " (Inf: " << s.inf_got << " in output, " << s.inf_want << " in reference)";
  }
  if (!(s.nmse <= tol.nmse)) {
    ok = false;
    why << "\n  nmse " << fmt(s.nmse) << " > limit " << fmt(tol.nmse);
  }
  if (!(s.max_abs_rel <= tol.max_abs)) {
    ok = false;
    why << "\n  max_abs " << fmt(s.max_abs) << " = " << fmt(s.max_abs_rel) << " x max|want| > limit "
        << fmt(tol.max_abs);
  }
  if (ok) return ::testing::AssertionSuccess();
  if (s.worst >= 0) why << "\n  worst finite error at " << at(s.worst);
  return ::testing::AssertionFailure() << got.describe() << " differs from the reference (" << s.finite
                                       << " finite pairs, key " << key << "):" << why.str();
}

::testing::AssertionResult bitwise_equal(const HostTensor& got, const HostTensor& want) {
  if (got.shape != want.shape || got.dtype != want.dtype) {
    return ::testing::AssertionFailure() << "got " << got.describe() << ", want " << want.describe();
  }
  const std::size_t es = dtype_size(got.dtype);
  std::int64_t diffs = 0, first = -1;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(got.data.data() + es * i, want.data.data() + es * i, es) != 0) {
      if (first < 0) first = i;
      ++diffs;
    }
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diffs << " of " << got.numel() << " values differ in their bits; first at "
                                       << multi_index(got.shape, first) << ": got " << fmt(got.get(first)) << " want "
                                       << fmt(want.get(first));
}

std::int64_t count_nonfinite(const HostTensor& t) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) n += !std::isfinite(t.get(i));
  return n;
}

}  // namespace nanscope::test
