// The op layer itself, on every backend: errors name the op, the module, the
// shapes and dtypes and the device; zero-size inputs, dtype mismatches and
// tensors of another backend are refused; the tracer sees every op.

#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/backends.hpp"
#include "support/op_case.hpp"

namespace nanscope::test {
namespace {

std::string op_error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const OpError& e) {
    return e.what();
  }
  return "(no OpError thrown)";
}

TEST(OpLayerErrors, MismatchedShapesNameOpModuleShapesAndDevice) {
  for_each_backend([](Backend& be) {
    const OpContext c = make_context(be, {DType::f32}, {}, "unet.mid_block.attentions.0.proj_in");
    const Tensor a = be.upload(HostTensor({2, 3}, DType::f32));
    const Tensor b = be.upload(HostTensor({4, 2}, DType::f32));
    const std::string m = op_error_message([&] { ops::matmul(c, a, b); });
    for (const std::string& part :
         {std::string("MATMUL"), std::string("unet.mid_block.attentions.0.proj_in"), std::string("a[2,3] f32"),
          std::string("b[4,2] f32"), "\"" + be.device().name + "\""}) {
      EXPECT_NE(m.find(part), std::string::npos) << "no \"" << part << "\" in: " << m;
    }
    const Tensor x = be.upload(HostTensor({1, 6, 2, 2}, DType::f32));
    const std::string g = op_error_message([&] { ops::group_norm(c, x, 4, nullptr, nullptr, 1e-5f); });
    for (const char* part : {"GROUP_NORM", "x[1,6,2,2]", "groups=4"}) {
      EXPECT_NE(g.find(part), std::string::npos) << "no \"" << part << "\" in: " << g;
    }
    const std::string bc = op_error_message([&] { ops::add(c, x, upload_values(be, {3}, {1, 2, 3})); });
    EXPECT_NE(bc.find("ADD"), std::string::npos) << bc;
    EXPECT_NE(bc.find("cannot broadcast"), std::string::npos) << bc;
  });
}

TEST(OpLayerErrors, ZeroSizeDtypeMismatchAndForeignTensorsAreRefused) {
  for_each_backend([](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const std::string z = op_error_message([&] { ops::softmax(c, be.upload(HostTensor({0, 4}, DType::f32))); });
    for (const char* part : {"SOFTMAX", "x[0,4]", "zero-size"}) {
      EXPECT_NE(z.find(part), std::string::npos) << "no \"" << part << "\" in: " << z;
    }
    const std::string d = op_error_message([&] { ops::silu(c, be.upload(HostTensor({2, 2}, DType::f16))); });
    for (const char* part : {"SILU", "x[2,2] f16", "precision is f32"}) {
      EXPECT_NE(d.find(part), std::string::npos) << "no \"" << part << "\" in: " << d;
    }
    // A tensor that lives on another backend (another device, or another instance).
    const std::unique_ptr<Backend> other = make_backend(reference_backend().device());
    const Tensor foreign = other->upload(HostTensor::from_f32({2}, {1, 2}));
    const std::string f = op_error_message([&] { ops::scale(c, foreign, 2.0f); });
    EXPECT_NE(f.find("another device"), std::string::npos) << f;
  });
  const OpContext none;  // no backend
  EXPECT_THROW(ops::silu(none, reference_backend().upload(HostTensor::from_f32({1}, {1}))), OpError);
}

TEST(OpLayerTracer, SeesEveryOpWithItsInputsAndModulePath) {
  struct Recorder : OpTracer {
    std::vector<std::string> names;
    std::vector<std::size_t> inputs;
    std::vector<std::string> paths;
    void on_op(const OpContext& ctx, std::string_view op, std::span<const Tensor* const> in, const Tensor&) override {
      names.emplace_back(op);
      inputs.push_back(in.size());
      paths.push_back(ctx.path);
    }
  };
  for_each_backend([](Backend& be) {
    Recorder rec;
    OpContext c = make_context(be, {DType::f32}).child("down_blocks.0");
    c.tracer = &rec;
    const Tensor x = upload_values(be, {1, 2}, {1, 2});
    const Tensor w = upload_values(be, {3, 2}, {1, 0, 0, 1, 1, 1});
    const Tensor y = ops::linear(c.child("proj"), x, w, nullptr);
    ops::gelu(c, y);
    EXPECT_EQ(rec.names, (std::vector<std::string>{"LINEAR", "GELU"}));
    EXPECT_EQ(rec.inputs, (std::vector<std::size_t>{2, 1}));
    EXPECT_EQ(rec.paths, (std::vector<std::string>{"test.down_blocks.0.proj", "test.down_blocks.0"}));
  });
}

// add_reusing and group_norm_silu write over an input whose only handle the
// caller moved in, and only then: not while another handle sees the buffer,
// not in a traced call (the tracer was shown the input).
TEST(OpLayerReuse, WritesOverAMovedInBufferOnly) {
  for_each_backend([](Backend& be) {
    const OpContext c = make_context(be, {DType::f32});
    const Tensor b = upload_values(be, {2, 2}, {10, 20, 30, 40});

    Tensor a = upload_values(be, {2, 2}, {1, 2, 3, 4});
    const Storage* a_buffer = a.storage();
    const Tensor sum = ops::add_reusing(c, std::move(a), b);
    EXPECT_EQ(sum.storage(), a_buffer);
    EXPECT_EQ(download_values(be, sum), (std::vector<float>{11, 22, 33, 44}));

    const Tensor kept = upload_values(be, {2, 2}, {1, 2, 3, 4});
    const Tensor sum2 = ops::add_reusing(c, kept, b);  // a copy: `kept` still sees the buffer
    EXPECT_NE(sum2.storage(), kept.storage());
    EXPECT_EQ(download_values(be, kept), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(download_values(be, sum2), (std::vector<float>{11, 22, 33, 44}));

    OpNameRecorder rec;
    OpContext traced = c;
    traced.tracer = &rec;
    Tensor t = upload_values(be, {2, 2}, {1, 2, 3, 4});
    const Storage* t_buffer = t.storage();
    EXPECT_NE(ops::add_reusing(traced, std::move(t), b).storage(), t_buffer);

    // One group of 4 values {1, 2, 3, 4}: silu of the normalised values.
    Tensor x = upload_values(be, {1, 2, 2}, {1, 2, 3, 4});
    const Storage* x_buffer = x.storage();
    const Tensor n = ops::group_norm_silu(c, c, std::move(x), 1, nullptr, nullptr, 0.0f);
    EXPECT_EQ(n.storage(), x_buffer);
    const std::vector<float> got = download_values(be, n);
    const double s = 1.0 / std::sqrt(1.25);
    const double v[] = {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s};
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], v[i] / (1.0 + std::exp(-v[i])), 1e-6) << i;
    const Tensor y = upload_values(be, {1, 2, 2}, {1, 2, 3, 4});
    EXPECT_NE(ops::group_norm_silu(c, c, y, 1, nullptr, nullptr, 0.0f).storage(), y.storage());
    EXPECT_EQ(download_values(be, y), (std::vector<float>{1, 2, 3, 4}));
  });
}

// Mixed precision (per-module dtype overrides): an op casts inputs of another
// dtype to its context's, activations through a traced CAST under the op's
// module path and weights untraced; without the flag they are an error.
TEST(OpLayerMixedPrecision, CastsInputsToTheModulesDtype) {
  struct Recorder : OpTracer {
    std::vector<std::string> names;
    std::vector<DType> dtypes;
    void on_op(const OpContext&, std::string_view op, std::span<const Tensor* const>, const Tensor& out) override {
      names.emplace_back(op);
      dtypes.push_back(out.dtype());
    }
  };
  for_each_backend([](Backend& be) {
    Recorder rec;
    const Tensor x16 = upload_values(be, {1, 2}, {30000, 40000}, DType::f16);
    const Tensor w16 = upload_values(be, {2, 2}, {1, 1, 1, 1}, DType::f16);
    const OpContext strict = make_context(be, {DType::f32});
    EXPECT_THROW(ops::linear(strict, x16, w16, nullptr), OpError);

    OpContext up32 = make_context(be, {DType::f32});
    up32.mixed_precision = true;
    up32.tracer = &rec;
    const Tensor y = ops::linear(up32, x16, w16, nullptr);  // 70000: past f16's 65504, fine in f32
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(download_values(be, y), (std::vector<float>{70000, 70000}));
    EXPECT_EQ(rec.names, (std::vector<std::string>{"CAST", "LINEAR"}));  // the weight's cast is not traced

    // Back in an f16 module the value no longer fits: its CAST is where it breaks.
    OpContext back16 = make_context(be, {DType::f16});
    back16.mixed_precision = true;
    back16.tracer = &rec;
    const Tensor z = ops::scale(back16, y, 0.5f);
    EXPECT_EQ(z.dtype(), DType::f16);
    ASSERT_GE(rec.names.size(), 2u);
    EXPECT_EQ(rec.names.back(), "SCALE");
    EXPECT_EQ(rec.names[rec.names.size() - 2], "CAST");
    EXPECT_EQ(rec.dtypes[rec.names.size() - 2], DType::f16);
    EXPECT_TRUE(std::isinf(download_values(be, z)[0]));
    // Same dtypes: no cast at all.
    const std::size_t before = rec.names.size();
    ops::scale(up32, y, 2.0f);
    EXPECT_EQ(rec.names.size(), before + 1);
  });
}

}  // namespace
}  // namespace nanscope::test
