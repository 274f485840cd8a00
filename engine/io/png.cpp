#include "io/png.hpp"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/utf8.hpp"
#include "io/atomic_file.hpp"

namespace nanscope::io {

namespace {

constexpr std::size_t kCompressAbove = 4096;  // bytes of text
constexpr png_uint_32 kMaxSide = 32768;
constexpr std::uint64_t kMaxPixels = 16384ull * 16384ull;
constexpr png_alloc_size_t kMaxChunkBytes = 64u << 20;
constexpr png_uint_32 kMaxAncillaryChunks = 10000;

// libpng reports errors through a callback that must not return; it longjmps
// back to the setjmp in encode()/read_png(). Everything the callbacks touch or
// that changes after setjmp lives in this heap object, and no C++ object is
// constructed between setjmp and a libpng call that can fail, so the jump
// skips no destructor and reads no clobbered local.
struct PngState {
  std::string name;
  std::string error;
  std::string out;  // encoded bytes
  bool out_failed = false;
  const std::string* in = nullptr;
  std::size_t in_pos = 0;
  std::vector<png_bytep> rows;  // decode's row pointers (here, not a local modified after setjmp)
};

PngState* state(png_structp png) { return static_cast<PngState*>(png_get_error_ptr(png)); }

void on_error(png_structp png, png_const_charp msg) {
  PngState* st = state(png);
  if (msg != st->error.c_str()) st->error.assign(msg ? msg : "unknown libpng error");  // else: already there
  png_longjmp(png, 1);
}

void on_warning(png_structp png, png_const_charp msg) {
  log::debug("{}: libpng: {}", state(png)->name, msg ? msg : "");
}

void on_write(png_structp png, png_bytep data, std::size_t len) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (st->out_failed) return;
  try {
    st->out.append(reinterpret_cast<const char*>(data), len);
  } catch (...) {  // never unwind through libpng: note it and fail after png_write_end
    st->out_failed = true;
  }
}

void on_flush(png_structp) {}

void on_read(png_structp png, png_bytep data, std::size_t len) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (st->in_pos + len > st->in->size()) png_error(png, "the file ends early (truncated PNG)");
  std::memcpy(data, st->in->data() + st->in_pos, len);
  st->in_pos += len;
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

std::string latin1_to_utf8(const char* s, std::size_t n) {
  std::string out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

void check_texts(const std::string& name, const std::vector<PngText>& texts) {
  for (const PngText& t : texts) {
    const bool bad_key = t.key.empty() || t.key.size() > 79 || t.key.front() == ' ' || t.key.back() == ' ' ||
                         t.key.find("  ") != std::string::npos ||
                         std::any_of(t.key.begin(), t.key.end(), [](char c) { return c < 32 || c > 126; });
    if (bad_key) {
      throw FileError(name + ": PNG text key \"" + t.key +
                      "\" is not allowed: use 1-79 printable ASCII characters without leading, trailing or double "
                      "spaces");
    }
    if (t.text.find('\0') != std::string::npos) {
      throw FileError(name + ": PNG text \"" + t.key + "\" contains a NUL byte, which PNG text chunks cannot hold");
    }
  }
}

// The libpng calls of encode(), alone in their frame with the setjmp: the
// arguments are not modified afterwards, so nothing here can be clobbered.
void run_encoder(PngState* st, const RgbImage& img, const std::vector<png_bytep>& rows, std::vector<png_text>& chunks) {
  const std::string& name = st->name;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, st, on_error, on_warning);
  if (!png) throw FileError(name + ": libpng could not start (out of memory?)");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    throw FileError(name + ": libpng could not start (out of memory?)");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw FileError(name + ": cannot encode the PNG: " + st->error);
  }
  png_set_write_fn(png, st, on_write, on_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!chunks.empty()) png_set_text(png, info, chunks.data(), static_cast<int>(chunks.size()));
  png_write_info(png, info);
  png_write_image(png, const_cast<png_bytepp>(rows.data()));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

std::string encode(const std::string& name, const RgbImage& img, const std::vector<PngText>& texts) {
  const std::size_t expected = static_cast<std::size_t>(img.width) * static_cast<std::size_t>(img.height) * 3;
  if (img.width <= 0 || img.height <= 0 || img.width > static_cast<int>(kMaxSide) ||
      img.height > static_cast<int>(kMaxSide) || img.pixels.size() != expected) {
    throw FileError(name + ": cannot write a " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " RGB image from " + std::to_string(img.pixels.size()) + " bytes (expected width*height*3 = " +
                    std::to_string(expected) + ", sides 1 to " + std::to_string(kMaxSide) + ")");
  }
  check_texts(name, texts);

  auto st = std::make_unique<PngState>();
  st->name = name;
  st->out.reserve(expected / 2 + 4096);
  std::vector<png_bytep> rows(static_cast<std::size_t>(img.height));
  for (int y = 0; y < img.height; ++y) {
    rows[static_cast<std::size_t>(y)] = const_cast<png_bytep>(
        img.pixels.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(img.width) * 3);
  }
  std::vector<png_text> chunks(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    png_text& c = chunks[i];
    std::memset(&c, 0, sizeof c);
    const bool big = texts[i].text.size() > kCompressAbove;
    c.key = const_cast<char*>(texts[i].key.c_str());
    c.text = const_cast<char*>(texts[i].text.c_str());
    if (is_ascii(texts[i].text)) {  // tEXt / zTXt (ASCII is valid Latin-1)
      c.compression = big ? PNG_TEXT_COMPRESSION_zTXt : PNG_TEXT_COMPRESSION_NONE;
      c.text_length = texts[i].text.size();
    } else {  // iTXt: UTF-8
      c.compression = big ? PNG_ITXT_COMPRESSION_zTXt : PNG_ITXT_COMPRESSION_NONE;
      c.itxt_length = texts[i].text.size();
      c.lang = const_cast<char*>("");
      c.lang_key = const_cast<char*>("");
    }
  }

  run_encoder(st.get(), img, rows, chunks);
  if (st->out_failed) throw FileError(name + ": out of memory while encoding the PNG");
  return std::move(st->out);
}

void collect_texts(png_structp png, png_infop info, std::vector<PngText>& out) {
  png_textp t = nullptr;
  int n = 0;
  png_get_text(png, info, &t, &n);
  for (int i = 0; i < n; ++i) {
    const bool itxt = t[i].compression == PNG_ITXT_COMPRESSION_NONE || t[i].compression == PNG_ITXT_COMPRESSION_zTXt;
    PngText pt;
    pt.key = latin1_to_utf8(t[i].key, std::strlen(t[i].key));
    // iTXt holds UTF-8 by the standard; ill-formed bytes become U+FFFD so that
    // PngText is always UTF-8 (the texts end up in JSON).
    pt.text = itxt ? repair_utf8(std::string_view(t[i].text ? t[i].text : "", t[i].itxt_length))
                   : latin1_to_utf8(t[i].text ? t[i].text : "", t[i].text_length);
    out.push_back(std::move(pt));
  }
}

// False, with the reason in st->error, when the image is refused before its
// pixels are allocated: more pixels than an image may have, or more image data
// than the file's deflate streams can expand to (deflate's ratio is at most
// 1032:1), i.e. a damaged or truncated header.
bool header_fits(png_structp png, png_infop info, PngState* st) {
  const std::uint64_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const std::uint64_t raw = h * (static_cast<std::uint64_t>(png_get_rowbytes(png, info)) + 1);
  if (w * h > kMaxPixels) {
    st->error = std::to_string(w) + "x" + std::to_string(h) + " pixels is more than the " + std::to_string(kMaxPixels) +
                " an image may have (16384x16384)";
    return false;
  }
  if (raw > 1032 * static_cast<std::uint64_t>(st->in->size()) + 65536) {
    st->error = "the header says " + std::to_string(w) + "x" + std::to_string(h) + " (" + std::to_string(raw) +
                " bytes of image data) but the file holds only " + std::to_string(st->in->size()) +
                " bytes; it is truncated or damaged";
    return false;
  }
  return true;
}

// libpng allocates a text chunk's declared length before reading it, even
// past png_set_chunk_malloc_max: every chunk must fit in the file, checked here
// on the bytes in memory before libpng sees them.
void check_chunk_lengths(const std::string& name, const std::string& bytes) {
  std::size_t pos = 8;  // after the signature
  while (bytes.size() - pos >= 8) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
    const std::uint64_t len = (std::uint64_t{p[0]} << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    const std::string type(reinterpret_cast<const char*>(p + 4), 4);
    const std::uint64_t left = bytes.size() - pos - 8;
    if (len + 4 > left) {
      throw FileError(name + ": not a readable PNG: chunk \"" + repair_utf8(type) + "\" at byte " +
                      std::to_string(pos) + " declares " + std::to_string(len) + " bytes but the file has " +
                      std::to_string(left) + " after it; the file is truncated or damaged");
    }
    if (type == "IEND") return;
    pos += 12 + static_cast<std::size_t>(len);
  }
}

// The libpng calls of read_png(), alone in their frame with the setjmp.
void run_decoder(PngState* st, PngContents* result) {
  const std::string& name = st->name;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, st, on_error, on_warning);
  if (!png) throw FileError(name + ": libpng could not start (out of memory?)");
  png_infop info = png_create_info_struct(png);
  png_infop end_info = png_create_info_struct(png);
  if (!info || !end_info) {
    png_destroy_read_struct(&png, &info, &end_info);
    throw FileError(name + ": libpng could not start (out of memory?)");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, &end_info);
    throw FileError(name + ": not a readable PNG: " + st->error);
  }
  png_set_read_fn(png, st, on_read);
  png_set_user_limits(png, kMaxSide, kMaxSide);
  // A chunk's declared length is allocated before it is read, and text chunks
  // are inflated in memory: bound both (the nanscope chunk is a few hundred KB).
  png_set_chunk_malloc_max(png, kMaxChunkBytes);
  png_set_chunk_cache_max(png, kMaxAncillaryChunks);
  png_read_info(png, info);
  if (!header_fits(png, info, st)) png_error(png, st->error.c_str());
  // Whatever the file holds, deliver 8-bit RGB.
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  if (png_get_rowbytes(png, info) != static_cast<std::size_t>(w) * 3) {
    png_error(png, "unexpected row layout after conversion to RGB");
  }
  result->image.width = static_cast<int>(w);
  result->image.height = static_cast<int>(h);
  result->image.pixels.resize(static_cast<std::size_t>(w) * h * 3);
  st->rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) st->rows[y] = result->image.pixels.data() + static_cast<std::size_t>(y) * w * 3;
  png_read_image(png, st->rows.data());
  png_read_end(png, end_info);
  collect_texts(png, info, result->texts);
  collect_texts(png, end_info, result->texts);
  png_destroy_read_struct(&png, &info, &end_info);
}

}  // namespace

const std::string* PngContents::find(std::string_view key) const {
  for (const PngText& t : texts) {
    if (t.key == key) return &t.text;
  }
  return nullptr;
}

void write_png(const std::filesystem::path& path, const RgbImage& image, const std::vector<PngText>& texts) {
  write_file_atomic(path, encode(path.string(), image, texts));
}

PngContents read_png(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(name + ": cannot open: " + std::strerror(errno));
    std::ostringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0) {
    throw FileError(name + ": not a PNG file (it does not start with the PNG signature)");
  }
  check_chunk_lengths(name, bytes);

  auto st = std::make_unique<PngState>();
  st->name = name;
  st->in = &bytes;
  auto result = std::make_unique<PngContents>();

  run_decoder(st.get(), result.get());
  return std::move(*result);
}

}  // namespace nanscope::io
