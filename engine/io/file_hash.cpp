#include "io/file_hash.hpp"

#include <openssl/evp.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"

namespace nanscope::io {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kAutoV1Offset = 0x100000;
constexpr std::uint64_t kAutoV1Length = 0x10000;
constexpr int kCacheVersion = 1;

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx_);
      throw Error("OpenSSL: cannot initialise sha256");
    }
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const char* data, std::size_t n) {
    if (n > 0) EVP_DigestUpdate(ctx_, data, n);
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> d{};
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, d.data(), &len);
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (unsigned int i = 0; i < len; ++i) {
      s += kDigits[d[i] >> 4];
      s += kDigits[d[i] & 15];
    }
    return s;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// The part of [begin, end) that lies in [lo, hi), as an offset into the chunk and a length.
std::pair<std::size_t, std::size_t> overlap(std::uint64_t begin, std::uint64_t end, std::uint64_t lo,
                                            std::uint64_t hi) {
  const std::uint64_t a = std::max(begin, lo);
  const std::uint64_t b = std::min(end, hi);
  if (a >= b) return {0, 0};
  return {static_cast<std::size_t>(a - begin), static_cast<std::size_t>(b - a)};
}

std::int64_t mtime_ns(const fs::path& p) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(fs::last_write_time(p).time_since_epoch()).count();
}

}  // namespace

FileHashes hash_file(const fs::path& path, const std::atomic<bool>* cancel) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path.string() + ": cannot open it to hash it (" + std::strerror(errno) + ")");
  Sha256 whole, after_header, v1;
  std::vector<char> buf(1 << 20);
  std::uint64_t pos = 0;
  std::uint64_t header_end = 0;  // 0: not known yet / not a safetensors file
  bool safetensors = false;
  std::uint64_t file_size = 0;
  {
    std::error_code ec;
    file_size = fs::file_size(path, ec);
    if (ec) throw FileError(path.string() + ": cannot read its size (" + ec.message() + ")");
  }
  while (in) {
    if (cancel && cancel->load()) throw Cancelled("hashing " + path.string() + " was cancelled");
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (n == 0) break;
    if (pos == 0 && n >= 8) {
      std::uint64_t len = 0;
      for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(buf[static_cast<std::size_t>(i)]);
      // A safetensors header: an 8-byte little-endian length, then a JSON object, within the file.
      if (len >= 2 && len <= file_size - 8 && (n <= 8 || buf[8] == '{')) {
        safetensors = true;
        header_end = 8 + len;
      }
    }
    whole.update(buf.data(), n);
    if (safetensors) {
      const auto [off, len] = overlap(pos, pos + n, header_end, UINT64_MAX);
      after_header.update(buf.data() + off, len);
    }
    const auto [off, len] = overlap(pos, pos + n, kAutoV1Offset, kAutoV1Offset + kAutoV1Length);
    v1.update(buf.data() + off, len);
    pos += n;
  }
  if (in.bad() || pos != file_size) {
    throw FileError(path.string() + ": reading it to hash it stopped after " + std::to_string(pos) + " of " +
                    std::to_string(file_size) + " bytes");
  }
  FileHashes h;
  h.sha256 = whole.hex();
  if (safetensors) h.addnet_sha256 = after_header.hex();
  h.autov1 = v1.hex().substr(0, 8);
  return h;
}

std::string a1111_lora_short_hash(const fs::path& path) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::uintmax_t, std::int64_t>, std::string> cache;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw FileError("cannot read the size of " + path.string() + ": " + ec.message());
  const auto key = std::make_tuple(path.string(), size, mtime_ns(path));
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const FileHashes h = hash_file(path);
  if (h.addnet_sha256.empty()) {
    throw FileError(path.string() + ": not a safetensors file (no valid header), so it has no A1111 LoRA hash");
  }
  const std::string hash = h.addnet_sha256.substr(0, 12);
  const std::lock_guard<std::mutex> lock(mu);
  cache[key] = hash;
  return hash;
}

FileHashCache::FileHashCache(fs::path cache_file) : file_(std::move(cache_file)) {
  std::error_code ec;
  if (file_.empty() || !fs::exists(file_, ec)) return;
  auto warn = [&](const std::string& why) {
    warnings_.push_back("the hash cache " + file_.string() + " " + why + "; ignoring it (the files are hashed again)");
    log::warn("{}", warnings_.back());
    entries_.clear();
    dirty_ = true;
  };
  std::ifstream in(file_, std::ios::binary);
  if (!in) {
    warn(std::string("cannot be read (") + std::strerror(errno) + ")");
    return;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || j.value("nanscope_hash_cache", 0) != kCacheVersion || !j.contains("files") ||
        !j["files"].is_object()) {
      warn("is not a NaNscope hash cache of version " + std::to_string(kCacheVersion));
      return;
    }
    for (const auto& [p, e] : j["files"].items()) {
      Entry entry;
      entry.size = e.at("size").get<std::uintmax_t>();
      entry.mtime_ns = e.at("mtime_ns").get<std::int64_t>();
      entry.hashes.sha256 = e.at("sha256").get<std::string>();
      entry.hashes.addnet_sha256 = e.at("addnet_sha256").get<std::string>();
      entry.hashes.autov1 = e.at("autov1").get<std::string>();
      if (entry.hashes.sha256.size() != 64 || entry.hashes.autov1.size() != 8) {
        warn("holds a malformed entry for " + p);
        return;
      }
      entries_[p] = std::move(entry);
    }
  } catch (const nlohmann::json::exception& e) {
    {
      warn(std::string("is not valid (") + e.what() + ")");
      return;
    }
  }
}

fs::path FileHashCache::default_path() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "nanscope" / "model-hashes.json";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "nanscope" / "model-hashes.json";
  return {};
}

FileHashes FileHashCache::get(const fs::path& path, const std::atomic<bool>* cancel) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const std::string key = (ec ? path : abs).string();
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw FileError(path.string() + ": cannot read its size (" + ec.message() + ")");
  const std::int64_t mtime = mtime_ns(path);
  if (auto it = entries_.find(key); it != entries_.end() && it->second.size == size && it->second.mtime_ns == mtime)
    return it->second.hashes;
  Entry e{size, mtime, hash_file(path, cancel)};
  ++hashed_;
  dirty_ = true;
  entries_[key] = e;
  return e.hashes;
}

void FileHashCache::save() {
  if (!dirty_ || file_.empty()) return;
  nlohmann::json j;
  j["nanscope_hash_cache"] = kCacheVersion;
  j["files"] = nlohmann::json::object();
  for (const auto& [p, e] : entries_) {
    j["files"][p] = {{"size", e.size},
                     {"mtime_ns", e.mtime_ns},
                     {"sha256", e.hashes.sha256},
                     {"addnet_sha256", e.hashes.addnet_sha256},
                     {"autov1", e.hashes.autov1}};
  }
  try {
    std::error_code ec;
    fs::create_directories(file_.parent_path(), ec);
    write_file_atomic(file_, j.dump(1) + "\n");
    dirty_ = false;
  } catch (const Error& e) {
    warnings_.push_back(std::string("could not save the hash cache: ") + e.what());
    log::warn("{}", warnings_.back());
  }
}

}  // namespace nanscope::io
