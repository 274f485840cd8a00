#pragma once
// Text cleanup and pre-tokenisation of transformers' CLIPTokenizer (4.47), as
// it runs when ftfy is NOT installed (the project venv has no ftfy, and
// diffusers users without it get exactly this path):
//
//   BasicTokenizer(do_lower_case=True, strip_accents=False, do_split_on_punc=False):
//     1. drop U+0000, U+FFFD and every category C* character (Cc, Cf, Cs, Co,
//        Cn) except \t \n \r; map \t \n \r ' ' and Zs to ' '
//     2. put spaces around CJK ideographs (BERT's _is_chinese_char ranges)
//     3. NFC
//     4. split on Python whitespace (str.split(): Zs, and bidi classes WS/B/S)
//     5. lower-case each word with Python's str.lower() (full mapping: U+0130
//        -> "i" U+0307; Final_Sigma: Σ at the end of a cased word -> ς)
//     6. join the words with single spaces
//   then regex.findall with
//     <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//   (IGNORECASE). One quirk of the `regex` module is reproduced: with
//   IGNORECASE, U+0345 COMBINING GREEK YPOGEGRAMMENI (Mn, case-folds to a
//   letter) matches neither [\p{L}] nor [^\s\p{L}\p{N}], so it is dropped.
//
// With ftfy installed, transformers instead runs ftfy.fix_text, then
// whitespace_clean and lower(). What differs from the path above: ftfy
// straightens curly quotes ("don’t" then splits as "don" + "'t"), expands
// ligatures (ﬁ -> fi), maps full-width forms to ASCII, repairs mojibake and
// some HTML entities, and keeps format characters such as ZWJ; it does not
// space out CJK ideographs (so a run of them is one [\p{L}]+ piece there).
// Prompts with such text can tokenise differently from an ftfy-equipped
// Python install; ASCII prompts without HTML entities and accented Latin
// prompts tokenise the same on both paths.
//
// Unicode data comes from utf8proc (categories, NFC, simple case mappings,
// bidi classes). The remaining gap: code points assigned after the Unicode
// version of the reference Python (3.11: Unicode 14.0; Debian's utf8proc 2.8:
// Unicode 15.0) are kept here and removed there as unassigned.

#include <string>
#include <string_view>
#include <vector>

namespace nanscope {

// UTF-8 -> code points. Invalid sequences become U+FFFD (which the cleanup
// then drops, as it drops U+FFFD from a Python string); *had_invalid is set.
std::u32string decode_utf8(std::string_view s, bool* had_invalid = nullptr);
std::string encode_utf8(std::u32string_view s);

// Python's str.isspace(): category Zs or bidi class WS, B or S.
bool is_python_space(char32_t c);

// Steps 1-6 above: the words of the text, lower-cased, joined by single spaces.
std::u32string clip_clean_text(std::u32string_view text);

// Cleanup plus the regex split: the pieces BPE runs on, as UTF-8.
std::vector<std::string> clip_pre_tokenize(std::string_view text);

}  // namespace nanscope
