// The C++ CLIP tokenizer against transformers' CLIPTokenizer (tests/oracles/
// tokenizer_oracle.py) on the same vocab.json/merges.txt, which the oracle
// learns from a generated corpus (nothing is downloaded). The cases without
// Python use a byte-level vocabulary written here.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "support/oracle.hpp"
#include "text/clip_pre_tokenizer.hpp"
#include "text/clip_tokenizer.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::TempDir;

json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return json::parse(in);
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::vector<std::string> tricky_prompts() {
  std::string long_prompt;
  for (int i = 0; i < 12; ++i) long_prompt += "a highly detailed painting of a castle on a hill, ";
  std::string a75, a76;
  for (int i = 0; i < 75; ++i) a75 += "a ";
  a76 = a75 + "b";
  return {
      "a photo of an astronaut riding a horse on mars",
      "(masterpiece:1.2), best quality, ((ultra-detailed)), [bad hands], {{cat}}",
      "1024x1024 8k uhd, f/1.8, 35mm, 3.14159, -2e5",
      "Don't stop, it's the cat's TOY; we'll see, I'd say, you're right, they've gone, I'm 'quoted' ''s",
      "Don’t use curly ‘quotes’ or “doubles”",
      "Café naïve résumé Müller ÅNGSTRÖM Ελληνικά ΟΔΟΣ ΟΔΟΣ. İstanbul STRASSE straße ǅemal",
      "decomposed e\u0301 and composed \u00e9, \u212b angstrom sign, \ufb01nal ligature, \uff21\uff22 fullwidth",
      "emoji 🙂👍🏽 👨‍👩‍👧 ❤️ flags 🇯🇵 ✨✨",
      "東京タワー 日本語の文章 中文字符 한국어 ｶﾀｶﾅ",
      "  multiple   spaces\n\nnew lines\ttabs\r\n  trailing  ",
      "UPPER CASE PROMPT WITH MiXeD cAsE",
      "",
      "   ",
      long_prompt,
      a75,
      a76,
      "<|startoftext|>hidden<|endoftext|> tokens <|ENDOFTEXT|> a<|endoftext|>b",
      "hello!! world! what?! ... !",
      "zero\u200bwidth \u00a0nbsp \u3000ideographic\u2028line\u2029para \u0085next",
      std::string("bell\x07 and ") + std::string(1, '\0') + " null \x7f del",
      "Ⅻ roman ⅻ, ½ ² ³ ٣ ௫ ①",
      "ypogegrammeni ᾳ a\u0345b, \u0130i, Σ alone, ΣΑΣ, ΑΣ' x",
      "a painting in <nanscope-style> style, <nanscope-style>landscape",
      "word-with-hyphens under_scores dots.in.words e-mail@example.com #hashtag $100 50%",
  };
}

// transformers' answers for every prompt, compared field by field. With a
// layout, the oracle first trains a vocabulary and writes `folder` in that layout.
void expect_matches_transformers(const fs::path& folder, const std::vector<std::string>& prompts,
                                 const std::string& layout = "") {
  TempDir io;
  std::ofstream(io / "prompts.json") << json(prompts).dump();
  std::vector<std::string> args = {"encode", folder.string(), (io / "prompts.json").string(),
                                   (io / "expected.json").string()};
  if (!layout.empty()) args.push_back(layout);
  test::run_oracle("tokenizer_oracle.py", args);
  const json want = read_json(io / "expected.json");
  const ClipTokenizer tok = ClipTokenizer::load(folder);
  EXPECT_EQ(tok.bos_id(), want["bos"].get<int>());
  EXPECT_EQ(tok.eos_id(), want["eos"].get<int>());
  EXPECT_EQ(tok.pad_id(), want["pad"].get<int>());
  EXPECT_EQ(tok.max_length(), want["max_length"].get<int>());
  EXPECT_EQ(tok.vocab_size(), want["vocab_size"].get<int>());
  ASSERT_EQ(want["results"].size(), prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i) + ": " + json(prompts[i]).dump());
    const json& w = want["results"][i];
    const TokenizedPrompt got = tok.encode(prompts[i]);
    EXPECT_EQ(got.ids, w["ids"].get<std::vector<int>>());
    EXPECT_EQ(tok.tokenize(prompts[i]), w["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(got.prompt_tokens, w["count"].get<int>());
    const std::vector<int> ids = tok.encode_ids(prompts[i]);
    EXPECT_EQ(tok.decode(ids), w["decoded"].get<std::string>());
    // The end token sits right after the kept prompt tokens.
    EXPECT_EQ(got.eos_index, got.kept_tokens + 1);
    EXPECT_EQ(got.ids[static_cast<std::size_t>(got.eos_index)], tok.eos_id());
  }
}

TEST(ClipTokenizer, MatchesTransformersWithSd1Files) {
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  expect_matches_transformers(dir / "sd1", tricky_prompts(), "sd1");
}

TEST(ClipTokenizer, MatchesTransformersWithSd2PadToken) {
  // SD2's pad token "!" (id 0) is a special token, so transformers cuts every
  // "!" out of the raw text as id 0 instead of BPE-merging "!!" or "!</w>".
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  const fs::path folder = dir / "sd2";
  expect_matches_transformers(folder, tricky_prompts(), "sd2");
  const ClipTokenizer tok = ClipTokenizer::load(folder);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.encode_ids("wow!!").back(), 0);
  EXPECT_EQ(tok.encode("a").ids.back(), 0);
}

TEST(ClipTokenizer, MatchesTransformersWithAddedTokensDecoder) {
  // model_max_length 24 and a non-special added token that strips spaces on both sides.
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  const fs::path folder = dir / "decoder";
  expect_matches_transformers(folder, tricky_prompts(), "decoder");
  const ClipTokenizer tok = ClipTokenizer::load(folder);
  EXPECT_EQ(tok.max_length(), 24);
  EXPECT_EQ(tok.encode("x").ids.size(), 24u);
}

TEST(ClipTokenizer, MatchesTransformersWithEmbeddedModel) {
  const fs::path folder = fs::path(NANSCOPE_SOURCE_DIR) / "resources/models/nanscope-tiny/tokenizer";
  if (!fs::exists(folder / "vocab.json")) GTEST_SKIP() << "no embedded model tokenizer at " << folder;
  NANSCOPE_REQUIRE_PYTHON();
  std::vector<std::string> prompts = tricky_prompts();
  prompts.push_back("a red circle and a blue square on a yellow background");
  expect_matches_transformers(folder, prompts);
}

TEST(ClipPreTokenizer, EveryCodePointMatchesTransformers) {
  // For (nearly) every assigned code point c: "a{c}a ΑΣ{c} {c}Σ X{c}" through
  // the cleanup and the regex, compared piece by piece. Covers the control
  // and whitespace classes, CJK spacing, NFC, lower-casing, Final_Sigma and
  // the letter / number / other classes.
  NANSCOPE_REQUIRE_PYTHON();
  TempDir io;
  test::run_oracle("tokenizer_oracle.py", {"codepoints", (io / "cps.json").string()});
  const json want = read_json(io / "cps.json");
  std::size_t failures = 0;
  for (const json& e : want["entries"]) {
    const auto text = e[1].get<std::string>();
    const auto expected = e[2].get<std::vector<std::string>>();
    const auto got = clip_pre_tokenize(text);
    if (got != expected && ++failures <= 20) {
      ADD_FAILURE() << "U+" << std::hex << e[0].get<int>() << std::dec << " " << json(text).dump()
                    << "\n  transformers: " << json(expected).dump() << "\n  nanscope:     " << json(got).dump();
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << want["entries"].size() << " code points (Python Unicode "
                          << want["unidata_version"].get<std::string>() << ")";
}

// ---- without Python: a byte-level vocabulary written here -------------------

// OpenAI CLIP's bytes_to_unicode(), as UTF-8 strings.
std::vector<std::string> byte_alphabet() {
  std::vector<std::string> out;
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out.push_back(encode_utf8(std::u32string(1, printable ? char32_t(b) : char32_t(256 + next++))));
  }
  return out;
}

// 512 byte tokens, "hello</w>" through four merges, the two special tokens.
fs::path write_byte_vocab(const fs::path& dir, const json& config = json::object()) {
  fs::create_directories(dir);
  json vocab = json::object();
  int id = 0;
  for (const auto& s : byte_alphabet()) vocab[s] = id++;
  for (const auto& s : byte_alphabet()) vocab[s + "</w>"] = id++;
  for (const char* t : {"he", "hel", "hell", "hello</w>", "<|startoftext|>", "<|endoftext|>"}) vocab[t] = id++;
  write_text(dir / "vocab.json", vocab.dump());
  write_text(dir / "merges.txt", "#version: 0.2\nh e\nhe l\nhel l\nhell o</w>\n");
  if (!config.empty()) write_text(dir / "tokenizer_config.json", config.dump());
  return dir;
}

TEST(ClipTokenizer, BytesMergesAndPadding) {
  TempDir dir;
  const ClipTokenizer tok = ClipTokenizer::load(write_byte_vocab(dir / "tok"));
  EXPECT_EQ(tok.bos_id(), 516);
  EXPECT_EQ(tok.eos_id(), 517);
  EXPECT_EQ(tok.pad_id(), 517);  // CLIP's default pad is the end token
  EXPECT_EQ(tok.max_length(), 77);
  EXPECT_EQ(tok.merge_count(), 4u);
  EXPECT_EQ(tok.tokenize("Hello helloo"), (std::vector<std::string>{"hello</w>", "hell", "o", "o</w>"}));
  const TokenizedPrompt p = tok.encode("hello !");
  ASSERT_EQ(p.ids.size(), 77u);
  EXPECT_EQ(p.ids[0], 516);
  EXPECT_EQ(p.ids[1], 515);       // hello</w>
  EXPECT_EQ(p.ids[2], 256 + 33);  // "!</w>": this vocab numbers byte symbols by byte value
  EXPECT_EQ(p.ids[3], 517);
  EXPECT_EQ(p.ids[76], 517);
  EXPECT_EQ(p.prompt_tokens, 2);
  EXPECT_FALSE(p.truncated());
  EXPECT_EQ(tok.decode(tok.encode_ids("Hello, Wörld 🙂")), "hello , wörld 🙂");
}

TEST(ClipTokenizer, TruncationKeepsTheFirstTokensAndWarnsWithTheCount) {
  TempDir dir;
  const ClipTokenizer tok = ClipTokenizer::load(write_byte_vocab(dir / "tok", {{"model_max_length", 8}}));
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  log::logger()->sinks().push_back(sink);
  const TokenizedPrompt p = tok.encode("hello 1 2 3 4 5 6 7 8 9");
  log::logger()->sinks().pop_back();
  EXPECT_EQ(p.prompt_tokens, 10);
  EXPECT_EQ(p.kept_tokens, 6);
  EXPECT_TRUE(p.truncated());
  ASSERT_EQ(p.ids.size(), 8u);
  EXPECT_EQ(p.ids[1], 515);
  EXPECT_EQ(p.ids[7], tok.eos_id());
  EXPECT_EQ(p.eos_index, 7);
  const std::string log = captured.str();
  EXPECT_NE(log.find("10 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("\"6 7 8 9\""), std::string::npos) << log;
}

TEST(ClipTokenizer, InvalidUtf8IsDroppedLikeU_FFFD) {
  TempDir dir;
  const ClipTokenizer tok = ClipTokenizer::load(write_byte_vocab(dir / "tok"));
  EXPECT_EQ(tok.encode_ids("hel\xff\xfelo"), tok.encode_ids("hello"));
  EXPECT_EQ(tok.encode_ids("\xe2\x82"), std::vector<int>{});
}

TEST(ClipTokenizer, FileErrorsNameTheFile) {
  TempDir dir;
  auto expect_error = [](const fs::path& folder, const std::string& needle) {
    try {
      ClipTokenizer::load(folder);
      ADD_FAILURE() << "no error for " << folder;
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(dir / "missing", (dir / "missing").string());

  const fs::path bad_json = write_byte_vocab(dir / "bad_json");
  write_text(bad_json / "vocab.json", "{\"a\": 1,");
  expect_error(bad_json, (bad_json / "vocab.json").string() + ": not valid JSON");

  const fs::path bad_id = write_byte_vocab(dir / "bad_id");
  write_text(bad_id / "vocab.json", "{\"a\": \"one\"}");
  expect_error(bad_id, "the id of token \"a\"");

  const fs::path bad_merge = write_byte_vocab(dir / "bad_merge");
  write_text(bad_merge / "merges.txt", "#version: 0.2\nh e\nhe l x\n");
  expect_error(bad_merge, (bad_merge / "merges.txt").string() + ": line 3");

  const fs::path no_merges = write_byte_vocab(dir / "no_merges");
  fs::remove(no_merges / "merges.txt");
  expect_error(no_merges, (no_merges / "merges.txt").string() + ": cannot open");

  const fs::path bad_pad = write_byte_vocab(dir / "bad_pad", {{"pad_token", 5}});
  expect_error(bad_pad, "\"pad_token\" must be a string");

  const fs::path bad_len = write_byte_vocab(dir / "bad_len", {{"model_max_length", 1}});
  expect_error(bad_len, "\"model_max_length\" must be an integer >= 2");
}

}  // namespace
}  // namespace nanscope
