#pragma once
// PNG files with text chunks, through libpng.
//
// Writing: 8-bit RGB, atomically (temp file + rename). Each text goes into a
// tEXt chunk when it is plain ASCII and into an iTXt chunk (UTF-8) otherwise,
// the way PIL (and so A1111) chooses; texts longer than 4 KiB are compressed
// (iTXt with zlib), which PIL, exiftool and A1111 read. Text chunks are
// written before the image data so readers that stop early still see them.
//
// Reading: any PNG (gray, palette, 16-bit, alpha, interlaced) as 8-bit RGB
// (alpha dropped), plus every tEXt, zTXt and iTXt chunk before or after the
// image data, as UTF-8 (tEXt/zTXt are Latin-1 by the PNG standard).
//
// Errors are FileErrors naming the file and what is wrong.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace nanscope::io {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  // row-major, 3 bytes per pixel, no padding

  friend bool operator==(const RgbImage&, const RgbImage&) = default;
};

struct PngText {
  std::string key;   // 1-79 printable Latin-1 characters (ASCII in practice), no leading/trailing space
  std::string text;  // UTF-8, no NUL bytes
  friend bool operator==(const PngText&, const PngText&) = default;
};

struct PngContents {
  RgbImage image;
  std::vector<PngText> texts;  // in file order
  // The first text with this key, or nullptr.
  const std::string* find(std::string_view key) const;
};

void write_png(const std::filesystem::path& path, const RgbImage& image, const std::vector<PngText>& texts = {});
PngContents read_png(const std::filesystem::path& path);

}  // namespace nanscope::io
