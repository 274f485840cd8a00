#pragma once
// File hashes the model-sharing tools print: A1111 writes them into an image's
// "parameters" (Model hash, Lora hashes), so the files an image names can be
// recorded and found again.

#include <cstdint>
#include <filesystem>
#include <string>

namespace nanscope::io {

// sha256 of the bytes [offset, end of file), as 64 lowercase hex digits.
// Throws FileError naming the file when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path, std::uint64_t offset = 0);

// The hash A1111 prints in "Lora hashes" for a .safetensors LoRA: the first 12
// hex digits of the "addnet" hash, sha256 of everything after the safetensors
// header (8-byte length + JSON), so that editing the metadata keeps it.
// Sources: kohya-ss sd-scripts library/train_util.py addnet_hash_safetensors;
// A1111 modules/hashes.py sha256(..., use_addnet_hash=True) and
// extensions-builtin/Lora/network.py (NetworkOnDisk: shorthash = hash[0:12]).
// Cached per (path, size, mtime) for the life of the process.
std::string a1111_lora_short_hash(const std::filesystem::path& path);

}  // namespace nanscope::io
