// RunConfig: set() keys, override resolution, JSON presets (round trip,
// every class of bad key and value, atomic writes).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "config/inspect_settings.hpp"
#include "config/module_pattern.hpp"
#include "config/preset.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "support/errors.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

// The error message of `fn`, which must throw E.
using test::error_of;
using test::expect_contains;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

RunConfig custom_config() {
  RunConfig c;
  c.set("model", "/models/sd15");
  c.set("vae", "/models/sd15/vae-fp16-fix");
  c.set("prompt", "  a cat, (masterpiece:1.2), 東京 🙂 \"quoted\"\nsecond line");
  c.set("negative_prompt", "blurry");
  c.set("steps", "30");
  c.set("cfg_scale", "7.5");
  c.set("seeds", "18446744073709551615, 0, 42");
  c.set("width", "1024");
  c.set("height", "1080");
  c.set("sampler", "dpmpp_2m_karras");
  c.set("noise", "torch-cpu");
  c.set("device", "pthread-cpu");
  c.set("clip_skip", "1");
  c.set("nan_policy", "retry-vae:/models/vae-fp16-fix");
  c.set("unet.dtype", "f16");
  c.set("unet.accumulate", "native");
  c.set("unet.attention.softmax", "native");
  c.set("unet.attention.impl", "sliced");
  c.set("unet.attention.slice_size", "4");
  c.set("vae.dtype", "bf16");
  c.set("unet.up_blocks.*.attentions.*.attn1.accumulate", "f32");
  c.set("unet.up_blocks.*.attentions.*.attn1.attention.softmax", "f32");
  c.set("unet.up_blocks.3.*.attn1.attention.impl", "bmm");
  c.set("text_encoder.encoder.layers.11.dtype", "f32");
  c.set("inspect.trace", "always");
  c.set("inspect.decode_every", "5");
  c.set("inspect.layer_retry_limit", "3");
  return c;
}

TEST(RunConfig, DefaultsAreValid) {
  const RunConfig c;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.image_seeds(), std::vector<std::uint64_t>{1});
  EXPECT_EQ(c.resolve(Component::unet, "up_blocks.1.attentions.0"), Precision{});
  EXPECT_EQ(c.resolve_attention(Component::vae, ""), AttentionConfig{});
}

TEST(RunConfig, SetStoresEveryKey) {
  const RunConfig c = custom_config();
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.model, "/models/sd15");
  EXPECT_EQ(c.prompt, "  a cat, (masterpiece:1.2), 東京 🙂 \"quoted\"\nsecond line");  // prompts keep their spaces
  EXPECT_EQ(c.steps, 30);
  EXPECT_DOUBLE_EQ(c.cfg_scale, 7.5);
  EXPECT_EQ(c.seeds, (std::vector<std::uint64_t>{18446744073709551615ull, 0, 42}));
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(c.batch_size, 3);
  EXPECT_EQ(c.width, 1024);
  EXPECT_EQ(c.height, 1080);
  EXPECT_EQ(c.sampler, SamplerId::dpmpp_2m);  // the old name: dpmpp_2m with the karras schedule
  EXPECT_EQ(c.schedule, ScheduleId::karras);
  EXPECT_EQ(c.noise, NoiseKind::torch_cpu);
  EXPECT_EQ(c.clip_skip, 1);
  EXPECT_EQ(c.nan_policy.kind, NanPolicy::Kind::retry_vae);
  EXPECT_EQ(c.nan_policy.vae_path, "/models/vae-fp16-fix");
  EXPECT_EQ(c.component(Component::unet).precision,
            (Precision{DType::f16, Accumulate::native, SoftmaxPrecision::native}));
  EXPECT_EQ(c.component(Component::unet).attention, (AttentionConfig{AttentionImpl::sliced, 4}));
  EXPECT_EQ(c.component(Component::vae).precision.dtype, DType::bf16);
  ASSERT_EQ(c.overrides.size(), 3u);
  EXPECT_EQ(c.overrides[0].pattern, "unet.up_blocks.*.attentions.*.attn1");
  EXPECT_EQ(c.overrides[0].accumulate, Accumulate::f32);
  EXPECT_EQ(c.overrides[0].softmax, SoftmaxPrecision::f32);
  EXPECT_FALSE(c.overrides[0].dtype);
  EXPECT_EQ(c.inspect, json::parse(R"({"trace": "always", "decode_every": 5, "layer_retry_limit": 3})"));

  RunConfig d;
  d.set("unet.dtype=f16");  // the CLI's form
  d.set(" steps = 12 ");
  EXPECT_EQ(d.component(Component::unet).precision.dtype, DType::f16);
  EXPECT_EQ(d.steps, 12);
  d.set("seed", "7");  // a single seed drops an explicit list
  EXPECT_TRUE(d.seeds.empty());
  d.set("batch_size", "3");
  EXPECT_EQ(d.image_seeds(), (std::vector<std::uint64_t>{7, 8, 9}));
}

TEST(RunConfig, NanPoliciesRoundTripThroughTheirNames) {
  for (const char* name : {"report", "stop", "retry-vae-f32", "retry-vae:/models/vae-fp16-fix", "retry-layer-f32"}) {
    const auto p = NanPolicy::parse(name);
    ASSERT_TRUE(p) << name;
    EXPECT_EQ(p->to_string(), name);
  }
  EXPECT_EQ(NanPolicy::parse("retry-layer-f32")->kind, NanPolicy::Kind::retry_layer_f32);
  EXPECT_FALSE(NanPolicy::parse("retry-layer"));
  RunConfig c;
  c.set("nan_policy", "retry-layer-f32");
  c.set("inspect.layer_retry_limit", "5");
  EXPECT_EQ(inspect_settings(c.inspect).layer_retry_limit, 5);
  EXPECT_EQ(inspect_settings(RunConfig{}.inspect).layer_retry_limit, 8);
}

TEST(RunConfig, SetErrorsNameTheKeyAndTheAllowedValues) {
  RunConfig c;
  auto err = [&c](const std::string& k, const std::string& v) { return error_of<ConfigError>([&] { c.set(k, v); }); };
  expect_contains(err("stepz", "3"), {"\"stepz\"", "unknown key", "steps", "cfg_scale", "inspect.NAME"});
  expect_contains(err("unet.dtyp", "f16"), {"\"unet.dtyp\"", "unknown key", "dtype, accumulate"});
  expect_contains(err("unett.dtype", "f16"), {"\"unett.dtype\"", "unknown key"});
  expect_contains(err("unet.dtype", "f64"), {"\"unet.dtype\"", "\"f64\"", "f32, f16, bf16"});
  expect_contains(err("vae.accumulate", "f16"), {"\"vae.accumulate\"", "f32, native"});
  expect_contains(err("unet.attention.softmax", "half"), {"\"unet.attention.softmax\"", "f32, native"});
  expect_contains(err("unet.attention.impl", "flash"), {"\"unet.attention.impl\"", "fused, bmm, sliced"});
  expect_contains(err("unet.attention.slice_size", "0"), {"\"unet.attention.slice_size\"", "from 1 to 65536"});
  expect_contains(
      err("sampler", "Euler a"),
      {"\"sampler\"", "euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_sde, dpmpp_sde, heun, lms, unipc, ddpm, lcm"});
  expect_contains(err("noise", "gpu"), {"\"noise\"", "nanscope, torch-cpu"});
  expect_contains(err("nan_policy", "retry-vae:"), {"\"nan_policy\"", "report, stop, retry-vae-f32, retry-vae:PATH"});
  expect_contains(err("steps", "twenty"), {"\"steps\"", "from 1 to 10000", "\"twenty\""});
  expect_contains(err("steps", "0"), {"\"steps\"", "from 1 to 10000"});
  expect_contains(err("steps", "20.5"), {"\"steps\""});
  expect_contains(err("batch_size", "65"), {"\"batch_size\"", "from 1 to 64"});
  expect_contains(err("clip_skip", "-1"), {"\"clip_skip\"", "from 0 to 24"});
  expect_contains(err("width", "1001"), {"\"width\"", "multiple of 8"});
  expect_contains(err("height", "big"), {"\"height\"", "multiple of 8"});
  expect_contains(err("cfg_scale", "nan"), {"\"cfg_scale\"", "from 0 to 100"});
  expect_contains(err("cfg_scale", "-1"), {"\"cfg_scale\"", "from 0 to 100"});
  expect_contains(err("cfg_scale", "7x"), {"\"cfg_scale\""});
  expect_contains(err("seed", "-1"), {"\"seed\"", "0 to 18446744073709551615"});
  expect_contains(err("seeds", "1,,2"), {"\"seeds\""});
  expect_contains(err("unet.up_blocks.attn*.dtype", "f16"), {"\"unet.up_blocks.attn*.dtype\"", "whole segment"});
  expect_contains(err("unet.up_blocks..dtype", "f16"), {"empty segment"});
  expect_contains(err("unet.up-blocks.dtype", "f16"), {"bad segment \"up-blocks\""});
  expect_contains(err("inspect.", "1"), {"\"inspect.\""});
  expect_contains(err("inspect.trace", "true"), {"\"inspect.trace\"", "auto, always, off"});
  expect_contains(err("inspect.note", "x"), {"\"inspect.note\"", "unknown inspector setting", "inspect.emulate"});
  expect_contains(err("unet.dtype", ""), {"\"unet.dtype\"", "f32, f16, bf16"});  // defaults cannot be cleared
  expect_contains(error_of<ConfigError>([&] { c.set("unet.dtype f16"); }), {"expected key=value"});
  c.set("seeds", "1,2");
  expect_contains(err("batch_size", "3"), {"\"batch_size\"", "conflicts", "2 explicit seeds"});
  // A failed set() changes nothing.
  EXPECT_EQ(c.batch_size, 2);
  EXPECT_EQ(c.component(Component::unet).precision.dtype, DType::f32);
}

TEST(ModulePattern, StarTakesOneOrMoreWholeSegmentsAndPrefixesMatch) {
  const ModulePattern p = ModulePattern::parse("unet.up_blocks.*.attentions.*.attn1");
  EXPECT_EQ(p.specificity(), 4);
  EXPECT_TRUE(p.matches("unet.up_blocks.1.attentions.0.transformer_blocks.0.attn1"));
  EXPECT_TRUE(p.matches("unet.up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q"));
  EXPECT_TRUE(p.matches("unet.up_blocks.3.attentions.2.attn1"));
  EXPECT_FALSE(p.matches("unet.up_blocks.attentions.0.attn1"));  // * needs at least one segment
  EXPECT_FALSE(p.matches("unet.up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_q"));
  EXPECT_FALSE(p.matches("unet.up_blocks.1.attentions.0.transformer_blocks.0.attn10"));  // whole segments only
  EXPECT_FALSE(p.matches("unet.up_blocks.1.attentions.0"));
  EXPECT_FALSE(p.matches("vae.up_blocks.1.attentions.0.attn1"));
  EXPECT_TRUE(ModulePattern::parse("unet.*").matches("unet.conv_in"));
  EXPECT_FALSE(ModulePattern::parse("unet.*").matches("unet"));
  EXPECT_TRUE(ModulePattern::parse("unet").matches("unet.conv_in"));
  EXPECT_TRUE(ModulePattern::parse("vae.*.conv1").matches("vae.decoder.up_blocks.0.resnets.1.conv1"));
  EXPECT_EQ(ModulePattern::parse("vae.*.conv1").specificity(), 2);
  EXPECT_THROW(ModulePattern::parse("clip.layers.0"), ConfigError);
  EXPECT_THROW(ModulePattern::parse(""), ConfigError);
  EXPECT_THROW(ModulePattern::parse("unet.*attn"), ConfigError);
}

TEST(RunConfig, MostSpecificOverrideWinsPerFieldAndLaterWinsTies) {
  RunConfig c;
  c.set("unet.dtype", "f16");
  c.set("unet.accumulate", "native");
  c.set("unet.up_blocks.*.accumulate", "f32");              // 2 literals
  c.set("unet.up_blocks.3.*.attn1.dtype", "f32");           // 4 literals
  c.set("unet.*.attentions.*.attn1.accumulate", "native");  // 3 literals: beats up_blocks.*
  c.set("unet.*.attn1.attention.impl", "bmm");              // 2 literals
  c.set("unet.up_blocks.*.attention.impl", "sliced");       // 2 literals, later: wins the tie
  c.set("unet.up_blocks.*.attention.slice_size", "8");

  const std::string attn1 = "up_blocks.3.attentions.2.transformer_blocks.0.attn1";
  EXPECT_EQ(c.resolve(Component::unet, attn1 + ".to_q"),
            (Precision{DType::f32, Accumulate::native, SoftmaxPrecision::f32}));
  EXPECT_EQ(c.resolve(Component::unet, "up_blocks.1.attentions.0.transformer_blocks.0.attn1"),
            (Precision{DType::f16, Accumulate::native, SoftmaxPrecision::f32}));
  EXPECT_EQ(c.resolve(Component::unet, "up_blocks.1.resnets.0.conv1"),
            (Precision{DType::f16, Accumulate::f32, SoftmaxPrecision::f32}));
  EXPECT_EQ(c.resolve(Component::unet, "down_blocks.0.resnets.0.conv1"),
            (Precision{DType::f16, Accumulate::native, SoftmaxPrecision::f32}));
  EXPECT_EQ(c.resolve(Component::unet, ""), (Precision{DType::f16, Accumulate::native, SoftmaxPrecision::f32}));
  EXPECT_EQ(c.resolve_attention(Component::unet, attn1), (AttentionConfig{AttentionImpl::sliced, 8}));
  // The dtype an override sets (the module computes in it), and only where one does.
  EXPECT_EQ(c.override_dtype(Component::unet, attn1 + ".to_q"), DType::f32);
  EXPECT_EQ(c.override_dtype(Component::unet, "up_blocks.1.resnets.0.conv1"), std::nullopt);
  EXPECT_TRUE(c.has_dtype_overrides(Component::unet));
  EXPECT_FALSE(c.has_dtype_overrides(Component::vae));
  EXPECT_EQ(c.resolve_attention(Component::unet, "mid_block.attentions.0.transformer_blocks.0.attn1"),
            (AttentionConfig{AttentionImpl::bmm, 1}));
  // Overrides of one component never reach another.
  EXPECT_EQ(c.resolve(Component::vae, "up_blocks.3.attentions.0.attn1"), Precision{});

  // Setting the tie loser again moves it last, so it now wins.
  c.set("unet.*.attn1.attention.impl", "bmm");
  EXPECT_EQ(c.resolve_attention(Component::unet, attn1).impl, AttentionImpl::bmm);
  // An empty value removes a field, and the override with its last field.
  c.set("unet.up_blocks.*.attention.slice_size", "");
  EXPECT_EQ(c.resolve_attention(Component::unet, attn1).slice_size, 1);
  const std::size_t before = c.overrides.size();
  c.set("unet.up_blocks.3.*.attn1.dtype", "");
  EXPECT_EQ(c.overrides.size(), before - 1);
  EXPECT_EQ(c.resolve(Component::unet, attn1).dtype, DType::f16);
}

TEST(RunConfig, ImageConfigCarriesItsOwnSeed) {
  RunConfig c;
  c.set("seed", "18446744073709551615");
  c.set("batch_size", "2");
  EXPECT_EQ(c.image_seeds(), (std::vector<std::uint64_t>{18446744073709551615ull, 0}));  // wraps
  const RunConfig second = c.image_config(1);
  EXPECT_EQ(second.seed, 0u);
  EXPECT_EQ(second.batch_size, 1);
  c.set("seeds", "5,9");
  EXPECT_EQ(c.image_config(1).seed, 9u);
  EXPECT_TRUE(c.image_config(1).seeds.empty());
  EXPECT_THROW(c.image_config(2), ConfigError);
}

TEST(Preset, JsonRoundTrip) {
  for (const RunConfig& c : {RunConfig{}, custom_config()}) {
    const json j = to_json(c);
    EXPECT_EQ(j["nanscope_preset"], 1);
    EXPECT_EQ(run_config_from_json(j), c) << j.dump(2);
    EXPECT_EQ(run_config_from_json(json::parse(j.dump())), c);
  }
  const json j = to_json(custom_config());
  EXPECT_EQ(j["overrides"][0], json::parse(R"({"pattern": "unet.up_blocks.*.attentions.*.attn1",
                                               "accumulate": "f32", "attention": {"softmax": "f32"}})"));
  EXPECT_EQ(j["precision"]["unet"], json::parse(R"({"dtype": "f16", "accumulate": "native",
                                       "attention": {"softmax": "native", "impl": "sliced", "slice_size": 4}})"));
}

TEST(Preset, PartialPresetOverlaysDefaults) {
  const RunConfig c = run_config_from_json(json::parse(R"({"nanscope_preset": 1, "steps": 8,
      "precision": {"unet": {"attention": {"impl": "bmm"}}}})"));
  RunConfig want;
  want.steps = 8;
  want.component(Component::unet).attention.impl = AttentionImpl::bmm;
  EXPECT_EQ(c, want);
}

TEST(Preset, SaveAndLoad) {
  TempDir dir;
  const RunConfig c = custom_config();
  save_preset(c, dir / "p.json");
  EXPECT_EQ(load_preset(dir / "p.json"), c);
  EXPECT_NE(slurp(dir / "p.json").find("\"nanscope_preset\": 1"), std::string::npos);
  // Overwriting replaces the file and leaves no temporary behind.
  RunConfig d;
  d.steps = 3;
  save_preset(d, dir / "p.json");
  EXPECT_EQ(load_preset(dir / "p.json"), d);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  // An invalid config is not saved.
  d.batch_size = 0;
  expect_contains(error_of<ConfigError>([&] { save_preset(d, dir / "q.json"); }), {"q.json", "\"batch_size\""});
  EXPECT_FALSE(fs::exists(dir / "q.json"));
}

TEST(Preset, BadKeysAndValuesNameTheFileTheKeyPathAndTheAllowedValues) {
  TempDir dir;
  auto load_err = [&](const std::string& text) {
    std::ofstream(dir / "bad.json") << text;
    return error_of<ConfigError>([&] { load_preset(dir / "bad.json"); });
  };
  const std::string file = (dir / "bad.json").string();
  expect_contains(load_err(R"({"steps": 3})"), {file, "\"nanscope_preset\"", "missing"});
  expect_contains(load_err(R"({"nanscope_preset": 2})"), {"version 2", "newer"});
  expect_contains(load_err(R"({"nanscope_preset": "1"})"), {"\"nanscope_preset\"", "expected an integer"});
  expect_contains(load_err(R"([1, 2])"), {file, "expected an object"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "stepz": 3})"), {file, "\"stepz\"", "unknown key", "steps"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "steps": "20"})"), {"\"steps\"", "from 1 to 10000", "\"20\""});
  expect_contains(load_err(R"({"nanscope_preset": 1, "steps": 0})"), {"\"steps\"", "from 1 to 10000"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "steps": 1e3})"), {"\"steps\"", "expected an integer"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "cfg_scale": "7"})"), {"\"cfg_scale\"", "from 0 to 100"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "width": 1001})"), {"\"width\"", "multiple of 8"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "seed": -3})"), {"\"seed\"", "0 to 18446744073709551615"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "seeds": [1, "x"]})"), {"\"seeds[1]\""});
  expect_contains(load_err(R"({"nanscope_preset": 1, "seeds": [1, 2], "batch_size": 3})"),
                  {"\"batch_size\"", "conflicts"});
  expect_contains(
      load_err(R"({"nanscope_preset": 1, "sampler": "plms"})"),
      {"\"sampler\"", "euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_sde, dpmpp_sde, heun, lms, unipc, ddpm, lcm"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "noise": 3})"), {"\"noise\"", "expected a string"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "nan_policy": "ignore"})"), {"\"nan_policy\"", "retry-vae-f32"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "precision": {"clip": {}}})"),
                  {"\"precision.clip\"", "unknown key", "text_encoder, unet, vae"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "precision": {"unet": {"dtype": "f8"}}})"),
                  {"\"precision.unet.dtype\"", "\"f8\"", "f32, f16, bf16"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "precision": {"unet": {"attention": {"impl": "sdpa"}}}})"),
                  {"\"precision.unet.attention.impl\"", "fused, bmm, sliced"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "precision": {"unet": {"attention": {"slices": 2}}}})"),
                  {"\"precision.unet.attention.slices\"", "softmax, impl, slice_size"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "precision": {"vae": {"attention": {"slice_size": 0}}}})"),
                  {"\"precision.vae.attention.slice_size\"", "from 1 to 65536"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": {}})"), {"\"overrides\"", "expected a list"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": [{"dtype": "f32"}]})"),
                  {"\"overrides[0].pattern\"", "missing"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": [{"pattern": "unet.x"}]})"),
                  {"\"overrides[0]\"", "sets no field"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": [{"pattern": "unet.a*", "dtype": "f32"}]})"),
                  {"\"overrides[0].pattern\"", "whole segment"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": [{"pattern": "unet.x", "dtype": "f8"}]})"),
                  {"\"overrides[0].dtype\"", "f32, f16, bf16"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "overrides": [{"pattern": "unet.x", "acc": "f32"}]})"),
                  {"\"overrides[0].acc\"", "pattern, dtype, accumulate, attention"});
  expect_contains(load_err(R"({"nanscope_preset": 1, "inspect": []})"), {"\"inspect\"", "expected an object"});

  // Not JSON, not there: FileErrors naming the file.
  std::ofstream(dir / "broken.json") << "{\"nanscope_preset\": 1,";
  expect_contains(error_of<FileError>([&] { load_preset(dir / "broken.json"); }),
                  {(dir / "broken.json").string(), "not valid JSON"});
  expect_contains(error_of<FileError>([&] { load_preset(dir / "missing.json"); }),
                  {(dir / "missing.json").string(), "cannot open"});
}

TEST(Preset, ApplyJsonIsAllOrNothing) {
  RunConfig c;
  const json bad = json::parse(R"({"nanscope_preset": 1, "steps": 5, "sampler": "nope"})");
  EXPECT_THROW(apply_json(c, bad), ConfigError);
  EXPECT_EQ(c, RunConfig{});
}

// Makes writes past `bytes` fail with EFBIG (for root too, unlike permissions).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(Preset, FailedWriteLeavesTheOldFileIntact) {
  TempDir dir;
  const fs::path path = dir / "keep.json";
  RunConfig old;
  old.prompt = "the old preset";
  save_preset(old, path);
  const std::string before = slurp(path);

  RunConfig next = custom_config();
  std::string message;
  {
    FileSizeLimit limit(64);  // the preset is ~1.5 KB: the write fails part-way
    message = error_of<FileError>([&] { save_preset(next, path); });
  }
  expect_contains(message, {path.string(), "write failed"});
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "temporary left behind";

  // A folder that is not there (or is a file): nothing written, the error names the target.
  expect_contains(error_of<FileError>([&] { save_preset(next, path / "sub.json"); }),
                  {(path / "sub.json").string(), "cannot create a temporary file"});

  // An unwritable folder (meaningless for root, who may write anywhere).
  if (::geteuid() == 0) {
    std::cout << "[ note ] running as root: the read-only-folder case is covered by the size limit above\n";
    return;
  }
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string ro = error_of<FileError>([&] { save_preset(next, path); });
  fs::permissions(dir.path(), fs::perms::owner_all);
  expect_contains(ro, {path.string(), "writable"});
  EXPECT_EQ(slurp(path), before);
}

}  // namespace
}  // namespace nanscope
