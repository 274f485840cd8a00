#include "config/foreign_generation.hpp"

#include <charconv>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "config/a1111.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"

namespace nanscope {

using json = nlohmann::json;

std::string_view foreign_tool_name(ForeignTool t) { return t == ForeignTool::a1111 ? "A1111" : "ComfyUI"; }

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<long long> to_integer(std::string_view s) {
  s = trim(s);
  long long v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> to_number(std::string_view s) {
  s = trim(s);
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// ---------------------------------------------------------------- A1111 ----

[[noreturn]] void a1111_fail(const std::string& key, const std::string& value, const std::string& what) {
  std::string shown = value.size() > 80 ? value.substr(0, 80) + "..." : value;
  throw ConfigError("A1111 parameters \"" + key + ": " + shown + "\": " + what);
}

int a1111_int(const std::string& k, const std::string& v, long long lo, long long hi) {
  const auto n = to_integer(v);
  if (!n || *n < lo || *n > hi)
    a1111_fail(k, v, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(*n);
}

double a1111_number(const std::string& k, const std::string& v) {
  const auto n = to_number(v);
  if (!n) a1111_fail(k, v, "expected a number");
  return *n;
}

std::pair<int, int> a1111_size(const std::string& k, const std::string& v) {
  static const std::regex re(R"(\s*(\d{1,6})x(\d{1,6})\s*)");
  std::smatch m;
  if (!std::regex_match(v, m, re)) a1111_fail(k, v, "expected WxH such as 512x768");
  return {std::stoi(m[1].str()), std::stoi(m[2].str())};
}

// A1111's extra-network tags for LoRAs (<lora:...>; LyCORIS's <lyco:...> alike):
// modules/extra_networks.py parse_prompt (re_extra_net "<(\w+):([^>]+)>",
// arguments split on ':') and ExtraNetworkParams (an argument "k=v" is named,
// any other positional), then extensions-builtin/Lora/extra_networks_lora.py
// activate: te = positional[1] or 1, then named te; unet = positional[2] or
// te, then named unet; dyn = positional[3] or named dyn (dynamic rank, which
// NaNscope does not do: kept in `unsupported`).
std::vector<ForeignLora> prompt_loras(const std::string& prompt) {
  static const std::regex re(R"(<(lora|lyco):([^>]+)>)");
  std::vector<ForeignLora> out;
  for (auto it = std::sregex_iterator(prompt.begin(), prompt.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string tag = (*it)[0].str();
    std::vector<std::string> positional;
    std::vector<std::pair<std::string, std::string>> named;
    const std::string args = (*it)[2].str();
    for (std::size_t start = 0;;) {
      const std::size_t colon = args.find(':', start);
      const std::string item = args.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      // item.split('=', 2): exactly one '=' makes a named argument.
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos && item.find('=', eq + 1) == std::string::npos) {
        named.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      } else {
        positional.push_back(item);
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    auto number = [&](const std::string& v, const std::string& what) {
      const auto w = to_number(v);
      if (!w) {
        throw ConfigError("A1111 parameters: the prompt's LoRA tag \"" + tag + "\": the " + what + " \"" + v +
                          "\" is not a number");
      }
      return *w;
    };
    ForeignLora l;
    if (positional.empty() || trim(positional[0]).empty())
      throw ConfigError("A1111 parameters: the prompt's LoRA tag \"" + tag + "\" names no LoRA");
    l.name = std::string(trim(positional[0]));
    l.source = "prompt tag";
    double te = positional.size() > 1 ? number(positional[1], "text-encoder weight") : 1.0;
    std::optional<double> unet;
    if (positional.size() > 2) unet = number(positional[2], "UNet weight");
    if (positional.size() > 3) l.unsupported = "dynamic rank " + std::string(trim(positional[3]));
    for (const auto& [k, v] : named) {
      if (k == "te") {
        te = number(v, "te= weight");
      } else if (k == "unet") {
        unet = number(v, "unet= weight");
      } else if (k == "dyn") {
        l.unsupported = "dyn=" + v + " (dynamic rank)";
      }
    }
    l.clip_weight = te;
    l.weight = unet.value_or(te);
    out.push_back(std::move(l));
  }
  return out;
}

// "Lora hashes: \"name: 0123456789ab, other: ...\"" (A1111's Lora extension writes
// name: shorthash pairs joined by ", ").
std::vector<std::pair<std::string, std::string>> lora_hashes(const std::string& k, const std::string& v) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start <= v.size()) {
    std::size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    const std::string_view item = trim(std::string_view(v).substr(start, comma - start));
    if (!item.empty()) {
      const std::size_t colon = item.rfind(':');
      if (colon == std::string_view::npos)
        a1111_fail(k, v, "expected \"name: hash\" pairs, found \"" + std::string(item) + "\"");
      out.emplace_back(std::string(trim(item.substr(0, colon))), std::string(trim(item.substr(colon + 1))));
    }
    start = comma + 1;
  }
  return out;
}

bool is_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

ForeignGeneration foreign_from_a1111(std::string_view parameters) {
  const A1111Text text = parse_a1111_text(parameters);
  ForeignGeneration g;
  g.tool = ForeignTool::a1111;
  g.prompt = text.prompt;
  g.negative_prompt = text.negative_prompt;
  g.rng = "GPU";  // A1111: a missing RNG means the default, the GPU generator
  g.clip_skip = 1;
  std::vector<std::pair<std::string, std::string>> hashes;
  std::optional<double> hires_denoising;
  bool hires = false;
  for (const auto& [k, v] : text.fields) {
    if (k == "Steps") {
      g.steps = a1111_int(k, v, 1, 10000);
    } else if (k == "Sampler") {
      g.sampler = v;
    } else if (k == "Schedule type") {
      g.schedule = v;
    } else if (k == "CFG scale") {
      g.cfg_scale = a1111_number(k, v);
    } else if (k == "Seed") {
      const auto n = to_integer(v);
      if (!n || *n < 0) a1111_fail(k, v, "expected a seed, an integer from 0");
      g.seed = static_cast<std::uint64_t>(*n);
    } else if (k == "Size") {
      std::tie(g.width, g.height) = a1111_size(k, v);
    } else if (k == "Clip skip") {
      g.clip_skip = a1111_int(k, v, 1, 24);
    } else if (k == "Model") {
      g.model = v;
    } else if (k == "Model hash") {
      if (!is_hex(trim(v))) a1111_fail(k, v, "expected hexadecimal digits (A1111's AutoV1 or AutoV2 hash)");
      g.model_hash = lower(std::string(trim(v)));
    } else if (k == "VAE") {
      g.vae = v;
    } else if (k == "VAE hash") {
      if (!is_hex(trim(v))) a1111_fail(k, v, "expected hexadecimal digits");
      g.vae_hash = lower(std::string(trim(v)));
    } else if (k == "Lora hashes") {
      hashes = lora_hashes(k, v);
    } else if (k == "Denoising strength") {
      g.denoise = a1111_number(k, v);
    } else if (k == "Hires upscale") {
      g.hires_upscale = a1111_number(k, v);
      hires = true;
    } else if (k == "Hires resize") {
      std::tie(g.hires_width, g.hires_height) = a1111_size(k, v);
      hires = true;
    } else if (k == "Hires steps") {
      g.hires_steps = a1111_int(k, v, 0, 10000);
      hires = true;
    } else if (k == "Hires upscaler") {
      g.hires_upscaler = v;
      hires = true;
    } else if (k == "Hires sampler") {
      if (v != "Use same sampler") g.hires_sampler = v;
      hires = true;
    } else if (k == "Hires schedule type") {
      if (v != "Use same scheduler") g.hires_schedule = v;
      hires = true;
    } else if (k == "Hires prompt") {
      g.hires_prompt = v;
      hires = true;
    } else if (k == "Hires negative prompt") {
      g.hires_negative_prompt = v;
      hires = true;
    } else if (k == "Hires CFG Scale" || k == "Hires CFG scale") {  // Forge's spelling, and SD.Next's
      g.hires_cfg_scale = a1111_number(k, v);
      hires = true;
    } else if (k == "Hires checkpoint") {
      if (v != "Use same checkpoint") g.hires_checkpoint = v;
      hires = true;
    } else if (k == "Hires denoising") {
      hires_denoising = a1111_number(k, v);
      hires = true;
    } else if (k == "ENSD") {
      const auto n = to_integer(v);
      if (!n) a1111_fail(k, v, "expected an integer");
      g.ensd = *n;
    } else if (k == "Eta") {
      g.eta = a1111_number(k, v);
    } else if (k == "RNG") {
      if (v != "GPU" && v != "CPU" && v != "NV") a1111_fail(k, v, "expected GPU, CPU or NV");
      g.rng = v;
    } else if (k == "UniPC variant") {
      g.unipc_variant = v;
    } else if (k == "UniPC skip type") {
      g.unipc_skip_type = v;
    } else if (k == "UniPC order") {
      g.unipc_order = v;
    } else if (k == "UniPC lower order final") {
      g.unipc_lower_order_final = v;
    } else if (k == "Version") {
      g.version = v;
    } else {
      g.unknown_fields.emplace_back(k, v);
    }
  }
  // With hires fix, A1111 writes the second pass's denoising as "Denoising strength".
  if (hires) g.hires_denoise = hires_denoising ? hires_denoising : g.denoise;
  g.loras = prompt_loras(g.prompt);
  for (const auto& [name, hash] : hashes) {
    bool found = false;
    for (ForeignLora& l : g.loras) {
      if (l.name == name) {
        l.hash = lower(hash);
        found = true;
      }
    }
    if (!found) g.loras.push_back({.name = name, .hash = lower(hash), .source = "Lora hashes"});
  }
  return g;
}

// -------------------------------------------------------------- ComfyUI ----

namespace {

struct Link {
  std::string node;
  int output = 0;
};

// comfy_execution/graph_utils.py is_link(): [str, int|float].
std::optional<Link> as_link(const json& v) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number()) return std::nullopt;
  return Link{v[0].get<std::string>(), static_cast<int>(v[1].get<double>())};
}

class Graph {
 public:
  explicit Graph(const json& prompt) : prompt_(prompt) {
    for (const auto& [id, node] : prompt.items()) {
      if (!node.is_object()) fail_node(id, "?", "is not an object (expected {\"class_type\": ..., \"inputs\": {...}})");
      if (!node.contains("class_type") || !node["class_type"].is_string())
        fail_node(id, "?", "has no class_type string");
      if (node.contains("inputs") && !node["inputs"].is_object())
        fail_node(id, node["class_type"].get<std::string>(), "inputs is not an object");
    }
    for (const auto& [id, node] : prompt.items()) {
      if (!node.contains("inputs")) continue;
      for (const auto& [name, value] : node["inputs"].items()) {
        if (auto l = as_link(value); l && !prompt.contains(l->node)) {
          fail_input(id, name, "links to node " + l->node + ", which the graph does not have (a dangling link)");
        }
      }
    }
    check_cycles();
  }

  bool has(const std::string& id) const { return prompt_.contains(id); }
  std::string class_type(const std::string& id) const { return prompt_.at(id).at("class_type").get<std::string>(); }
  std::string who(const std::string& id) const { return "node " + id + " '" + class_type(id) + "'"; }

  const json* input(const std::string& id, const std::string& name) const {
    const json& node = prompt_.at(id);
    if (!node.contains("inputs") || !node["inputs"].contains(name)) return nullptr;
    return &node["inputs"][name];
  }
  const json& required(const std::string& id, const std::string& name) const {
    const json* v = input(id, name);
    if (v == nullptr) fail_input(id, name, "is missing (a required input)");
    return *v;
  }
  // A literal input (not a link) of the given kind.
  std::int64_t integer(const std::string& id, const std::string& name) const {
    const json& v = literal(id, name);
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      fail_input(id, name, "expected an integer, found " + v.dump());
    return v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(v.get<double>());
  }
  double number(const std::string& id, const std::string& name) const {
    const json& v = literal(id, name);
    if (!v.is_number()) fail_input(id, name, "expected a number, found " + v.dump());
    return v.get<double>();
  }
  std::string string(const std::string& id, const std::string& name) const {
    const json& v = literal(id, name);
    if (!v.is_string()) fail_input(id, name, "expected a string, found " + v.dump());
    return v.get<std::string>();
  }
  const json& literal(const std::string& id, const std::string& name) const {
    const json& v = required(id, name);
    if (auto l = as_link(v))
      fail_input(id, name, "is a link to " + who(l->node) + "; NaNscope reads this input only as a value");
    return v;
  }
  // The link of a required input; an error when it is a value.
  Link link(const std::string& id, const std::string& name) const {
    const json& v = required(id, name);
    auto l = as_link(v);
    if (!l) fail_input(id, name, "expected a link [\"node id\", output], found " + v.dump());
    return *l;
  }
  // The link's producer must be one of `classes` with output `output`, or an
  // unknown class (listed by the caller); a known class at the wrong output is an error.
  void expect_output(const std::string& id, const std::string& name, const Link& l, const std::string& type,
                     std::initializer_list<std::pair<const char*, int>> producers) const {
    const std::string ct = class_type(l.node);
    for (const auto& [cls, out] : producers) {
      if (ct == cls && l.output != out) {
        fail_input(id, name,
                   "links to output " + std::to_string(l.output) + " of " + who(l.node) + "; a " + type +
                       " comes from its output " + std::to_string(out));
      }
    }
  }

  [[noreturn]] void fail_input(const std::string& id, const std::string& name, const std::string& what) const {
    throw ConfigError("ComfyUI prompt: " + who(id) + " input '" + name + "' " + what);
  }
  [[noreturn]] static void fail_node(const std::string& id, const std::string& cls, const std::string& what) {
    throw ConfigError("ComfyUI prompt: node " + id + " '" + cls + "' " + what);
  }

  const json& raw() const { return prompt_; }

 private:
  // Depth-first over every link, iterative (a huge graph must not exhaust the stack).
  void check_cycles() const {
    std::map<std::string, int> state;  // 0 new, 1 on the path, 2 done
    for (const auto& [start, unused] : prompt_.items()) {
      if (state[start] != 0) continue;
      struct Frame {
        std::string id;
        std::vector<std::pair<std::string, std::string>> next;  // (input name, target)
        std::size_t i = 0;
      };
      std::vector<Frame> stack;
      auto push = [&](const std::string& id) {
        Frame f{id, {}, 0};
        const json& node = prompt_.at(id);
        if (node.contains("inputs"))
          for (const auto& [name, value] : node["inputs"].items())
            if (auto l = as_link(value)) f.next.emplace_back(name, l->node);
        state[id] = 1;
        stack.push_back(std::move(f));
      };
      push(start);
      while (!stack.empty()) {
        Frame& f = stack.back();
        if (f.i == f.next.size()) {
          state[f.id] = 2;
          stack.pop_back();
          continue;
        }
        const auto [name, target] = f.next[f.i++];
        if (state[target] == 1) {
          std::string path;
          bool on = false;
          for (const Frame& s : stack) {
            if (s.id == target) on = true;
            if (on) path += s.id + " -> ";
          }
          fail_input(f.id, name,
                     "links to " + who(target) + ", which depends on this node: a cycle (" + path + target + ")");
        }
        if (state[target] == 0) push(target);
      }
    }
  }

  const json& prompt_;
};

bool is_sampler(const std::string& cls) { return cls == "KSampler" || cls == "KSamplerAdvanced"; }

// The sampler whose latent reaches an output: SaveImage/PreviewImage <- VAEDecode <- sampler.
std::string find_sampler(const Graph& g) {
  std::vector<std::string> samplers;
  for (const auto& [id, node] : g.raw().items())
    if (is_sampler(g.class_type(id))) samplers.push_back(id);
  if (samplers.empty())
    throw ConfigError("ComfyUI prompt: no KSampler or KSamplerAdvanced node; NaNscope reproduces graphs built on one");
  for (const auto& [id, node] : g.raw().items()) {
    const std::string ct = g.class_type(id);
    if (ct != "SaveImage" && ct != "PreviewImage") continue;
    const json* images = g.input(id, "images");
    if (images == nullptr) continue;
    const auto dec = as_link(*images);
    if (!dec || g.class_type(dec->node) != "VAEDecode") continue;
    const json* samples = g.input(dec->node, "samples");
    if (samples == nullptr) continue;
    const auto s = as_link(*samples);
    if (s && is_sampler(g.class_type(s->node))) return s->node;
  }
  // No output node leads to one: the sampler no other sampler reads from (the last pass).
  std::vector<std::string> last;
  for (const std::string& s : samplers) {
    bool read = false;
    for (const std::string& o : samplers) {
      const json* li = g.input(o, "latent_image");
      if (li == nullptr) continue;
      if (auto l = as_link(*li); l && l->node == s) read = true;
    }
    if (!read) last.push_back(s);
  }
  return last.empty() ? samplers.front() : last.front();
}

class ComfyReader {
 public:
  ComfyReader(const Graph& g, ForeignGeneration& out) : g_(g), out_(out) {}

  void read() {
    const std::string s = find_sampler(g_);
    out_.sampler_node = s;
    seen_.insert(s);
    const bool advanced = g_.class_type(s) == "KSamplerAdvanced";
    out_.seed = static_cast<std::uint64_t>(nonnegative(s, advanced ? "noise_seed" : "seed"));
    const std::int64_t steps = g_.integer(s, "steps");
    if (steps < 1 || steps > 10000) g_.fail_input(s, "steps", "expected 1 to 10000, found " + std::to_string(steps));
    out_.steps = static_cast<int>(steps);
    out_.cfg_scale = g_.number(s, "cfg");
    out_.sampler = g_.string(s, "sampler_name");
    out_.schedule = g_.string(s, "scheduler");
    if (advanced) {
      out_.add_noise = g_.string(s, "add_noise") != "disable";
      out_.start_step = static_cast<int>(g_.integer(s, "start_at_step"));
      out_.end_step = static_cast<int>(std::min<std::int64_t>(g_.integer(s, "end_at_step"), 1'000'000));
    } else {
      out_.denoise = g_.number(s, "denoise");
    }
    model(s, "model");
    out_.prompt = text(s, "positive");
    out_.negative_prompt = text(s, "negative");
    latent(s);
    vae(s);
  }

 private:
  std::int64_t nonnegative(const std::string& id, const std::string& name) {
    const std::int64_t v = g_.integer(id, name);
    if (v < 0) g_.fail_input(id, name, "expected a seed from 0, found " + std::to_string(v));
    return v;
  }

  static bool known(const std::string& cls) {
    static const std::set<std::string> k = {"KSampler",       "KSamplerAdvanced",    "CheckpointLoaderSimple",
                                            "CLIPTextEncode", "EmptyLatentImage",    "VAELoader",
                                            "LoraLoader",     "LoraLoaderModelOnly", "CLIPSetLastLayer",
                                            "VAEDecode",      "SaveImage",           "PreviewImage"};
    return k.count(cls) != 0;
  }

  // Lists a node NaNscope does not reproduce, and every other such node
  // upstream of it (a ControlNetApply's ControlNetLoader and LoadImage).
  void unsupported(const std::string& id, const std::string& from, const std::string& input) {
    if (!seen_.insert(id).second) return;
    out_.unsupported_nodes.push_back({id, g_.class_type(id), g_.who(from) + " input '" + input + "'"});
    const json* inputs = g_.raw().at(id).contains("inputs") ? &g_.raw().at(id)["inputs"] : nullptr;
    if (inputs == nullptr) return;
    for (const auto& [name, value] : inputs->items())
      if (auto l = as_link(value); l && !known(g_.class_type(l->node))) unsupported(l->node, id, name);
  }

  // The input of an unknown node that carries the same thing on (its "model",
  // "clip", "conditioning"...), when it has one that is a link.
  std::optional<std::string> pass_through(const std::string& id, std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (const json* v = g_.input(id, n); v && as_link(*v)) return std::string(n);
    return std::nullopt;
  }

  // MODEL: LoraLoader / LoraLoaderModelOnly chains down to the checkpoint.
  void model(const std::string& from, const std::string& input) {
    const Link l = g_.link(from, input);
    g_.expect_output(from, input, l, "MODEL",
                     {{"CheckpointLoaderSimple", 0}, {"LoraLoader", 0}, {"LoraLoaderModelOnly", 0}});
    const std::string ct = g_.class_type(l.node);
    if (ct == "CheckpointLoaderSimple") {
      checkpoint(l.node);
    } else if (ct == "LoraLoader" || ct == "LoraLoaderModelOnly") {
      lora(l.node, ct == "LoraLoader");
      model(l.node, "model");
    } else {
      unsupported(l.node, from, input);
      if (auto next = pass_through(l.node, {"model"})) model(l.node, *next);
    }
  }

  void checkpoint(const std::string& id) {
    const std::string name = g_.string(id, "ckpt_name");
    if (!out_.model.empty() && out_.model != name)
      g_.fail_input(id, "ckpt_name",
                    "names \"" + name + "\" while the model comes from \"" + out_.model +
                        "\": two checkpoints on one sampler's path");
    out_.model = name;
    seen_.insert(id);
  }

  void lora(const std::string& id, bool with_clip) {
    if (!seen_.insert(id).second) return;  // reached through both MODEL and CLIP
    ForeignLora l;
    l.name = g_.string(id, "lora_name");
    l.weight = g_.number(id, "strength_model");
    l.clip_weight = with_clip ? g_.number(id, "strength_clip") : 0.0;
    l.source = g_.who(id);
    out_.loras.push_back(std::move(l));
  }

  // CLIP: CLIPSetLastLayer and LoraLoader (output 1) down to the checkpoint (output 1).
  void clip(const std::string& from, const std::string& input) {
    const Link l = g_.link(from, input);
    g_.expect_output(from, input, l, "CLIP", {{"CheckpointLoaderSimple", 1}, {"LoraLoader", 1}});
    const std::string ct = g_.class_type(l.node);
    if (ct == "CheckpointLoaderSimple") {
      checkpoint(l.node);
    } else if (ct == "LoraLoader") {
      lora(l.node, true);
      clip(l.node, "clip");
    } else if (ct == "CLIPSetLastLayer") {
      seen_.insert(l.node);
      const std::int64_t layer = g_.integer(l.node, "stop_at_clip_layer");
      if (layer > -1 || layer < -24)
        g_.fail_input(l.node, "stop_at_clip_layer", "expected -1 to -24, found " + std::to_string(layer));
      out_.clip_skip = static_cast<int>(-layer);
      clip(l.node, "clip");
    } else {
      unsupported(l.node, from, input);
      if (auto next = pass_through(l.node, {"clip"})) clip(l.node, *next);
    }
  }

  std::string text(const std::string& from, const std::string& input) {
    const Link l = g_.link(from, input);
    if (g_.class_type(l.node) != "CLIPTextEncode") {
      unsupported(l.node, from, input);
      // ControlNetApplyAdvanced passes "positive" and "negative" on; most others "conditioning".
      if (auto next = pass_through(l.node, {input.c_str(), "conditioning", "conditioning_1", "conditioning_to"}))
        return text(l.node, *next);
      return {};
    }
    seen_.insert(l.node);
    const json& t = g_.required(l.node, "text");
    if (auto tl = as_link(t)) {
      unsupported(tl->node, l.node, "text");
      clip(l.node, "clip");
      return {};
    }
    if (!t.is_string()) g_.fail_input(l.node, "text", "expected a string, found " + t.dump());
    clip(l.node, "clip");
    return t.get<std::string>();
  }

  void latent(const std::string& s) {
    const Link l = g_.link(s, "latent_image");
    const std::string ct = g_.class_type(l.node);
    if (ct != "EmptyLatentImage") {
      out_.latent_source = ct;
      unsupported(l.node, s, "latent_image");
      return;
    }
    seen_.insert(l.node);
    auto dim = [&](const char* name) {
      const std::int64_t v = g_.integer(l.node, name);
      if (v < 8 || v > 16384) g_.fail_input(l.node, name, "expected 8 to 16384, found " + std::to_string(v));
      return static_cast<int>(v);
    };
    out_.width = dim("width");
    out_.height = dim("height");
    const std::int64_t b = g_.integer(l.node, "batch_size");
    if (b < 1 || b > 4096) g_.fail_input(l.node, "batch_size", "expected 1 to 4096, found " + std::to_string(b));
    out_.batch_size = static_cast<int>(b);
  }

  // The VAEDecode reading this sampler's output, and its VAE.
  void vae(const std::string& s) {
    for (const auto& [id, node] : g_.raw().items()) {
      if (g_.class_type(id) != "VAEDecode") continue;
      const json* samples = g_.input(id, "samples");
      const auto sl = samples ? as_link(*samples) : std::nullopt;
      if (!sl || sl->node != s) continue;
      seen_.insert(id);
      const Link v = g_.link(id, "vae");
      g_.expect_output(id, "vae", v, "VAE", {{"CheckpointLoaderSimple", 2}, {"VAELoader", 0}});
      const std::string ct = g_.class_type(v.node);
      if (ct == "VAELoader") {
        seen_.insert(v.node);
        out_.vae = g_.string(v.node, "vae_name");
      } else if (ct == "CheckpointLoaderSimple") {
        checkpoint(v.node);
      } else {
        unsupported(v.node, id, "vae");
      }
      return;
    }
  }

  const Graph& g_;
  ForeignGeneration& out_;
  std::set<std::string> seen_;
};

}  // namespace

ForeignGeneration foreign_from_comfyui(std::string_view prompt_json, std::string_view workflow_json) {
  if (const auto bad = invalid_utf8_offset(prompt_json))
    throw ConfigError("ComfyUI prompt: not valid UTF-8 (" + describe_invalid_utf8(prompt_json, *bad) + ")");
  json prompt;
  try {
    prompt = json::parse(prompt_json);
  } catch (const json::exception& e) {
    throw ConfigError(std::string("ComfyUI prompt: not valid JSON (") + e.what() + ")");
  }
  if (!prompt.is_object())
    throw ConfigError("ComfyUI prompt: expected an object of nodes {\"id\": {\"class_type\": ...}}, found a " +
                      std::string(prompt.type_name()));
  ForeignGeneration g;
  g.tool = ForeignTool::comfyui;
  g.rng = "CPU";  // ComfyUI draws the initial noise with torch's CPU generator (comfy/sample.py prepare_noise)
  const Graph graph(prompt);
  ComfyReader(graph, g).read();
  if (!workflow_json.empty()) {
    try {
      g.workflow = json::parse(workflow_json);
    } catch (const json::exception&) {
      g.workflow = nullptr;  // kept only for reference; a broken one does not stop the reading
    }
  }
  return g;
}

std::optional<ForeignGeneration> foreign_generation_from_png(const io::PngContents& png, std::string_view source) {
  if (png.find("nanscope") != nullptr) return std::nullopt;
  try {
    if (const std::string* p = png.find("prompt")) {
      const std::string* w = png.find("workflow");
      return foreign_from_comfyui(*p, w ? std::string_view(*w) : std::string_view{});
    }
    if (const std::string* p = png.find("parameters")) return foreign_from_a1111(*p);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(source) + ": " + e.what());
  }
  return std::nullopt;
}

std::vector<ForeignLora> a1111_prompt_loras(const std::string& prompt) { return prompt_loras(prompt); }

json to_json(const ForeignGeneration& g) {
  json j;
  j["tool"] = foreign_tool_name(g.tool);
  auto opt = [&](const char* k, const auto& v) {
    if (v) j[k] = *v;
  };
  auto str = [&](const char* k, const std::string& v) {
    if (!v.empty()) j[k] = v;
  };
  str("version", g.version);
  j["prompt"] = g.prompt;
  j["negative_prompt"] = g.negative_prompt;
  opt("steps", g.steps);
  str("sampler", g.sampler);
  str("schedule", g.schedule);
  opt("cfg_scale", g.cfg_scale);
  opt("seed", g.seed);
  opt("width", g.width);
  opt("height", g.height);
  if (g.batch_size != 1) j["batch_size"] = g.batch_size;
  opt("clip_skip", g.clip_skip);
  str("model", g.model);
  str("model_hash", g.model_hash);
  str("vae", g.vae);
  str("vae_hash", g.vae_hash);
  j["loras"] = json::array();
  for (const auto& l : g.loras)
    j["loras"].push_back({{"name", l.name},
                          {"weight", l.weight},
                          {"clip_weight", l.clip_weight},
                          {"hash", l.hash},
                          {"source", l.source}});
  for (std::size_t i = 0; i < g.loras.size(); ++i)
    if (!g.loras[i].unsupported.empty()) j["loras"][i]["unsupported"] = g.loras[i].unsupported;
  opt("denoise", g.denoise);
  opt("hires_upscale", g.hires_upscale);
  opt("hires_width", g.hires_width);
  opt("hires_height", g.hires_height);
  opt("hires_steps", g.hires_steps);
  str("hires_upscaler", g.hires_upscaler);
  opt("hires_denoise", g.hires_denoise);
  str("hires_sampler", g.hires_sampler);
  str("hires_schedule", g.hires_schedule);
  opt("hires_prompt", g.hires_prompt);
  opt("hires_negative_prompt", g.hires_negative_prompt);
  opt("hires_cfg_scale", g.hires_cfg_scale);
  str("hires_checkpoint", g.hires_checkpoint);
  opt("ensd", g.ensd);
  opt("eta", g.eta);
  str("rng", g.rng);
  str("unipc_variant", g.unipc_variant);
  str("unipc_skip_type", g.unipc_skip_type);
  str("unipc_order", g.unipc_order);
  str("unipc_lower_order_final", g.unipc_lower_order_final);
  opt("start_step", g.start_step);
  opt("end_step", g.end_step);
  opt("add_noise", g.add_noise);
  str("sampler_node", g.sampler_node);
  str("latent_source", g.latent_source);
  j["unknown_fields"] = json::object();
  for (const auto& [k, v] : g.unknown_fields) j["unknown_fields"][k] = v;
  j["unsupported_nodes"] = json::array();
  for (const auto& n : g.unsupported_nodes)
    j["unsupported_nodes"].push_back({{"id", n.id}, {"class_type", n.class_type}, {"reached_by", n.reached_by}});
  return j;
}

}  // namespace nanscope
