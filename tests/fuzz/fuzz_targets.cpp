#include "fuzz_targets.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "config/a1111.hpp"
#include "config/foreign_generation.hpp"
#include "config/png_metadata.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "io/png.hpp"
#include "io/safetensors.hpp"
#include "models/clip_text.hpp"
#include "models/config_json.hpp"
#include "models/ldm_checkpoint.hpp"
#include "models/unet.hpp"
#include "models/vae.hpp"
#include "pipeline/model_index.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/scheduler_config.hpp"
#include "studies/sweep.hpp"
#include "text/clip_tokenizer.hpp"

namespace nanscope::fuzz {
namespace {

namespace fs = std::filesystem;
using Bytes = std::span<const std::uint8_t>;

std::string_view as_text(Bytes in) { return {reinterpret_cast<const char*>(in.data()), in.size()}; }

[[noreturn]] void finding(const std::string& what) { throw FuzzFinding(what); }

// Runs `f`, swallowing the engine's own errors (a reader refusing bad input).
template <typename F>
void refused_ok(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

// The input as a file the path-taking readers open: an anonymous memory file
// (memfd), named by /proc/self/fd/N. `size` larger than the input leaves a
// sparse zero tail that costs nothing until read.
class MemFile {
 public:
  explicit MemFile(Bytes data, std::uint64_t size = 0) {
    fd_ = memfd_create("nanscope-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n <= 0) throw std::runtime_error(std::string("memfd write: ") + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    if (size > data.size() && ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      throw std::runtime_error(std::string("memfd ftruncate: ") + std::strerror(errno));
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const fs::path& path() const { return path_; }

 private:
  int fd_ = -1;
  fs::path path_;
};

// A private folder for the readers that resolve names next to their file
// (the sweep spec's preset), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/nanscope-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

// ---------------------------------------------------------------------------

// A whole .safetensors file: header length, header JSON, layout checks, and
// every tensor's bytes read (ASan sees any range outside the mapping).
void fuzz_safetensors(Bytes in) {
  const MemFile file(in);
  std::optional<io::SafetensorsFile> st;
  refused_ok([&] { st.emplace(io::SafetensorsFile::open(file.path())); });
  if (!st) return;
  std::uint64_t total = 0;
  for (const auto& e : st->entries()) {
    if (st->find(e.name) == nullptr) finding("entry \"" + e.name + "\" is listed but find() misses it");
    const auto bytes = st->bytes(e);
    if (bytes.size() != e.bytes()) finding("entry \"" + e.name + "\": bytes() disagrees with its offsets");
    for (const std::uint8_t b : bytes) total += b;
    if (io::to_dtype(e.file_dtype) && e.numel() <= (1 << 16)) {
      const HostTensor t = st->read(e, DType::f32);
      if (t.numel() != e.numel()) finding("entry \"" + e.name + "\": read() gave another element count");
    } else if (!io::to_dtype(e.file_dtype)) {
      refused_ok([&] { st->read(e, DType::f32); });
    }
  }
  (void)total;
}

// A single-file checkpoint's header (the JSON after the length field): the
// file is made with a sparse zero data area as long as the largest offset, so
// family detection, config inference and the name tables see any layout.
void fuzz_single_file(Bytes in) {
  const std::string_view header = as_text(in);
  std::uint64_t data = 0;
  const nlohmann::json j = nlohmann::json::parse(header.begin(), header.end(), nullptr, false);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (!v.is_object() || !v.contains("data_offsets") || !v["data_offsets"].is_array()) continue;
      for (const auto& o : v["data_offsets"])
        if (o.is_number_unsigned()) data = std::max(data, o.get<std::uint64_t>());
    }
  }
  data = std::min<std::uint64_t>(data, std::uint64_t{1} << 32);  // sparse: costs nothing unless read
  std::string head(8, '\0');
  const std::uint64_t len = header.size();
  std::memcpy(head.data(), &len, 8);
  head.append(header);
  const MemFile file({reinterpret_cast<const std::uint8_t*>(head.data()), head.size()}, head.size() + data);

  refused_ok([&] {
    const models::LdmCheckpoint ckpt = models::LdmCheckpoint::open(file.path());
    for (const auto& c : ckpt.components()) {
      const models::WeightSource source = ckpt.source(c.name);
      for (const auto& name : source.names()) {
        if (!ckpt.names().to_ldm(c.name + "." + name)) {
          finding("component " + c.name + ": \"" + name + "\" came from the file but maps to no LDM key");
        }
      }
    }
    (void)ckpt.unclaimed();
  });
  refused_ok([&] { (void)models::open_vae_file(file.path()); });
}

// config.json of a UNet, VAE or CLIP text encoder, and model_index.json.
void fuzz_config_json(Bytes in) {
  const MemFile file(in);
  std::optional<models::ConfigJson> c;
  refused_ok([&] { c.emplace(models::ConfigJson::load(file.path())); });
  if (!c) return;
  refused_ok([&] { (void)models::UNetConfig::from_json(*c); });
  refused_ok([&] { (void)models::VaeConfig::from_json(*c); });
  refused_ok([&] { (void)models::ClipTextConfig::from_json(*c); });
  refused_ok([&] { (void)pipeline::ModelIndex::load(file.path()); });
}

// scheduler_config.json for every sampler, and the tables it makes.
void fuzz_scheduler_config(Bytes in) {
  const std::string_view text = as_text(in);
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return;
  for (const SamplerId kind : kSamplers) {
    std::optional<pipeline::SchedulerConfig> s;
    refused_ok([&] { s.emplace(pipeline::SchedulerConfig::from_json(j, kind)); });
    if (!s) continue;
    const std::vector<float> a = pipeline::schedule::alphas_cumprod(*s, true);
    if (a.size() != static_cast<std::size_t>(s->num_train_timesteps)) {
      finding("alphas_cumprod has " + std::to_string(a.size()) + " entries for num_train_timesteps " +
              std::to_string(s->num_train_timesteps));
    }
    const std::vector<float> sig = pipeline::schedule::training_sigmas(a);
    if (s->use_karras_sigmas) {
      (void)pipeline::schedule::karras_sigmas(s->sigma_min.value_or(sig.front()), s->sigma_max.value_or(sig.back()),
                                              20);
    }
  }
}

// A preset file; what it gives must write and read back the same.
void fuzz_preset(Bytes in) {
  const MemFile file(in);
  std::optional<RunConfig> c;
  refused_ok([&] { c.emplace(load_preset(file.path())); });
  if (!c) return;
  const nlohmann::json j = to_json(*c);
  RunConfig back;
  try {
    back = run_config_from_json(j, "written preset");
  } catch (const Error& e) {
    finding(std::string("a preset that loads does not read back after writing: ") + e.what());
  }
  if (!(back == *c)) finding("a preset read back differs from the config written: " + j.dump());
}

// A PNG file: decoding, its text chunks and the run config they record.
void fuzz_png(Bytes in) {
  const MemFile file(in);
  std::optional<io::PngContents> png;
  refused_ok([&] { png.emplace(io::read_png(file.path())); });
  if (!png) return;
  const auto& img = png->image;
  if (img.pixels.size() != static_cast<std::size_t>(img.width) * static_cast<std::size_t>(img.height) * 3) {
    finding("read_png gave " + std::to_string(img.pixels.size()) + " bytes for " + std::to_string(img.width) + "x" +
            std::to_string(img.height));
  }
  refused_ok([&] { (void)config_from_png(*png, "fuzz.png"); });
}

// A PNG's text chunks as "key\0text\0key\0text...": the NaNscope chunk, A1111
// parameters and the fallbacks between them.
void fuzz_png_metadata(Bytes in) {
  const std::string_view s = as_text(in);
  io::PngContents png;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t k_end = std::min(s.find('\0', pos), s.size());
    const std::size_t t_begin = std::min(k_end + 1, s.size());
    const std::size_t t_end = std::min(s.find('\0', t_begin), s.size());
    png.texts.push_back({std::string(s.substr(pos, k_end - pos)), std::string(s.substr(t_begin, t_end - t_begin))});
    pos = t_end + 1;
  }
  std::optional<RunConfig> c;
  refused_ok([&] { c = config_from_png(png, "fuzz.png"); });
  refused_ok([&] { (void)nanscope_chunk(png, "fuzz.png"); });
  if (!c) return;
  // What NaNscope would write for that config must restore it.
  io::PngContents written;
  written.texts = run_png_texts(*c);
  std::optional<RunConfig> back;
  try {
    back = config_from_png(written, "written.png");
  } catch (const Error& e) {
    finding(std::string("the texts written for a restored config do not read back: ") + e.what());
  }
  if (!back || !(*back == *c)) finding("the config restored from the written texts differs");
}

// A1111 "parameters" text; the text written for what it gives reads back to
// the same config.
void fuzz_a1111(Bytes in) {
  std::optional<RunConfig> c;
  refused_ok([&] { c.emplace(run_config_from_a1111(as_text(in))); });
  if (!c) return;
  const std::string text = a1111_parameters(*c);
  RunConfig back;
  try {
    back = run_config_from_a1111(text);
  } catch (const Error& e) {
    finding("the A1111 text written for a parsed config does not parse: " + std::string(e.what()) + "\n" + text);
  }
  if (a1111_parameters(back) != text) {
    finding("the A1111 text does not survive a second round:\n" + text + "\n---\n" + a1111_parameters(back));
  }
}

// Another tool's settings: the input as A1111 parameters text and as a
// ComfyUI prompt graph. Whatever is accepted must turn into JSON.
void fuzz_foreign(Bytes in) {
  const std::string_view text = as_text(in);
  refused_ok([&] { (void)to_json(foreign_from_a1111(text)).dump(); });
  refused_ok([&] { (void)to_json(foreign_from_comfyui(text, text)).dump(); });
}

// A prompt through the embedded model's CLIP tokenizer.
void fuzz_clip_tokenizer(Bytes in) {
  static const ClipTokenizer tok =
      ClipTokenizer::load(fs::path(NANSCOPE_SOURCE_DIR) / "resources/models/nanscope-tiny/tokenizer");
  const TokenizedPrompt t = tok.encode(as_text(in));
  if (t.ids.size() != static_cast<std::size_t>(tok.max_length())) {
    finding("encode gave " + std::to_string(t.ids.size()) + " ids, expected " + std::to_string(tok.max_length()));
  }
  if (t.eos_index <= 0 || t.eos_index >= tok.max_length() || t.ids[t.eos_index] != tok.eos_id()) {
    finding("the end token is not at eos_index " + std::to_string(t.eos_index));
  }
  for (const int id : t.ids) {
    if (id < 0 || id >= tok.vocab_size()) finding("id " + std::to_string(id) + " is outside the vocabulary");
  }
  (void)tok.decode(t.ids, true);
}

// A sweep spec (next to a valid preset "base.json" it may name).
void fuzz_sweep_spec(Bytes in) {
  static const ScratchDir dir;
  static const bool preset_written = [] {
    save_preset(RunConfig{}, dir.path() / "base.json");
    return true;
  }();
  (void)preset_written;
  const fs::path spec = dir.path() / "spec.json";
  write_file(spec, as_text(in));
  std::optional<studies::SweepSpec> s;
  refused_ok([&] { s.emplace(studies::SweepSpec::read(spec)); });
  if (!s) return;
  if (s->cells.size() > studies::kMaxSweepCells) finding("more cells than kMaxSweepCells");
  std::set<fs::path> reports;
  for (const auto& c : s->cells) {
    if (!reports.insert(s->report_path(c)).second) {
      finding("two cells write the same report " + s->report_path(c).string());
    }
  }
}

}  // namespace

const std::vector<FuzzTarget>& fuzz_targets() {
  static const std::vector<FuzzTarget> targets{
      {"safetensors", "safetensors header and layout validation, tensor reads", fuzz_safetensors},
      {"single_file", "single-file checkpoint family detection, config inference and key mapping", fuzz_single_file},
      {"config_json", "UNet / VAE / CLIP config.json and model_index.json", fuzz_config_json},
      {"scheduler_config", "scheduler_config.json for every sampler", fuzz_scheduler_config},
      {"preset", "preset files, and that they write and read back", fuzz_preset},
      {"png", "PNG decoding and the run config in its chunks", fuzz_png},
      {"png_metadata", "PNG text chunks: the NaNscope chunk and A1111 parameters", fuzz_png_metadata},
      {"a1111", "A1111 parameters text and its round trip", fuzz_a1111},
      {"foreign", "another tool's settings: A1111 parameters and ComfyUI prompt graphs", fuzz_foreign},
      {"clip_tokenizer", "prompts through the CLIP tokenizer", fuzz_clip_tokenizer},
      {"sweep_spec", "sweep specs and their expansion into cells", fuzz_sweep_spec},
  };
  return targets;
}

const FuzzTarget* find_fuzz_target(std::string_view name) {
  for (const auto& t : fuzz_targets())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace nanscope::fuzz
