#include "config/a1111.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <regex>
#include <vector>

#include "config/settings.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"

namespace nanscope {

namespace {

// A1111's infotext_utils.quote().
std::string quote(const std::string& v) {
  if (v.find_first_of(",\n:") == std::string::npos) return v;
  return nlohmann::json(v).dump();
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
  std::vector<std::string> seen;  // width and height share "Size": the first row writes it
  for (const Setting& row : settings()) {
    if (row.a1111.empty() || std::find(seen.begin(), seen.end(), row.a1111) != seen.end()) continue;
    seen.push_back(row.a1111);
    const std::optional<std::string> v = row.to_a1111 ? row.to_a1111(c) : row.format(row.get(c));
    if (v) params.emplace_back(row.a1111, *v);
  }

  std::string line;
  for (const auto& [k, v] : params) line += (line.empty() ? "" : ", ") + k + ": " + quote(v);
  std::string text = c.prompt;
  if (!c.negative_prompt.empty()) text += "\nNegative prompt: " + c.negative_prompt;
  text += "\n" + line;
  return std::string(strip(text));
}

A1111Text parse_a1111_text(std::string_view parameters) {
  // The prompt goes into presets and PNG chunks as JSON, which holds UTF-8 only.
  if (const auto bad = invalid_utf8_offset(parameters)) {
    throw ConfigError("A1111 parameters: the text is not valid UTF-8 (" + describe_invalid_utf8(parameters, *bad) +
                      "); the tool that wrote it used another encoding: re-save it as UTF-8");
  }
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
  A1111Text out;
  if (!lines.empty()) {
    out.fields = find_params(lines.back());
    if (out.fields.size() >= 3) {
      lines.pop_back();
    } else {
      out.fields.clear();
    }
  }
  // A1111's parser strips "Negative prompt:" from every line that starts
  // with it; only the first one starts the negative prompt here, so a
  // negative prompt with such a line of its own (written from one read as
  // "Negative prompt: Negative prompt: ...") reads back as it was written.
  bool negative_mode = false;
  for (const std::string& raw : lines) {
    std::string_view line = strip(raw);
    if (!negative_mode && line.substr(0, 16) == "Negative prompt:") {
      negative_mode = true;
      line = strip(line.substr(16));
    }
    std::string& target = negative_mode ? out.negative_prompt : out.prompt;
    target += (target.empty() ? "" : "\n") + std::string(line);
  }
  for (auto& [k, v] : out.fields) {
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      try {
        v = nlohmann::json::parse(v).get<std::string>();
      } catch (const nlohmann::json::exception&) {
        // A1111 keeps a value it cannot unquote as it is.
      }
    }
  }
  return out;
}

RunConfig run_config_from_a1111(std::string_view parameters, const RunConfig& base) {
  A1111Text text = parse_a1111_text(parameters);
  RunConfig c = base;
  c.prompt = text.prompt;
  c.negative_prompt = text.negative_prompt;
  A1111Fields fields;
  for (auto& [k, v] : text.fields) fields[k] = v;
  std::vector<std::string> read;  // names already read (width and height share "Size")
  for (const Setting& row : settings()) {
    if (row.a1111.empty() || !row.a1111_read) continue;
    if (std::find(read.begin(), read.end(), row.a1111) != read.end()) continue;
    read.push_back(row.a1111);
    auto it = fields.find(row.a1111);
    if (it == fields.end()) continue;
    try {
      if (row.from_a1111) {
        row.from_a1111(c, it->second, fields);
      } else {
        c.set(row.key, it->second);
      }
    } catch (const ConfigError& e) {
      throw ConfigError("A1111 parameters \"" + row.a1111 + ": " + it->second + "\": " + e.what());
    }
  }
  return c;
}

}  // namespace nanscope
