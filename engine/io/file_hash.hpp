#pragma once
// The hashes other tools name model files by, and a cache of them.
//
// A1111 names a checkpoint or VAE by "AutoV2", the first 10 hex digits of the
// whole file's sha256 (modules/hashes.py calculate_sha256), or, in images
// from before late 2022, by "AutoV1": the first 8 hex digits of the sha256 of
// the 0x10000 bytes at offset 0x100000 (modules/sd_models.py model_hash; a
// file shorter than that hashes what is there, possibly nothing). Its LoRA
// extension names a .safetensors LoRA by the sha256 of the bytes after the
// safetensors header (kohya-ss's addnet hash, hashes.py
// addnet_hash_safetensors), 12 hex digits in "Lora hashes". One pass over the
// file computes all three (OpenSSL's SHA-256).
//
// FileHashCache keeps them in a JSON file keyed by path, size and mtime (the
// XDG cache dir by default), so a large models folder is hashed once; a file
// whose size or mtime changed is hashed again; a cache file that cannot be
// read as one is ignored with a warning (and rewritten on save).

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace nanscope::io {

struct FileHashes {
  std::string sha256;         // the whole file, 64 lowercase hex digits
  std::string addnet_sha256;  // the bytes after the safetensors header; "" when the file does not start like one
  std::string autov1;         // 8 hex digits
  friend bool operator==(const FileHashes&, const FileHashes&) = default;
};

// Throws FileError naming the file when it cannot be read. `cancel`, when
// given and set, stops the hashing within 1 MiB (throws Cancelled).
FileHashes hash_file(const std::filesystem::path& path, const std::atomic<bool>* cancel = nullptr);

// The hash A1111 prints in "Lora hashes" for a .safetensors LoRA: the first 12
// hex digits of addnet_sha256 (so that editing the metadata keeps it).
// Sources: kohya-ss sd-scripts library/train_util.py addnet_hash_safetensors;
// A1111 modules/hashes.py sha256(..., use_addnet_hash=True) and
// extensions-builtin/Lora/network.py (NetworkOnDisk: shorthash = hash[0:12]).
// Cached per (path, size, mtime) for the life of the process. Throws FileError
// naming the file when it cannot be read or does not start like a safetensors file.
std::string a1111_lora_short_hash(const std::filesystem::path& path);

class FileHashCache {
 public:
  // Reads `cache_file` if it exists; an unreadable or corrupt one is ignored with a warning.
  explicit FileHashCache(std::filesystem::path cache_file);
  // $XDG_CACHE_HOME/nanscope/model-hashes.json, else ~/.cache/nanscope/model-hashes.json.
  static std::filesystem::path default_path();

  // The file's hashes, from the cache when its path, size and mtime match,
  // else hashed now (and remembered). Throws FileError for an unreadable file.
  // `cancel` as for hash_file.
  FileHashes get(const std::filesystem::path& path, const std::atomic<bool>* cancel = nullptr);
  // Writes the cache atomically when something was added; a failure is a warning only.
  void save();

  int hashed() const { return hashed_; }  // files this object hashed (cache misses)
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Entry {
    std::uintmax_t size = 0;
    std::int64_t mtime_ns = 0;
    FileHashes hashes;
  };
  std::filesystem::path file_;
  std::map<std::string, Entry> entries_;
  int hashed_ = 0;
  bool dirty_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace nanscope::io
