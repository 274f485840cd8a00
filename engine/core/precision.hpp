#pragma once
// Precision is data: one value flows from the RunConfig to every op.

#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.hpp"

namespace nanscope {

// Sums inside matmul/conv/attention/norm statistics: f32 registers, or the
// storage type itself ("native": every partial sum is rounded to the storage
// dtype, exactly what half-precision hardware accumulation does).
enum class Accumulate : std::uint8_t { f32, native };
// Attention scores and softmax: upcast to f32, or kept in the storage dtype.
enum class SoftmaxPrecision : std::uint8_t { f32, native };
// fused: one pass with an online softmax (SDPA / flash-like);
// bmm: the full score matrix; sliced: the score matrix in slices of slice_size heads.
enum class AttentionImpl : std::uint8_t { fused, bmm, sliced };

struct Precision {
  DType dtype = DType::f32;
  Accumulate accumulate = Accumulate::f32;
  SoftmaxPrecision softmax = SoftmaxPrecision::f32;

  // True when sums are rounded to a narrower type than f32.
  bool native_accumulation() const { return accumulate == Accumulate::native && dtype != DType::f32; }
  bool native_softmax() const { return softmax == SoftmaxPrecision::native && dtype != DType::f32; }
  std::string describe() const;  // "f16/acc=native/softmax=f32"
  friend bool operator==(const Precision&, const Precision&) = default;
};

struct AttentionConfig {
  AttentionImpl impl = AttentionImpl::fused;
  int slice_size = 1;  // heads (batch*heads rows) per slice for `sliced`
  friend bool operator==(const AttentionConfig&, const AttentionConfig&) = default;
};

std::string_view accumulate_name(Accumulate a);
std::string_view softmax_name(SoftmaxPrecision s);
std::string_view attention_impl_name(AttentionImpl i);
std::optional<Accumulate> parse_accumulate(std::string_view s);
std::optional<SoftmaxPrecision> parse_softmax(std::string_view s);
std::optional<AttentionImpl> parse_attention_impl(std::string_view s);

}  // namespace nanscope
