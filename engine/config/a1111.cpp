#include "config/a1111.hpp"

#include <spdlog/fmt/fmt.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"

namespace nanscope {

namespace {

// A1111's infotext_utils.quote().
std::string quote(const std::string& v) {
  if (v.find_first_of(",\n:") == std::string::npos) return v;
  return nlohmann::json(v).dump();
}

std::string number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return fmt::format("{}", v);  // shortest text that reads back as the same double
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A1111's re_param: "Key: value," pairs, values optionally JSON-quoted.
const std::regex& param_regex() {
  static const std::regex re(R"re(\s*(\w[\w \-/]+):\s*("(?:\\.|[^\\"])+"|[^,]*)(?:,|$))re");
  return re;
}

std::vector<std::pair<std::string, std::string>> find_params(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), param_regex()); it != std::sregex_iterator(); ++it) {
    if ((*it)[0].length() == 0) continue;
    out.emplace_back((*it)[1].str(), (*it)[2].str());
  }
  return out;
}

}  // namespace

std::string model_display_name(std::string_view model_path) {
  if (model_path.empty()) return "nanscope-tiny";
  std::filesystem::path p{std::string(model_path)};
  if (!p.has_filename()) p = p.parent_path();  // "models/sd15/"
  // Only checkpoint extensions are dropped: folder names such as "sd-v1.5" keep their dots.
  const std::string ext = p.extension().string();
  for (const char* e : {".safetensors", ".ckpt", ".pt", ".pth", ".bin"}) {
    if (ext == e) return p.stem().string();
  }
  return p.filename().string();
}

std::string a1111_parameters(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> params;
  params.emplace_back("Steps", std::to_string(c.steps));
  params.emplace_back("Sampler", std::string(sampler_a1111_name(c.sampler)));
  params.emplace_back("CFG scale", number(c.cfg_scale));
  params.emplace_back("Seed", std::to_string(c.seed));
  if (c.width > 0 && c.height > 0)
    params.emplace_back("Size", std::to_string(c.width) + "x" + std::to_string(c.height));
  params.emplace_back("Model", model_display_name(c.model));
  if (!c.vae.empty()) params.emplace_back("VAE", model_display_name(c.vae));
  if (c.clip_skip >= 1) params.emplace_back("Clip skip", std::to_string(c.clip_skip + 1));
  if (c.noise == NoiseKind::torch_cpu) params.emplace_back("RNG", "CPU");

  std::string line;
  for (const auto& [k, v] : params) line += (line.empty() ? "" : ", ") + k + ": " + quote(v);
  std::string text = c.prompt;
  if (!c.negative_prompt.empty()) text += "\nNegative prompt: " + c.negative_prompt;
  text += "\n" + line;
  return std::string(strip(text));
}

RunConfig run_config_from_a1111(std::string_view parameters, const RunConfig& base) {
  RunConfig c = base;
  std::vector<std::string> lines;
  {
    const std::string_view text = strip(parameters);
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t nl = text.find('\n', start);
      lines.emplace_back(text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
      if (nl == std::string_view::npos) break;
      start = nl + 1;
    }
  }
  std::vector<std::pair<std::string, std::string>> params;
  if (!lines.empty()) {
    params = find_params(lines.back());
    if (params.size() >= 3) {
      lines.pop_back();
    } else {
      params.clear();
    }
  }
  std::string prompt, negative;
  bool negative_mode = false;
  for (const std::string& raw : lines) {
    std::string_view line = strip(raw);
    if (line.substr(0, 16) == "Negative prompt:") {
      negative_mode = true;
      line = strip(line.substr(16));
    }
    std::string& target = negative_mode ? negative : prompt;
    target += (target.empty() ? "" : "\n") + std::string(line);
  }
  c.prompt = prompt;
  c.negative_prompt = negative;

  std::map<std::string, std::string> fields;
  for (auto& [k, v] : params) {
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      try {
        v = nlohmann::json::parse(v).get<std::string>();
      } catch (const nlohmann::json::exception&) {
        // A1111 keeps a value it cannot unquote as it is.
      }
    }
    fields[k] = v;
  }
  auto field = [&](const char* name) -> const std::string* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  auto set = [&](const char* name, const char* key, const std::string& value) {
    try {
      c.set(key, value);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("A1111 parameters \"") + name + ": " + value + "\": " + e.what());
    }
  };
  if (auto v = field("Steps")) set("Steps", "steps", *v);
  if (auto v = field("CFG scale")) set("CFG scale", "cfg_scale", *v);
  if (auto v = field("Seed")) set("Seed", "seed", *v);
  if (auto v = field("Size")) {
    static const std::regex size_re(R"((\d+)x(\d+))");
    std::smatch m;
    if (!std::regex_match(*v, m, size_re)) throw ConfigError("A1111 parameters \"Size: " + *v + "\": expected WxH");
    set("Size", "width", m[1].str());
    set("Size", "height", m[2].str());
  }
  if (auto v = field("Clip skip")) {
    const std::string n = *v;
    if (n == "1") {
      c.clip_skip = 0;
    } else {
      try {
        set("Clip skip", "clip_skip", std::to_string(std::stoi(n) - 1));
      } catch (const std::logic_error&) {
        throw ConfigError("A1111 parameters \"Clip skip: " + n + "\": expected an integer from 1 to 25");
      }
    }
  }
  if (auto v = field("RNG")) c.noise = *v == "CPU" ? NoiseKind::torch_cpu : c.noise;
  if (auto v = field("Sampler")) {
    std::string name = *v;
    if (auto sched = field("Schedule type"); sched && *sched == "Karras") name += " Karras";
    bool known = false;
    for (SamplerId s :
         {SamplerId::euler, SamplerId::euler_a, SamplerId::ddim, SamplerId::dpmpp_2m, SamplerId::dpmpp_2m_karras}) {
      if (sampler_a1111_name(s) == name) {
        c.sampler = s;
        known = true;
      }
    }
    if (!known)
      log::warn("A1111 sampler \"{}\" has no NaNscope counterpart; keeping {}", name, sampler_name(c.sampler));
  }
  return c;
}

}  // namespace nanscope
