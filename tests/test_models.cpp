// Whole components against diffusers' and transformers' own classes: seeded
// random-weight models saved with save_pretrained by tests/oracles/models_oracle.py,
// run there in float64 with the classic attention processor, and here through
// the engine on every backend.
//
// Tolerances (normalised MSE / max-abs in units of max|want|), calibrated by
// running the cases and setting bounds a few times above what was observed:
// - CLIP runs in float32 in the oracle (transformers' causal mask needs it):
//   f32 vs f32 differs by summation order only, well inside the same bound.
// - f32 on any backend vs torch float64: every op rounds its output to f32,
//   observed nmse <= 1e-12 (reference) and <= 1e-11 (OpenCL): bound 1e-9 / 1e-4.
// - f16 storage, f32 accumulation on any backend vs torch float64: every
//   activation is rounded to 11 bits; observed nmse ~1e-6: bound 1e-4 / 3e-2.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "backend/opencl/opencl_backend.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "models/clip_text.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"
#include "support/compare.hpp"
#include "support/oracle.hpp"
#include "support/random.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using test::Tolerance;

constexpr Tolerance kF32{1e-9, 1e-4};
constexpr Tolerance kF16{1e-4, 3e-2};

struct Fixture {
  test::TempDir dir;
  std::map<std::string, fs::path> made;

  fs::path model(const std::string& kind) {
    auto it = made.find(kind);
    if (it != made.end()) return it->second;
    const fs::path out = dir / kind;
    test::run_oracle("models_oracle.py", {"make", kind, out.string()});
    made[kind] = out;
    return out;
  }

  std::map<std::string, HostTensor> run(const std::string& kind,
                                        const std::vector<std::pair<std::string, HostTensor>>& inputs) {
    const fs::path in = dir / (kind + "_in.safetensors");
    const fs::path out = dir / (kind + "_out.safetensors");
    io::write_safetensors(in, inputs);
    test::run_oracle("models_oracle.py", {"run", kind, model(kind).string(), in.string(), out.string()});
    const auto file = io::SafetensorsFile::open(out);
    std::map<std::string, HostTensor> res;
    for (const auto& e : file.entries()) res[e.name] = file.read(e, DType::f32);
    return res;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

struct BackendCase {
  std::string name;
  std::shared_ptr<Backend> backend;
};

std::vector<BackendCase> backends() {
  std::vector<BackendCase> out;
  const DeviceList list = enumerate_devices();
  for (const auto& d : list.devices) {
    if (d.kind == DeviceKind::simulator) continue;  // Oclgrind: test_oclgrind
    out.push_back({d.name, std::shared_ptr<Backend>(make_backend(d))});
  }
  return out;
}

OpContext context(Backend& be, DType dtype) {
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision.dtype = dtype;
  return ctx;
}

HostTensor f32(const HostTensor& t) { return t.converted(DType::f32); }

// The ops a traced call ran. A traced call (the inspector's layer trace) takes
// the unfused ops in the modules' order, each output in its own buffer; the
// untraced call fuses GROUP_NORM+SILU, reorders the resnets' shortcut and
// writes over buffers it owns. Its output must be the traced one, bit for bit:
// the trace explains the run it re-runs.
struct OpNames : OpTracer {
  std::vector<std::string> names;
  void on_op(const OpContext&, std::string_view op, std::span<const Tensor* const>, const Tensor&) override {
    names.emplace_back(op);
  }
  bool has(std::string_view op) const { return std::find(names.begin(), names.end(), op) != names.end(); }
};

void expect_trace_reproduces(const OpNames& traced, const HostTensor& traced_out, const HostTensor& untraced_out) {
  EXPECT_TRUE(traced.has("GROUP_NORM"));
  EXPECT_TRUE(traced.has("SILU"));
  EXPECT_FALSE(traced.has("GROUP_NORM+SILU"));
  EXPECT_TRUE(test::bitwise_equal(traced_out, untraced_out)) << "the traced call differs from the untraced one";
}

// A repeated call (Backend::begin_repeated_call): the second and third calls of
// the same key are served from the OpenCL backend's arena, planned from the
// first, and give the first's output bit for bit.
void expect_repeats_reproduce(Backend& be, const std::function<HostTensor()>& call, const HostTensor& first) {
  auto* cl = dynamic_cast<opencl::OpenClBackend*>(&be);
  const std::size_t replayed = cl ? cl->pool().counts().replayed : 0;
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(test::bitwise_equal(call(), first)) << "repeated call " << i + 2;
  if (cl) {
    EXPECT_GT(cl->pool().counts().replayed, replayed) << "the repeated calls were not served from the arena";
  }
}

void check_unet(const std::string& kind, bool sdxl) {
  NANSCOPE_REQUIRE_PYTHON();
  test::Rng rng(test::seed_from(kind));
  const HostTensor sample = test::random_normal(rng, {2, 4, 8, 8}, DType::f32);
  const HostTensor context_h = test::random_normal(rng, {2, 77, 32}, DType::f32);
  const std::vector<float> timesteps{999.0f, 261.5f};
  const HostTensor text_embeds = test::random_normal(rng, {2, 16}, DType::f32);
  const std::vector<float> time_ids{64, 64, 0, 0, 64, 64, 32, 48, 2, 4, 32, 32};
  std::vector<std::pair<std::string, HostTensor>> in{
      {"sample", sample}, {"timesteps", HostTensor::from_f32({2}, timesteps)}, {"context", context_h}};
  if (sdxl) {
    in.emplace_back("text_embeds", text_embeds);
    in.emplace_back("time_ids", HostTensor::from_f32({2, 6}, time_ids));
  }
  const auto want = fixture().run(kind, in);
  for (const auto& bc : backends()) {
    for (DType dt : {DType::f32, DType::f16}) {
      if (dt == DType::f16 && bc.backend->device().id == "reference") continue;  // slow; the op tests cover it
      SCOPED_TRACE(kind + " on " + bc.name + " " + std::string(dtype_name(dt)));
      Backend& be = *bc.backend;
      const auto unet = models::UNet::load(fixture().model(kind), be, dt);
      const OpContext ctx = context(be, dt);
      models::AddedConditions added;
      if (sdxl) {
        added.text_embeds = be.upload(text_embeds.converted(dt));
        added.time_ids = time_ids;
      }
      const Tensor out = unet.forward(ctx, be.upload(sample.converted(dt)), timesteps,
                                      be.upload(context_h.converted(dt)), sdxl ? &added : nullptr);
      const HostTensor got = be.download(out);
      EXPECT_TRUE(test::tensors_close(f32(got), want.at("out"), dt == DType::f32 ? kF32 : kF16));
      expect_repeats_reproduce(
          be,
          [&] {
            return be.download(unet.forward(ctx, be.upload(sample.converted(dt)), timesteps,
                                            be.upload(context_h.converted(dt)), sdxl ? &added : nullptr));
          },
          got);
      OpNames trace;
      OpContext traced = ctx;
      traced.tracer = &trace;
      expect_trace_reproduces(trace,
                              be.download(unet.forward(traced, be.upload(sample.converted(dt)), timesteps,
                                                       be.upload(context_h.converted(dt)), sdxl ? &added : nullptr)),
                              got);
    }
  }
}

TEST(Models, UNetSd1MatchesDiffusers) { check_unet("unet_sd1", false); }
TEST(Models, UNetSd2MatchesDiffusers) { check_unet("unet_sd2", false); }
TEST(Models, UNetSdxlMatchesDiffusers) { check_unet("unet_sdxl", true); }

TEST(Models, VaeMatchesDiffusers) {
  NANSCOPE_REQUIRE_PYTHON();
  test::Rng rng(test::seed_from("vae"));
  const HostTensor latents = test::random_normal(rng, {1, 4, 8, 8}, DType::f32);
  const HostTensor image = test::random_uniform(rng, {1, 3, 16, 16}, DType::f32, -1.0, 1.0);
  const auto want = fixture().run("vae", {{"latents", latents}, {"image", image}});
  for (const auto& bc : backends()) {
    for (DType dt : {DType::f32, DType::f16}) {
      SCOPED_TRACE("vae on " + bc.name + " " + std::string(dtype_name(dt)));
      Backend& be = *bc.backend;
      const auto vae = models::Vae::load(fixture().model("vae"), be, dt, /*with_encoder=*/true);
      const OpContext ctx = context(be, dt);
      const Tolerance tol = dt == DType::f32 ? kF32 : kF16;
      const HostTensor decoded = be.download(vae.decode(ctx, be.upload(latents.converted(dt))));
      EXPECT_TRUE(test::tensors_close(f32(decoded), want.at("decoded"), tol));
      expect_repeats_reproduce(
          be, [&] { return be.download(vae.decode(ctx, be.upload(latents.converted(dt)))); }, decoded);
      OpNames trace;
      OpContext traced = ctx;
      traced.tracer = &trace;
      expect_trace_reproduces(trace, be.download(vae.decode(traced, be.upload(latents.converted(dt)))), decoded);
      EXPECT_TRUE(test::tensors_close(f32(be.download(vae.encode(ctx, be.upload(image.converted(dt))))),
                                      want.at("encoded"), tol));
    }
  }
}

void check_clip(const std::string& kind) {
  NANSCOPE_REQUIRE_PYTHON();
  // Two prompts: BOS, words, EOS, then padding (the legacy model pads with its
  // EOS-like id so argmax pooling is exercised; the other pads with 0).
  const bool proj = kind == "clip_proj";
  const int bos = proj ? 998 : 0, eos = proj ? 999 : 2, pad = proj ? 0 : 2;
  std::vector<std::vector<int>> ids(2, std::vector<int>(77, pad));
  test::Rng rng(test::seed_from(kind));
  for (int b = 0; b < 2; ++b) {
    const int words = b == 0 ? 5 : 40;
    ids[b][0] = bos;
    for (int t = 1; t <= words; ++t) ids[b][t] = 3 + static_cast<int>(rng.next_u64() % 900);
    ids[b][words + 1] = eos;
  }
  std::vector<float> flat;
  for (const auto& row : ids)
    for (int id : row) flat.push_back(static_cast<float>(id));
  const auto want = fixture().run(kind, {{"ids", HostTensor::from_f32({2, 77}, flat)}});
  for (const auto& bc : backends()) {
    SCOPED_TRACE(kind + " on " + bc.name);
    Backend& be = *bc.backend;
    const auto model = models::ClipTextModel::load(fixture().model(kind), be, DType::f32);
    const OpContext ctx = context(be, DType::f32);
    const auto out = model.forward(ctx, ids);
    EXPECT_TRUE(test::tensors_close(be.download(out.prompt_embeds), want.at("last"), kF32));
    EXPECT_TRUE(test::tensors_close(be.download(out.penultimate), want.at("penultimate"), kF32));
    EXPECT_TRUE(test::tensors_close(be.download(out.pooled), want.at("pooled"), kF32));
    const auto skipped = model.forward(ctx, ids, /*clip_skip=*/1);
    EXPECT_TRUE(test::tensors_close(be.download(skipped.prompt_embeds), want.at("skip1"), kF32));
  }
}

TEST(Models, ClipTextMatchesTransformers) { check_clip("clip"); }
TEST(Models, ClipTextWithProjectionMatchesTransformers) { check_clip("clip_proj"); }

TEST(Models, ShapeMismatchNamesFileTensorAndShapes) {
  NANSCOPE_REQUIRE_PYTHON();
  const fs::path src = fixture().model("unet_sd1");
  const fs::path bad = fixture().dir / "unet_bad";
  fs::create_directories(bad);
  fs::copy_file(src / "diffusion_pytorch_model.safetensors", bad / "diffusion_pytorch_model.safetensors");
  // A config that disagrees with the weights: 16 instead of 32 channels at the first level.
  std::ifstream in(src / "config.json");
  auto j = nlohmann::json::parse(in);
  j["block_out_channels"] = {16, 64};
  std::ofstream(bad / "config.json") << j.dump(2);
  auto be = make_backend(select_device(enumerate_devices(), "reference"));
  try {
    models::UNet::load(bad, *be, DType::f32);
    FAIL() << "loading a mismatched config should fail";
  } catch (const FileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("diffusion_pytorch_model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("time_embedding.linear_1.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[128,32]"), std::string::npos) << msg;  // in the file
    EXPECT_NE(msg.find("[64,16]"), std::string::npos) << msg;   // implied by the config
  }
}

}  // namespace
}  // namespace nanscope
