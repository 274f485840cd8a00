#pragma once
// CLIP's byte-level BPE tokenizer, loaded from a diffusers `tokenizer/` folder
// (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json,
// added_tokens.json), producing the ids that diffusers'
//   tokenizer(prompt, padding="max_length", max_length=model_max_length, truncation=True)
// produces with transformers 4.47's CLIPTokenizer (the slow one, ftfy absent:
// see clip_pre_tokenizer.hpp for the text cleanup and where it differs).
//
// Written by hand: no Debian library implements CLIP's BPE (byte-to-unicode
// alphabet, "</w>" end-of-word marker, merge ranks from merges.txt, the
// added-token splitting of transformers). Unicode work goes to utf8proc.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nanscope {

struct TokenizedPrompt {
  // Exactly max_length ids: start token, up to max_length-2 prompt tokens,
  // end token, then the pad token.
  std::vector<int> ids;
  int prompt_tokens = 0;  // tokens of the prompt itself before truncation (no start/end)
  int kept_tokens = 0;    // tokens of the prompt that fit
  int eos_index = 0;      // position of the end token in ids
  bool truncated() const { return kept_tokens < prompt_tokens; }
};

// A token that is matched in the raw text before any cleanup or BPE (the
// special tokens, SD2's pad "!", textual-inversion style additions).
struct AddedToken {
  std::string content;
  int id = 0;
  bool special = false;
  bool lstrip = false;       // eats whitespace on its left
  bool rstrip = false;       // eats whitespace on its right
  bool single_word = false;  // only when not glued to other text
};

class ClipTokenizer {
 public:
  // Loads a tokenizer folder. Throws FileError naming the file and what is wrong.
  static ClipTokenizer load(const std::filesystem::path& folder);

  // The model input for one prompt: start, prompt tokens, end, padding. A
  // prompt longer than max_length-2 tokens is truncated with a warning log
  // naming its token count and the dropped text.
  TokenizedPrompt encode(std::string_view prompt) const;

  // The prompt's token ids without start/end tokens, truncation or padding.
  std::vector<int> encode_ids(std::string_view text) const;
  // The same as token strings (byte-level alphabet, "</w>" ends a word).
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids back to text: tokens joined, "</w>" read as a space, trimmed
  // (transformers' convert_tokens_to_string). Special tokens are kept
  // unless skip_special.
  std::string decode(std::span<const int> ids, bool skip_special = false) const;
  std::string id_to_token(int id) const;  // "" for an unknown id

  int max_length() const { return max_length_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  int pad_id() const { return pad_id_; }
  int unk_id() const { return unk_id_; }
  // Vocabulary plus added tokens that are not in it.
  int vocab_size() const { return static_cast<int>(decoder_.size()); }
  std::size_t merge_count() const { return merge_ranks_.size(); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const std::filesystem::path& folder() const { return folder_; }

 private:
  struct Segment {
    std::string text;
    const AddedToken* added = nullptr;
  };
  std::vector<Segment> split_on_added(std::string_view text) const;
  void bpe(const std::string& piece, std::vector<std::string>& out) const;
  int token_to_id(const std::string& token) const;

  std::filesystem::path folder_;
  std::unordered_map<std::string, int> encoder_;      // vocab.json
  std::unordered_map<int, std::string> decoder_;      // vocab + added tokens
  std::unordered_map<std::string, int> merge_ranks_;  // "first second" -> rank
  std::vector<AddedToken> added_;                     // matched in the raw text
  std::unordered_map<std::string, int> added_ids_;    // content -> id
  int max_length_ = 77;
  int bos_id_ = 0;
  int eos_id_ = 0;
  int pad_id_ = 0;
  int unk_id_ = 0;
  std::string bos_, eos_;
};

}  // namespace nanscope
