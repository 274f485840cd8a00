// PNG writing/reading with text chunks, the A1111 "parameters" text and the
// "nanscope" config chunk; cross-checked with PIL (tests/oracles/png_oracle.py),
// which is what A1111 and most SD tools read and write PNG text with.

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/a1111.hpp"
#include "config/png_metadata.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/version.hpp"
#include "io/png.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using io::PngText;
using io::RgbImage;
using nlohmann::json;
using test::TempDir;

RgbImage gradient(int w, int h) {
  RgbImage img{w, h, {}};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.pixels.push_back(static_cast<std::uint8_t>(x * 37 + y));
      img.pixels.push_back(static_cast<std::uint8_t>(y * 53 + 3 * x));
      img.pixels.push_back(static_cast<std::uint8_t>((x ^ y) * 11));
    }
  }
  return img;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// (chunk type, keyword) for every chunk of a PNG file, walked by hand.
std::vector<std::pair<std::string, std::string>> chunks(const std::string& png) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 8;
  while (pos + 12 <= png.size()) {
    const auto* p = reinterpret_cast<const unsigned char*>(png.data() + pos);
    const std::size_t len = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    const std::string type = png.substr(pos + 4, 4);
    const std::string data = png.substr(pos + 8, std::min<std::size_t>(len, 80));
    out.emplace_back(type, data.substr(0, data.find('\0')));
    pos += 12 + len;
  }
  return out;
}

bool has_chunk(const std::string& png, const std::string& type, const std::string& keyword) {
  for (const auto& [t, k] : chunks(png)) {
    if (t == type && k == keyword) return true;
  }
  return false;
}

RunConfig sample_config() {
  RunConfig c;
  c.prompt = "a cat, sitting";
  c.negative_prompt = "blurry";
  c.steps = 20;
  c.sampler = SamplerId::euler_a;
  c.cfg_scale = 7;
  c.seed = 1;
  c.width = 512;
  c.height = 512;
  return c;
}

TEST(Png, RoundTripOfPixelsAndTexts) {
  TempDir dir;
  const RgbImage img = gradient(7, 5);
  const std::vector<PngText> texts = {{"parameters", "a cat\nSteps: 20"}, {"nanscope", R"({"a": 1})"}};
  io::write_png(dir / "a.png", img, texts);
  const io::PngContents got = io::read_png(dir / "a.png");
  EXPECT_EQ(got.image, img);
  EXPECT_EQ(got.texts, texts);
  ASSERT_NE(got.find("nanscope"), nullptr);
  EXPECT_EQ(*got.find("nanscope"), R"({"a": 1})");
  EXPECT_EQ(got.find("missing"), nullptr);
  // Text chunks precede the image data; the write left no temporary behind.
  const auto list = chunks(slurp(dir / "a.png"));
  ASSERT_GE(list.size(), 5u);
  EXPECT_EQ(list[0].first, "IHDR");
  EXPECT_EQ(list[1], (std::pair<std::string, std::string>{"tEXt", "parameters"}));
  EXPECT_EQ(list[2], (std::pair<std::string, std::string>{"tEXt", "nanscope"}));
  EXPECT_EQ(list[3].first, "IDAT");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(Png, Utf8TextGoesToItxtAndLongTextIsCompressed) {
  TempDir dir;
  std::string big = R"({"inspector": [)";
  for (int i = 0; i < 4000; ++i) big += std::to_string(i) + ",";
  big += "0]}";
  const std::vector<PngText> texts = {{"parameters", "東京の猫, café 🙂\nSteps: 20"},
                                      {"ascii", "plain"},
                                      {"nanscope", big},
                                      {"big utf8", big + "é"}};
  io::write_png(dir / "u.png", gradient(3, 2), texts);
  const std::string file = slurp(dir / "u.png");
  EXPECT_TRUE(has_chunk(file, "iTXt", "parameters"));
  EXPECT_TRUE(has_chunk(file, "tEXt", "ascii"));
  EXPECT_TRUE(has_chunk(file, "zTXt", "nanscope"));
  EXPECT_TRUE(has_chunk(file, "iTXt", "big utf8"));
  EXPECT_LT(file.size(), 2 * big.size());  // both big texts were compressed
  EXPECT_EQ(io::read_png(dir / "u.png").texts, texts);
}

TEST(Png, ErrorsNameTheFile) {
  TempDir dir;
  auto read_error = [](const fs::path& p) {
    try {
      io::read_png(p);
    } catch (const FileError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no FileError for " << p;
    return std::string();
  };
  std::ofstream(dir / "notes.png") << "this is text, not an image\n";
  std::string msg = read_error(dir / "notes.png");
  EXPECT_NE(msg.find((dir / "notes.png").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a PNG"), std::string::npos) << msg;

  msg = read_error(dir / "missing.png");
  EXPECT_NE(msg.find((dir / "missing.png").string()), std::string::npos) << msg;

  io::write_png(dir / "whole.png", gradient(64, 64), {{"parameters", "x"}});
  const std::string whole = slurp(dir / "whole.png");
  std::ofstream(dir / "cut.png", std::ios::binary) << whole.substr(0, whole.size() / 2);
  msg = read_error(dir / "cut.png");
  EXPECT_NE(msg.find((dir / "cut.png").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  std::string corrupt = whole;
  corrupt[corrupt.size() / 2] = static_cast<char>(corrupt[corrupt.size() / 2] ^ 0x55);  // inside IDAT: CRC fails
  std::ofstream(dir / "crc.png", std::ios::binary) << corrupt;
  msg = read_error(dir / "crc.png");
  EXPECT_NE(msg.find((dir / "crc.png").string()), std::string::npos) << msg;

  auto write_error = [&](const RgbImage& img, const std::vector<PngText>& texts) {
    try {
      io::write_png(dir / "w.png", img, texts);
    } catch (const FileError& e) {
      EXPECT_FALSE(fs::exists(dir / "w.png"));
      return std::string(e.what());
    }
    ADD_FAILURE() << "no FileError";
    return std::string();
  };
  RgbImage short_img = gradient(4, 4);
  short_img.pixels.pop_back();
  EXPECT_NE(write_error(short_img, {}).find("expected width*height*3 = 48"), std::string::npos);
  EXPECT_NE(write_error(gradient(2, 2), {{std::string(80, 'k'), "x"}}).find("is not allowed"), std::string::npos);
  EXPECT_NE(write_error(gradient(2, 2), {{"k", std::string("a\0b", 3)}}).find("NUL"), std::string::npos);
}

TEST(A1111, ParametersText) {
  RunConfig c = sample_config();
  EXPECT_EQ(a1111_parameters(c),
            "a cat, sitting\nNegative prompt: blurry\n"
            "Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 1, Size: 512x512, Model: nanscope-tiny");
  c.negative_prompt.clear();
  c.cfg_scale = 7.5;
  c.sampler = SamplerId::dpmpp_2m;
  c.schedule = ScheduleId::karras;
  c.seed = 18446744073709551615ull;
  c.model = "/models/My, Model: v2.safetensors";
  c.vae = "/models/sd-vae-ft-mse.1/";
  c.clip_skip = 1;
  c.noise = NoiseKind::torch_cpu;
  c.width = 0;  // left to the model: no Size
  EXPECT_EQ(a1111_parameters(c),
            "a cat, sitting\nSteps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7.5, "
            "Seed: 18446744073709551615, "
            "Model: \"My, Model: v2\", VAE: sd-vae-ft-mse.1, Clip skip: 2, RNG: CPU");
}

TEST(A1111, ParsesItsOwnTextAndA1111s) {
  RunConfig c = sample_config();
  c.prompt = "line one,\nline two";
  c.negative_prompt = "ugly,\nbad";
  c.sampler = SamplerId::ddim;
  c.cfg_scale = 4.25;
  c.clip_skip = 2;
  c.noise = NoiseKind::torch_cpu;
  c.width = 768;
  const RunConfig back = run_config_from_a1111(a1111_parameters(c));
  EXPECT_EQ(back.prompt, c.prompt);
  EXPECT_EQ(back.negative_prompt, c.negative_prompt);
  EXPECT_EQ(back.steps, 20);
  EXPECT_EQ(back.sampler, SamplerId::ddim);
  EXPECT_DOUBLE_EQ(back.cfg_scale, 4.25);
  EXPECT_EQ(back.seed, 1u);
  EXPECT_EQ(back.width, 768);
  EXPECT_EQ(back.height, 512);
  EXPECT_EQ(back.clip_skip, 2);
  EXPECT_EQ(back.noise, NoiseKind::torch_cpu);

  // As A1111 1.7+ writes it: schedule type apart, quoted values, extra fields.
  const RunConfig a = run_config_from_a1111(
      "masterpiece, 1girl\nNegative prompt: lowres\nSteps: 28, Sampler: DPM++ 2M, Schedule type: Karras, "
      "CFG scale: 6, Seed: 3141592653, Size: 832x1216, Model hash: 31e35c80fc, Model: sd_xl_base_1.0, "
      "Lora hashes: \"a: 1, b: 2\", Clip skip: 1, Version: v1.9.4");
  EXPECT_EQ(a.prompt, "masterpiece, 1girl");
  EXPECT_EQ(a.negative_prompt, "lowres");
  EXPECT_EQ(a.steps, 28);
  EXPECT_EQ(a.sampler, SamplerId::dpmpp_2m);
  EXPECT_EQ(a.schedule, ScheduleId::karras);
  EXPECT_DOUBLE_EQ(a.cfg_scale, 6);
  EXPECT_EQ(a.seed, 3141592653u);
  EXPECT_EQ(a.width, 832);
  EXPECT_EQ(a.height, 1216);
  EXPECT_EQ(a.clip_skip, 0);

  // Fewer than three "Key: value" pairs: the last line is prompt text.
  EXPECT_EQ(run_config_from_a1111("just a prompt: with colon").prompt, "just a prompt: with colon");
  try {
    run_config_from_a1111("p\nSteps: many, Sampler: Euler, Seed: 1");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Steps: many"), std::string::npos) << e.what();
  }
}

TEST(PngMetadata, RunConfigRoundTripThroughBothChunks) {
  TempDir dir;
  RunConfig c = sample_config();
  c.prompt = "東京の猫, (masterpiece:1.2)";
  c.set("unet.dtype", "f16");
  c.set("unet.up_blocks.*.attentions.*.attn1.accumulate", "f32");
  c.set("inspect.trace", "always");
  const json extra = {{"inspector", {{"nonfinite", 0}, {"origin", "up_blocks.3.attentions.2"}}}};
  write_run_png(dir / "run.png", gradient(16, 8), c, extra);
  const io::PngContents png = io::read_png(dir / "run.png");
  EXPECT_EQ(png.image, gradient(16, 8));
  ASSERT_NE(png.find("parameters"), nullptr);
  EXPECT_EQ(*png.find("parameters"), a1111_parameters(c));
  const auto chunk = nanscope_chunk(png, "run.png");
  ASSERT_TRUE(chunk);
  EXPECT_EQ((*chunk)["nanscope_png"], 1);
  // Which NaNscope wrote it: in the chunk, and as the PNG standard's "Software".
  EXPECT_EQ((*chunk)["nanscope_version"], std::string(version()));
  EXPECT_EQ((*chunk)["nanscope_commit"], git_commit().empty() ? json() : json(std::string(git_commit())));
  ASSERT_NE(png.find("Software"), nullptr);
  EXPECT_EQ(*png.find("Software"), version_line("NaNscope"));
  EXPECT_NE(png.find("Software")->find(NANSCOPE_VERSION), std::string::npos);
  EXPECT_THROW(run_png_texts(c, {{"nanscope_version", "9"}}), ConfigError);
  EXPECT_EQ((*chunk)["inspector"], extra["inspector"]);
  EXPECT_EQ((*chunk)["config"], to_json(c));
  EXPECT_EQ(config_from_png(png, "run.png"), c);
  EXPECT_TRUE(has_chunk(slurp(dir / "run.png"), "iTXt", "parameters"));

  // Without the nanscope chunk the A1111 text still restores the basics.
  io::PngContents a1111_only = png;
  a1111_only.texts.erase(a1111_only.texts.begin() + 1);
  const auto restored = config_from_png(a1111_only, "a.png");
  ASSERT_TRUE(restored);
  EXPECT_EQ(restored->prompt, c.prompt);
  EXPECT_EQ(restored->sampler, c.sampler);
  EXPECT_EQ(config_from_png(io::PngContents{}, "none.png"), std::nullopt);

  EXPECT_THROW(run_png_texts(c, {{"config", 1}}), ConfigError);
  io::PngContents unversioned = png;
  unversioned.texts[1].text = json{{"config", to_json(c)}}.dump();
  EXPECT_EQ(config_from_png(unversioned, "old.png"), c);
  unversioned.texts[1].text = json{{"nanscope_png", 2}, {"config", to_json(c)}}.dump();
  EXPECT_THROW(config_from_png(unversioned, "new.png"), FileError);
  io::PngContents broken = png;
  broken.texts[1].text = "{not json";
  try {
    config_from_png(broken, "broken.png");
    ADD_FAILURE() << "no error";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.png"), std::string::npos) << e.what();
  }
}

TEST(Png, PilReadsWhatWeWrite) {
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  RunConfig c = sample_config();
  c.prompt = "東京の猫 🙂, café";
  write_run_png(dir / "ours.png", gradient(13, 7), c, {{"inspector", {{"bands", json::array({1, 2})}}}});
  test::run_oracle("png_oracle.py", {"read", (dir / "ours.png").string(), (dir / "pil.json").string()});
  std::ifstream in(dir / "pil.json");
  const json pil = json::parse(in);
  EXPECT_EQ(pil["size"], json::array({13, 7}));
  EXPECT_EQ(pil["mode"], "RGB");
  const RgbImage img = gradient(13, 7);
  EXPECT_EQ(pil["pixels"].get<std::vector<int>>(), std::vector<int>(img.pixels.begin(), img.pixels.end()));
  EXPECT_EQ(pil["texts"]["parameters"], a1111_parameters(c));
  EXPECT_EQ(json::parse(pil["texts"]["nanscope"].get<std::string>())["config"], to_json(c));
}

TEST(Png, WeReadWhatPilWrites) {
  // A1111-style files: Latin-1 tEXt, UTF-8 iTXt, compressed iTXt/zTXt, in
  // RGB, RGBA, L, LA and palette modes; pixels compared with PIL's RGB view.
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  test::run_oracle("png_oracle.py", {"write", dir.path().string()});
  std::ifstream in(dir / "expected.json");
  const json want = json::parse(in);
  for (const auto& [name, w] : want.items()) {
    SCOPED_TRACE(name);
    const io::PngContents got = io::read_png(dir / name);
    EXPECT_EQ(got.image.width, w["size"][0].get<int>());
    EXPECT_EQ(got.image.height, w["size"][1].get<int>());
    EXPECT_EQ(std::vector<int>(got.image.pixels.begin(), got.image.pixels.end()), w["pixels"].get<std::vector<int>>());
    for (const auto& [key, text] : w["texts"].items()) {
      ASSERT_NE(got.find(key), nullptr) << key;
      EXPECT_EQ(*got.find(key), text.get<std::string>()) << key;
    }
    const auto cfg = config_from_png(got, name);
    ASSERT_TRUE(cfg);
    EXPECT_EQ(cfg->prompt, "café crème, naïve");
    EXPECT_EQ(cfg->sampler, SamplerId::dpmpp_2m);
    EXPECT_EQ(cfg->schedule, ScheduleId::karras);
    EXPECT_EQ(cfg->width, 512);
  }
}

}  // namespace
}  // namespace nanscope
