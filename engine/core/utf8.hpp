#pragma once
// UTF-8 checks for text that comes from files and the command line (prompts,
// PNG text chunks): JSON output (presets, the PNG nanscope chunk, reports)
// needs valid UTF-8, so readers check or repair it where the text comes in.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace nanscope {

// The byte offset of the first byte that does not start a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF are not
// well-formed), or nullopt when all of `s` is valid.
std::optional<std::size_t> invalid_utf8_offset(std::string_view s);

// `s` with every ill-formed sequence replaced by U+FFFD, as most text readers do.
std::string repair_utf8(std::string_view s);

// "byte 0xF5 at offset 24", for error messages about an offset from invalid_utf8_offset.
std::string describe_invalid_utf8(std::string_view s, std::size_t offset);

}  // namespace nanscope
