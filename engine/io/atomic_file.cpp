#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace nanscope::io {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes and removes the temporary unless released.
class TempFile {
 public:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void release() { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  const std::string target = path.string();
  auto fail = [&](const std::string& step, int err) {
    throw FileError(target + ": " + step + ": " + errno_text(err) +
                    (err == EACCES || err == EROFS || err == ENOENT || err == ENOTDIR
                         ? ". Check that the folder exists and is writable."
                     : err == ENOSPC || err == EFBIG || err == EDQUOT ? ". Free some disk space."
                                                                      : ""));
  };
  // O_EXCL with a name unique to this process and call (mkstemp would force mode 0600).
  static std::atomic<unsigned> counter{0};
  int fd = -1;
  std::string tmp;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) fail("cannot create a temporary file next to it", errno);
  }
  if (fd < 0) fail("cannot create a temporary file next to it", EEXIST);
  TempFile file(fd, tmp);

  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(file.fd(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(file.fd()) != 0) fail("fsync failed", errno);
  if (file.close() != 0) fail("close failed", errno);
  if (::rename(file.path().c_str(), target.c_str()) != 0) fail("cannot replace it with the new file", errno);
  file.release();
}

}  // namespace nanscope::io
