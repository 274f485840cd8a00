// The settings table's img2img and hires-fix rows (setting_rows.hpp), with
// their A1111 readers.

#include <cctype>
#include <regex>

#include "config/setting_rows.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope::setting_rows {

namespace {

// A1111 writes one "Denoising strength": img2img's strength, or in txt2img
// the hires fix's denoise (then "Hires upscale" is there too).
void denoising_strength_from_a1111(RunConfig& c, const std::string& value, const A1111Fields& all) {
  const bool hires = all.contains("Hires upscale") || all.contains("Hires resize");
  c.set(hires ? "hires.denoise" : "strength", std::string(trim(value)));
}

void hires_upscaler_from_a1111(RunConfig& c, const std::string& value, const A1111Fields&) {
  for (HiresUpscaler u : kHiresUpscalerCodec.all) {
    if (hires_upscaler_a1111_name(u) == value) {
      c.hires_upscaler = u;
      return;
    }
  }
  log::warn("A1111 hires upscaler \"{}\" has no NaNscope counterpart (NaNscope has {}); keeping {}", value,
            join(kHiresUpscalerCodec.names()), hires_upscaler_name(c.hires_upscaler));
}

}  // namespace

void add_img2img_rows(std::vector<Setting>& t) {
  t.push_back(member(&RunConfig::init_image,
                     {.key = "init_image",
                      .help = "img2img: a PNG to start from instead of pure noise (encoded by the run's VAE; resized "
                              "to the run's size when it differs, with a note); empty: txt2img",
                      .omit_default = true}));
  t.push_back(member(&RunConfig::strength,
                     {.key = "strength",
                      .type = SettingType::number,
                      .default_value = "0.75",
                      .min = 0,
                      .max = 1,
                      .help = "img2img: how much of the schedule re-noises the init image, as diffusers' strength "
                              "(the last int(steps * strength) steps run); A1111's \"Denoising strength\"",
                      .a1111 = "Denoising strength",
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (c.hires()) return number_text(c.hires_denoise);
                        if (c.init_image.empty()) return std::nullopt;
                        return number_text(c.strength);
                      },
                      .from_a1111 = denoising_strength_from_a1111}));
  t.push_back(member(&RunConfig::hires_scale,
                     {.key = "hires.scale",
                      .type = SettingType::number,
                      .default_value = "0",
                      .min = 0,
                      .max = 8,
                      .help = "Hires fix: a second pass at this many times the size (A1111's \"Upscale by\"); 0: "
                              "off",
                      .a1111 = "Hires upscale",
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        // A1111 writes "Hires upscale" or, with a target size, "Hires resize".
                        if (!c.hires() || c.hires_width > 0 || c.hires_height > 0) return std::nullopt;
                        return number_text(c.hires_scale);
                      }}));
  t.push_back(member(&RunConfig::hires_steps,
                     {.key = "hires.steps",
                      .type = SettingType::integer,
                      .default_value = "0",
                      .min = 0,
                      .max = 10000,
                      .help = "Hires fix: steps of the second pass (A1111's: a schedule of int(steps / denoise) "
                              "steps of which the last `steps` run); 0: the first pass's steps",
                      .a1111 = "Hires steps",
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (!c.hires() || c.hires_steps <= 0) return std::nullopt;
                        return std::to_string(c.hires_steps);
                      }}));
  t.push_back(member(&RunConfig::hires_denoise,
                     {.key = "hires.denoise",
                      .type = SettingType::number,
                      .default_value = "0.7",
                      .min = 0.001,
                      .max = 1,
                      .help = "Hires fix: denoising strength of the second pass (A1111's \"Denoising strength\" "
                              "in a txt2img image)",
                      .a1111 = "Denoising strength",
                      .omit_default = true}));
  t.push_back(enum_member(&RunConfig::hires_upscaler, kHiresUpscalerCodec,
                          {.key = "hires.upscaler",
                           .default_value = "latent",
                           .help = "Hires fix: how the first pass is enlarged: latent (bilinear on the latent, "
                                   "A1111's \"Latent\"), latent-nearest, latent-nearest-exact (torch's nearest "
                                   "modes), or lanczos (decode, resize the image with Lanczos, encode again)",
                           .a1111 = "Hires upscaler",
                           .omit_default = true,
                           .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                             if (!c.hires()) return std::nullopt;
                             return std::string(hires_upscaler_a1111_name(c.hires_upscaler));
                           },
                           .from_a1111 = hires_upscaler_from_a1111}));
}

namespace {

// ---------------------------------------------------------------- the hires pass's own settings

// A1111's "Hires resize: WxH" (hr_resize_x x hr_resize_y, either may be 0).
void hires_resize_from_a1111(RunConfig& c, const std::string& value, const A1111Fields&) {
  static const std::regex size_re(R"(\s*(\d+)x(\d+)\s*)");
  std::smatch m;
  if (!std::regex_match(value, m, size_re)) throw ConfigError("expected WxH (either may be 0)");
  c.set("hires.width", m[1].str());
  c.set("hires.height", m[2].str());
}

// "Hires sampler" is written only when it differs from "Sampler"; its schedule
// is "Hires schedule type" when A1111 wrote one (read by that row), else the
// first pass's, unless the name itself carries one (older "DPM++ 2M Karras").
void hires_sampler_from_a1111(RunConfig& c, const std::string& value, const A1111Fields& all) {
  if (value == "Use same sampler") return;
  const auto own = all.find("Hires schedule type");
  const std::string type = own == all.end() ? std::string() : own->second;
  if (const auto choice = sampler_from_a1111(value, type)) {
    c.hires_sampler = choice->sampler;
    if (type.empty() && value != sampler_a1111_name(choice->sampler)) c.hires_schedule = choice->schedule;
    return;
  }
  log::warn("A1111 hires sampler \"{}\" has no NaNscope counterpart; the hires pass keeps the first pass's sampler",
            value);
}

void hires_schedule_from_a1111(RunConfig& c, const std::string& value, const A1111Fields&) {
  if (value == "Use same scheduler") return;
  for (ScheduleId id : kSchedules) {
    if (const auto label = a1111_schedule_label(id); label && *label == value) {
      c.hires_schedule = id;
      return;
    }
  }
  if (value == "Automatic") {
    c.hires_schedule = ScheduleId::class_default;
    return;
  }
  log::warn("A1111 hires schedule type \"{}\" has no NaNscope counterpart; the hires pass keeps the first pass's",
            value);
}

// A free text as an A1111 field value that reads back as itself: A1111's
// quote() JSON-quotes only values with ',', ':' or a newline, and the reader
// strips spaces and unquotes "..."; so a text with spaces at its ends or a
// quote at its start is quoted here (it then holds none of ",:\n", so quote()
// leaves it as it is).
std::string a1111_text_value(const std::string& v) {
  auto space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  const bool plain_reads_back = v.empty() || v.find_first_of(",:\n") != std::string::npos ||
                                (!space(v.front()) && !space(v.back()) && v.front() != '"');
  return plain_reads_back ? v : json(v).dump();
}

// An optional enum: "" (the first pass's) or one of the codec's names.
template <typename E>
Setting optional_enum_member(std::optional<E> RunConfig::*m, const Codec<E>& codec, Setting s) {
  s.type = SettingType::choice;
  s.choices = codec.names();
  s.choices.insert(s.choices.begin(), "");
  s.canonical = [codec](std::string_view v) -> std::optional<std::string> {
    if (v.empty()) return std::string();
    return codec.canonical()(v);
  };
  s.get = [m, codec](const RunConfig& c) { return (c.*m) ? codec.to_json(*(c.*m)) : json(""); };
  s.put = [m, codec](RunConfig& c, const json& v) {
    if (v.get<std::string>().empty()) {
      (c.*m).reset();
    } else {
      c.*m = codec.from_json(v);
    }
  };
  return s;
}

}  // namespace

void add_hires_pass_rows(std::vector<Setting>& t) {
  t.push_back(member(&RunConfig::hires_width,
                     {.key = "hires.width",
                      .type = SettingType::size,
                      .default_value = "0",
                      .min = 8,
                      .max = 16384,
                      .help = "Hires fix: the second pass's width instead of hires.scale (A1111's \"Resize width "
                              "to\"); 0 with hires.height set: from the first pass's aspect. With both set and "
                              "another aspect, the enlarged first pass is cropped to it as A1111 does",
                      .a1111 = "Hires resize",
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (c.hires_width <= 0 && c.hires_height <= 0) return std::nullopt;
                        return std::to_string(c.hires_width) + "x" + std::to_string(c.hires_height);
                      },
                      .from_a1111 = hires_resize_from_a1111}));
  t.push_back(member(&RunConfig::hires_height,
                     {.key = "hires.height",
                      .type = SettingType::size,
                      .default_value = "0",
                      .min = 8,
                      .max = 16384,
                      .help = "Hires fix: the second pass's height instead of hires.scale (A1111's \"Resize "
                              "height to\"); 0 with hires.width set: from the first pass's aspect",
                      .a1111 = "Hires resize",
                      .omit_default = true}));
  t.push_back(optional_enum_member(&RunConfig::hires_sampler, kSamplerCodec,
                                   {.key = "hires.sampler",
                                    .help = "Hires fix: the second pass's sampler (A1111's \"Hires sampling "
                                            "method\"); empty: the first pass's (\"Use same sampler\")",
                                    .a1111 = "Hires sampler",
                                    .omit_default = true,
                                    .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                                      if (!c.hires() || !c.hires_sampler || *c.hires_sampler == c.sampler)
                                        return std::nullopt;
                                      return std::string(sampler_a1111_name(*c.hires_sampler));
                                    },
                                    .from_a1111 = hires_sampler_from_a1111}));
  t.push_back(optional_enum_member(
      &RunConfig::hires_schedule, kScheduleCodec,
      {.key = "hires.schedule",
       .help = "Hires fix: the second pass's schedule (A1111's \"Hires schedule type\"); empty: the first pass's",
       .a1111 = "Hires schedule type",
       .omit_default = true,
       .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
         if (!c.hires() || !c.hires_schedule || *c.hires_schedule == c.schedule) return std::nullopt;
         return std::string(a1111_schedule_label(*c.hires_schedule).value_or("Automatic"));
       },
       .from_a1111 = hires_schedule_from_a1111}));
  t.push_back(member(&RunConfig::hires_prompt,
                     {.key = "hires.prompt",
                      .max = kMaxPromptBytes,
                      .help = "Hires fix: the second pass's prompt (A1111's \"Hires prompt\"); empty: the prompt",
                      .a1111 = "Hires prompt",
                      .keep_spaces = true,
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (!c.hires() || c.hires_prompt.empty() || c.hires_prompt == c.prompt) return std::nullopt;
                        return a1111_text_value(c.hires_prompt);
                      }}));
  t.push_back(member(&RunConfig::hires_negative_prompt,
                     {.key = "hires.negative_prompt",
                      .max = kMaxPromptBytes,
                      .help = "Hires fix: the second pass's negative prompt (A1111's \"Hires negative prompt\"); "
                              "empty: the negative prompt",
                      .a1111 = "Hires negative prompt",
                      .keep_spaces = true,
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (!c.hires() || c.hires_negative_prompt.empty() ||
                            c.hires_negative_prompt == c.negative_prompt)
                          return std::nullopt;
                        return a1111_text_value(c.hires_negative_prompt);
                      }}));
  t.push_back(member(&RunConfig::hires_cfg_scale,
                     {.key = "hires.cfg_scale",
                      .type = SettingType::number,
                      .default_value = "0",
                      .min = 0,
                      .max = 100,
                      .help = "Hires fix: the second pass's guidance scale (A1111's \"Hires CFG Scale\"); 0: "
                              "cfg_scale",
                      .a1111 = "Hires CFG Scale",
                      .omit_default = true,
                      .to_a1111 = [](const RunConfig& c) -> std::optional<std::string> {
                        if (!c.hires() || c.hires_cfg_scale <= 0 || c.hires_cfg_scale == c.cfg_scale)
                          return std::nullopt;
                        return number_text(c.hires_cfg_scale);
                      }}));
}

}  // namespace nanscope::setting_rows
