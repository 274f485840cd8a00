#include "backend/reference/reference_backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include "backend/reference/host_access.hpp"
#include "core/error.hpp"

#ifndef NANSCOPE_VERSION
#define NANSCOPE_VERSION "0.1.0"  // keep in step with project(VERSION) in the top CMakeLists.txt
#endif

namespace nanscope::reference {

HostStorage::HostStorage(const void* owner, std::size_t bytes) : owner_(owner), data_(bytes, 0) {}

namespace {

std::uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace

ReferenceBackend::ReferenceBackend(std::uint64_t memory_limit_bytes, std::uint64_t max_alloc_limit_bytes) {
  info_.id = "reference";
  info_.name = "reference";
  info_.vendor = "NaNscope";
  info_.driver_version = NANSCOPE_VERSION;
  info_.device_version = "reference (plain C++, f64 accumulation)";
  info_.platform_name = "NaNscope reference";
  info_.platform_version = NANSCOPE_VERSION;
  info_.kind = DeviceKind::reference;
  // Half arithmetic is emulated exactly (round after every step), not native.
  info_.fp16 = false;
  info_.fp64 = true;
  info_.global_mem_bytes = physical_memory_bytes();
  info_.max_alloc_bytes = info_.global_mem_bytes;
  info_.compute_units = std::max(1u, std::thread::hardware_concurrency());
  info_.reason = "built-in plain C++ device: ground truth, slow";
  info_ = limited_device(std::move(info_), memory_limit_bytes, max_alloc_limit_bytes);
}

Tensor ReferenceBackend::empty(const Shape& shape, DType dtype) {
  for (auto d : shape) {
    if (d < 0) throw OpError("cannot allocate " + shape_str(shape) + ": negative dimension");
  }
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (info_.max_alloc_bytes && bytes > info_.max_alloc_bytes) {
    throw DeviceError("cannot allocate " + shape_str(shape) + " " + std::string(dtype_name(dtype)) + " (" +
                      std::to_string(bytes >> 20) + " MiB) on \"reference\": larger than its memory limit (" +
                      std::to_string(info_.max_alloc_bytes >> 20) + " MiB)");
  }
  std::shared_ptr<HostStorage> storage;
  try {
    // owns() compares against the Backend subobject: store exactly that pointer.
    storage = std::make_shared<HostStorage>(static_cast<const Backend*>(this), bytes);
  } catch (const std::bad_alloc&) {
    throw DeviceError("cannot allocate " + shape_str(shape) + " " + std::string(dtype_name(dtype)) + " (" +
                      std::to_string(bytes) + " bytes) on \"reference\": host memory exhausted");
  } catch (const std::length_error&) {
    throw DeviceError("cannot allocate " + shape_str(shape) + " " + std::string(dtype_name(dtype)) + " (" +
                      std::to_string(bytes) + " bytes) on \"reference\": larger than the host can address");
  }
  return Tensor(shape, dtype, std::move(storage));
}

Tensor ReferenceBackend::upload(const HostTensor& host) {
  if (host.data.size() != static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype)) {
    const auto expected = static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype);
    throw OpError("upload of " + host.describe() + ": host buffer holds " + std::to_string(host.data.size()) +
                  " bytes, expected " + std::to_string(expected));
  }
  Tensor t = empty(host.shape, host.dtype);
  if (!host.data.empty()) std::memcpy(detail::storage_of(t).data(), host.data.data(), host.data.size());
  return t;
}

HostTensor ReferenceBackend::download(const Tensor& t) {
  if (!owns(t)) throw OpError("download of " + t.describe() + ": the tensor does not live on \"reference\"");
  HostTensor h(t.shape(), t.dtype());
  if (!h.data.empty()) std::memcpy(h.data.data(), detail::storage_of(t).data(), h.data.size());
  return h;
}

namespace detail {

HostStorage& storage_of(const Tensor& t) {
  auto* s = dynamic_cast<HostStorage*>(t.storage());
  if (s == nullptr) throw OpError("tensor " + t.describe() + " is not a reference-backend tensor");
  return *s;
}

Floats::Floats(const Tensor& t) {
  const std::uint8_t* raw = storage_of(t).data();
  const auto n = static_cast<std::size_t>(t.numel());
  switch (t.dtype()) {
    case DType::f32:
      ptr_ = reinterpret_cast<const float*>(raw);  // HostStorage is vector-allocated: aligned for float
      return;
    case DType::f16:
    case DType::bf16: {
      owned_.resize(n);
      const bool half = t.dtype() == DType::f16;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, raw + 2 * i, 2);
        owned_[i] = half ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
      }
      ptr_ = owned_.data();
      return;
    }
  }
}

Store::Store(Tensor& t) : data_(storage_of(t).data()), dtype_(t.dtype()) {}

double round_sum_slow(DType t, double s, double err) {
  if (!std::isfinite(s)) return round_d(t, s);
  const double up = std::nextafter(s, HUGE_VAL);
  const double down = std::nextafter(s, -HUGE_VAL);
  // s is a rounding boundary of t exactly when its two neighbours round apart;
  // then the sign of the remainder decides. Otherwise s rounds like a + b.
  if (round_d(t, up) == round_d(t, down)) return round_d(t, s);
  return round_d(t, err > 0 ? up : down);
}

void parallel_for(std::int64_t count, double cost_per_item, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (count <= 0) return;
  // Threads only pay off above ~a few million operations.
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const auto threads =
      static_cast<std::int64_t>(std::min<double>({static_cast<double>(std::min(hw, 8u)), static_cast<double>(count),
                                                  std::max(1.0, cost_per_item * static_cast<double>(count) / 4e6)}));
  if (threads <= 1) {
    fn(0, count);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const std::int64_t chunk = (count + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t begin = t * chunk;
    const std::int64_t end = std::min(count, begin + chunk);
    if (begin >= end) break;
    pool.emplace_back([&, begin, end] {
      try {
        fn(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace detail
}  // namespace nanscope::reference
