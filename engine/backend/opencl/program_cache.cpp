#include "backend/opencl/program_cache.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>

#include "backend/opencl/cache_inventory.hpp"
#include "backend/opencl/kernel_sources.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::opencl {

namespace fs = std::filesystem;

struct ProgramCache::Entry {
  std::string key;  // hex cache key (covers source, options and device)
  cl_program program = nullptr;
};

namespace {

using Digest = std::array<unsigned char, 32>;

// Entry file layout (native byte order; the key covers the device and driver,
// so an entry never travels between machines of different endianness):
//   0  magic "NSKC"            4 bytes
//   4  format version          u32
//   8  cache key               32 bytes (sha256)
//  40  payload length          u64
//  48  payload sha256          32 bytes
//  80  payload (the program binary from CL_PROGRAM_BINARIES)
constexpr char kMagic[4] = {'N', 'S', 'K', 'C'};
constexpr std::size_t kHeaderSize = 80;
constexpr std::size_t kBuildLogLimit = 4000;

// Incremental sha256 through OpenSSL's EVP interface.
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

  void update(const void* data, std::size_t n) { EVP_DigestUpdate(ctx_, data, n); }
  // A length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
  void field(std::string_view s) {
    const std::uint64_t n = s.size();
    update(&n, sizeof(n));
    update(s.data(), s.size());
  }
  Digest finish() {
    Digest d{};
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, d.data(), &len);
    return d;
  }

 private:
  EVP_MD_CTX* ctx_;
};

Digest sha256(const void* data, std::size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.finish();
}

std::string hex(const Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (unsigned char c : d) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

Digest unhex(const std::string& s) {
  Digest d{};
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i < d.size() && 2 * i + 1 < s.size(); ++i) {
    d[i] = static_cast<unsigned char>(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
  }
  return d;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS || size == 0) {
    return {};
  }
  std::string text(size, '\0');
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, text.data(), nullptr) != CL_SUCCESS) {
    return {};
  }
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string options_label(const std::string& options) { return "[" + options + "]"; }

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v && *v) return std::string(v);
  return std::nullopt;
}

}  // namespace

ProgramCache::ProgramCache(cl_context context, cl_device_id device, const DeviceInfo& info, std::string dir)
    : context_(context), device_(device), info_(info), dir_(std::move(dir)) {
  if (dir_.empty()) {
    log::debug("kernel cache disabled: every program is built from source");
    return;
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    log::warn("kernel cache disabled: cannot create directory {} ({}); programs will be built every run", dir_,
              ec.message());
    dir_.clear();
    return;
  }
  log::debug("kernel cache: {}", dir_);
}

ProgramCache::~ProgramCache() {
  for (Entry* e : entries_) {
    if (e->program) NS_CL_CHECK_NOTHROW(clReleaseProgram(e->program));
    delete e;
  }
}

std::string ProgramCache::default_dir() {
  if (auto v = env("NANSCOPE_KERNEL_CACHE")) return *v;
  if (auto v = env("XDG_CACHE_HOME")) return (fs::path(*v) / "nanscope" / "kernels").string();
  if (auto v = env("HOME")) return (fs::path(*v) / ".cache" / "nanscope" / "kernels").string();
  return {};
}

std::string ProgramCache::full_source(const std::string& program) {
  const KernelSource* common = nullptr;
  const KernelSource* body = nullptr;
  for (const auto& k : kernel_sources()) {
    if (k.name == "common") common = &k;
    if (k.name == program) body = &k;
  }
  if (!body || program == "common") {
    std::string names;
    for (const auto& k : kernel_sources()) names += (names.empty() ? "" : ", ") + k.name;
    throw Error("no kernel program '" + program + "' is embedded (kernels/" + program +
                ".cl); embedded programs: " + (names.empty() ? "none" : names));
  }
  return common ? common->source + "\n" + body->source : body->source;
}

std::string ProgramCache::cache_key(const std::string& source, const std::string& options) const {
  Sha256 h;
  const std::uint32_t version = kFormatVersion;
  h.update(&version, sizeof(version));
  h.field(source);
  h.field(options);
  h.field(info_.name);
  h.field(info_.driver_version);
  h.field(info_.device_version);
  h.field(info_.platform_name);
  h.field(info_.platform_version);
  return hex(h.finish());
}

std::string ProgramCache::entry_path(const std::string& key) const {
  return dir_.empty() ? std::string() : (fs::path(dir_) / (key + ".bin")).string();
}

std::vector<BuildRecord> ProgramCache::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

cl_program ProgramCache::get(const std::string& program, const std::string& options, const RemoteBuild& remote) {
  return get_source(program, full_source(program), options, remote);
}

namespace {

// Reads and validates an entry. Returns the payload, or nullopt with `reason`
// set when the file exists but cannot be trusted (reason empty: no entry).
std::optional<std::vector<unsigned char>> read_entry(const std::string& path, const Digest& key, std::string& reason) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  if (!fs::is_regular_file(path, ec)) {
    // A folder or device node where the entry belongs: reading it would throw out of the stream.
    reason = "not a regular file";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    reason = "cannot be opened";
    return std::nullopt;
  }
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeaderSize) {
    reason = "truncated (" + std::to_string(bytes.size()) + " bytes, shorter than the header)";
    return std::nullopt;
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    reason = "not a NaNscope kernel cache entry (bad magic)";
    return std::nullopt;
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  if (version != ProgramCache::kFormatVersion) {
    reason = "written by cache format " + std::to_string(version) + ", expected " +
             std::to_string(ProgramCache::kFormatVersion);
    return std::nullopt;
  }
  if (std::memcmp(bytes.data() + 8, key.data(), key.size()) != 0) {
    reason = "foreign (its key belongs to another program, options or device)";
    return std::nullopt;
  }
  std::uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 40, 8);
  if (length != bytes.size() - kHeaderSize) {
    reason = "truncated or padded (payload " + std::to_string(bytes.size() - kHeaderSize) + " bytes, header says " +
             std::to_string(length) + ")";
    return std::nullopt;
  }
  if (length == 0) {
    reason = "empty payload";
    return std::nullopt;
  }
  const Digest sum = sha256(bytes.data() + kHeaderSize, length);
  if (std::memcmp(bytes.data() + 48, sum.data(), sum.size()) != 0) {
    reason = "corrupt (checksum mismatch)";
    return std::nullopt;
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(kHeaderSize));
  return bytes;
}

}  // namespace

std::string ProgramCache::check_entry(const std::string& path, const std::string& key) {
  if (key.size() != 64 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return "not named by a cache key (64 hex digits)";
  }
  std::string reason;
  if (!read_entry(path, unhex(key), reason) && reason.empty()) reason = "missing";
  return reason;
}

namespace {

void write_entry(const std::string& path, const Digest& key, const std::vector<unsigned char>& payload) {
  static std::atomic<unsigned> counter{0};
  // Same directory as the target so rename() is atomic; unique per process and call.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::array<unsigned char, kHeaderSize> header{};
  std::memcpy(header.data(), kMagic, 4);
  const std::uint32_t version = ProgramCache::kFormatVersion;
  std::memcpy(header.data() + 4, &version, 4);
  std::memcpy(header.data() + 8, key.data(), key.size());
  const std::uint64_t length = payload.size();
  std::memcpy(header.data() + 40, &length, 8);
  const Digest sum = sha256(payload.data(), payload.size());
  std::memcpy(header.data() + 48, sum.data(), sum.size());
  // POSIX calls rather than a stream, so that the warning can say why (a full
  // disk, a read-only file system); a failed entry leaves no temporary behind.
  // (io/atomic_file sits above this layer.)
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const auto fail = [&](const char* step) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw FileError("cannot write kernel cache entry " + path + " (" + step + "): " + why);
  };
  if (fd < 0) fail("create");
  for (const auto& [data, size] : {std::pair<const unsigned char*, std::size_t>{header.data(), header.size()},
                                   std::pair<const unsigned char*, std::size_t>{payload.data(), payload.size()}}) {
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write");
      done += static_cast<std::size_t>(n);
    }
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw FileError("cannot write kernel cache entry " + path + " (close): " + why);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();  // before remove() reuses ec
    fs::remove(tmp, ec);
    throw FileError("cannot rename " + tmp + " to " + path + ": " + why);
  }
}

std::vector<unsigned char> program_binary(cl_program program) {
  size_t size = 0;
  NS_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr));
  std::vector<unsigned char> binary(size);
  if (size == 0) return binary;
  unsigned char* ptr = binary.data();
  NS_CL_CHECK(clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr));
  return binary;
}

}  // namespace

cl_program ProgramCache::load_entry(const std::string& path, const std::string& key, const std::string& program,
                                    const std::string& options, std::string& reason) {
  auto payload = read_entry(path, unhex(key), reason);
  if (!payload) return nullptr;
  const unsigned char* bin = payload->data();
  const size_t bin_size = payload->size();
  cl_int bin_status = CL_SUCCESS;
  cl_int err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(context_, 1, &device_, &bin_size, &bin, &bin_status, &err);
  if (err != CL_SUCCESS || bin_status != CL_SUCCESS) {
    reason = std::string("rejected by the driver (") + cl_status_name(err != CL_SUCCESS ? err : bin_status) +
             " in clCreateProgramWithBinary)";
    if (p) NS_CL_CHECK_NOTHROW(clReleaseProgram(p));
    return nullptr;
  }
  // A program from a binary still needs a build call before kernels can be created.
  err = clBuildProgram(p, 1, &device_, options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    reason = std::string("rejected by the driver (") + cl_status_name(err) + " in clBuildProgram)";
    NS_CL_CHECK_NOTHROW(clReleaseProgram(p));
    return nullptr;
  }
  touch_entry(path);  // its last use, for the inventory
  if (!fs::exists(fs::path(path).replace_extension(".json"))) {
    write_entry_metadata(path, program, options, info_, std::nullopt);  // an entry from before metadata
  }
  return p;
}

cl_program ProgramCache::get_source(const std::string& program, const std::string& source, const std::string& options,
                                    const RemoteBuild& remote) {
  const std::string key = cache_key(source, options);
  {
    std::lock_guard lock(mutex_);
    for (Entry* e : entries_) {
      if (e->key == key) return e->program;
    }
  }

  // Build or load outside the lock so different programs can build in parallel.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string variant = program + "|" + options;
  KernelBuildEvent started{program, options, false, false, 0.0};
  {
    std::lock_guard lock(mutex_);
    plan_progress(variant, false, started);
  }
  if (listener_) listener_(started);
  const Digest key_raw = unhex(key);
  const std::string path = entry_path(key);
  BuildRecord record;
  record.program = program;
  record.options = options;
  cl_program built = nullptr;

  if (!path.empty()) {
    std::string reason;
    built = load_entry(path, key, program, options, reason);
    if (built) {
      record.cache_hit = true;
    } else if (!reason.empty()) {
      log::warn("kernel cache entry {} for {} {} is {}; deleting it and rebuilding from source", path, program,
                options_label(options), reason);
      std::error_code ec;
      fs::remove(path, ec);
      fs::remove(fs::path(path).replace_extension(".json"), ec);
      record.note = "cache entry " + reason + "; rebuilt";
    }
  }

  if (!built && remote && !path.empty()) {
    // A helper process builds it into the cache; this process loads what it wrote.
    std::string why = remote(program, options, key);
    if (why.empty()) {
      std::string reason;
      built = load_entry(path, key, program, options, reason);
      if (!built) why = "its cache entry " + (reason.empty() ? std::string("is missing") : "is " + reason);
    }
    if (built) {
      record.note = record.note.empty() ? "built in a helper process" : record.note + " in a helper process";
    } else {
      log::debug("helper build of {} {} not used ({}); building it here", program, options_label(options), why);
    }
  }

  if (!built) {
    const char* src = source.c_str();
    const size_t len = source.size();
    cl_int err = CL_SUCCESS;
    cl_program p = clCreateProgramWithSource(context_, 1, &src, &len, &err);
    if (err != CL_SUCCESS) {
      throw_cl_error(err, "clCreateProgramWithSource", "creating program " + program + " on \"" + info_.name + "\"");
    }
    err = clBuildProgram(p, 1, &device_, options.c_str(), nullptr, nullptr);
    if (err != CL_SUCCESS) {
      std::string text = build_log(p, device_);
      NS_CL_CHECK_NOTHROW(clReleaseProgram(p));
      if (text.size() > kBuildLogLimit) text = text.substr(0, kBuildLogLimit) + "\n[... build log truncated]";
      throw ClError("building program " + program + " " + options_label(options) + " on \"" + info_.name +
                        "\" failed: " + cl_status_name(err) + " in clBuildProgram\nbuild log:\n" +
                        (text.empty() ? "(empty)" : text),
                    err);
    }
    if (const std::string text = build_log(p, device_); !text.empty()) {
      log::debug("build log of {} {}:\n{}", program, options_label(options), text);
    }
    built = p;
    if (!path.empty()) {
      try {
        const auto binary = program_binary(p);
        if (binary.empty()) {
          log::debug("the driver returned no binary for {}; not cached", program);
        } else {
          write_entry(path, key_raw, binary);
          write_entry_metadata(path, program, options, info_, ms_since(t0));
        }
      } catch (const Error& e) {
        log::warn("could not save {} {} to the kernel cache: {}", program, options_label(options), e.what());
      }
    }
  }

  record.ms = ms_since(t0);
  KernelBuildEvent finished{program, options, true, record.cache_hit, record.ms};
  {
    std::lock_guard lock(mutex_);
    plan_progress(variant, true, finished);
  }
  if (listener_) listener_(finished);
  const std::string progress = finished.plan_count ? " (" + finished.progress() + ")" : std::string();
  if (record.cache_hit) {
    log::info("loaded {} {} from cache in {:.0f} ms{}", program, options_label(options), record.ms, progress);
  } else {
    log::info("built {} {} in {:.0f} ms{}{}", program, options_label(options), record.ms,
              record.note.empty() ? "" : " (" + record.note + ")", progress);
  }

  std::lock_guard lock(mutex_);
  for (Entry* e : entries_) {
    if (e->key == key) {  // another thread finished the same program first: keep one
      NS_CL_CHECK_NOTHROW(clReleaseProgram(built));
      return e->program;
    }
  }
  entries_.push_back(new Entry{key, built});
  records_.push_back(std::move(record));
  return built;
}

void ProgramCache::set_plan(std::map<std::string, double> pending, unsigned streams) {
  std::lock_guard lock(mutex_);
  plan_pending_ = std::move(pending);
  plan_streams_ = std::max(1u, streams);
  plan_count_ = static_cast<int>(plan_pending_.size());
  plan_done_ = 0;
}

bool ProgramCache::in_memory(const std::string& program, const std::string& options) const {
  return has_key(cache_key(full_source(program), options));
}

bool ProgramCache::has_key(const std::string& key) const {
  std::lock_guard lock(mutex_);
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry* e) { return e->key == key; });
}

bool ProgramCache::ready(const std::string& program, const std::string& options) const {
  std::string key;
  {
    std::lock_guard lock(mutex_);
    const auto it = ready_keys_.find(program + "|" + options);
    if (it != ready_keys_.end()) key = it->second;
  }
  if (key.empty()) {
    key = cache_key(full_source(program), options);
    std::lock_guard lock(mutex_);
    ready_keys_[program + "|" + options] = key;
  }
  return has_key(key) || (!dir_.empty() && check_entry(entry_path(key), key).empty());
}

void ProgramCache::plan_progress(const std::string& variant, bool finished, KernelBuildEvent& e) {
  if (plan_pending_.empty()) return;
  const auto it = plan_pending_.find(variant);
  if (it == plan_pending_.end()) return;  // a program the plan did not foresee: no progress to tell
  double left = 0.0;
  for (const auto& [v, ms] : plan_pending_) left += ms;
  left /= plan_streams_;
  e.plan_count = plan_count_;
  if (!finished) {
    e.plan_index = plan_done_ + 1;
    e.plan_left_ms = left;
    return;
  }
  e.plan_index = ++plan_done_;
  e.plan_left_ms = std::max(0.0, left - it->second / plan_streams_);
  plan_pending_.erase(it);
  if (plan_pending_.empty()) plan_count_ = plan_done_ = 0;
}

void ProgramCache::set_listener(KernelBuildListener listener) { listener_ = std::move(listener); }

}  // namespace nanscope::opencl
