// What the fuzzers found (docs/fuzzing.md), one test each: the input that
// found it is also kept in tests/fuzz/corpus/<target>/ (test_fuzz_corpus
// replays it); here each refusal is checked to name the file or key and say
// what to do.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "config/a1111.hpp"
#include "config/png_metadata.hpp"
#include "config/preset.hpp"
#include "config/run_config.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/png.hpp"
#include "models/clip_text.hpp"
#include "models/config_json.hpp"
#include "models/ldm_checkpoint.hpp"
#include "models/unet.hpp"
#include "pipeline/model_index.hpp"
#include "studies/sweep.hpp"
#include "support/errors.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_contains;

const fs::path kCorpus = fs::path(NANSCOPE_TESTS_DIR) / "fuzz" / "corpus";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "nanscope-findings-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A 2x2 PNG whose iTXt chunk declares 1.9 GB: libpng allocated the declared
// length before reading it (the fuzzer's out-of-memory).
TEST(FuzzFindings, PngChunkLongerThanTheFileIsRefusedBeforeAllocating) {
  const fs::path f = kCorpus / "png" / "oom-ed06dac02dc956705a57991a05ed7a332e191fbd";
  const std::string msg = error_of<FileError>([&] { io::read_png(f); });
  expect_contains(msg, {f.string(), "chunk \"iTXt\"", "1946157276 bytes", "truncated or damaged"});
}

// An A1111 prompt with a byte that is not UTF-8 was accepted, and saving the
// image then threw json::type_error from the nanscope chunk.
TEST(FuzzFindings, A1111TextThatIsNotUtf8IsRefused) {
  const std::string text =
      "a dog\nSteps: 5, Sampler: 1\xF5"
      "Ere, Seed: 3";
  const std::string msg = error_of<ConfigError>([&] { run_config_from_a1111(text); });
  expect_contains(msg, {"A1111 parameters", "not valid UTF-8", "byte 0xF5 at offset 26", "re-save it as UTF-8"});

  RunConfig c;
  const std::string set = error_of<ConfigError>([&] { c.set("prompt", "caf\xE9"); });
  expect_contains(set, {"\"prompt\"", "not valid UTF-8", "byte 0xE9 at offset 3", "save the text as UTF-8"});
  EXPECT_EQ(c.prompt, RunConfig{}.prompt);
}

// A line "Negative prompt: Negative prompt: x" gave the negative prompt a
// line starting "Negative prompt:"; written back, every such line lost the
// words again, so the text changed each round.
TEST(FuzzFindings, A1111NegativePromptKeepsItsOwnNegativePromptLines) {
  const std::string text = slurp(kCorpus / "a1111" / "negative-prompt-twice");
  const RunConfig c = run_config_from_a1111(text);
  EXPECT_EQ(c.prompt, "a photo of a cat");
  EXPECT_EQ(c.negative_prompt, "blurry\nNegative prompt: Negative prompt: low quality");
  const std::string written = a1111_parameters(c);
  EXPECT_EQ(run_config_from_a1111(written), c);
  EXPECT_EQ(a1111_parameters(run_config_from_a1111(written)), written);
}

TEST(FuzzFindings, Utf8CheckAndRepair) {
  EXPECT_EQ(invalid_utf8_offset("caf\xC3\xA9 \xF0\x9F\x98\x80"), std::nullopt);
  EXPECT_EQ(invalid_utf8_offset("ab\xC0\xAF"), 2u);         // overlong
  EXPECT_EQ(invalid_utf8_offset("\xED\xA0\x80"), 0u);       // surrogate
  EXPECT_EQ(invalid_utf8_offset("x\xF4\x90\x80\x80"), 1u);  // past U+10FFFF
  EXPECT_EQ(invalid_utf8_offset("\xE2\x82"), 0u);           // cut short
  EXPECT_EQ(repair_utf8("a\xF5z\xC3\xA9"), "a\xEF\xBF\xBDz\xC3\xA9");
}

// Two cells with one id (seeds [2, 2]) wrote one report: the second was
// skipped as finished.
TEST(FuzzFindings, SweepCellsThatWouldShareAReportAreRefused) {
  const fs::path f = kCorpus / "sweep_spec" / "crash-7849027d3870182e791189c68881dfb0a9203970";
  TempDir dir;
  std::ofstream(dir.path() / "base.json") << R"({"nanscope_preset": 1})";
  const fs::path spec = dir.path() / "spec.json";
  std::ofstream(spec) << slurp(f);
  const std::string msg = error_of<ConfigError>([&] { studies::SweepSpec::read(spec); });
  expect_contains(msg, {spec.string(), "cells 0 and 1", "f16-seed2-64x64", "each cell needs its own report"});
}

TEST(FuzzFindings, SweepPathsMustBeStrings) {
  TempDir dir;
  const fs::path spec = dir.path() / "spec.json";
  std::ofstream(spec) << R"({"nanscope_sweep": 1, "preset": 5})";
  expect_contains(error_of<ConfigError>([&] { studies::SweepSpec::read(spec); }),
                  {spec.string(), "\"preset\" must be a path", "found 5"});
  std::ofstream(spec) << R"({"nanscope_sweep": "1"})";
  expect_contains(error_of<ConfigError>([&] { studies::SweepSpec::read(spec); }),
                  {spec.string(), "\"nanscope_sweep\": 1"});
}

TEST(FuzzFindings, ModelIndexValuesOfTheWrongTypeNameTheKey) {
  const auto j = nlohmann::json::parse(R"({"_class_name": "StableDiffusionPipeline",
                                           "force_zeros_for_empty_prompt": "yes"})");
  expect_contains(error_of<ConfigError>([&] { pipeline::ModelIndex::from_json(j, "m/model_index.json"); }),
                  {"m/model_index.json", "'force_zeros_for_empty_prompt' must be true or false", "\"yes\""});
  expect_contains(
      error_of<ConfigError>([&] { pipeline::ModelIndex::from_json(nlohmann::json::array(), "m/model_index.json"); }),
      {"m/model_index.json", "expected a JSON object"});
}

// A number too large for a double ("1E400") is json::out_of_range, not a
// json::parse_error: it escaped the readers that caught parse errors only.
TEST(FuzzFindings, JsonNumbersTooLargeAreFileErrors) {
  const fs::path preset = kCorpus / "preset" / "crash-f43f4a15fb3c45b1e27fcf2d477649b5f9cbdd10";
  expect_contains(error_of<FileError>([&] { load_preset(preset); }), {preset.string(), "not valid JSON", "406"});

  io::PngContents png;
  png.texts.push_back({"nanscope", R"({"config": {"nanscope_preset": 1, "steps": 1E400}})"});
  expect_contains(error_of<FileError>([&] { config_from_png(png, "a.png"); }),
                  {"a.png", "\"nanscope\" text chunk is not valid JSON"});

  TempDir dir;
  const fs::path spec = dir.path() / "spec.json";
  std::ofstream(spec) << R"({"nanscope_sweep": 1, "seeds": [1E999]})";
  expect_contains(error_of<FileError>([&] { studies::SweepSpec::read(spec); }), {spec.string(), "not valid JSON"});
}

// A block index too long for std::stoll ("input_blocks.99999999999999999999.")
// escaped family detection as std::out_of_range.
TEST(FuzzFindings, LdmBlockIndexTooLargeIsAFileError) {
  const std::string header = slurp(kCorpus / "single_file" / "regression-block-index-overflow");
  const auto j = nlohmann::json::parse(header);
  std::uint64_t data = 0;
  for (const auto& [k, v] : j.items()) data = std::max(data, v["data_offsets"][1].get<std::uint64_t>());
  TempDir dir;
  const fs::path f = dir.path() / "model.safetensors";
  {
    std::ofstream out(f, std::ios::binary);
    const std::uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << std::string(data, '\0');
  }
  expect_contains(error_of<FileError>([&] { models::LdmCheckpoint::open(f); }),
                  {f.string(), "model.diffusion_model.input_blocks.99999999999999999999.0.weight",
                   "the file is damaged or not a checkpoint"});
}

// Zero heads divided by zero (SIGFPE), INT64_MIN % -1 overflowed: sizes and
// counts in config.json are checked before they are used.
TEST(FuzzFindings, ModelConfigSizesMustBePositive) {
  const auto load = [](const std::string& name) { return models::ConfigJson::load(kCorpus / "config_json" / name); };
  expect_contains(
      error_of<ConfigError>([&] { models::ClipTextConfig::from_json(load("regression-clip-heads-zero.json")); }),
      {"regression-clip-heads-zero.json", "'num_attention_heads' = 0 is not a size", "expected 1 to"});
  expect_contains(
      error_of<ConfigError>([&] { models::UNetConfig::from_json(load("regression-unet-heads-zero.json")); }),
      {"regression-unet-heads-zero.json", "'attention_head_dim' = 0 is not a size"});
  expect_contains(error_of<ConfigError>([&] { models::UNetConfig::from_json(load("regression-unet-int64-min.json")); }),
                  {"regression-unet-int64-min.json", "'block_out_channels' = -9223372036854775808 is not a size"});
}

}  // namespace
}  // namespace nanscope
