#include "backend/opencl/kernel_builder.hpp"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "backend/opencl/opencl_backend.hpp"
#include "backend/opencl/program_cache.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

extern char** environ;

namespace nanscope::opencl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kExecutable = "nanscope-kernel-builder";
// How long a helper may take to open its device before the run stops waiting for it.
constexpr int kReadyTimeoutMs = 20000;

// Splits a protocol line at tabs.
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    out.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

// A message on one protocol field: tabs and newlines become spaces.
std::string one_field(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::string kernel_builder_path() {
  if (const char* v = std::getenv("NANSCOPE_KERNEL_BUILDER"); v && *v) {
    const std::string s = v;
    if (s == "0" || s == "off") return {};
    if (is_executable(s)) return s;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log::warn("NANSCOPE_KERNEL_BUILDER={} is not an executable file; building kernels in this process", s);
    }
    return {};
  }
  // ../libexec/nanscope/ beside the running program: the installed layout
  // (bin/ and libexec/nanscope/) and the build tree's (cli/, gui/, tests/, bench/).
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path helper = self.parent_path().parent_path() / "libexec" / "nanscope" / kExecutable;
  return is_executable(helper) ? helper.string() : std::string();
}

std::unique_ptr<KernelBuilderProcess> KernelBuilderProcess::start(const std::string& exe, const DeviceInfo& device,
                                                                  const std::string& cache_dir, std::string& why) {
  int sv[2];
  // Close-on-exec: no other child (another helper included) inherits either end,
  // so a helper sees its input end when the run closes it.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    why = std::string("socketpair: ") + std::strerror(errno);
    return nullptr;
  }
  std::vector<std::string> args = {exe, "--device", device.id, "--cache", cache_dir};
  if (device.kind != DeviceKind::simulator) args.emplace_back("--no-simulator");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    why = "cannot start " + exe + ": " + std::strerror(rc);
    return nullptr;
  }
  return std::unique_ptr<KernelBuilderProcess>(
      new KernelBuilderProcess(pid, sv[0], device.name, device.driver_version));
}

KernelBuilderProcess::KernelBuilderProcess(pid_t pid, int fd, std::string device_name, std::string driver)
    : pid_(pid), fd_(fd), device_name_(std::move(device_name)), driver_(std::move(driver)) {}

KernelBuilderProcess::~KernelBuilderProcess() {
  ::close(fd_);  // the helper's input ends: it exits after the build in hand (none: builds are synchronous)
  // A helper stuck in its driver gets two seconds, then is killed: the run never waits on it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string KernelBuilderProcess::fail(std::string why) {
  broken_ = why;
  log::debug("kernel builder helper (pid {}) not used any more: {}", pid_, why);
  return why;
}

bool KernelBuilderProcess::send_line(const std::string& line) {
  std::size_t done = 0;
  while (done < line.size()) {
    // MSG_NOSIGNAL: a helper that ended gives EPIPE here, never SIGPIPE to the run.
    const ssize_t n = ::send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool KernelBuilderProcess::read_line(std::string& line, std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (const std::size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return true;
    }
    if (!ready_) {  // the helper is opening its device: bounded
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      pollfd p{fd_, POLLIN, 0};
      const int r = waited < kReadyTimeoutMs ? ::poll(&p, 1, static_cast<int>(kReadyTimeoutMs - waited)) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        why = "it did not open the device within " + std::to_string(kReadyTimeoutMs / 1000) + " s";
        return false;
      }
    }
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n == 0 ? "it ended" : std::string("reading from it failed: ") + std::strerror(errno);
      return false;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string KernelBuilderProcess::build(const std::string& program, const std::string& options, const std::string& key,
                                        const std::string& specializations) {
  if (!broken_.empty()) return broken_;
  if ((program + options + specializations).find_first_of("\t\n") != std::string::npos) {
    return "the program name or options hold a tab or newline";
  }
  std::string line;
  if (!ready_) {
    std::string why;
    if (!read_line(line, why)) return fail(why + " before opening the device");
    const auto f = fields(line);
    if (f.size() >= 2 && f[0] == "ERR") return fail(f[1]);
    if (f.size() != 3 || f[0] != "READY") return fail("it answered \"" + line + "\" instead of READY");
    if (f[1] != one_field(device_name_) || f[2] != one_field(driver_)) {
      return fail("it opened \"" + f[1] + "\" (driver " + f[2] + "), not \"" + device_name_ + "\" (driver " + driver_ +
                  ")");
    }
    ready_ = true;
  }
  if (!send_line("BUILD\t" + program + "\t" + options + "\t" + specializations + "\n")) {
    return fail("it ended (cannot send it a build)");
  }
  if (std::string why; !read_line(line, why)) return fail(why + " while building " + program);
  const auto f = fields(line);
  if (f.size() == 3 && f[0] == "OK") {
    // Another key: a helper from another NaNscope build (other kernel sources); none of its entries would be used.
    if (f[1] != key) return fail("it wrote cache key " + f[1] + " where this run expects " + key);
    return {};
  }
  if (f.size() == 2 && f[0] == "ERR") return f[1];  // this program only: the run's own build reports it in full
  return fail("it answered \"" + line + "\" to a build");
}

namespace {

// One reply line, flushed at once (the run waits on it).
void reply(std::FILE* out, const std::string& line) {
  std::fputs((line + "\n").c_str(), out);
  std::fflush(out);
}

}  // namespace

int serve_kernel_builds(const std::string& device_id, const std::string& cache_dir, std::FILE* in, std::FILE* out) {
  if (cache_dir.empty()) {
    reply(out, "ERR\tno kernel cache directory: a helper only builds into the cache");
    return 2;
  }
  const DeviceList list = enumerate_devices();
  const DeviceInfo* device = nullptr;
  for (const auto& d : list.devices) {
    if (d.id == device_id && d.cl_device) device = &d;
  }
  if (!device) {
    reply(out, "ERR\tno OpenCL device " + one_field(device_id) + " in the helper process");
    return 2;
  }
  auto dev = static_cast<cl_device_id>(device->cl_device);
  cl_int err = CL_SUCCESS;
  cl_context context = create_device_context(*device, err);
  if (err != CL_SUCCESS) {
    reply(out, std::string("ERR\tclCreateContext failed: ") + cl_status_name(err));
    return 2;
  }
  int status = 0;
  {
    ProgramCache cache(context, dev, *device, cache_dir);
    if (cache.dir().empty()) {
      reply(out, "ERR\tthe kernel cache directory " + one_field(cache_dir) + " cannot be used");
      status = 2;
    } else {
      reply(out, "READY\t" + one_field(device->name) + "\t" + one_field(device->driver_version));
      char* raw = nullptr;
      std::size_t cap = 0;
      ssize_t n = 0;
      while ((n = ::getline(&raw, &cap, in)) > 0) {
        std::string line(raw, static_cast<std::size_t>(n));
        if (line.back() == '\n') line.pop_back();
        const auto f = fields(line);
        if (f.size() != 4 || f[0] != "BUILD") {
          reply(out, "ERR\tnot a request: " + one_field(line));
          continue;
        }
        // This process builds one program at a time: the variable is set for this build alone.
        if (f[3].empty()) {
          ::unsetenv("POCL_BINARY_SPECIALIZE_WG");
        } else {
          ::setenv("POCL_BINARY_SPECIALIZE_WG", f[3].c_str(), 1);
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
          cache.get(f[1], f[2]);
          const std::string key = cache.cache_key(ProgramCache::full_source(f[1]), f[2]);
          if (const std::string bad = ProgramCache::check_entry(cache.entry_path(key), key); !bad.empty()) {
            reply(out, "ERR\tbuilt, but its cache entry is " + one_field(bad));
            continue;
          }
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          reply(out, "OK\t" + key + "\t" + std::to_string(static_cast<long long>(ms)));
        } catch (const std::exception& e) {
          reply(out, "ERR\t" + one_field(e.what()));
        }
      }
      std::free(raw);
    }
  }
  NS_CL_CHECK_NOTHROW(clReleaseContext(context));
  return status;
}

}  // namespace nanscope::opencl
