// Reference data movement: concat, slice, permute, nearest 2x upsample (bit
// copies in the storage format) and cast (exact widening, RNE narrowing).

#include <cstring>

#include "backend/reference/host_access.hpp"

namespace nanscope::reference {

using detail::storage_of;

void ReferenceBackend::concat(const ConcatArgs& a) {
  const std::size_t es = dtype_size(a.out.dtype());
  std::int64_t total = 0;
  for (auto d : a.dims) total += d;
  std::uint8_t* dst = storage_of(a.out).data();
  std::int64_t offset = 0;  // position along the concatenated dimension
  for (std::size_t p = 0; p < a.inputs.size(); ++p) {
    const std::uint8_t* src = storage_of(*a.inputs[p]).data();
    const auto run = static_cast<std::size_t>(a.dims[p] * a.inner) * es;
    for (std::int64_t o = 0; o < a.outer; ++o) {
      std::memcpy(dst + static_cast<std::size_t>((o * total + offset) * a.inner) * es,
                  src + static_cast<std::size_t>(o) * run, run);
    }
    offset += a.dims[p];
  }
}

void ReferenceBackend::slice(const SliceArgs& a) {
  const std::size_t es = dtype_size(a.out.dtype());
  const std::uint8_t* src = storage_of(a.x).data();
  std::uint8_t* dst = storage_of(a.out).data();
  const std::int64_t len = a.end - a.begin;
  const auto run = static_cast<std::size_t>(len * a.inner) * es;
  for (std::int64_t o = 0; o < a.outer; ++o) {
    std::memcpy(dst + static_cast<std::size_t>(o) * run,
                src + static_cast<std::size_t>((o * a.dim + a.begin) * a.inner) * es, run);
  }
}

void ReferenceBackend::permute(const PermuteArgs& a) {
  const std::size_t es = dtype_size(a.out.dtype());
  const std::uint8_t* src = storage_of(a.x).data();
  std::uint8_t* dst = storage_of(a.out).data();
  const auto& in = a.in_shape;
  std::array<std::int64_t, 4> in_stride{in[1] * in[2] * in[3], in[2] * in[3], in[3], 1};
  std::array<std::int64_t, 4> out_shape{}, step{};
  for (int i = 0; i < 4; ++i) {
    out_shape[i] = in[a.perm[i]];
    step[i] = in_stride[a.perm[i]];  // input stride walked by output dim i
  }
  std::int64_t o = 0;
  for (std::int64_t i0 = 0; i0 < out_shape[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < out_shape[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < out_shape[2]; ++i2)
        for (std::int64_t i3 = 0; i3 < out_shape[3]; ++i3, ++o) {
          const std::int64_t s = i0 * step[0] + i1 * step[1] + i2 * step[2] + i3 * step[3];
          std::memcpy(dst + static_cast<std::size_t>(o) * es, src + static_cast<std::size_t>(s) * es, es);
        }
}

void ReferenceBackend::upsample_nearest2x(const UpsampleArgs& a) {
  const std::size_t es = dtype_size(a.out.dtype());
  const std::uint8_t* src = storage_of(a.x).data();
  std::uint8_t* dst = storage_of(a.out).data();
  const std::int64_t oh = 2 * a.h, ow = 2 * a.w;
  for (std::int64_t plane = 0; plane < a.n * a.c; ++plane) {
    for (std::int64_t y = 0; y < oh; ++y) {
      const std::uint8_t* srow = src + static_cast<std::size_t>((plane * a.h + y / 2) * a.w) * es;
      std::uint8_t* drow = dst + static_cast<std::size_t>((plane * oh + y) * ow) * es;
      for (std::int64_t x = 0; x < ow; ++x) std::memcpy(drow + x * es, srow + (x / 2) * es, es);
    }
  }
}

void ReferenceBackend::cast(const CastArgs& a) {
  const detail::Floats x(a.x);
  detail::Store out(a.out);
  const std::int64_t n = a.x.numel();
  for (std::int64_t i = 0; i < n; ++i) out.set_f32(i, x[i]);  // the value is exact in f32: one rounding
}

}  // namespace nanscope::reference
