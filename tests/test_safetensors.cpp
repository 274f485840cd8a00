// The safetensors reader and writer: round trips, interoperability with the
// Python `safetensors` package both ways, and one test per kind of damage,
// each of which must give a FileError naming the file (and the tensor).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "support/oracle.hpp"

namespace nanscope::io {
namespace {

using test::TempDir;

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given header text and `data_bytes` bytes of data (0, 1, 2, ...).
std::string file_bytes(const std::string& header, std::size_t data_bytes, std::uint64_t header_len = UINT64_MAX) {
  const std::uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  s += header;
  for (std::size_t i = 0; i < data_bytes; ++i) s += static_cast<char>(i & 0xff);
  return s;
}

// Expects open() to throw a FileError whose message contains every fragment.
void expect_open_error(const std::filesystem::path& p, std::initializer_list<std::string> fragments) {
  try {
    (void)SafetensorsFile::open(p);
    ADD_FAILURE() << "opening " << p << " succeeded; expected a FileError";
  } catch (const FileError& e) {
    const std::string what = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(what.find(f), std::string::npos) << "missing \"" << f << "\" in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FileError, got " << typeid(e).name() << ": " << e.what();
  }
}

TEST(Safetensors, RoundTripKeepsBytesShapesAndMetadata) {
  TempDir dir;
  const auto path = dir / "rt.safetensors";
  const HostTensor a = HostTensor::from_f32({2, 3}, {1.0f, -2.5f, 3.25f, 65504.0f, 1e-8f, -0.0f});
  const HostTensor b = HostTensor::from_f32({5}, {0.1f, 65520.0f, -1e5f, 3.0f, 6e-8f}, DType::f16);
  const HostTensor c = HostTensor::from_f32({1, 1, 3}, {1.00390625f, 3.0e38f, -7.0f}, DType::bf16);
  const HostTensor empty({0, 4}, DType::f32);
  const HostTensor scalar = HostTensor::from_f32({}, {42.0f});
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}, {"empty", empty}, {"scalar", scalar}}, {{"k", "v"}});

  // No temporary file is left next to the result.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);

  // The header is padded so the data area starts 8-byte aligned.
  const std::string raw = read_all(path);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + header_len + a.data.size() + b.data.size() + c.data.size() + 4);

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.entries().size(), 5u);
  EXPECT_EQ(f.metadata().at("k"), "v");
  for (const auto& [name, t] : std::initializer_list<std::pair<const char*, const HostTensor*>>{
           {"a", &a}, {"b", &b}, {"c", &c}, {"empty", &empty}, {"scalar", &scalar}}) {
    SCOPED_TRACE(name);
    const TensorEntry* e = f.find(name);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->shape, t->shape);
    EXPECT_EQ(to_dtype(e->file_dtype), t->dtype);
    const auto bytes = f.bytes(*e);
    ASSERT_EQ(bytes.size(), t->data.size());
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), t->data.begin()));
    const HostTensor back = f.read(name, t->dtype);
    EXPECT_EQ(back.data, t->data);
  }
  EXPECT_EQ(f.find("missing"), nullptr);
  // Entries come in file order: ascending offsets.
  for (std::size_t i = 1; i < f.entries().size(); ++i) EXPECT_LE(f.entries()[i - 1].end, f.entries()[i].begin);
}

TEST(Safetensors, ReadConvertsWithRoundToNearestEven) {
  TempDir dir;
  const auto path = dir / "conv.safetensors";
  // 1 + 2^-11 is an f16 tie (rounds down to even 1.0); 1 + 3*2^-11 ties up to 1 + 2^-9; 65520 overflows f16.
  const std::vector<float> v{1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 65519.0f, -0x1p-25f, 1.0f + 0x1p-8f};
  write_safetensors(path, {{"x", HostTensor::from_f32({6}, v)}, {"h", HostTensor::from_f32({6}, v, DType::f16)}});
  const auto f = SafetensorsFile::open(path);
  const HostTensor as_f16 = f.read("x", DType::f16);
  const HostTensor as_bf16 = f.read("x", DType::bf16);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(as_f16.get(i)), std::bit_cast<std::uint32_t>(round_to(DType::f16, v[i])));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(as_bf16.get(i)), std::bit_cast<std::uint32_t>(round_to(DType::bf16, v[i])));
  }
  EXPECT_EQ(as_f16.get(0), 1.0f);
  EXPECT_EQ(as_f16.get(1), 1.0f + 0x1p-9f);
  EXPECT_TRUE(std::isinf(as_f16.get(2)));
  EXPECT_EQ(as_f16.get(3), 65504.0f);
  EXPECT_TRUE(std::signbit(as_f16.get(4)) && as_f16.get(4) == 0.0f);
  // f16 -> f32 is exact.
  const HostTensor widened = f.read("h", DType::f32);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(widened.get(i), round_to(DType::f16, v[i]));
}

// The file is truncated in place after it was opened (another program still
// writing it, a copy overwritten): the tensors past the new end are a
// FileError naming the file, the tensor and what to do, not a SIGBUS; what is
// still there reads as before, also after a conversion.
TEST(Safetensors, TruncatedAfterOpenIsAnErrorNotACrash) {
  TempDir dir;
  const auto path = dir / "shrinks.safetensors";
  const std::vector<float> a(1024, 1.5f), b(1 << 16, 2.5f);
  write_safetensors(path, {{"a", HostTensor::from_f32({1024}, a)}, {"b", HostTensor::from_f32({1 << 16}, b)}});
  const auto f = SafetensorsFile::open(path);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 4 * 1000);  // inside "b", past whole pages of it
  EXPECT_EQ(f.read("a", DType::f32).to_f32(), a);
  EXPECT_EQ(f.read("a", DType::f16).to_f32(), a);
  for (const DType t : {DType::f32, DType::bf16}) {
    try {
      (void)f.read("b", t);
      ADD_FAILURE() << "reading past the new end succeeded";
    } catch (const FileError& e) {
      const std::string what = e.what();
      for (const char* part : {"shrinks.safetensors", "tensor \"b\"", "changed on disk", "Load the model again"}) {
        EXPECT_NE(what.find(part), std::string::npos) << "no \"" << part << "\" in: " << what;
      }
    }
  }
}

TEST(Safetensors, ReadsWhatPythonWrote) {
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  const auto path = dir / "py.safetensors";
  test::run_oracle("safetensors_oracle.py", {"write", path.string()});
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("producer"), "safetensors_oracle");
  EXPECT_EQ(f.entries().size(), 5u);

  const HostTensor a = f.read("a", DType::f32);
  ASSERT_EQ(a.shape, (Shape{2, 3, 5}));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(a.get(i), static_cast<float>(i) * 0.25f - 3.0f);
  const HostTensor b = f.read("b.half", DType::f16);
  EXPECT_EQ(b.dtype, DType::f16);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b.get(i), static_cast<float>(i) * 0.5f - 2.0f);
  const HostTensor c = f.read("c.bf16", DType::f32);
  ASSERT_EQ(c.shape, (Shape{4, 4}));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(c.get(i), round_to(DType::bf16, static_cast<float>(i) * 1000.5f)) << i;
  const HostTensor big = f.read("big", DType::f32);
  EXPECT_EQ(big.get(0), 65504.0f);
  EXPECT_EQ(big.get(1), -65504.0f);
  EXPECT_EQ(big.get(2), round_to(DType::f16, 1e-7f));  // an f16 subnormal

  // I64 is recognised, refused as a weight, and still readable as raw bytes.
  const TensorEntry* ids = f.find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->file_dtype, FileDType::I64);
  const auto raw = f.bytes(*ids);
  ASSERT_EQ(raw.size(), 40u);
  std::int64_t third = 0;
  std::memcpy(&third, raw.data() + 16, 8);
  EXPECT_EQ(third, 2);
  try {
    (void)f.read("ids", DType::f32);
    ADD_FAILURE() << "reading an I64 tensor as a weight succeeded";
  } catch (const FileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"ids\""), std::string::npos) << what;
    EXPECT_NE(what.find("I64"), std::string::npos) << what;
    EXPECT_NE(what.find("py.safetensors"), std::string::npos) << what;
  }
}

TEST(Safetensors, PythonReadsWhatWeWrote) {
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  const auto path = dir / "cpp.safetensors";
  std::vector<float> x(6), y(5), z(3);
  for (int i = 0; i < 6; ++i) x[i] = static_cast<float>(i) - 2.5f;
  for (int i = 0; i < 5; ++i) y[i] = static_cast<float>(i) * 0.1f;
  for (int i = 0; i < 3; ++i) z[i] = static_cast<float>(i) * 1000.5f;
  write_safetensors(path,
                    {{"x", HostTensor::from_f32({2, 3}, x)},
                     {"y", HostTensor::from_f32({5}, y, DType::f16)},
                     {"z", HostTensor::from_f32({3}, z, DType::bf16)},
                     {"empty", HostTensor({0, 4}, DType::f32)}},
                    {{"k", "v"}, {"seed", "42"}});
  test::run_oracle("safetensors_oracle.py", {"check", path.string()});
}

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    const auto p = dir_ / name;
    write_bytes(p, bytes);
    return p;
  }
  TempDir dir_;
};

TEST_F(SafetensorsCorrupt, ShorterThanTheLengthField) {
  expect_open_error(write("short.safetensors", "abc"), {"short.safetensors", "at least 8 bytes", "found 3"});
  expect_open_error(write("zero.safetensors", ""), {"zero.safetensors", "at least 8 bytes"});
}

TEST_F(SafetensorsCorrupt, HugeHeaderLength) {
  expect_open_error(write("huge.safetensors", file_bytes("{}", 0, 1ull << 40)),
                    {"huge.safetensors", "header length 1099511627776", "exceeds"});
}

TEST_F(SafetensorsCorrupt, HeaderLengthPastTheEnd) {
  expect_open_error(write("past.safetensors", file_bytes("{}", 0, 4096)), {"past.safetensors", "past the end"});
}

TEST_F(SafetensorsCorrupt, TruncatedData) {
  TempDir d;
  const auto good = d / "good.safetensors";
  write_safetensors(good, {{"w", HostTensor({4, 4}, DType::f32)}});
  std::string bytes = read_all(good);
  bytes.resize(bytes.size() - 10);
  expect_open_error(write("trunc.safetensors", bytes), {"trunc.safetensors", "\"w\"", "truncated"});
}

TEST_F(SafetensorsCorrupt, BadJson) {
  expect_open_error(write("json.safetensors", file_bytes("{\"a\": {\"dtype\": ", 0)),
                    {"json.safetensors", "not valid JSON"});
}

TEST_F(SafetensorsCorrupt, HeaderNotAnObject) {
  expect_open_error(write("arr.safetensors", file_bytes("[1, 2, 3]", 0)), {"arr.safetensors", "JSON object", "array"});
  expect_open_error(write("entry.safetensors", file_bytes(R"({"w": 5})", 0)), {"entry.safetensors", "\"w\"", "object"});
}

TEST_F(SafetensorsCorrupt, UnknownDtype) {
  expect_open_error(
      write("dt.safetensors", file_bytes(R"({"w": {"dtype": "F7", "shape": [2], "data_offsets": [0, 2]}})", 2)),
      {"dt.safetensors", "\"w\"", "unknown dtype \"F7\"", "F32, F16"});
}

TEST_F(SafetensorsCorrupt, ShapeDoesNotMatchSize) {
  expect_open_error(write("size.safetensors",
                          file_bytes(R"({"w": {"dtype": "F32", "shape": [5, 7], "data_offsets": [0, 100]}})", 100)),
                    {"size.safetensors", "\"w\"", "[5,7]", "needs 140 bytes", "hold 100"});
}

TEST_F(SafetensorsCorrupt, NegativeOrFractionalShape) {
  expect_open_error(
      write("neg.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4)),
      {"neg.safetensors", "\"w\"", "non-negative integer"});
  expect_open_error(
      write("frac.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4)),
      {"frac.safetensors", "\"w\"", "non-negative integer"});
}

TEST_F(SafetensorsCorrupt, OverflowingShape) {
  expect_open_error(
      write("ovf.safetensors",
            file_bytes(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0)),
      {"ovf.safetensors", "\"w\"", "too large"});
}

TEST_F(SafetensorsCorrupt, OffsetsOutsideTheData) {
  expect_open_error(
      write("off.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})", 16)),
      {"off.safetensors", "\"w\"", "past the data area", "16 bytes"});
  expect_open_error(
      write("rev.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16)),
      {"rev.safetensors", "\"w\"", "end before they begin"});
  expect_open_error(write("miss.safetensors", file_bytes(R"({"w": {"dtype": "F32", "shape": [0]}})", 0)),
                    {"miss.safetensors", "\"w\"", "data_offsets"});
}

TEST_F(SafetensorsCorrupt, OverlappingRanges) {
  const std::string h =
      R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]}})";
  expect_open_error(write("overlap.safetensors", file_bytes(h, 16)),
                    {"overlap.safetensors", "\"b\"", "overlap", "\"a\""});
}

TEST_F(SafetensorsCorrupt, DuplicateName) {
  const std::string h =
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  expect_open_error(write("dup.safetensors", file_bytes(h, 8)), {"dup.safetensors", "\"a\"", "twice"});
}

TEST_F(SafetensorsCorrupt, MetadataMustBeStrings) {
  expect_open_error(write("meta.safetensors", file_bytes(R"({"__metadata__": {"n": 3}})", 0)),
                    {"meta.safetensors", "__metadata__", "\"n\"", "string"});
  // A well-formed metadata map is kept, and a file with no tensors is valid.
  const auto ok = write("meta_ok.safetensors", file_bytes(R"({"__metadata__": {"format": "pt"}})", 0));
  const auto f = SafetensorsFile::open(ok);
  EXPECT_TRUE(f.entries().empty());
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST_F(SafetensorsCorrupt, MissingTensorOnRead) {
  TempDir d;
  const auto p = d / "one.safetensors";
  write_safetensors(p, {{"only", HostTensor({1}, DType::f32)}});
  const auto f = SafetensorsFile::open(p);
  try {
    (void)f.read("other", DType::f32);
    ADD_FAILURE() << "read of a missing tensor succeeded";
  } catch (const FileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("one.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find("\"other\""), std::string::npos) << what;
    EXPECT_NE(what.find("only"), std::string::npos) << what;
  }
}

TEST(SafetensorsWriter, RejectsDuplicateAndInconsistentTensors) {
  TempDir dir;
  HostTensor bad({2, 2}, DType::f32);
  bad.data.resize(3);
  EXPECT_THROW(write_safetensors(dir / "bad.safetensors", {{"x", bad}}), FileError);
  EXPECT_THROW(write_safetensors(dir / "dup.safetensors",
                                 {{"x", HostTensor({1}, DType::f32)}, {"x", HostTensor({1}, DType::f32)}}),
               FileError);
  EXPECT_THROW(write_safetensors(dir / "no_such_dir" / "x.safetensors", {{"x", HostTensor({1}, DType::f32)}}),
               FileError);
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.safetensors"));
}

void expect_pickle_refused(const std::filesystem::path& p) {
  for (int use_open = 0; use_open < 2; ++use_open) {
    try {
      if (use_open) {
        (void)SafetensorsFile::open(p);
      } else {
        refuse_pickle(p);
      }
      ADD_FAILURE() << p << " was not refused";
    } catch (const FileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(p.filename().string()), std::string::npos) << what;
      EXPECT_NE(what.find("pickle"), std::string::npos) << what;
      EXPECT_NE(what.find("runs whatever code"), std::string::npos) << what;
      EXPECT_NE(what.find("safetensors.torch"), std::string::npos) << what;  // the conversion one-liner
    }
  }
}

TEST(SafetensorsPickle, RefusesPickleAndZipByMagic) {
  TempDir dir;
  write_bytes(dir / "legacy.ckpt", std::string("\x80\x02}q\x00(X\x01\x00\x00\x00wq\x01", 14));
  std::string zip("PK\x03\x04\x00\x00\x08\x08\x00\x00", 10);
  zip.append(100, 'x');  // not string + string: GCC 12 warns falsely there (-Warray-bounds on the inlined copy)
  write_bytes(dir / "model.pt", zip);
  EXPECT_EQ(sniff_weights_format(dir / "legacy.ckpt"), WeightsFormat::pickle);
  EXPECT_EQ(sniff_weights_format(dir / "model.pt"), WeightsFormat::torch_zip);
  expect_pickle_refused(dir / "legacy.ckpt");
  expect_pickle_refused(dir / "model.pt");

  // A real safetensors file passes the check, even if its length field happens to start with 0x80 0x02.
  const auto st = dir / "ok.safetensors";
  write_safetensors(st, {{"w", HostTensor({2}, DType::f32)}});
  EXPECT_EQ(sniff_weights_format(st), WeightsFormat::safetensors);
  EXPECT_NO_THROW(refuse_pickle(st));
  std::string pad = "{" + std::string(0x280 - 2, ' ') + "}";
  const auto tricky = dir / "tricky.safetensors";
  write_bytes(tricky, file_bytes(pad, 0));
  EXPECT_EQ(static_cast<unsigned char>(read_all(tricky)[0]), 0x80);
  EXPECT_NO_THROW(refuse_pickle(tricky));
  EXPECT_NO_THROW((void)SafetensorsFile::open(tricky));
}

TEST(SafetensorsPickle, RefusesRealTorchSaveFiles) {
  NANSCOPE_REQUIRE_PYTHON();
  TempDir dir;
  test::run_oracle("safetensors_oracle.py", {"pickles", dir.path().string()});
  EXPECT_EQ(sniff_weights_format(dir / "model.ckpt"), WeightsFormat::torch_zip);
  EXPECT_EQ(sniff_weights_format(dir / "legacy.pt"), WeightsFormat::pickle);
  expect_pickle_refused(dir / "model.ckpt");
  expect_pickle_refused(dir / "legacy.pt");
}

}  // namespace
}  // namespace nanscope::io
