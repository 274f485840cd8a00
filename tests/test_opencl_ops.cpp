// Smoke tests of the OpenCL kernels against the reference backend: one test
// per op family, every storage dtype, both accumulation modes, small odd
// shapes (edges of every block size). The full case matrix lives in tests/ops/.
//
// Expectations: native accumulation/softmax is emulated exactly, so those
// results must equal the reference bit for bit (where the device has doubles,
// exp for native softmax is taken in double and rounded once, as the
// reference does). f32 accumulation differs from the reference's double sums
// by f32 rounding only. Data movement, casts and add/sub/mul (correctly
// rounded) are bit-exact in every mode.
//
// BackendOptions::kernel_style = gpu forces the GPU-style kernels (local-memory tiles,
// work-group reductions) on a CPU device: the GpuStyle test does that.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "ops/ops.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace nanscope {
namespace {

using test::Tolerance;

struct Mode {
  DType dtype;
  Accumulate acc;
  SoftmaxPrecision sm = SoftmaxPrecision::f32;
  std::string name() const {
    return std::string(dtype_name(dtype)) + "/" + std::string(accumulate_name(acc)) + "/" +
           std::string(softmax_name(sm));
  }
  bool exact() const { return dtype != DType::f32 && acc == Accumulate::native; }
};

const std::vector<Mode> kModes = {
    {DType::f32, Accumulate::f32},    {DType::f16, Accumulate::f32},    {DType::bf16, Accumulate::f32},
    {DType::f32, Accumulate::native}, {DType::f16, Accumulate::native}, {DType::bf16, Accumulate::native},
};

// f32 accumulation: the sums' f32 rounding, then one rounding to the dtype. Calibrated on the
// cases below with margin: f32 storage sees ~1e-7 relative error, f16/bf16 at most one unit
// in the last place of a rounded output.
Tolerance sum_tolerance(DType t) {
  switch (t) {
    case DType::f32: return {1e-11, 1e-5};
    case DType::f16: return {1e-6, 2e-3};
    case DType::bf16: return {1e-4, 1.6e-2};
  }
  return {};
}

class OpenClOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    list_ = new DeviceList(enumerate_devices());
    for (const auto& d : list_->devices) {
      if (test::is_test_device(d) && !cl_) cl_ = make_backend(d).release();
      if (d.kind == DeviceKind::reference && !ref_) ref_ = make_backend(d).release();
    }
  }
  static void TearDownTestSuite() {
    delete cl_;
    delete ref_;
    delete list_;
    cl_ = ref_ = nullptr;
    list_ = nullptr;
  }
  void SetUp() override {
    if (!cl_) GTEST_SKIP() << "no OpenCL device";
    ASSERT_NE(ref_, nullptr);
  }

  static OpContext ctx(Backend* be, const Mode& m, AttentionImpl impl = AttentionImpl::fused, int slice = 1) {
    OpContext c;
    c.backend = be;
    c.path = "test";
    c.precision = Precision{m.dtype, m.acc, m.sm};
    c.attention = AttentionConfig{impl, slice};
    return c;
  }

  // Runs fn on both backends with the same host inputs; returns (opencl, reference) outputs.
  template <typename Fn>
  std::pair<HostTensor, HostTensor> both(const std::vector<HostTensor>& inputs, const Mode& m, Fn fn,
                                         AttentionImpl impl = AttentionImpl::fused, int slice = 1) {
    auto run = [&](Backend* be) {
      std::vector<Tensor> t;
      for (const auto& h : inputs) t.push_back(be->upload(h));
      return be->download(fn(ctx(be, m, impl, slice), t));
    };
    return {run(cl_), run(ref_)};
  }

  // Bit-exact where the mode is emulated exactly, else within the f32-accumulation tolerance.
  void check(const std::pair<HostTensor, HostTensor>& r, const Mode& m, const std::string& what, bool exact,
             std::optional<Tolerance> tol = std::nullopt) {
    SCOPED_TRACE(what + " " + m.name());
    if (exact) {
      EXPECT_TRUE(test::bitwise_equal(r.first, r.second));
    } else {
      EXPECT_TRUE(test::tensors_close(r.first, r.second, tol ? *tol : sum_tolerance(m.dtype)));
    }
  }

  static HostTensor randn(const Shape& s, DType t, std::string_view tag, double stddev = 1.0) {
    test::Rng rng(test::seed_from(tag));
    return test::random_normal(rng, s, t, 0.0, stddev);
  }

  static DeviceList* list_;
  static Backend* cl_;
  static Backend* ref_;
};

DeviceList* OpenClOps::list_ = nullptr;
Backend* OpenClOps::cl_ = nullptr;
Backend* OpenClOps::ref_ = nullptr;

TEST_F(OpenClOps, ElementwiseShapeAndCast) {
  for (const Mode& m : kModes) {
    const DType t = m.dtype;
    const auto a = randn({2, 5, 7, 19}, t, "ew.a", 3.0), b = randn({5, 1, 19}, t, "ew.b", 3.0);
    for (auto fn : {&ops::add, &ops::sub, &ops::mul}) {
      check(both({a, b}, m, [&](const OpContext& c, auto& x) { return fn(c, x[0], x[1]); }), m, "binary", true);
    }
    const auto c3 = randn({2, 3, 7, 19}, t, "ew.c");
    check(both({a, c3}, m,
               [](const OpContext& c, auto& x) {
                 const Tensor parts[] = {x[0], x[1]};
                 return ops::concat(c, parts, 1);
               }),
          m, "concat", true);
    check(both({a}, m, [](const OpContext& c, auto& x) { return ops::slice(c, x[0], 2, 1, 6); }), m, "slice", true);
    check(both({a}, m,
               [](const OpContext& c, auto& x) {
                 const int perm[] = {0, 2, 1, 3};
                 return ops::permute(c, x[0], perm);
               }),
          m, "permute", true);
    check(both({a}, m,
               [](const OpContext& c, auto& x) {
                 const int perm[] = {3, 1, 0, 2};
                 return ops::permute(c, x[0], perm);
               }),
          m, "permute (gather)", true);
    check(both({a}, m, [](const OpContext& c, auto& x) { return ops::upsample_nearest2x(c, x[0]); }), m, "upsample",
          true);
    // Casts from f32 values with Inf-producing magnitudes in f16.
    const auto big = randn({3, 37}, DType::f32, "ew.big", 3e4);
    check(both({big}, m, [&](const OpContext& c, auto& x) { return ops::cast(c, x[0], t); }), m, "cast from f32", true);
    check(both({a}, m, [](const OpContext& c, auto& x) { return ops::cast(c, x[0], DType::bf16); }), m, "cast to bf16",
          true);
    check(both({a}, m, [](const OpContext& c, auto& x) { return ops::cast(c, x[0], DType::f16); }), m, "cast to f16",
          true);
  }
}

TEST_F(OpenClOps, Activations) {
  for (const Mode& m : kModes) {
    const auto x = randn({3, 5, 37}, m.dtype, "act.x", 2.0);
    check(both({x}, m, [](const OpContext& c, auto& v) { return ops::silu(c, v[0]); }), m, "silu", false);
    check(both({x}, m, [](const OpContext& c, auto& v) { return ops::gelu(c, v[0]); }), m, "gelu", false);
    check(both({x}, m, [](const OpContext& c, auto& v) { return ops::gelu(c, v[0], ops::GeluApprox::tanh); }), m,
          "gelu tanh", false);
    check(both({x}, m, [](const OpContext& c, auto& v) { return ops::quick_gelu(c, v[0]); }), m, "quick_gelu", false);
    check(both({x}, m, [](const OpContext& c, auto& v) { return ops::scale(c, v[0], 0.18215f); }), m, "scale", true);
    const auto g = randn({7, 2 * 37}, m.dtype, "act.g", 2.0);
    check(both({g}, m, [](const OpContext& c, auto& v) { return ops::geglu(c, v[0]); }), m, "geglu", false);
    // sin/cos of arguments up to 999 in f32 on the device against double on the reference: the
    // op suite's timestep tolerance (tests/support/tolerance.cpp; NVIDIA's sin/cos measured there).
    const std::vector<float> ts{999.0f, 1.0f, 500.5f};
    const Tolerance timestep_f32{2.5e-10, 2.5e-4};
    check(both({}, m, [&](const OpContext& c, auto&) { return ops::timestep_embedding(c, ts, 33, true, 1.0f); }), m,
          "timestep_embedding", false, m.dtype == DType::f32 ? std::optional<Tolerance>(timestep_f32) : std::nullopt);
  }
}

TEST_F(OpenClOps, Matmul) {
  for (const Mode& m : kModes) {
    const DType t = m.dtype;
    const auto a = randn({2, 37, 70}, t, "mm.a"), b = randn({2, 70, 45}, t, "mm.b");
    const auto w = randn({45, 70}, t, "mm.w"), bias = randn({45}, t, "mm.bias");
    check(both({a, b}, m, [](const OpContext& c, auto& x) { return ops::matmul(c, x[0], x[1]); }), m, "batched",
          m.exact());
    check(both({a, w, bias}, m, [](const OpContext& c, auto& x) { return ops::linear(c, x[0], x[1], &x[2]); }), m,
          "linear", m.exact());
    check(both({a, b, bias}, m,
               [](const OpContext& c, auto& x) { return ops::matmul(c, x[0], x[1], false, 0.3f, &x[2]); }),
          m, "alpha + bias", m.exact());
    // k long enough for several k-blocks (passes) of the panel GEMM.
    const auto da = randn({29, 700}, t, "mm.da", 0.2), dw = randn({41, 700}, t, "mm.dw", 0.2);
    const auto dbias = randn({41}, t, "mm.dbias");
    check(both({da, dw, dbias}, m, [](const OpContext& c, auto& x) { return ops::linear(c, x[0], x[1], &x[2]); }), m,
          "deep linear", m.exact());
    const auto ba = randn({2, 29, 700}, t, "mm.ba", 0.2), bb = randn({2, 700, 41}, t, "mm.bb", 0.2);
    check(both({ba, bb}, m, [](const OpContext& c, auto& x) { return ops::matmul(c, x[0], x[1]); }), m, "deep batched",
          m.exact());
  }
  // A native f16 partial sum past 65504 is Inf, exactly as in the reference.
  const Mode m{DType::f16, Accumulate::native};
  const auto a = HostTensor::from_f32({1, 4}, {300, 300, 300, -300}, DType::f16);
  const auto b = HostTensor::from_f32({4, 1}, {100, 100, 100, 100}, DType::f16);
  const auto r = both({a, b}, m, [](const OpContext& c, auto& x) { return ops::matmul(c, x[0], x[1]); });
  EXPECT_TRUE(std::isinf(r.first.get(0)));
  EXPECT_TRUE(test::bitwise_equal(r.first, r.second));
}

TEST_F(OpenClOps, Conv2d) {
  struct Geometry {
    Shape x, w;
    int stride, padding;
  };
  const std::vector<Geometry> geoms = {
      {{2, 5, 9, 11}, {7, 5, 3, 3}, 1, 1},   // 3x3, odd sizes
      {{1, 4, 10, 9}, {6, 4, 3, 3}, 2, 1},   // stride 2 (downsampling)
      {{2, 6, 5, 7}, {9, 6, 1, 1}, 1, 0},    // 1x1 = plain GEMM
      {{1, 3, 34, 40}, {5, 3, 3, 3}, 1, 1},  // rows wide enough for the vector im2col path
      {{2, 48, 7, 9}, {5, 48, 3, 3}, 1, 1},  // k = 432: two k-blocks
  };
  for (const Mode& m : kModes) {
    for (const auto& g : geoms) {
      const auto x = randn(g.x, m.dtype, "conv.x"), w = randn(g.w, m.dtype, "conv.w", 0.3);
      const auto bias = randn({g.w[0]}, m.dtype, "conv.b");
      check(both({x, w, bias}, m,
                 [&](const OpContext& c, auto& v) { return ops::conv2d(c, v[0], v[1], &v[2], g.stride, g.padding); }),
            m, "conv2d " + shape_str(g.x) + " * " + shape_str(g.w), m.exact());
    }
  }
}

TEST_F(OpenClOps, Norms) {
  for (const Mode& m : kModes) {
    const auto x = randn({2, 12, 5, 7}, m.dtype, "gn.x", 2.0);
    const auto gamma = randn({12}, m.dtype, "gn.g"), beta = randn({12}, m.dtype, "gn.b");
    check(both({x, gamma, beta}, m,
               [](const OpContext& c, auto& v) { return ops::group_norm(c, v[0], 4, &v[1], &v[2], 1e-5f); }),
          m, "group_norm", m.exact());
    const auto y = randn({2, 9, 70}, m.dtype, "ln.x", 2.0);
    const auto lg = randn({70}, m.dtype, "ln.g"), lb = randn({70}, m.dtype, "ln.b");
    check(
        both({y, lg, lb}, m, [](const OpContext& c, auto& v) { return ops::layer_norm(c, v[0], &v[1], &v[2], 1e-5f); }),
        m, "layer_norm", m.exact());
    check(both({y}, m, [](const OpContext& c, auto& v) { return ops::layer_norm(c, v[0], nullptr, nullptr, 1e-6f); }),
          m, "layer_norm (no affine)", m.exact());
  }
}

TEST_F(OpenClOps, Softmax) {
  for (const Mode& base : kModes) {
    for (SoftmaxPrecision sm : {SoftmaxPrecision::f32, SoftmaxPrecision::native}) {
      Mode m = base;
      m.sm = sm;
      const auto x = randn({3, 7, 77}, m.dtype, "sm.x", 4.0);
      check(both({x}, m, [](const OpContext& c, auto& v) { return ops::softmax(c, v[0]); }), m, "softmax",
            sm == SoftmaxPrecision::native && m.dtype != DType::f32);
    }
  }
}

TEST_F(OpenClOps, Attention) {
  for (const Mode& base : kModes) {
    for (SoftmaxPrecision sm : {SoftmaxPrecision::f32, SoftmaxPrecision::native}) {
      Mode m = base;
      m.sm = sm;
      const bool exact = m.dtype != DType::f32 && m.acc == Accumulate::native && sm == SoftmaxPrecision::native;
      // 2 batches x 3 heads, 13 queries over 19 keys, d = 24, dv = 16; and causal self-attention.
      const auto q = randn({2, 13, 3 * 24}, m.dtype, "at.q"), k = randn({2, 19, 3 * 24}, m.dtype, "at.k");
      const auto v = randn({2, 19, 3 * 16}, m.dtype, "at.v");
      const auto s = randn({2, 11, 2 * 8}, m.dtype, "at.s");
      for (AttentionImpl impl : {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced}) {
        const std::string name(attention_impl_name(impl));
        check(both(
                  {q, k, v}, m,
                  [](const OpContext& c, auto& x) { return ops::attention(c, x[0], x[1], x[2], 3, 0.2f); }, impl, 4),
              m, "attention " + name, exact);
        check(
            both(
                {s}, m, [](const OpContext& c, auto& x) { return ops::attention(c, x[0], x[0], x[0], 2, 0.35f, true); },
                impl, 3),
            m, "causal attention " + name, exact);
      }
      // sliced equals bmm bit for bit on the device itself.
      const auto bmm = both(
          {q, k, v}, m, [](const OpContext& c, auto& x) { return ops::attention(c, x[0], x[1], x[2], 3, 0.2f); },
          AttentionImpl::bmm);
      const auto sliced = both(
          {q, k, v}, m, [](const OpContext& c, auto& x) { return ops::attention(c, x[0], x[1], x[2], 3, 0.2f); },
          AttentionImpl::sliced, 5);
      EXPECT_TRUE(test::bitwise_equal(sliced.first, bmm.first)) << m.name();
    }
  }
}

// The GPU-style kernels (local-memory GEMM tiles, work-group reductions), forced on this device.
TEST_F(OpenClOps, GpuStyle) {
  BackendOptions gpu_style;
  gpu_style.kernel_style = KernelStyleChoice::gpu;
  const std::unique_ptr<Backend> gpu = make_backend(cl_->device(), gpu_style);
  Backend* const own = cl_;
  cl_ = gpu.get();  // both() runs on cl_
  struct Restore {
    Backend* own;
    ~Restore() { cl_ = own; }
  } restore{own};
  for (const Mode& m : kModes) {
    const auto a = randn({2, 67, 70}, m.dtype, "gpu.a"), b = randn({2, 70, 77}, m.dtype, "gpu.b");
    const auto w = randn({77, 70}, m.dtype, "gpu.w"), bias = randn({77}, m.dtype, "gpu.bias");
    check(both({a, b, bias}, m,
               [](const OpContext& c, auto& x) { return ops::matmul(c, x[0], x[1], false, 0.7f, &x[2]); }),
          m, "gpu matmul", m.exact());
    check(both({a, w, bias}, m, [](const OpContext& c, auto& x) { return ops::linear(c, x[0], x[1], &x[2]); }), m,
          "gpu linear", m.exact());
    const auto x = randn({2, 5, 9, 11}, m.dtype, "gpu.x"), cw = randn({7, 5, 3, 3}, m.dtype, "gpu.cw", 0.3);
    check(both({x, cw}, m, [](const OpContext& c, auto& v) { return ops::conv2d(c, v[0], v[1], nullptr, 1, 1); }), m,
          "gpu conv2d", m.exact());
    const auto gx = randn({2, 12, 5, 70}, m.dtype, "gpu.gn", 2.0);
    check(
        both({gx}, m, [](const OpContext& c, auto& v) { return ops::group_norm(c, v[0], 3, nullptr, nullptr, 1e-5f); }),
        m, "gpu group_norm", m.exact());
    Mode ms = m;
    ms.sm = SoftmaxPrecision::native;
    check(both({gx}, ms, [](const OpContext& c, auto& v) { return ops::softmax(c, v[0]); }), ms, "gpu softmax",
          m.dtype != DType::f32);
  }
  // The kernel family and a fallback (causal attention leaves the flash kernel) are on record.
  const auto q = randn({1, 9, 2 * 8}, DType::f32, "gpu.q");
  const auto out = both({q, q, q}, Mode{DType::f32, Accumulate::f32},
                        [](const OpContext& c, auto& v) { return ops::attention(c, v[0], v[1], v[2], 2, 0.3f, true); });
  check(out, Mode{DType::f32, Accumulate::f32}, "gpu causal attention", false);
  const std::vector<std::string> notes = gpu->kernel_notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.front().rfind("kernel family: gpu", 0), 0u) << notes.front();
  bool causal = false;
  for (const auto& n : notes) causal = causal || n.find("flash attention not used") != std::string::npos;
  EXPECT_TRUE(causal) << "no fallback note for causal attention";
  const std::string own_family = own->kernel_notes().front();
  EXPECT_EQ(own_family.rfind(own->device().kind == DeviceKind::cpu ? "kernel family: cpu" : "kernel family: gpu", 0),
            0u)
      << own_family;
}

}  // namespace
}  // namespace nanscope
