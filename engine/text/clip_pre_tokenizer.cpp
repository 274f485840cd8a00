#include "text/clip_pre_tokenizer.hpp"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

namespace nanscope {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

bool is_letter(utf8proc_category_t k) { return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO; }
bool is_number(utf8proc_category_t k) { return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO; }
bool is_other_category(utf8proc_category_t k) {  // C*: Cn (0), Cc, Cf, Cs, Co
  return k == UTF8PROC_CATEGORY_CN || (k >= UTF8PROC_CATEGORY_CC && k <= UTF8PROC_CATEGORY_CO);
}

// transformers' _is_whitespace / _is_control (tokenization_utils.py).
bool is_bert_whitespace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || category(c) == UTF8PROC_CATEGORY_ZS;
}
bool is_bert_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return is_other_category(category(c));
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks, not all of CJK.
bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The White_Space property, which the `regex` module uses for \s. utf8proc
// does not expose it; the list is short and fixed by the Unicode standard.
bool is_regex_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's _PyUnicode_IsCased: Lowercase, Uppercase or Lt. Ll/Lu/Lt and any
// character with a case mapping cover it, plus the Other_Lowercase and
// Other_Uppercase characters that are neither letters with mappings nor
// modifier letters (Lm is case-ignorable, so the sigma rule never asks it).
bool is_cased(char32_t c) {
  const auto k = category(c);
  if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return true;
  const auto cp = static_cast<utf8proc_int32_t>(c);
  if (utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp) return true;
  return c == 0xAA || c == 0xBA || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
         (c >= 0x1F170 && c <= 0x1F189);
}

// Python's _PyUnicode_IsCaseIgnorable: Mn, Me, Cf, Lm, Sk, or Word_Break
// MidLetter / MidNumLet / Single_Quote.
bool is_case_ignorable(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default: break;
  }
  static constexpr std::array<char32_t, 17> kMid = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,
                                                    0x5F4,  0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
                                                    0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
  for (char32_t m : kMid) {
    if (c == m) return true;
  }
  return false;
}

// Python's Final_Sigma condition for the capital sigma at word[i]:
// \p{cased} \p{case-ignorable}* Σ !(\p{case-ignorable}* \p{cased}).
bool final_sigma(std::u32string_view word, std::size_t i) {
  std::size_t j = i;
  while (j > 0 && is_case_ignorable(word[j - 1])) --j;
  if (j == 0 || !is_cased(word[j - 1])) return false;
  std::size_t k = i + 1;
  while (k < word.size() && is_case_ignorable(word[k])) ++k;
  return k == word.size() || !is_cased(word[k]);
}

// Python's str.lower(). SpecialCasing.txt has a single unconditional lower
// mapping that differs from the simple one (U+0130); Python also applies the
// language-independent Final_Sigma rule and no language-specific ones.
void append_lower(std::u32string_view word, std::u32string& out) {
  for (std::size_t i = 0; i < word.size(); ++i) {
    const char32_t c = word[i];
    if (c == 0x130) {
      out += U'i';
      out += char32_t{0x307};
    } else if (c == 0x3A3) {
      out += final_sigma(word, i) ? char32_t{0x3C2} : char32_t{0x3C3};
    } else {
      out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    }
  }
}

std::u32string nfc(std::u32string_view text) {
  const std::string utf8 = encode_utf8(text);
  utf8proc_uint8_t* out = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()), static_cast<utf8proc_ssize_t>(utf8.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  // The input was produced by encode_utf8 from valid code points, so the only
  // failure is out of memory: keep the text as it is rather than lose it.
  if (n < 0) return std::u32string(text);
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> holder(out, &std::free);
  return decode_utf8(std::string_view(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n)));
}

enum class PieceClass : std::uint8_t { letter, number, other, skip };

PieceClass classify(char32_t c) {
  if (c == 0x345) return PieceClass::skip;  // the regex IGNORECASE quirk (see the header)
  const auto k = category(c);
  if (is_letter(k)) return PieceClass::letter;
  if (is_number(k)) return PieceClass::number;
  if (is_regex_space(c)) return PieceClass::skip;
  return PieceClass::other;
}

bool ascii_ieq(char32_t c, char lower) {
  const auto l = static_cast<char32_t>(lower);
  return c == l || (l >= U'a' && l <= U'z' && c == l - 32);
}

// Length of the literal alternative matching at text[i], or 0. The regex is
// IGNORECASE, but only ASCII letters fold onto these literals (checked
// against the `regex` module: "'ſ" is not "'s").
std::size_t match_literal(std::u32string_view text, std::size_t i) {
  static constexpr std::array<std::string_view, 9> kLiterals = {
      "<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  for (std::string_view lit : kLiterals) {
    if (text.size() - i < lit.size()) continue;
    bool ok = true;
    for (std::size_t k = 0; k < lit.size() && ok; ++k) ok = ascii_ieq(text[i + k], lit[k]);
    if (ok) return lit.size();
  }
  return 0;
}

}  // namespace

std::u32string decode_utf8(std::string_view s, bool* had_invalid) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  auto left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = -1;
    const auto n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp < 0) {
      out += kReplacement;
      if (had_invalid) *had_invalid = true;
      ++p;
      --left;
      continue;
    }
    out += static_cast<char32_t>(cp);
    p += n;
    left -= n;
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  utf8proc_uint8_t buf[4];
  for (char32_t c : s) {
    const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

bool is_python_space(char32_t c) {
  const auto* prop = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  if (prop->category == UTF8PROC_CATEGORY_ZS) return true;
  return prop->bidi_class == UTF8PROC_BIDI_CLASS_WS || prop->bidi_class == UTF8PROC_BIDI_CLASS_B ||
         prop->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

std::u32string clip_clean_text(std::u32string_view text) {
  // 1-2: control removal, whitespace to ' ', spaces around CJK ideographs.
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0 || c == kReplacement || is_bert_control(c)) continue;
    if (is_bert_whitespace(c)) {
      cleaned += U' ';
    } else if (is_cjk_ideograph(c)) {
      cleaned += U' ';
      cleaned += c;
      cleaned += U' ';
    } else {
      cleaned += c;
    }
  }
  // 3: NFC.
  const std::u32string normalized = nfc(cleaned);
  // 4-6: words, each lower-cased on its own (Final_Sigma looks only inside the word).
  std::u32string out;
  out.reserve(normalized.size());
  std::size_t i = 0;
  while (i < normalized.size()) {
    while (i < normalized.size() && is_python_space(normalized[i])) ++i;
    std::size_t j = i;
    while (j < normalized.size() && !is_python_space(normalized[j])) ++j;
    if (j > i) {
      if (!out.empty()) out += U' ';
      append_lower(std::u32string_view(normalized).substr(i, j - i), out);
    }
    i = j;
  }
  return out;
}

std::vector<std::string> clip_pre_tokenize(std::string_view text) {
  const std::u32string clean = clip_clean_text(decode_utf8(text));
  const std::u32string_view t(clean);
  std::vector<std::string> pieces;
  std::size_t i = 0;
  while (i < t.size()) {
    if (const std::size_t n = match_literal(t, i); n > 0) {
      pieces.push_back(encode_utf8(t.substr(i, n)));
      i += n;
      continue;
    }
    const PieceClass k = classify(t[i]);
    if (k == PieceClass::skip) {
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    if (k != PieceClass::number) {  // [\p{N}] takes one digit; the other two classes are runs
      while (j < t.size() && classify(t[j]) == k) ++j;
    }
    pieces.push_back(encode_utf8(t.substr(i, j - i)));
    i = j;
  }
  return pieces;
}

}  // namespace nanscope
