#include "config/lora_list.hpp"

#include <spdlog/fmt/fmt.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include "core/error.hpp"

namespace nanscope {

namespace fs = std::filesystem;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<double> parse_number(std::string_view v) {
  const std::string s(trim(v));
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

void check_weight(double w, std::string_view key, std::string_view item) {
  if (!std::isfinite(w) || w < -100 || w > 100) {
    config_detail::fail(key, "the weight of \"" + std::string(item) + "\" must be a number from -100 to 100");
  }
}

}  // namespace

std::vector<LoraRef> parse_lora_list(std::string_view text, std::string_view key) {
  std::vector<LoraRef> out;
  std::string_view rest = text;
  while (!trim(rest).empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    LoraRef r;
    // The last one or two ':'-separated numbers: FILE:WEIGHT or FILE:TE:UNET.
    auto split = [](std::string_view s) -> std::pair<std::string_view, std::optional<double>> {
      const std::size_t colon = s.rfind(':');
      if (colon == std::string_view::npos) return {s, std::nullopt};
      const std::optional<double> w = parse_number(s.substr(colon + 1));
      if (!w) return {s, std::nullopt};
      return {s.substr(0, colon), w};
    };
    auto [head, last] = split(item);
    if (last) {
      auto [head2, before] = split(head);
      if (before && !trim(head2).empty()) {
        r.weight = *before;
        r.unet_weight = *last;
        head = head2;
      } else {
        r.weight = *last;
      }
    }
    r.path = std::string(trim(head));
    if (r.path.empty()) {
      config_detail::fail(key,
                          "expected FILE:WEIGHT entries separated by commas (e.g. style.safetensors:0.8), found \"" +
                              std::string(item) + "\"");
    }
    check_weight(r.weight, key, item);
    if (r.unet_weight) check_weight(*r.unet_weight, key, item);
    if (r.unet_weight == r.weight) r.unet_weight.reset();  // one form for one meaning (FILE:W)
    out.push_back(std::move(r));
  }
  return out;
}

std::string format_lora_list(const std::vector<LoraRef>& loras) {
  std::string s;
  for (const auto& l : loras) {
    s += (s.empty() ? "" : ",") + l.path;
    if (l.unet_weight && *l.unet_weight != l.weight) {
      s += ":" + fmt::format("{}", l.weight) + ":" + fmt::format("{}", *l.unet_weight);
    } else if (l.weight != 1.0) {
      s += ":" + fmt::format("{}", l.weight);
    }
  }
  return s;
}

void add_loras(RunConfig& config, std::string_view text, std::string_view key) {
  for (auto& l : parse_lora_list(text, key)) config.loras.push_back(std::move(l));
}

namespace {
const std::regex& lora_tag() {
  static const std::regex re("<lora:([^>]+)>");
  return re;
}
}  // namespace

std::vector<PromptLora> prompt_loras(std::string_view prompt) {
  std::vector<PromptLora> out;
  const std::string p(prompt);
  for (auto it = std::sregex_iterator(p.begin(), p.end(), lora_tag()); it != std::sregex_iterator(); ++it) {
    PromptLora l;
    l.tag = (*it)[0].str();
    std::vector<std::string> positional;
    std::vector<std::pair<std::string, std::string>> named;
    const std::string inner = (*it)[1].str();
    std::size_t start = 0;
    for (std::size_t c = inner.find(':');; c = inner.find(':', start)) {
      const std::string item(
          trim(std::string_view(inner).substr(start, c == std::string::npos ? std::string::npos : c - start)));
      // ExtraNetworkParams: item.split('=', 2) with exactly two parts is a named argument.
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos && item.find('=', eq + 1) == std::string::npos) {
        named.emplace_back(std::string(trim(std::string_view(item).substr(0, eq))),
                           std::string(trim(std::string_view(item).substr(eq + 1))));
      } else {
        positional.push_back(item);
      }
      if (c == std::string::npos) break;
      start = c + 1;
    }
    if (positional.empty() || positional.front().empty())
      config_detail::fail("prompt", l.tag + " names no LoRA; the syntax is <lora:NAME:WEIGHT>");
    l.name = positional.front();
    auto number = [&](const std::string& v, const std::string& what) {
      const auto w = parse_number(v);
      if (!w) config_detail::fail("prompt", l.tag + ": the " + what + " \"" + v + "\" is not a number");
      check_weight(*w, "prompt", l.tag);
      return *w;
    };
    if (positional.size() > 3) {
      config_detail::fail("prompt", l.tag +
                                        ": a fourth argument is A1111's dynamic rank (dyn), which NaNscope does not "
                                        "do; use <lora:NAME:TE:UNET>");
    }
    if (positional.size() > 1) l.weight = number(positional[1], "weight");
    if (positional.size() > 2) l.unet_weight = number(positional[2], "UNet weight");
    for (const auto& [k, v] : named) {
      if (k == "te") {
        l.weight = number(v, "te= weight");
      } else if (k == "unet") {
        l.unet_weight = number(v, "unet= weight");
      } else if (k == "dyn") {
        config_detail::fail("prompt", l.tag + ": dyn=" + v +
                                          " (A1111's dynamic rank, the first N ranks of the LoRA) is not supported; "
                                          "leave it out to apply the full rank");
      } else {
        config_detail::fail("prompt",
                            l.tag + ": unknown argument \"" + k + "=" + v + "\"; A1111 reads te=, unet= and dyn=");
      }
    }
    out.push_back(std::move(l));
  }
  return out;
}

std::string strip_lora_tags(std::string_view prompt) { return std::regex_replace(std::string(prompt), lora_tag(), ""); }

std::vector<RunLora> run_loras(const RunConfig& config) {
  std::vector<RunLora> out;
  for (const auto& l : config.loras) out.push_back({l.path, l.weight, l.unet_weight, "lora setting"});
  const std::vector<PromptLora> tags = prompt_loras(config.prompt);
  if (tags.empty()) return out;
  if (config.lora_dir.empty()) {
    config_detail::fail("lora_dir", "the prompt names " + tags.front().tag +
                                        " but no LoRA folder is set; set lora_dir to the folder holding " +
                                        tags.front().name + ".safetensors (or give the file with --lora FILE:WEIGHT)");
  }
  const fs::path dir(config.lora_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    config_detail::fail("lora_dir",
                        "\"" + config.lora_dir + "\" is not a folder (the prompt names " + tags.front().tag + ")");
  }
  // One walk of the folder for all tags: stem -> files.
  std::map<std::string, std::vector<fs::path>> by_stem;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".safetensors")
      by_stem[it->path().stem().string()].push_back(it->path());
  }
  for (const auto& t : tags) {
    const auto found = by_stem.find(t.name);
    if (found == by_stem.end()) {
      config_detail::fail(
          "prompt", t.tag + ": no " + t.name + ".safetensors in lora_dir " + config.lora_dir + " (or its subfolders)");
    }
    if (found->second.size() > 1) {
      std::string list;
      for (const auto& p : found->second) list += (list.empty() ? "" : ", ") + p.string();
      config_detail::fail("prompt", t.tag + ": several files in lora_dir are named " + t.name + ".safetensors (" +
                                        list + "); rename one or give the file with --lora");
    }
    out.push_back({found->second.front().string(), t.weight, t.unet_weight, "prompt " + t.tag});
  }
  return out;
}

}  // namespace nanscope
