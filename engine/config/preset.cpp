#include "config/preset.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "config/module_pattern.hpp"
#include "config/settings.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace nanscope {

namespace {

using config_detail::fail;
using nlohmann::json;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

const json& object(const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, "expected an object, found " + v.dump());
  return v;
}

std::string string_value(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, "expected a string, found " + v.dump());
  return v.get<std::string>();
}

long long version_value(const json& v) {
  if (!v.is_number_integer() || v.get<long long>() < 1) {
    fail("nanscope_preset", "expected an integer (the format version; this NaNscope writes " +
                                std::to_string(kPresetVersion) + "), found " + v.dump());
  }
  return v.get<long long>();
}

json::json_pointer pointer(std::string_view dotted) {
  std::string p = "/" + std::string(dotted);
  std::replace(p.begin(), p.end(), '.', '/');
  return json::json_pointer(p);
}

using Leaf = std::function<void(std::size_t index, const json& value, const std::string& where)>;

// Walks the object `j`, found at the key path `at` (as messages spell it),
// against `paths` (dot-joined, relative to `j`): a key whose path is
// paths[i] is a leaf for `leaf`; a key that begins some paths must hold an
// object and is walked in turn; `extra` keys of `j` itself are left to the
// caller; any other key is an error listing the keys allowed at its level.
void walk(const json& j, const std::string& at, const std::string& rel, const std::vector<std::string>& paths,
          const std::vector<std::string_view>& extra, const Leaf& leaf) {
  for (const auto& [k, v] : object(j, at.empty() ? "(top level)" : at).items()) {
    if (std::find(extra.begin(), extra.end(), k) != extra.end()) continue;
    const std::string where = join(at, k);
    const std::string sub = join(rel, k);
    bool inner = false;
    bool done = false;
    for (std::size_t i = 0; i < paths.size() && !done; ++i) {
      if (paths[i] == sub) {
        leaf(i, v, where);
        done = true;
      }
      inner = inner || paths[i].starts_with(sub + ".");
    }
    if (done) continue;
    if (inner) {
      walk(v, where, sub, paths, {}, leaf);
      continue;
    }
    std::vector<std::string> allowed(extra.begin(), extra.end());
    for (const std::string& p : paths) {
      if (!rel.empty() && !p.starts_with(rel + ".")) continue;
      const std::string rest = rel.empty() ? p : p.substr(rel.size() + 1);
      const std::string next = rest.substr(0, rest.find('.'));
      if (std::find(allowed.begin(), allowed.end(), next) == allowed.end()) allowed.push_back(next);
    }
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail(where, "unknown key; allowed here: " + list);
  }
}

std::vector<std::string> row_paths() {
  std::vector<std::string> paths;
  for (const Setting& row : settings()) paths.push_back(row.path());
  return paths;
}

std::vector<std::string> field_paths() {
  std::vector<std::string> paths;
  for (const PrecisionField& f : precision_fields()) paths.push_back(f.spec.key);
  return paths;
}

void apply(RunConfig& c, const json& j) {
  object(j, "(top level)");
  static const std::vector<std::string> paths = row_paths();
  std::map<std::string, json> given;  // by row key, checked
  const auto& rows = settings();
  if (!j.contains("nanscope_preset")) {
    fail("nanscope_preset",
         "missing: not a NaNscope preset (expected \"nanscope_preset\": " + std::to_string(kPresetVersion) + ")");
  }
  const long long version = version_value(j["nanscope_preset"]);
  if (version > kPresetVersion) {
    fail("nanscope_preset", "version " + std::to_string(version) + " is newer than this NaNscope reads (" +
                                std::to_string(kPresetVersion) + "); update NaNscope");
  }
  walk(j, "", "", paths, {"nanscope_preset", "overrides"},
       [&](std::size_t i, const json& v, const std::string& where) { given[rows[i].key] = rows[i].check(v, where); });

  // The inspector settings are replaced as a whole, like the overrides.
  if (j.contains("inspect")) c.inspect = json::object();
  // In table order: seed, then seeds (which sets seed and batch_size), then
  // batch_size (which must agree with seeds).
  for (const Setting& row : rows) {
    if (auto it = given.find(row.key); it != given.end()) row.put(c, it->second);
  }
  if (given.contains("seed") && !c.seeds.empty() && given["seed"].get<std::uint64_t>() != c.seeds.front()) {
    fail("seed", given["seed"].dump() + " is not the first of \"seeds\" (" + std::to_string(c.seeds.front()) + ")");
  }

  if (j.contains("overrides")) {
    const json& list_json = j["overrides"];
    if (!list_json.is_array())
      fail("overrides", "expected a list of {\"pattern\": ..., fields...}, found " + list_json.dump());
    static const std::vector<std::string> fields = field_paths();
    std::vector<PrecisionOverride> list;
    for (std::size_t i = 0; i < list_json.size(); ++i) {
      const std::string path = "overrides[" + std::to_string(i) + "]";
      const json& o = object(list_json[i], path);
      PrecisionOverride po;
      if (!o.contains("pattern")) fail(path + ".pattern", "missing (e.g. \"unet.up_blocks.*.attentions.*.attn1\")");
      po.pattern = string_value(o["pattern"], path + ".pattern");
      try {
        ModulePattern::parse(po.pattern);
      } catch (const ConfigError& e) {
        fail(path + ".pattern", e.what());
      }
      walk(o, path, "", fields, {"pattern"}, [&](std::size_t f, const json& v, const std::string& where) {
        const PrecisionField& field = precision_fields()[f];
        field.put_override(po, field.spec.check(v, where));
      });
      if (po.empty()) {
        std::string names;
        for (const auto& f : fields) names += (names.empty() ? "" : ", ") + f;
        fail(path, "sets no field; use " + names);
      }
      list.push_back(std::move(po));
    }
    c.overrides = std::move(list);
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path.string() + ": cannot open the preset: " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

json to_json(const RunConfig& c) {
  json j = json::object();
  j["nanscope_preset"] = kPresetVersion;
  j["inspect"] = json::object();
  for (const Setting& row : settings()) {
    json v = row.get(c);
    if (row.omit_default && v == row.default_json()) continue;
    j[pointer(row.path())] = std::move(v);
  }
  json overrides = json::array();
  for (const PrecisionOverride& o : c.overrides) {
    json e = {{"pattern", o.pattern}};
    for (const PrecisionField& f : precision_fields()) {
      json v = f.get_override(o);
      if (!v.is_null()) e[pointer(f.spec.key)] = std::move(v);
    }
    overrides.push_back(std::move(e));
  }
  j["overrides"] = std::move(overrides);
  return j;
}

void apply_json(RunConfig& config, const json& j, std::string_view source) {
  RunConfig next = config;  // all or nothing: a bad key leaves `config` as it was
  try {
    apply(next, j);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(source) + ": " + e.what());
  }
  config = std::move(next);
}

RunConfig run_config_from_json(const json& j, std::string_view source) {
  RunConfig c;
  apply_json(c, j, source);
  return c;
}

void save_preset(const RunConfig& config, const std::filesystem::path& path) {
  try {
    config.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": not saved: " + e.what());
  }
  io::write_file_atomic(path, to_json(config).dump(2) + "\n");
}

RunConfig load_preset(const std::filesystem::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw FileError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  return run_config_from_json(j, path.string());
}

}  // namespace nanscope
