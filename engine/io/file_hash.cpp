#include "io/file_hash.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.hpp"

namespace nanscope::io {

namespace fs = std::filesystem;

std::string sha256_file_hex(const fs::path& path, std::uint64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("cannot open " + path.string() + " to hash it");
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in) throw FileError(path.string() + " is shorter than " + std::to_string(offset) + " bytes; cannot hash it");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error("OpenSSL: cannot initialise sha256");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n));
  }
  if (in.bad()) throw FileError("reading " + path.string() + " failed while hashing it");
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md.data(), &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", md[i]);
    hex += b;
  }
  return hex;
}

std::string a1111_lora_short_hash(const fs::path& path) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::uintmax_t, fs::file_time_type>, std::string> cache;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw FileError("cannot read the size of " + path.string() + ": " + ec.message());
  const auto mtime = fs::last_write_time(path, ec);
  const auto key = std::make_tuple(path.string(), size, mtime);
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  std::ifstream in(path, std::ios::binary);
  unsigned char len_bytes[8] = {};
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8)) {
    throw FileError(path.string() + " is shorter than a safetensors header (8 bytes); cannot hash it");
  }
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | len_bytes[i];
  if (header > size - 8) {
    throw FileError(path.string() + ": its safetensors header says " + std::to_string(header) +
                    " bytes but the file has " + std::to_string(size) + "; the file is truncated or not safetensors");
  }
  const std::string hash = sha256_file_hex(path, header + 8).substr(0, 12);
  const std::lock_guard<std::mutex> lock(mu);
  cache[key] = hash;
  return hash;
}

}  // namespace nanscope::io
