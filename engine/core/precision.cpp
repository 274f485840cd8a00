#include "core/precision.hpp"

namespace nanscope {

std::string Precision::describe() const {
  std::string s(dtype_name(dtype));
  s += "/acc=";
  s += accumulate_name(accumulate);
  s += "/softmax=";
  s += softmax_name(softmax);
  return s;
}

std::string_view accumulate_name(Accumulate a) { return a == Accumulate::f32 ? "f32" : "native"; }
std::string_view softmax_name(SoftmaxPrecision s) { return s == SoftmaxPrecision::f32 ? "f32" : "native"; }
std::string_view attention_impl_name(AttentionImpl i) {
  switch (i) {
    case AttentionImpl::fused: return "fused";
    case AttentionImpl::bmm: return "bmm";
    case AttentionImpl::sliced: return "sliced";
  }
  return "?";
}

std::optional<Accumulate> parse_accumulate(std::string_view s) {
  if (s == "f32") return Accumulate::f32;
  if (s == "native") return Accumulate::native;
  return std::nullopt;
}
std::optional<SoftmaxPrecision> parse_softmax(std::string_view s) {
  if (s == "f32") return SoftmaxPrecision::f32;
  if (s == "native") return SoftmaxPrecision::native;
  return std::nullopt;
}
std::optional<AttentionImpl> parse_attention_impl(std::string_view s) {
  if (s == "fused") return AttentionImpl::fused;
  if (s == "bmm") return AttentionImpl::bmm;
  if (s == "sliced") return AttentionImpl::sliced;
  return std::nullopt;
}

}  // namespace nanscope
