#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header mapping tensor names to
// {dtype, shape, data_offsets}, then the raw data area.
//
// The reader maps the file read-only and validates the whole header before any
// tensor byte is handed out: header length, JSON, every dtype, shape and offset
// pair, and that the byte ranges lie inside the data area without overlapping.
// Every problem is a FileError naming the file, the tensor, what was expected,
// what was found and what to do.
//
// Pickle checkpoints (.ckpt, .pt, .bin, .pth) are refused: unpickling runs
// code from the file.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace nanscope::io {

// Every dtype the safetensors format defines. Only F32, F16 and BF16 can be
// loaded as weights; the others are recognised so the error can say what the
// file holds.
enum class FileDType : std::uint8_t {
  F64,
  F32,
  F16,
  BF16,
  I64,
  I32,
  I16,
  I8,
  U64,
  U32,
  U16,
  U8,
  BOOL,
  F8_E4M3,
  F8_E5M2
};

std::string_view file_dtype_name(FileDType t);  // "F32", as written in the header
std::size_t file_dtype_size(FileDType t);
std::optional<FileDType> parse_file_dtype(std::string_view s);
// The storage dtype for a loadable file dtype (F32, F16, BF16), else nullopt.
std::optional<DType> to_dtype(FileDType t);
FileDType to_file_dtype(DType t);

struct TensorEntry {
  std::string name;
  FileDType file_dtype = FileDType::F32;
  Shape shape;
  // Byte range [begin, end) relative to the start of the data area.
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::int64_t numel() const { return shape_numel(shape); }
  std::uint64_t bytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws FileError (also for pickle/zip checkpoints).
  static SafetensorsFile open(const std::filesystem::path& path);

  // Entries in file order (ascending data offset).
  const std::vector<TensorEntry>& entries() const { return entries_; }
  // The entry with this name, or null.
  const TensorEntry* find(std::string_view name) const;
  // The entry's raw bytes (little-endian, possibly unaligned), valid while this object lives.
  std::span<const std::uint8_t> bytes(const TensorEntry& entry) const;
  // The tensor converted to `target` (F32/F16/BF16 sources; RNE, f16 overflow to Inf).
  // Throws FileError for a missing name or a dtype that is not a float weight type.
  HostTensor read(std::string_view name, DType target) const;
  HostTensor read(const TensorEntry& entry, DType target) const;

  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Mapping;
  SafetensorsFile() = default;

  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  std::size_t data_start_ = 0;  // file offset of the data area
  std::vector<TensorEntry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors in the given order with ascending offsets; the header is padded
// with spaces to a multiple of 8 bytes as the reference writer does. Atomic:
// written to a temporary file next to `path`, then renamed. Throws FileError.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, HostTensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

enum class WeightsFormat : std::uint8_t { safetensors, pickle, torch_zip, unknown };
// Looks at the first bytes: a pickle stream starts with the PROTO opcode 0x80 and
// a protocol number; torch.save() since 1.6 writes a zip ("PK\x03\x04"); a
// safetensors header starts with '{' at offset 8. Throws FileError when unreadable.
WeightsFormat sniff_weights_format(const std::filesystem::path& path);
// Throws FileError explaining why pickle/zip checkpoints are not loaded and how
// to convert them, when `path` is one; returns otherwise.
void refuse_pickle(const std::filesystem::path& path);

}  // namespace nanscope::io
