#pragma once
// A file system of its own for the disk fault tests: a tmpfs of a given size
// mounted on a fresh folder, which a test fills up (a full disk) or remounts
// read-only (a read-only destination that even root cannot write, unlike a
// folder without write permission). Unmounted and removed on destruction.
// Mounting needs CAP_SYS_ADMIN (root on the test machines and in CI); where
// it is missing, ok() is false and reason() says why, for a skip message.
// Header-only: the GUI tests use it too.

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace nanscope::test {

class SmallFilesystem {
 public:
  explicit SmallFilesystem(std::size_t bytes) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nanscope-smallfs-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) {
      reason_ = std::string("cannot make a folder to mount on: ") + std::strerror(errno);
      return;
    }
    path_ = buf.data();
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("nanscope-test", path_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      reason_ = std::string("cannot mount a small tmpfs for the disk fault tests (") + std::strerror(errno) +
                "); they need root or CAP_SYS_ADMIN";
      return;
    }
    mounted_ = true;
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;

  bool ok() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

  // Writes a filler file until the file system refuses more: a full disk.
  void fill() const {
    std::FILE* f = std::fopen((path_ / ".filler").c_str(), "wb");
    if (!f) return;
    const std::vector<char> block(4096, 0);
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }
  // Remounts it read-only; false (and reason()) when that fails.
  bool make_read_only() {
    if (::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
      reason_ = std::string("cannot remount read-only: ") + std::strerror(errno);
      return false;
    }
    return true;
  }

 private:
  std::filesystem::path path_;
  std::string reason_;
  bool mounted_ = false;
};

}  // namespace nanscope::test
