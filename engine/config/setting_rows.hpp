#pragma once
// What the settings table's parts share (settings.cpp: the table and its
// rows' checks; settings_passes.cpp: the img2img and hires-fix rows): the
// enums as choices (Codec), the rows' accessors for RunConfig members, and
// text helpers. Internal to engine/config.

#include <spdlog/fmt/fmt.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/a1111.hpp"
#include "config/sampler_names.hpp"
#include "config/settings.hpp"

namespace nanscope::setting_rows {

using nlohmann::json;

inline std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : std::string(sep)) + i;
  return s;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The shortest text that reads back as the same double ("7", "7.5").
inline std::string number_text(double v) { return fmt::format("{}", v); }

// Prompts far beyond what any text encoder reads (77 tokens; SDXL and long-
// prompt front ends a few hundred) are refused before any work: 64 KiB.
inline constexpr double kMaxPromptBytes = 65536;

// ---------------------------------------------------------------- enums as choices

template <typename E>
struct Codec {
  std::string_view (*name)(E);
  std::optional<E> (*parse)(std::string_view);
  std::vector<E> all;

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (E e : all) out.emplace_back(name(e));
    return out;
  }
  json to_json(E e) const { return std::string(name(e)); }
  E from_json(const json& v) const { return *parse(v.get<std::string>()); }  // checked: a canonical name
  // Accepts what parse accepts (dtype aliases such as fp16) and answers with the name.
  std::function<std::optional<std::string>(std::string_view)> canonical() const {
    return [name = name, parse = parse](std::string_view s) -> std::optional<std::string> {
      if (auto e = parse(s)) return std::string(name(*e));
      return std::nullopt;
    };
  }
};

inline const Codec<DType> kDTypeCodec{dtype_name, parse_dtype, {DType::f32, DType::f16, DType::bf16}};
inline const Codec<Accumulate> kAccumulateCodec{
    accumulate_name, parse_accumulate, {Accumulate::f32, Accumulate::native}};
inline const Codec<SoftmaxPrecision> kSoftmaxCodec{
    softmax_name, parse_softmax, {SoftmaxPrecision::f32, SoftmaxPrecision::native}};
inline const Codec<AttentionImpl> kImplCodec{
    attention_impl_name, parse_attention_impl, {AttentionImpl::fused, AttentionImpl::bmm, AttentionImpl::sliced}};
inline const Codec<SamplerId> kSamplerCodec{sampler_name, parse_sampler, {kSamplers.begin(), kSamplers.end()}};
inline const Codec<HiresUpscaler> kHiresUpscalerCodec{hires_upscaler_name,
                                                      parse_hires_upscaler,
                                                      {HiresUpscaler::latent, HiresUpscaler::latent_nearest,
                                                       HiresUpscaler::latent_nearest_exact, HiresUpscaler::lanczos}};
inline const Codec<NoiseKind> kNoiseCodec{
    noise_name, parse_noise, {NoiseKind::nanscope, NoiseKind::torch_cpu, NoiseKind::torch_cuda}};
inline const Codec<ScheduleId> kScheduleCodec{schedule_name, parse_schedule, {kSchedules.begin(), kSchedules.end()}};
inline const Codec<TorchCpuKernel> kTorchCpuKernelCodec{
    torch_cpu_kernel_name,
    parse_torch_cpu_kernel,
    {TorchCpuKernel::automatic, TorchCpuKernel::avx2, TorchCpuKernel::scalar}};
// ---------------------------------------------------------------- row accessors

// get/put for a plain RunConfig member (text, integer, number, seed).
template <typename T>
Setting member(T RunConfig::*m, Setting s) {
  s.get = [m](const RunConfig& c) { return json(c.*m); };
  s.put = [m](RunConfig& c, const json& v) { c.*m = v.get<T>(); };
  return s;
}

template <typename E>
Setting enum_member(E RunConfig::*m, const Codec<E>& codec, Setting s) {
  s.type = SettingType::choice;
  s.choices = codec.names();
  s.canonical = codec.canonical();
  s.get = [m, codec](const RunConfig& c) { return codec.to_json(c.*m); };
  s.put = [m, codec](RunConfig& c, const json& v) { c.*m = codec.from_json(v); };
  return s;
}

// img2img and the hires fix (pipeline/img2img.hpp). Appended after the
// inspector rows; presets leave them out at their defaults.
void add_img2img_rows(std::vector<Setting>& t);
// The hires fix's target size and the second pass's own sampler, schedule,
// prompts and guidance (A1111's hires fields). Appended after the img2img
// rows; empty / 0 means the first pass's, as A1111's "Use same ...".
void add_hires_pass_rows(std::vector<Setting>& t);

}  // namespace nanscope::setting_rows
