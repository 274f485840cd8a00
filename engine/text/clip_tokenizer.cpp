#include "text/clip_tokenizer.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "text/clip_pre_tokenizer.hpp"

namespace nanscope {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// transformers keeps merges.txt lines [1, 49152 - 256 - 2] (line 0 is the
// "#version" header): CLIP's 49408-entry vocabulary has room for no more.
constexpr std::size_t kMaxMerges = 49152 - 256 - 2;
constexpr int kDefaultMaxLength = 77;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path.string() + ": cannot open the file");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw FileError(path.string() + ": read error");
  return s.str();
}

json read_json(const fs::path& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FileError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// OpenAI CLIP's bytes_to_unicode(): printable Latin-1 bytes stand for
// themselves, the other 68 bytes map to U+0100.. in byte order. Stored as UTF-8.
const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      t[static_cast<std::size_t>(b)] = encode_utf8(std::u32string(1, cp));
    }
    return t;
  }();
  return table;
}

// The inverse, by code point.
const std::unordered_map<char32_t, std::uint8_t>& byte_decoder() {
  static const std::unordered_map<char32_t, std::uint8_t> table = [] {
    std::unordered_map<char32_t, std::uint8_t> t;
    for (int b = 0; b < 256; ++b)
      t[decode_utf8(byte_symbols()[static_cast<std::size_t>(b)])[0]] = static_cast<std::uint8_t>(b);
    return t;
  }();
  return table;
}

std::string strip_python_space(std::string_view s, bool left, bool right) {
  const std::u32string u = decode_utf8(s);
  std::size_t b = 0;
  std::size_t e = u.size();
  if (left) {
    while (b < e && is_python_space(u[b])) ++b;
  }
  if (right) {
    while (e > b && is_python_space(u[e - 1])) --e;
  }
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

// A token entry of tokenizer_config.json / special_tokens_map.json: a string,
// an AddedToken object ({"content": ..., "lstrip": ...}), or null.
std::optional<AddedToken> parse_token_spec(const json& v, const fs::path& file, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  AddedToken t;
  if (v.is_string()) {
    t.content = v.get<std::string>();
    return t;
  }
  if (!v.is_object() || !v.contains("content") || !v["content"].is_string()) {
    throw FileError(file.string() + ": \"" + key +
                    "\" must be a string or an object with a string \"content\"; found " + v.dump());
  }
  t.content = v["content"].get<std::string>();
  auto flag = [&](const char* name) {
    if (!v.contains(name)) return false;
    if (!v[name].is_boolean()) throw FileError(file.string() + ": \"" + key + "." + name + "\" must be true or false");
    return v[name].get<bool>();
  };
  t.lstrip = flag("lstrip");
  t.rstrip = flag("rstrip");
  t.single_word = flag("single_word");
  t.special = flag("special");
  return t;
}

// The special-token attributes in transformers' order (SPECIAL_TOKENS_ATTRIBUTES).
constexpr std::array<const char*, 7> kSpecialKeys = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                     "pad_token", "cls_token", "mask_token"};

}  // namespace

ClipTokenizer ClipTokenizer::load(const fs::path& folder) {
  ClipTokenizer t;
  t.folder_ = folder;
  if (!fs::is_directory(folder)) {
    throw FileError(folder.string() + ": not a folder; a CLIP tokenizer folder holds vocab.json and merges.txt");
  }

  // vocab.json: token -> id.
  const fs::path vocab_path = folder / "vocab.json";
  const json vocab = read_json(vocab_path);
  if (!vocab.is_object() || vocab.empty()) {
    throw FileError(vocab_path.string() + ": expected a JSON object mapping tokens to ids");
  }
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT_MAX) {
      throw FileError(vocab_path.string() + ": the id of token \"" + token +
                      "\" must be a non-negative integer; found " + id.dump());
    }
    t.encoder_[token] = id.get<int>();
    t.decoder_[id.get<int>()] = token;
  }

  // merges.txt: "#version" header, then one "first second" pair per line, by rank.
  const fs::path merges_path = folder / "merges.txt";
  std::string merges = read_file(merges_path);
  {
    std::istringstream lines(strip_python_space(merges, true, true));
    std::string line;
    std::size_t line_no = 0;
    std::size_t rank = 0;
    while (std::getline(lines, line)) {
      ++line_no;
      if (line_no == 1) {
        if (line.rfind("#version", 0) != 0) {
          log::warn("{}: the first line is not a \"#version\" header; it is skipped as transformers does",
                    merges_path.string());
        }
        continue;
      }
      if (rank == kMaxMerges) {
        log::debug("{}: merges after line {} are ignored (CLIP uses {})", merges_path.string(), line_no - 1,
                   kMaxMerges);
        break;
      }
      std::istringstream fields(line);
      std::string a, b, extra;
      if (!(fields >> a >> b) || (fields >> extra)) {
        throw FileError(merges_path.string() + ": line " + std::to_string(line_no) +
                        " is not a pair of symbols separated by a space: \"" + line + "\"");
      }
      t.merge_ranks_[a + ' ' + b] = static_cast<int>(rank++);  // a repeated pair keeps its last rank, like dict(zip)
    }
  }

  // Special and added tokens, resolved as transformers' from_pretrained does.
  const fs::path config_path = folder / "tokenizer_config.json";
  json config = json::object();
  if (fs::exists(config_path)) {
    config = read_json(config_path);
    if (!config.is_object()) throw FileError(config_path.string() + ": expected a JSON object");
  } else {
    log::debug("{}: absent; using CLIP's defaults", config_path.string());
  }
  std::array<std::optional<AddedToken>, kSpecialKeys.size()> specials;
  specials[0] = AddedToken{"<|startoftext|>"};  // CLIPTokenizer's defaults
  specials[1] = AddedToken{"<|endoftext|>"};
  specials[2] = AddedToken{"<|endoftext|>"};
  specials[4] = AddedToken{"<|endoftext|>"};
  std::vector<AddedToken> additional;
  auto read_specials = [&](const json& j, const fs::path& file) {
    for (std::size_t k = 0; k < kSpecialKeys.size(); ++k) {
      if (j.contains(kSpecialKeys[k])) specials[k] = parse_token_spec(j[kSpecialKeys[k]], file, kSpecialKeys[k]);
    }
    if (j.contains("additional_special_tokens") && !j["additional_special_tokens"].is_null()) {
      const json& list = j["additional_special_tokens"];
      if (!list.is_array()) throw FileError(file.string() + ": \"additional_special_tokens\" must be a list");
      for (const json& v : list) {
        if (auto tok = parse_token_spec(v, file, "additional_special_tokens")) additional.push_back(*tok);
      }
    }
  };
  read_specials(config, config_path);

  auto add = [&t](AddedToken tok) {
    if (tok.content.empty() || t.added_ids_.count(tok.content)) return;
    t.added_ids_[tok.content] = tok.id;
    t.decoder_[tok.id] = tok.content;
    t.added_.push_back(std::move(tok));
  };
  if (config.contains("added_tokens_decoder")) {
    const json& dec = config["added_tokens_decoder"];
    if (!dec.is_object()) throw FileError(config_path.string() + ": \"added_tokens_decoder\" must be an object");
    for (const auto& [key, value] : dec.items()) {
      int id = -1;
      try {
        std::size_t used = 0;
        id = std::stoi(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0) throw FileError(config_path.string() + ": \"added_tokens_decoder\" key \"" + key + "\" is not an id");
      auto tok = parse_token_spec(value, config_path, "added_tokens_decoder." + key);
      if (!tok) throw FileError(config_path.string() + ": \"added_tokens_decoder." + key + "\" is null");
      tok->id = id;
      add(*tok);
    }
  } else {
    // Legacy layout: special_tokens_map.json overrides the config, added_tokens.json adds tokens.
    const fs::path map_path = folder / "special_tokens_map.json";
    if (fs::exists(map_path)) {
      const json map = read_json(map_path);
      if (!map.is_object()) throw FileError(map_path.string() + ": expected a JSON object");
      read_specials(map, map_path);
      for (auto& s : specials) {
        if (s) s->special = true;
      }
    }
    const fs::path added_path = folder / "added_tokens.json";
    if (fs::exists(added_path)) {
      const json added = read_json(added_path);
      if (!added.is_object()) throw FileError(added_path.string() + ": expected a JSON object mapping tokens to ids");
      for (const auto& [content, id] : added.items()) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT_MAX) {
          throw FileError(added_path.string() + ": the id of \"" + content + "\" must be a non-negative integer");
        }
        AddedToken tok{content, id.get<int>()};
        for (const auto& s : specials) tok.special = tok.special || (s && s->content == content);
        add(tok);
      }
    }
  }
  // Special tokens not added yet: their vocabulary id, else a new one past the end.
  // transformers numbers them from len(get_vocab()): distinct token strings.
  int next_id = static_cast<int>(t.encoder_.size());
  for (const auto& a : t.added_) next_id += t.encoder_.count(a.content) ? 0 : 1;
  auto add_special = [&](AddedToken tok) {
    tok.special = true;
    if (auto it = t.encoder_.find(tok.content); it != t.encoder_.end()) {
      tok.id = it->second;
    } else if (!t.added_ids_.count(tok.content)) {
      tok.id = next_id++;
    }
    add(tok);
  };
  for (const auto& s : specials) {
    if (s) add_special(*s);
  }
  for (const auto& a : additional) add_special(a);

  auto special_id = [&](std::size_t k, const char* role) {
    if (!specials[k]) throw FileError(config_path.string() + ": no " + role + " token (\"" + kSpecialKeys[k] + "\")");
    return t.added_ids_.at(specials[k]->content);
  };
  t.bos_id_ = special_id(0, "start");
  t.eos_id_ = special_id(1, "end");
  t.bos_ = specials[0]->content;
  t.eos_ = specials[1]->content;
  if (specials[4]) {
    t.pad_id_ = t.added_ids_.at(specials[4]->content);
  } else {
    log::warn("{}: no pad token; padding with the end token {} as CLIP models do", config_path.string(), t.eos_);
    t.pad_id_ = t.eos_id_;
  }
  // transformers maps unknown BPE tokens through the vocabulary's entry for the unk token.
  const std::string unk = specials[2] ? specials[2]->content : t.eos_;
  if (auto it = t.encoder_.find(unk); it != t.encoder_.end()) {
    t.unk_id_ = it->second;
  } else {
    t.unk_id_ = t.added_ids_.count(unk) ? t.added_ids_.at(unk) : t.eos_id_;
  }

  if (config.contains("model_max_length")) {
    const json& m = config["model_max_length"];
    // transformers writes 1e30 ("no limit") for tokenizers saved without one.
    if (!m.is_number() || m.get<double>() < 2) {
      throw FileError(config_path.string() + ": \"model_max_length\" must be an integer >= 2; found " + m.dump());
    }
    if (m.get<double>() > 1e6) {
      log::info("{}: model_max_length {} means no limit; using CLIP's {}", config_path.string(), m.dump(),
                kDefaultMaxLength);
    } else {
      t.max_length_ = m.get<int>();
    }
  }
  log::debug("tokenizer {}: {} tokens, {} merges, max length {}, bos {} eos {} pad {}", folder.string(),
             t.decoder_.size(), t.merge_ranks_.size(), t.max_length_, t.bos_id_, t.eos_id_, t.pad_id_);
  return t;
}

std::vector<ClipTokenizer::Segment> ClipTokenizer::split_on_added(std::string_view text) const {
  // Leftmost, then longest, match of an added token in the raw text (what
  // transformers' Trie.split finds for non-overlapping token sets).
  std::vector<Segment> segs;
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < text.size() && !added_.empty()) {
    const AddedToken* best = nullptr;
    for (const auto& a : added_) {
      if (text.substr(i, a.content.size()) == a.content && (!best || a.content.size() > best->content.size())) {
        best = &a;
      }
    }
    if (!best) {
      ++i;
      continue;
    }
    if (i > start) segs.push_back({std::string(text.substr(start, i - start)), nullptr});
    segs.push_back({best->content, best});
    i += best->content.size();
    start = i;
  }
  if (start < text.size()) segs.push_back({std::string(text.substr(start)), nullptr});

  // lstrip / rstrip / single_word, in transformers' order (tokenize()).
  for (std::size_t k = 0; k < segs.size(); ++k) {
    const AddedToken* a = segs[k].added;
    if (!a) continue;
    Segment* left = k > 0 ? &segs[k - 1] : nullptr;
    Segment* right = k + 1 < segs.size() ? &segs[k + 1] : nullptr;
    if (a->rstrip && right && !right->text.empty()) right->text = strip_python_space(right->text, true, false);
    if (a->lstrip && left && !left->text.empty()) left->text = strip_python_space(left->text, false, true);
    if (a->single_word && left && !left->text.empty() && left->text.back() != ' ') {
      left->text += segs[k].text;
      segs[k].text.clear();
    } else if (a->single_word && right && !right->text.empty() && right->text.front() != ' ') {
      right->text = segs[k].text + right->text;
      segs[k].text.clear();
    }
  }
  // A segment is treated as an added token only while its text still is one.
  for (auto& s : segs) {
    if (s.added && s.text != s.added->content) s.added = nullptr;
  }
  return segs;
}

void ClipTokenizer::bpe(const std::string& piece, std::vector<std::string>& out) const {
  // transformers' CLIPTokenizer.bpe: the two special strings are cached as themselves.
  if (piece == "<|startoftext|>" || piece == "<|endoftext|>") {
    out.push_back(piece);
    return;
  }
  const auto& symbols = byte_symbols();
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (unsigned char b : piece) word.push_back(symbols[b]);
  if (word.empty()) return;
  word.back() += "</w>";
  std::string key;
  while (word.size() > 1) {
    int best_rank = INT_MAX;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(1, ' ').append(word[i + 1]);
      if (auto it = merge_ranks_.find(key); it != merge_ranks_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == INT_MAX) break;
    const std::string first = word[best];
    const std::string second = word[best + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        ++i;
      }
    }
    word = std::move(merged);
  }
  for (auto& w : word) out.push_back(std::move(w));
}

int ClipTokenizer::token_to_id(const std::string& token) const {
  if (auto it = added_ids_.find(token); it != added_ids_.end()) return it->second;
  if (auto it = encoder_.find(token); it != encoder_.end()) return it->second;
  return unk_id_;
}

std::vector<std::string> ClipTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> tokens;
  for (const Segment& seg : split_on_added(text)) {
    if (seg.text.empty()) continue;
    if (seg.added) {
      tokens.push_back(seg.text);
      continue;
    }
    for (const std::string& piece : clip_pre_tokenize(seg.text)) bpe(piece, tokens);
  }
  return tokens;
}

std::vector<int> ClipTokenizer::encode_ids(std::string_view text) const {
  std::vector<int> ids;
  for (const std::string& token : tokenize(text)) ids.push_back(token_to_id(token));
  return ids;
}

TokenizedPrompt ClipTokenizer::encode(std::string_view prompt) const {
  bool invalid = false;
  decode_utf8(prompt, &invalid);
  if (invalid) log::warn("prompt is not valid UTF-8; the invalid bytes are dropped");
  const std::vector<int> ids = encode_ids(prompt);
  const std::size_t room = static_cast<std::size_t>(max_length_ - 2);
  TokenizedPrompt r;
  r.prompt_tokens = static_cast<int>(ids.size());
  r.kept_tokens = static_cast<int>(std::min(ids.size(), room));
  if (r.truncated()) {
    const std::span<const int> dropped(ids.data() + room, ids.size() - room);
    log::warn("prompt has {} tokens; the text encoder takes {} (plus start and end), so this part is ignored: \"{}\"",
              r.prompt_tokens, room, decode(dropped));
  }
  r.ids.reserve(static_cast<std::size_t>(max_length_));
  r.ids.push_back(bos_id_);
  r.ids.insert(r.ids.end(), ids.begin(), ids.begin() + r.kept_tokens);
  r.eos_index = static_cast<int>(r.ids.size());
  r.ids.push_back(eos_id_);
  r.ids.resize(static_cast<std::size_t>(max_length_), pad_id_);
  return r;
}

std::string ClipTokenizer::id_to_token(int id) const {
  auto it = decoder_.find(id);
  return it == decoder_.end() ? std::string() : it->second;
}

std::string ClipTokenizer::decode(std::span<const int> ids, bool skip_special) const {
  std::string joined;
  for (int id : ids) {
    if (skip_special) {
      auto it = std::find_if(added_.begin(), added_.end(), [id](const AddedToken& a) { return a.id == id; });
      if (it != added_.end() && it->special) continue;
    }
    joined += id_to_token(id);
  }
  // Byte-level symbols back to bytes; a character outside the byte alphabet
  // (possible only in added tokens) is kept as it is.
  std::string bytes;
  const auto& dec = byte_decoder();
  for (char32_t c : decode_utf8(joined)) {
    if (auto it = dec.find(c); it != dec.end()) {
      bytes += static_cast<char>(it->second);
    } else {
      bytes += encode_utf8(std::u32string(1, c));
    }
  }
  std::string text = encode_utf8(decode_utf8(bytes));  // invalid UTF-8 -> U+FFFD, as errors="replace"
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text.compare(i, 4, "</w>") == 0) {
      out += ' ';
      i += 4;
    } else {
      out += text[i++];
    }
  }
  return strip_python_space(out, true, true);
}

}  // namespace nanscope
