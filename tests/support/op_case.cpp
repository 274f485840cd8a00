#include "support/op_case.hpp"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "support/backends.hpp"
#include "support/oracle.hpp"

namespace nanscope::test {

namespace {

std::map<std::string, OpCasePtr>& registry() {
  static std::map<std::string, OpCasePtr> r;
  return r;
}

std::map<std::string, HostTensor>& reference_cache() {
  static std::map<std::string, HostTensor> c;
  return c;
}

// PyTorch outputs by oracle key: cases that differ only in accumulation mode or
// attention impl share inputs and the oracle's (f32-accumulate) result.
std::map<std::string, HostTensor>& torch_cache() {
  static std::map<std::string, HostTensor> c;
  return c;
}

std::string oracle_key(const OpCase& c) {
  return c.op + "|" + c.desc + "|" + std::string(dtype_name(c.precision.dtype)) + "|" + c.oracle.dump();
}

DType oracle_out_dtype(const OpCase& c) {
  if (c.oracle.contains("out_dtype")) return *parse_dtype(c.oracle["out_dtype"].get<std::string>());
  return c.precision.dtype;
}

CaseFilter& case_filter() {
  static CaseFilter filter;
  return filter;
}

std::vector<std::string> op_filter() {
  std::vector<std::string> out;
  const char* f = std::getenv("NANSCOPE_OP_FILTER");
  if (!f) return out;
  std::string s(f);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = s.find(',', pos);
    const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// Cases whose PyTorch result the selected tests will need: ReferenceVsTorch for
// every case, BackendVsReference for the cases that skip the reference.
std::vector<OpCasePtr> selected_torch_cases() {
  std::vector<OpCasePtr> out;
  auto* ut = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < ut->total_test_suite_count(); ++i) {
    const auto* suite = ut->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      const auto* info = suite->GetTestInfo(j);
      if (!info->should_run()) continue;
      const std::string name = info->name();
      const auto slash = name.find('/');
      if (slash == std::string::npos) continue;
      const auto it = registry().find(name.substr(slash + 1));
      if (it == registry().end() || it->second->oracle.is_null()) continue;
      const std::string check = name.substr(0, slash);
      if (check == "ReferenceVsTorch" || (check == "BackendVsReference" && !it->second->on_reference)) {
        out.push_back(it->second);
      }
    }
  }
  return out;
}

void run_torch_batch(const std::vector<OpCasePtr>& cases) {
  TempDir dir;
  std::vector<std::pair<std::string, HostTensor>> inputs;
  nlohmann::json manifest = nlohmann::json::array();
  std::map<std::string, std::pair<std::string, DType>> slot_of_key;  // oracle key -> (output name, dtype)
  for (const auto& c : cases) {
    const std::string key = oracle_key(*c);
    if (torch_cache().count(key) || slot_of_key.count(key)) continue;
    const std::string slot = "c" + std::to_string(slot_of_key.size());
    slot_of_key[key] = {slot, oracle_out_dtype(*c)};
    Rng rng(c->seed());
    auto host = c->build(rng, c->precision);
    nlohmann::json names = nlohmann::json::array();
    for (std::size_t i = 0; i < host.size(); ++i) {
      const std::string n = slot + ".in" + std::to_string(i);
      names.push_back(n);
      inputs.emplace_back(n, std::move(host[i]));
    }
    manifest.push_back({{"output", slot},
                        {"case", c->name()},
                        {"dtype", std::string(dtype_name(c->precision.dtype))},
                        {"out_dtype", std::string(dtype_name(oracle_out_dtype(*c)))},
                        {"inputs", names},
                        {"params", c->oracle}});
  }
  if (slot_of_key.empty()) return;
  const auto manifest_path = dir / "manifest.json";
  std::ofstream(manifest_path) << manifest.dump(1);
  io::write_safetensors(dir / "inputs.safetensors", inputs);
  run_oracle("ops_oracle.py",
             {manifest_path.string(), (dir / "inputs.safetensors").string(), (dir / "outputs.safetensors").string()});
  const auto out = io::SafetensorsFile::open(dir / "outputs.safetensors");
  for (const auto& [key, slot] : slot_of_key) {
    const io::TensorEntry* e = out.find(slot.first);
    if (!e || e->file_dtype != io::FileDType::F64) {
      throw std::runtime_error("ops_oracle.py wrote no F64 output \"" + slot.first + "\" for " + key);
    }
    // The oracle's float64 result, rounded once into the storage dtype.
    const auto bytes = out.bytes(*e);
    HostTensor t(e->shape, slot.second);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      double d;
      std::memcpy(&d, bytes.data() + 8 * i, 8);
      t.set(i, round_to_from_double(slot.second, d));
    }
    torch_cache()[key] = std::move(t);
  }
}

std::vector<Tensor> upload_inputs(Backend& backend, const OpCase& c) {
  Rng rng(c.seed());
  std::vector<Tensor> inputs;
  for (const auto& h : c.build(rng, c.precision)) inputs.push_back(backend.upload(h));
  return inputs;
}

void perf_run(Backend& backend, const OpCase& c) {
  const auto inputs = upload_inputs(backend, c);
  const OpContext ctx = make_context(backend, c.precision, c.attention, "perf." + c.op);
  (void)c.run(ctx, inputs);  // warm-up: program builds, first-launch compiles
  backend.synchronize();
  int runs = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  while (runs < 50 && elapsed < 1.0) {
    (void)c.run(ctx, inputs);
    backend.synchronize();
    ++runs;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double ms = 1e3 * elapsed / runs;
  std::printf("[perf] %-60s %-24s %9.3f ms", c.name().c_str(), backend.device().name.c_str(), ms);
  if (c.flops > 0) std::printf("  %8.2f GFLOP/s", c.flops / (ms * 1e6));
  std::printf("\n");
}

}  // namespace

std::string OpCase::name() const {
  std::string s = op + "_" + std::string(dtype_name(precision.dtype));
  if (precision.dtype != DType::f32) s += precision.accumulate == Accumulate::native ? "_accnative" : "_accf32";
  if (uses_softmax && precision.dtype != DType::f32) {
    s += precision.softmax == SoftmaxPrecision::native ? "_smnative" : "_smf32";
  }
  if (uses_attention) {
    s += "_" + std::string(attention_impl_name(attention.impl));
    if (attention.impl == AttentionImpl::sliced) s += std::to_string(attention.slice_size);
  }
  s += "_" + desc;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

std::uint64_t OpCase::seed() const { return seed_from(op + "/" + desc); }

std::string OpCase::describe() const {
  std::string s = op + " " + desc + " " + precision.describe();
  if (uses_attention) {
    s += " attention=" + std::string(attention_impl_name(attention.impl)) +
         " slice_size=" + std::to_string(attention.slice_size);
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(seed()));
  return s + " seed " + buf;
}

std::vector<Precision> precision_matrix(bool with_softmax) {
  std::vector<Precision> out{{DType::f32, Accumulate::f32, SoftmaxPrecision::f32}};
  for (const DType t : {DType::f16, DType::bf16}) {
    for (const Accumulate a : {Accumulate::f32, Accumulate::native}) {
      if (with_softmax) {
        for (const SoftmaxPrecision s : {SoftmaxPrecision::f32, SoftmaxPrecision::native}) out.push_back({t, a, s});
      } else {
        out.push_back({t, a, SoftmaxPrecision::f32});
      }
    }
  }
  return out;
}

std::vector<OpCasePtr> expand(const OpCase& base, const std::vector<Precision>& precisions) {
  std::vector<OpCasePtr> out;
  for (const auto& p : precisions) {
    auto c = std::make_shared<OpCase>(base);
    c->precision = p;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCasePtr> register_cases(std::vector<OpCasePtr> cases) {
  const auto filter = op_filter();
  std::vector<OpCasePtr> kept;
  std::set<std::string> names;
  for (auto& c : cases) {
    bool keep = filter.empty();
    for (const auto& f : filter) keep = keep || c->op.find(f) != std::string::npos;
    if (!keep) continue;
    if (!names.insert(c->name()).second) {
      throw std::logic_error("two op cases are named " + c->name() + ": make their desc differ");
    }
    kept.push_back(std::move(c));
  }
  if (case_filter()) kept = case_filter()(std::move(kept));
  // gtest may evaluate the generator more than once: the latest registration wins.
  for (const auto& c : kept) registry()[c->name()] = c;
  return kept;
}

void set_case_filter(CaseFilter filter) { case_filter() = std::move(filter); }

OpContext make_context(Backend& backend, const Precision& p, const AttentionConfig& a, std::string path) {
  OpContext ctx;
  ctx.backend = &backend;
  ctx.path = std::move(path);
  ctx.precision = p;
  ctx.attention = a;
  return ctx;
}

HostTensor run_case(Backend& backend, const OpCase& c) {
  HostTensor result;
  {
    const auto inputs = upload_inputs(backend, c);
    const Tensor out = c.run(make_context(backend, c.precision, c.attention, "test." + c.op), inputs);
    backend.synchronize();
    result = backend.download(out);
  }  // every buffer of the case released: their guards are checked
  expect_no_guard_violations(backend);
  return result;
}

void expect_no_guard_violations(Backend& backend) {
  for (const auto& v : backend.take_guard_violations()) {
    ADD_FAILURE() << "on \"" << backend.device().name << "\": " << v;
  }
}

const HostTensor& reference_output(const OpCase& c) {
  auto& cache = reference_cache();
  const auto it = cache.find(c.name());
  if (it != cache.end()) return it->second;
  return cache[c.name()] = run_case(reference_backend(), c);
}

const HostTensor& torch_output(const OpCase& c) {
  const std::string key = oracle_key(c);
  if (!torch_cache().count(key)) {
    auto batch = selected_torch_cases();
    batch.push_back(std::make_shared<OpCase>(c));
    run_torch_batch(batch);
  }
  return torch_cache().at(key);
}

std::string shape_tag(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out.empty() ? "scalar" : out;
}

void expect_op_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected an OpError, but the op succeeded";
  } catch (const OpError& e) {
    const std::string what = e.what();
    for (const auto& frag : fragments) {
      EXPECT_NE(what.find(frag), std::string::npos) << "the message lacks \"" << frag << "\": " << what;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected an OpError, got another exception: " << e.what();
  }
}

std::vector<Backend*> all_backends() {
  std::vector<Backend*> out{&reference_backend()};
  for (Backend* b : opencl_backends()) out.push_back(b);
  return out;
}

void for_each_backend(const std::function<void(Backend&)>& f) {
  for (Backend* b : all_backends()) {
    SCOPED_TRACE("device \"" + b->device().name + "\"");
    f(*b);
    expect_no_guard_violations(*b);
  }
}

Tensor upload_values(Backend& backend, const Shape& shape, const std::vector<float>& values, DType t) {
  return backend.upload(HostTensor::from_f32(shape, values, t));
}

std::vector<float> download_values(Backend& backend, const Tensor& t) { return backend.download(t).to_f32(); }

::testing::AssertionResult matches_known(const HostTensor& got, const std::vector<float>& want, std::string_view family,
                                         const Precision& p) {
  const HostTensor exact = HostTensor::from_f32(got.shape, want, got.dtype);
  if (exact.numel() != got.numel()) {
    return ::testing::AssertionFailure() << "got " << got.numel() << " values, expected " << want.size();
  }
  return tensors_close(got, exact, tolerance(family, p, Check::torch));
}

void for_each_opencl(const std::function<void(Backend&)>& f) {
  if (opencl_backends().empty()) {
    if (in_ci()) {
      FAIL() << no_opencl_message();
    } else {
      GTEST_SKIP() << no_opencl_message();
    }
  }
  for (Backend* b : opencl_backends()) {
    SCOPED_TRACE("device \"" + b->device().name + "\"");
    f(*b);
  }
}

void check_backends(const OpCase& c) {
  SCOPED_TRACE(c.describe());
  if (!c.on_reference) {
    NANSCOPE_REQUIRE_PYTHON();
  }
  const Check check = c.on_reference ? Check::backend : Check::torch;
  const Tolerance tol = tolerance(c.family, c.precision, check);
  const std::string key = tolerance_key(c.family, c.precision, check) + (c.on_reference ? "" : " (opencl)");
  for_each_opencl([&](Backend& b) {
    const HostTensor& want = c.on_reference ? reference_output(c) : torch_output(c);
    const HostTensor got = run_case(b, c);
    // Native half on a device's half units (test_half_units.cpp) is the hardware's
    // arithmetic, not the reference's exact emulation: its exp is not correctly
    // rounded, and the online softmax compounds that over every key. It is held
    // to the native cell's bound on drift from the exact result instead.
    if (c.on_reference && b.native_half_in_hardware(c.precision)) {
      EXPECT_TRUE(tensors_close(got, want, tolerance(c.family, c.precision, Check::torch), c.expect_nonfinite,
                                key + " (half units)"));
      return;
    }
    EXPECT_TRUE(tensors_close(got, want, tol, c.expect_nonfinite, key));
    if (c.family == "exact") {
      EXPECT_TRUE(bitwise_equal(got, want));
    }
    if (std::getenv("NANSCOPE_OP_PERF")) perf_run(b, c);
  });
}

void check_torch(const OpCase& c) {
  SCOPED_TRACE(c.describe());
  if (!c.on_reference) {
    GTEST_SKIP() << "too slow for the reference backend: BackendVsReference checks the OpenCL output against PyTorch";
  }
  if (c.oracle.is_null()) GTEST_SKIP() << "no PyTorch equivalent for this case";
  if (!c.native_close_to_exact && precision_mode(c.precision) == "native") {
    GTEST_SKIP() << "native accumulation over reductions this long is not expected to approximate the exact "
                    "result; BackendVsReference checks its semantics and the failure-mode tests its overflow";
  }
  NANSCOPE_REQUIRE_PYTHON();
  const HostTensor& want = torch_output(c);
  const HostTensor& got = reference_output(c);
  EXPECT_TRUE(tensors_close(got, want, tolerance(c.family, c.precision, Check::torch), c.expect_nonfinite,
                            tolerance_key(c.family, c.precision, Check::torch)));
  if (c.family == "exact") {
    EXPECT_TRUE(bitwise_equal(got, want));
  }
}

}  // namespace nanscope::test
