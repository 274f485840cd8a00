#include "models/lora.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/file_hash.hpp"
#include "io/safetensors.hpp"
#include "models/ldm_checkpoint.hpp"
#include "models/unet.hpp"

namespace nanscope::models {

namespace fs = std::filesystem;

namespace {

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

std::string examples(const std::vector<std::string>& keys, std::size_t n = 3) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < n; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > n) s += ", ...";
  return s;
}

bool starts(std::string_view s, std::string_view p) { return s.starts_with(p); }
bool ends(std::string_view s, std::string_view p) { return s.ends_with(p); }

// The family a cross-attention width belongs to, for messages.
std::string family_of_width(std::int64_t w) {
  switch (w) {
    case 768: return "SD 1.x";
    case 1024: return "SD 2.x";
    case 2048: return "SDXL";
    default: return "another model";
  }
}

enum class Part : std::uint8_t { down, up, alpha };

struct Parsed {
  std::string component, name;
  Part part = Part::down;
  bool kohya = false, old_diffusers = false;
};

// kohya: "<lora_name>.<suffix>", lora_name without dots.
std::optional<Parsed> parse_kohya(const std::string& key, std::string& unsupported) {
  static constexpr std::pair<std::string_view, std::string_view> kPrefixes[] = {{"lora_unet_", "unet"},
                                                                                {"lora_te1_", "text_encoder"},
                                                                                {"lora_te2_", "text_encoder_2"},
                                                                                {"lora_te_", "text_encoder"}};
  for (const auto& [prefix, component] : kPrefixes) {
    if (!starts(key, prefix)) continue;
    const auto dot = key.find('.');
    if (dot == std::string::npos) return std::nullopt;
    const std::string base = key.substr(prefix.size(), dot - prefix.size());
    const std::string_view suffix = std::string_view(key).substr(dot + 1);
    Parsed p{std::string(component), base, Part::down, true, false};
    if (suffix == "lora_down.weight") return p;
    if (suffix == "lora_up.weight") return p.part = Part::up, p;
    if (suffix == "alpha") return p.part = Part::alpha, p;
    if (suffix == "dora_scale") unsupported = "DoRA (" + key + ")";
    if (starts(suffix, "hada_")) unsupported = "LyCORIS LoHa (" + key + ")";
    if (starts(suffix, "lokr_")) unsupported = "LyCORIS LoKr (" + key + ")";
    if (suffix == "lora_mid.weight") unsupported = "LyCORIS Tucker conv LoRA (" + key + ")";
    if (suffix == "diff" || suffix == "diff_b") unsupported = "LyCORIS full weight difference (" + key + ")";
    return std::nullopt;
  }
  return std::nullopt;
}

// diffusers / PEFT: "[unet.|text_encoder.|text_encoder_2.]<module>.<suffix>".
std::optional<Parsed> parse_diffusers(const std::string& key, std::string& unsupported) {
  Parsed p;
  std::string_view rest = key;
  if (starts(rest, "unet.")) {
    p.component = "unet", rest.remove_prefix(5);
  } else if (starts(rest, "text_encoder_2.")) {
    p.component = "text_encoder_2", rest.remove_prefix(15);
  } else if (starts(rest, "text_encoder.")) {
    p.component = "text_encoder", rest.remove_prefix(13);
  } else {
    p.component = starts(rest, "text_model.") ? "text_encoder" : "unet";  // unet.save_attn_procs() files
  }
  if (rest.find("lora_magnitude_vector") != std::string_view::npos) {
    unsupported = "DoRA (" + key + ")";
    return std::nullopt;
  }
  static constexpr std::pair<std::string_view, Part> kSuffixes[] = {
      {".lora_A.weight", Part::down},
      {".lora_B.weight", Part::up},
      {".lora.down.weight", Part::down},
      {".lora.up.weight", Part::up},
      {".lora_linear_layer.down.weight", Part::down},
      {".lora_linear_layer.up.weight", Part::up},
      {"_lora.down.weight", Part::down},  // <block>.processor.to_q_lora.down.weight
      {"_lora.up.weight", Part::up},
      {".alpha", Part::alpha},
  };
  for (const auto& [suffix, part] : kSuffixes) {
    if (!ends(rest, suffix)) continue;
    std::string name(rest.substr(0, rest.size() - suffix.size()));
    p.part = part;
    if (suffix.front() == '_') {
      // The attention-processor form: to_q / to_k / to_v / to_out of the block's attention.
      p.old_diffusers = true;
      const auto dot = name.rfind('.');
      std::string block = dot == std::string::npos ? "" : name.substr(0, dot);
      std::string proj = name.substr(dot == std::string::npos ? 0 : dot + 1);
      if (ends(block, ".processor")) block.resize(block.size() - 10);
      const bool te = p.component != "unet";
      if (proj == "to_out") proj = te ? "out_proj" : "to_out.0";
      if (te && (proj == "to_q" || proj == "to_k" || proj == "to_v")) proj = proj.substr(3) + "_proj";
      name = block.empty() ? proj : block + "." + proj;
    } else if (suffix != ".lora_A.weight" && suffix != ".lora_B.weight" && suffix != ".alpha") {
      p.old_diffusers = true;
    }
    p.name = std::move(name);
    return p;
  }
  return std::nullopt;
}

HostTensor read_f32(const io::SafetensorsFile& f, const std::string& key) { return f.read(key, DType::f32); }

}  // namespace

LoraFileData read_lora_file(const LoraSpec& spec) {
  const fs::path& path = spec.path;
  const std::string from = spec.origin.empty() ? "" : " (" + spec.origin + ")";
  if (!fs::is_regular_file(path)) {
    throw FileError("LoRA file " + path.string() + from + " does not exist or is not a file");
  }
  io::refuse_pickle(path);
  const io::SafetensorsFile f = io::SafetensorsFile::open(path);
  LoraFileData data;
  data.spec = spec;

  struct Group {
    std::string component, name, down, up, alpha;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  std::vector<std::string> unknown;
  std::string unsupported;
  bool kohya = false, diffusers = false, old = false;
  for (const auto& e : f.entries()) {
    std::string why;
    std::optional<Parsed> p = starts(e.name, "lora_") ? parse_kohya(e.name, why) : parse_diffusers(e.name, why);
    if (!why.empty() && unsupported.empty()) unsupported = why;
    if (!p) {
      unknown.push_back(e.name);
      continue;
    }
    (p->kohya ? kohya : diffusers) = true;
    old = old || p->old_diffusers;
    Group& g = groups[{p->component, p->name}];
    g.component = p->component;
    g.name = p->name;
    (p->part == Part::down ? g.down : p->part == Part::up ? g.up : g.alpha) = e.name;
  }
  if (!unsupported.empty()) {
    throw FileError("LoRA file " + path.string() + from + " is a " + unsupported +
                    " network; NaNscope applies plain LoRA (lora_down/lora_up, lora_A/lora_B) only");
  }
  if (!unknown.empty()) {
    throw FileError("LoRA file " + path.string() + from + ": " + std::to_string(unknown.size()) + " of " +
                    std::to_string(f.entries().size()) + " keys are no LoRA key NaNscope reads (e.g. " +
                    examples(unknown) +
                    "); it reads kohya/A1111 LoRAs (lora_unet_*.lora_down.weight, .lora_up.weight, .alpha) and "
                    "diffusers/PEFT ones (unet.*.lora_A.weight, .lora_B.weight). Is it a LoRA at all?");
  }
  if (groups.empty()) throw FileError("LoRA file " + path.string() + from + " holds no tensors");
  if (kohya && diffusers) {
    throw FileError("LoRA file " + path.string() + from +
                    " mixes kohya keys (lora_unet_...) with diffusers keys; it is no file a trainer writes");
  }

  for (auto& [id, g] : groups) {
    const std::string what = g.down.empty() ? (g.up.empty() ? g.alpha : g.up) : g.down;
    if (g.down.empty() || g.up.empty()) {
      throw FileError("LoRA file " + path.string() + from + ": " + what + " has no " +
                      (g.down.empty() ? "down (lora_down / lora_A)" : "up (lora_up / lora_B)") +
                      " partner; the file is incomplete");
    }
    LoraEntry e;
    e.component = g.component;
    e.name = g.name;
    e.key = g.down;
    e.down = read_f32(f, g.down);
    e.up = read_f32(f, g.up);
    const Shape& d = e.down.shape;
    const Shape& u = e.up.shape;
    const bool down_ok = (d.size() == 2 || d.size() == 4) && d[0] > 0;
    const bool up_ok = (u.size() == 2 || (u.size() == 4 && u[2] == 1 && u[3] == 1)) && down_ok && u[1] == d[0];
    if (!down_ok || !up_ok) {
      throw FileError(
          "LoRA file " + path.string() + from + ": " + g.down + " has shape " + shape_str(d) + " and " + g.up + " " +
          shape_str(u) +
          "; a LoRA pair is down [rank, in] (or [rank, in, k, k]) and up [out, rank] (or [out, rank, 1, 1]) "
          "with the same rank");
    }
    e.alpha = static_cast<float>(e.rank());
    if (!g.alpha.empty()) {
      const HostTensor a = read_f32(f, g.alpha);
      if (a.numel() != 1 || !std::isfinite(a.get(0))) {
        throw FileError("LoRA file " + path.string() + from + ": " + g.alpha + " must be one finite number, found " +
                        a.describe());
      }
      e.alpha = a.get(0);
    }
    data.summary.rank = std::max(data.summary.rank, static_cast<int>(e.rank()));
    data.entries.push_back(std::move(e));
  }
  const bool ldm_names = std::any_of(data.entries.begin(), data.entries.end(), [](const LoraEntry& e) {
    return e.component == "unet" &&
           (starts(e.name, "input_blocks") || starts(e.name, "middle_block") || starts(e.name, "output_blocks"));
  });
  data.format = kohya ? (ldm_names ? "kohya (LDM names)" : "kohya") : old ? "diffusers (old)" : "diffusers/PEFT";
  data.summary.path = path.string();
  data.summary.name = path.stem().string();
  data.summary.weight = spec.weight;
  data.summary.unet_weight = spec.weight_for("unet");
  data.summary.origin = spec.origin;
  data.summary.format = data.format;
  data.summary.short_hash = io::a1111_lora_short_hash(path);
  return data;
}

// ---------------------------------------------------------------------------

class LoraSet::Component final : public WeightPatch {
 public:
  Component(LoraSet& set, std::string component, const UNetConfig* unet, std::string family)
      : set_(set), component_(std::move(component)), family_(std::move(family)) {
    for (std::size_t fi = 0; fi < set_.files_.size(); ++fi)
      for (auto& e : set_.files_[fi].entries)
        if (e.component == component_) index_[e.name].push_back({fi, &e});
    if (unet) {
      LdmStructure s;
      s.unet = *unet;
      s.vae.block_out_channels.clear();
      ldm_ = std::make_unique<LdmNameMap>(s);
    }
  }

  bool unmerged() const override { return set_.unmerged_; }
  bool patches(const std::string& module) override { return !lookup(module).empty(); }

  void merge(const std::string& module, HostTensor& w) override {
    std::vector<float> acc = w.to_f32();
    const std::int64_t out = w.shape[0];
    const std::int64_t k = w.numel() / out;  // in * kh * kw
    for (const auto& [fi, e] : lookup(module)) {
      check(fi, *e, module, w.shape);
      const float scale =
          static_cast<float>(set_.files_[fi].spec.weight_for(component_)) * e->alpha / static_cast<float>(e->rank());
      const std::int64_t r = e->rank();
      const std::vector<float> up = e->up.to_f32(), down = e->down.to_f32();
      // (up @ down)[o, :] in f32 (as torch's fuse computes it for an f32 model), row by row.
      std::vector<float> row(static_cast<std::size_t>(k));
      for (std::int64_t o = 0; o < out; ++o) {
        std::fill(row.begin(), row.end(), 0.0f);
        for (std::int64_t j = 0; j < r; ++j) {
          const float a = up[static_cast<std::size_t>(o * r + j)];
          const float* dj = down.data() + j * k;
          for (std::int64_t i = 0; i < k; ++i) row[static_cast<std::size_t>(i)] += a * dj[i];
        }
        float* dst = acc.data() + o * k;
        for (std::int64_t i = 0; i < k; ++i) dst[i] += scale * row[static_cast<std::size_t>(i)];
      }
      claim(fi, *e);
    }
    w = HostTensor::from_f32(w.shape, acc, DType::f32);
  }

  std::vector<HostLoraBranch> branches(const std::string& module, const Shape& shape) override {
    std::vector<HostLoraBranch> out;
    for (const auto& [fi, e] : lookup(module)) {
      check(fi, *e, module, shape);
      HostLoraBranch b;
      b.name = set_.files_.size() == 1 ? "lora" : "lora." + std::to_string(fi);
      b.scale =
          static_cast<float>(set_.files_[fi].spec.weight_for(component_)) * e->alpha / static_cast<float>(e->rank());
      b.down = e->down;
      b.up = e->up;
      const std::int64_t r = e->rank();
      if (shape.size() == 2) {
        b.down.shape = {r, shape[1]};
        b.up.shape = {shape[0], r};
      } else {
        b.down.shape = {r, shape[1], shape[2], shape[3]};
        b.up.shape = {shape[0], r, 1, 1};
      }
      claim(fi, *e);
      out.push_back(std::move(b));
    }
    return out;
  }

  void note_overflow(const std::string& module, std::int64_t count, DType dtype) override {
    const std::string m = component_ + "." + module;
    std::vector<std::string> names;
    for (const auto& [fi, e] : lookup(module)) {
      set_.files_[fi].summary.overflows.push_back(m + ": " + std::to_string(count) + " non-finite in " +
                                                  std::string(dtype_name(dtype)));
      set_.files_[fi].summary.overflow_modules.push_back(m);
      names.push_back(set_.files_[fi].summary.name);
    }
    log::warn(
        "LoRA {}: merging it into {} overflows {}: {} values of the merged weight are Inf (the module's "
        "fault in the inspector; lora.mode=unmerged keeps the LoRA apart as {}.lora)",
        examples(names), m, dtype_name(dtype), count, m);
  }

 private:
  std::vector<std::pair<std::size_t, LoraEntry*>> lookup(const std::string& module) const {
    std::vector<std::pair<std::size_t, LoraEntry*>> hits;
    const auto add = [&](const std::string& name) {
      const auto it = index_.find(name);
      if (it == index_.end()) return;
      for (const auto& h : it->second)
        if (std::find(hits.begin(), hits.end(), h) == hits.end()) hits.push_back(h);
    };
    add(module);
    add(underscored(module));
    if (ldm_) {
      if (const auto ref = ldm_->to_ldm("unet." + module + ".weight")) {
        std::string_view l = ref->key;
        const std::string_view prefix = ldm_component_prefix(ModelFamily::sd1, "unet");
        if (starts(l, prefix) && ends(l, ".weight")) {
          l.remove_prefix(prefix.size());
          l.remove_suffix(7);
          add(underscored(std::string(l)));
        }
      }
    }
    std::sort(hits.begin(), hits.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return hits;
  }

  void claim(std::size_t fi, LoraEntry& e) {
    if (!e.claimed) ++set_.files_[fi].summary.modules;
    e.claimed = true;
  }

  // The pair must fit the module: down [r, in(, k, k)], up [out, r(, 1, 1)].
  void check(std::size_t fi, const LoraEntry& e, const std::string& module, const Shape& w) const {
    const LoraSpec& spec = set_.files_[fi].spec;
    const Shape& d = e.down.shape;
    const Shape& u = e.up.shape;
    const bool conv = w.size() == 4;
    const std::int64_t kernel = conv ? w[2] : 1;
    const bool in_ok = d[1] == w[1] && (d.size() == 2 ? kernel == 1 : d[2] == kernel && d[3] == kernel);
    const bool out_ok = u[0] == w[0];
    if (in_ok && out_ok) return;
    std::string msg = "LoRA " + spec.path.string() + ": " + e.key + " (down " + shape_str(d) + ", up " + shape_str(u) +
                      ") does not fit " + component_ + "." + module + " (weight " + shape_str(w) + ")";
    const bool cross = component_ == "unet" && (ends(module, "attn2.to_k") || ends(module, "attn2.to_v"));
    if (cross && d[1] != w[1]) {
      msg += ": the LoRA was made for a model whose text embeddings are " + std::to_string(d[1]) + " wide (" +
             family_of_width(d[1]) + "); " + (family_.empty() ? "this model" : "this " + family_ + " model") +
             "'s are " + std::to_string(w[1]) + " wide. Use a LoRA made for this model's family";
    } else if (!in_ok && d.size() == 4 && d[1] == w[1]) {
      msg += ": its down kernel is " + std::to_string(d[2]) + "x" + std::to_string(d[3]) + ", the module's " +
             std::to_string(kernel) + "x" + std::to_string(kernel);
    } else {
      msg += ": the LoRA is for a model with other channel counts (another family or a differently sized model)";
    }
    throw FileError(msg);
  }

  LoraSet& set_;
  std::string component_, family_;
  std::map<std::string, std::vector<std::pair<std::size_t, LoraEntry*>>> index_;
  std::unique_ptr<LdmNameMap> ldm_;
};

LoraSet::LoraSet(std::vector<LoraSpec> specs, bool unmerged) : unmerged_(unmerged) {
  for (auto& s : specs) files_.push_back(read_lora_file(s));
}

LoraSet::~LoraSet() = default;

void LoraSet::require_components(const std::vector<std::string>& present, std::string_view model_desc) const {
  for (const auto& f : files_) {
    std::map<std::string, std::vector<std::string>> missing;
    for (const auto& e : f.entries)
      if (std::find(present.begin(), present.end(), e.component) == present.end())
        missing[e.component].push_back(e.key);
    if (missing.empty()) continue;
    const auto& [component, keys] = *missing.begin();
    const bool sdxl = component == "text_encoder_2";
    throw FileError("LoRA " + f.spec.path.string() + " is " + (sdxl ? "an SDXL LoRA" : "for another model") + ": " +
                    std::to_string(keys.size()) + " of its entries patch " + component + " (e.g. " + examples(keys) +
                    "), which " + std::string(model_desc) + " does not have. Use a LoRA made for this model's family");
  }
}

WeightPatch* LoraSet::component(const std::string& component, const UNetConfig* unet, std::string family) {
  if (files_.empty()) return nullptr;
  components_.push_back(std::make_unique<Component>(*this, component, unet, std::move(family)));
  return components_.back().get();
}

void LoraSet::finish(std::string_view model_desc) {
  for (auto& f : files_) {
    std::vector<std::string> left;
    for (const auto& e : f.entries)
      if (!e.claimed) left.push_back(e.key);
    if (!left.empty()) {
      throw FileError("LoRA " + f.spec.path.string() + ": " + std::to_string(left.size()) + " of its " +
                      std::to_string(f.entries.size()) + " modules match no Linear or Conv2d of " +
                      std::string(model_desc) + " (e.g. " + examples(left) +
                      "); is it a LoRA for another model family or a differently built model?");
    }
    const std::string weights = f.spec.weight_for("unet") == f.spec.weight
                                    ? fmt::format("weight {}", f.spec.weight)
                                    : fmt::format("text encoder {}, UNet {}", f.spec.weight, f.spec.weight_for("unet"));
    log::info("LoRA {} ({}, rank {}, {}, {}): {} modules {}", f.summary.name, f.format, f.summary.rank, weights,
              f.summary.short_hash, f.summary.modules, unmerged_ ? "as branches (unmerged)" : "merged");
    f.entries.clear();
    f.entries.shrink_to_fit();
  }
  components_.clear();
}

std::vector<LoraSummary> LoraSet::summaries() const {
  std::vector<LoraSummary> out;
  for (const auto& f : files_) out.push_back(f.summary);
  return out;
}

}  // namespace nanscope::models
