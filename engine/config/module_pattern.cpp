#include "config/module_pattern.hpp"

#include "core/error.hpp"

namespace nanscope {

namespace {

bool is_name(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Does pattern[pi..] match a leading part of path[si..]? `*` takes one or more segments.
bool match_prefix(const std::vector<std::string>& pattern, std::size_t pi, const std::vector<std::string_view>& path,
                  std::size_t si) {
  if (pi == pattern.size()) return true;  // the rest of the path lies below the matched module
  if (si == path.size()) return false;
  if (pattern[pi] == "*") {
    for (std::size_t take = 1; si + take <= path.size(); ++take) {
      if (match_prefix(pattern, pi + 1, path, si + take)) return true;
    }
    return false;
  }
  return pattern[pi] == path[si] && match_prefix(pattern, pi + 1, path, si + 1);
}

}  // namespace

std::vector<std::string_view> split_module_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (path.empty()) return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    out.push_back(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

ModulePattern ModulePattern::parse(std::string_view text) {
  ModulePattern p;
  p.text_ = std::string(text);
  const auto fail = [&](const std::string& why) {
    throw ConfigError("module pattern \"" + std::string(text) + "\": " + why +
                      " (a pattern is component.segment.segment..., component one of text_encoder, unet, vae; "
                      "a segment is a name of letters, digits and _ or * for one or more segments)");
  };
  for (std::string_view seg : split_module_path(text)) {
    if (seg == "*") {
      p.segments_.emplace_back(seg);
      continue;
    }
    if (seg.empty()) fail("empty segment");
    if (seg.find('*') != std::string_view::npos)
      fail("'*' must be a whole segment, found \"" + std::string(seg) + "\"");
    if (!is_name(seg)) fail("bad segment \"" + std::string(seg) + "\"");
    p.segments_.emplace_back(seg);
    ++p.literals_;
  }
  if (p.segments_.empty()) fail("empty pattern");
  const std::string& c = p.segments_.front();
  if (c != "text_encoder" && c != "unet" && c != "vae")
    fail("the first segment must be a component, found \"" + c + "\"");
  return p;
}

bool ModulePattern::matches(const std::vector<std::string_view>& path_segments) const {
  return match_prefix(segments_, 0, path_segments, 0);
}

bool ModulePattern::matches(std::string_view path) const { return matches(split_module_path(path)); }

}  // namespace nanscope
