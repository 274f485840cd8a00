#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"

namespace nanscope::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; this host is not");

namespace {

// A header this large is not a weights file (real ones are a few hundred KB);
// the bound keeps a corrupt length from making us allocate gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

constexpr std::string_view kConvertHint =
    "Convert it to safetensors once, in a Python environment you trust with this file, e.g.:\n"
    "  python -c \"import sys, torch, safetensors.torch as st; sd = torch.load(sys.argv[1], map_location='cpu'); "
    "sd = sd.get('state_dict', sd); st.save_file({k: v.contiguous() for k, v in sd.items() "
    "if isinstance(v, torch.Tensor)}, sys.argv[2])\" model.ckpt model.safetensors";

std::string quoted(const std::filesystem::path& p) { return "\"" + p.string() + "\""; }

[[noreturn]] void fail(const std::filesystem::path& p, const std::string& what) {
  throw FileError(quoted(p) + ": " + what);
}

[[noreturn]] void fail_corrupt(const std::filesystem::path& p, const std::string& what) {
  fail(p, what + ". The file is damaged or was not written by a safetensors writer; re-download or re-export it.");
}

std::string errno_text() { return std::strerror(errno); }

struct FileDTypeInfo {
  FileDType type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<FileDTypeInfo, 15> kFileDTypes{{
    {FileDType::F64, "F64", 8},
    {FileDType::F32, "F32", 4},
    {FileDType::F16, "F16", 2},
    {FileDType::BF16, "BF16", 2},
    {FileDType::I64, "I64", 8},
    {FileDType::I32, "I32", 4},
    {FileDType::I16, "I16", 2},
    {FileDType::I8, "I8", 1},
    {FileDType::U64, "U64", 8},
    {FileDType::U32, "U32", 4},
    {FileDType::U16, "U16", 2},
    {FileDType::U8, "U8", 1},
    {FileDType::BOOL, "BOOL", 1},
    {FileDType::F8_E4M3, "F8_E4M3", 1},
    {FileDType::F8_E5M2, "F8_E5M2", 1},
}};

const FileDTypeInfo& info(FileDType t) {
  for (const auto& i : kFileDTypes) {
    if (i.type == t) return i;
  }
  return kFileDTypes[1];
}

std::string known_dtype_list() {
  std::string s;
  for (const auto& i : kFileDTypes) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

std::string tensor_label(const std::string& name) { return "tensor \"" + name + "\""; }

// A non-negative integer from a JSON value, or nullopt (negative, fractional, not a number).
std::optional<std::uint64_t> as_u64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= 0) return static_cast<std::uint64_t>(i);
  }
  return std::nullopt;
}

TensorEntry parse_entry(const std::filesystem::path& path, const std::string& name, const nlohmann::json& j,
                        std::uint64_t data_bytes) {
  const std::string who = tensor_label(name);
  if (!j.is_object()) {
    fail_corrupt(path, who + ": expected an object {dtype, shape, data_offsets}, found " + std::string(j.type_name()));
  }
  TensorEntry e;
  e.name = name;

  const auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) fail_corrupt(path, who + ": missing \"dtype\" string");
  const auto fd = parse_file_dtype(dt->get<std::string>());
  if (!fd) {
    fail(path, who + ": unknown dtype \"" + dt->get<std::string>() + "\" (known: " + known_dtype_list() +
                   "). The file may come from a newer safetensors version; convert the tensor to F32, F16 or BF16.");
  }
  e.file_dtype = *fd;

  const auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) fail_corrupt(path, who + ": missing \"shape\" array");
  // numel x element size must not overflow: checked per dimension.
  std::uint64_t expected = file_dtype_size(e.file_dtype);
  for (const auto& d : *sh) {
    const auto v = as_u64(d);
    if (!v || *v > static_cast<std::uint64_t>(INT64_MAX)) {
      fail_corrupt(path, who + ": shape " + sh->dump() + " has an entry that is not a non-negative integer");
    }
    e.shape.push_back(static_cast<std::int64_t>(*v));
    if (__builtin_mul_overflow(expected, *v, &expected)) {
      fail_corrupt(path, who + ": shape " + sh->dump() + " is too large to exist");
    }
  }

  const auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2) {
    fail_corrupt(path, who + ": expected \"data_offsets\": [begin, end]");
  }
  const auto b = as_u64((*off)[0]);
  const auto en = as_u64((*off)[1]);
  if (!b || !en) fail_corrupt(path, who + ": data_offsets " + off->dump() + " are not non-negative integers");
  if (*b > *en) fail_corrupt(path, who + ": data_offsets " + off->dump() + " end before they begin");
  e.begin = *b;
  e.end = *en;
  if (e.end - e.begin != expected) {
    fail_corrupt(path, who + ": shape " + shape_str(e.shape) + " x " + std::string(file_dtype_name(e.file_dtype)) +
                           " needs " + std::to_string(expected) + " bytes but data_offsets " + off->dump() + " hold " +
                           std::to_string(e.end - e.begin));
  }
  if (e.end > data_bytes) {
    fail_corrupt(path, who + ": data_offsets " + off->dump() + " reach past the data area, which holds " +
                           std::to_string(data_bytes) + " bytes (is the file truncated?)");
  }
  return e;
}

// The header's JSON, rejecting duplicate top-level keys (two tensors with one
// name would otherwise silently resolve to the last).
nlohmann::json parse_header(const std::filesystem::path& path, const char* begin, const char* end) {
  std::set<std::string> keys;
  std::string duplicate;
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev,
                                                   nlohmann::json& parsed) {
    if (depth == 1 && ev == nlohmann::json::parse_event_t::key && parsed.is_string()) {
      if (!keys.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(begin, end, cb);
  } catch (const nlohmann::json::exception& e) {
    fail_corrupt(path, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) {
    fail_corrupt(
        path, "the header must be a JSON object mapping tensor names to entries, found " + std::string(j.type_name()));
  }
  if (!duplicate.empty()) fail_corrupt(path, "the header names " + tensor_label(duplicate) + " twice");
  return j;
}

void convert(std::span<const std::uint8_t> src, FileDType from, HostTensor& out) {
  // An empty tensor has no buffer to copy into (memcpy must not see a null pointer).
  if (out.numel() == 0) return;
  // f16/bf16 -> f32 is exact, so every element is a single RNE rounding into the target.
  convert_elements(src.data(), *to_dtype(from), out.data.data(), out.dtype, static_cast<std::size_t>(out.numel()));
}

}  // namespace

std::string_view file_dtype_name(FileDType t) { return info(t).name; }
std::size_t file_dtype_size(FileDType t) { return info(t).size; }

std::optional<FileDType> parse_file_dtype(std::string_view s) {
  for (const auto& i : kFileDTypes) {
    if (i.name == s) return i.type;
  }
  return std::nullopt;
}

std::optional<DType> to_dtype(FileDType t) {
  switch (t) {
    case FileDType::F32: return DType::f32;
    case FileDType::F16: return DType::f16;
    case FileDType::BF16: return DType::bf16;
    default: return std::nullopt;
  }
}

FileDType to_file_dtype(DType t) {
  switch (t) {
    case DType::f32: return FileDType::F32;
    case DType::f16: return FileDType::F16;
    case DType::bf16: return FileDType::BF16;
  }
  return FileDType::F32;
}

// A read-only private mapping of the whole file, unmapped when the last
// SafetensorsFile copy goes away.
// The header is parsed from a read-only mapping; tensors are read with
// pread() on the descriptor kept open here. A file truncated in place after
// open() then gives a short read, reported as a FileError, where a read from
// the mapping would end the process with SIGBUS. A file replaced by a rename
// keeps its old contents for this object (the descriptor holds the old inode).
struct SafetensorsFile::Mapping {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  int fd = -1;
  ~Mapping() {
    if (data) munmap(const_cast<std::uint8_t*>(data), size);
    if (fd >= 0) ::close(fd);
  }
};

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open: " + errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail(path, "cannot stat: " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "is not a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  auto mapping = std::make_shared<Mapping>();
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd);
      fail(path, "cannot map " + std::to_string(size) + " bytes: " + why);
    }
    mapping->data = static_cast<const std::uint8_t*>(p);
    mapping->size = size;
  }
  mapping->fd = fd;  // read() reads tensors through it
  f.mapping_ = mapping;
  const std::uint8_t* base = mapping->data;

  const auto looks_like_pickle = [&] {
    if (size < 2) return false;
    const bool header_brace = size > 8 && base[8] == '{';
    const bool pk = size >= 4 && std::memcmp(base, "PK\x03\x04", 4) == 0;
    const bool proto = base[0] == 0x80 && base[1] >= 2 && base[1] <= 5;
    return !header_brace && (pk || proto);
  };
  if (looks_like_pickle()) refuse_pickle(path);

  if (size < 8) {
    fail_corrupt(path, "expected at least 8 bytes (the header length), found " + std::to_string(size) + " bytes");
  }
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian (static_assert above)
  if (header_len > kMaxHeaderBytes) {
    fail_corrupt(path, "header length " + std::to_string(header_len) + " bytes exceeds the limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > size - 8) {
    fail_corrupt(path, "header length " + std::to_string(header_len) + " bytes reaches past the end of the file (" +
                           std::to_string(size) + " bytes; is it truncated?)");
  }
  const auto* hb = reinterpret_cast<const char*>(base + 8);
  const nlohmann::json header = parse_header(path, hb, hb + header_len);

  f.data_start_ = 8 + static_cast<std::size_t>(header_len);
  const std::uint64_t data_bytes = size - f.data_start_;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        fail_corrupt(path, "\"__metadata__\" must be an object of strings, found " + std::string(value.type_name()));
      }
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          fail_corrupt(path,
                       "\"__metadata__\" key \"" + mk + "\" must be a string, found " + std::string(mv.type_name()));
        }
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    f.entries_.push_back(parse_entry(path, key, value, data_bytes));
  }

  std::sort(f.entries_.begin(), f.entries_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < f.entries_.size(); ++i) {
    const auto& prev = f.entries_[i - 1];
    const auto& cur = f.entries_[i];
    if (cur.begin < prev.end) {
      fail_corrupt(path, tensor_label(cur.name) + ": data_offsets [" + std::to_string(cur.begin) + "," +
                             std::to_string(cur.end) + "] overlap " + tensor_label(prev.name) + " at [" +
                             std::to_string(prev.begin) + "," + std::to_string(prev.end) +
                             "]; expected each tensor to begin at or after the previous one's end");
    }
  }
  for (std::size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  return f;
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::span<const std::uint8_t> SafetensorsFile::bytes(const TensorEntry& entry) const {
  if (entry.bytes() == 0) return {};
  return {mapping_->data + data_start_ + entry.begin, static_cast<std::size_t>(entry.bytes())};
}

HostTensor SafetensorsFile::read(std::string_view name, DType target) const {
  const TensorEntry* e = find(name);
  if (!e) {
    std::string some;
    for (std::size_t i = 0; i < entries_.size() && i < 5; ++i) some += (i ? ", " : "") + entries_[i].name;
    fail(path_, "no " + tensor_label(std::string(name)) + " (the file holds " + std::to_string(entries_.size()) +
                    " tensors" + (some.empty() ? "" : ", e.g. " + some) +
                    "). Check that the file is the component the model expects.");
  }
  return read(*e, target);
}

HostTensor SafetensorsFile::read(const TensorEntry& entry, DType target) const {
  if (!to_dtype(entry.file_dtype)) {
    fail(path_, tensor_label(entry.name) + " " + shape_str(entry.shape) + ": dtype " +
                    std::string(file_dtype_name(entry.file_dtype)) +
                    " cannot be loaded as a weight; expected F32, F16 or BF16. Convert it, e.g. in Python: "
                    "st.save_file({k: v.float() for k, v in st.load_file(path).items()}, out_path).");
  }
  HostTensor out(entry.shape, target);
  // Read with pread(), not from the mapping (see Mapping): straight into the
  // result when no conversion is needed, else through one buffer. Nothing of
  // the file stays resident beyond the page cache, so loading a 3.4 GB UNet
  // does not hold the file and its copy at once.
  const bool same = *to_dtype(entry.file_dtype) == target;
  std::vector<std::uint8_t> staged(same ? 0 : static_cast<std::size_t>(entry.bytes()));
  std::uint8_t* dst = same ? out.data.data() : staged.data();
  const std::uint64_t first = data_start_ + entry.begin;
  std::uint64_t done = 0;
  while (done < entry.bytes()) {
    const ssize_t got = ::pread(mapping_->fd, dst + done, static_cast<std::size_t>(entry.bytes() - done),
                                static_cast<off_t>(first + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path_, "cannot read " + tensor_label(entry.name) + ": " + errno_text());
    if (got == 0) {
      struct stat st {};
      const std::string now = fstat(mapping_->fd, &st) == 0 ? std::to_string(st.st_size) + " bytes" : "fewer bytes";
      fail(path_, "changed on disk while it was open: " + tensor_label(entry.name) + " needs bytes " +
                      std::to_string(first) + " to " + std::to_string(first + entry.bytes()) +
                      ", but the file now has " + now +
                      " (truncated or rewritten in place). Load the model again once the file is complete.");
    }
    done += static_cast<std::uint64_t>(got);
  }
  if (!same) convert(staged, entry.file_dtype, out);
  return out;
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, HostTensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || header.contains(name)) {
      fail(path, "cannot write " + tensor_label(name) + ": the name is reserved or used twice");
    }
    const std::uint64_t expected = static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype);
    if (t.data.size() != expected) {
      fail(path, "cannot write " + tensor_label(name) + " " + t.describe() + ": it holds " +
                     std::to_string(t.data.size()) + " bytes, expected " + std::to_string(expected));
    }
    header[name] = {{"dtype", std::string(file_dtype_name(to_file_dtype(t.dtype)))},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data area 8-byte aligned

  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(tmp, "cannot create: " + errno_text() + ". Check that the folder exists and is writable.");
    const std::uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) {
      out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail(tmp, "write failed (disk full?): " + errno_text());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(path, "cannot replace with the newly written file: " + ec.message());
  }
}

WeightsFormat sniff_weights_format(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: " + errno_text());
  std::array<unsigned char, 9> head{};
  in.read(reinterpret_cast<char*>(head.data()), head.size());
  const auto n = static_cast<std::size_t>(in.gcount());
  if (n >= 9 && head[8] == '{') return WeightsFormat::safetensors;
  if (n >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0) return WeightsFormat::torch_zip;
  if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) return WeightsFormat::pickle;
  return WeightsFormat::unknown;
}

void refuse_pickle(const std::filesystem::path& path) {
  const WeightsFormat f = sniff_weights_format(path);
  if (f != WeightsFormat::pickle && f != WeightsFormat::torch_zip) return;
  const std::string kind = f == WeightsFormat::pickle
                               ? "a Python pickle (legacy torch.save format)"
                               : "a PyTorch zip checkpoint (torch.save), which stores its tensors through pickle";
  fail(path, "is " + kind +
                 ". NaNscope does not load pickle files: loading one runs whatever code the file contains. " +
                 std::string(kConvertHint));
}

}  // namespace nanscope::io
