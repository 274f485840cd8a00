// nanscope-cli generate: txt2img from a diffusers folder (or the embedded
// model), with every precision setting per component, writing PNGs with
// A1111-compatible `parameters` and a `nanscope` JSON chunk. And
// nanscope-cli info: reads those chunks back.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "common.hpp"
#include "config/a1111.hpp"
#include "config/inspect_settings.hpp"
#include "config/lora_list.hpp"
#include "config/png_metadata.hpp"
#include "config/preset.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "inspect/fault_emulation.hpp"
#include "io/png.hpp"
#include "io/safetensors.hpp"
#include "pipeline/run_report.hpp"
#include "pipeline/session.hpp"
#include "studies/report_json.hpp"

namespace nanscope::cli {

namespace fs = std::filesystem;

int run_checkpoint_info(const std::string& path);  // cmd_checkpoint_info.cpp

namespace {

struct GenerateOptions {
  std::string preset, save_preset, model, vae, prompt, negative, size, sampler, schedule, noise, out = "out.png", dump;
  std::optional<int> steps;
  std::optional<double> cfg;
  std::optional<std::uint64_t> seed;
  std::optional<int> batch;
  std::vector<std::string> sets;
  std::string nan_policy;
  std::vector<std::string> loras;  // --lora FILE[:WEIGHT] or FILE:TE:UNET
};

struct Done {
  pipeline::GeneratedImage image;
  pipeline::RunReport report;
};

// Progress: a bar that redraws on a terminal, plain lines otherwise. Keeps the
// finished images for writing, and the tensors for --dump.
class CliObserver final : public pipeline::RunObserver {
 public:
  std::vector<Done> done;

  explicit CliObserver(std::string dump) : tty_(isatty(STDERR_FILENO) != 0), dump_(std::move(dump)) {}

  void on_status(std::string_view message) override {
    end_bar();
    std::fprintf(stderr, "%.*s...\n", static_cast<int>(message.size()), message.data());
  }
  void on_text_embeddings(const HostTensor& e) override {
    if (!dump_.empty()) io::write_safetensors(fs::path(dump_) / "text_embeddings.safetensors", {{"embeddings", e}});
  }
  void on_initial_noise(int image, const Shape& shape, std::span<const float> v) override {
    if (dump_.empty()) return;
    tensors_.clear();
    tensors_.emplace_back("initial_noise", HostTensor::from_f32(shape, {v.begin(), v.end()}));
  }
  bool wants_latents() const override { return !dump_.empty(); }
  void on_step(const pipeline::StepReport& s) override {
    if (!dump_.empty()) {
      char name[32];
      std::snprintf(name, sizeof name, "step_%03d", s.index);
      tensors_.emplace_back(name, HostTensor::from_f32(s.latent_shape, s.latent_values));
    }
    const int width = 30;
    const int filled = (s.index + 1) * width / s.steps;
    if (tty_) {
      std::fprintf(stderr, "\r  image %d [%s%s] %d/%d  %.2f s/step  max|x| %.3g%s", s.image + 1,
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(width - filled), '.').c_str(), s.index + 1, s.steps, s.seconds,
                   s.latent.max_abs, s.latent.nonfinite() ? "  NON-FINITE" : "");
      bar_open_ = true;
    } else {
      // Two model calls per step (heun, dpmpp_sde): the step and which of its calls.
      const std::string call = s.sampler_steps != s.steps ? " (step " + std::to_string(s.sampler_step + 1) + "/" +
                                                                std::to_string(s.sampler_steps) + " call " +
                                                                std::to_string(s.call_in_step + 1) + ")"
                                                          : "";
      std::fprintf(stderr, "image %d step %d/%d%s t=%.1f %.3f s max|x|=%.4g nonfinite=%lld\n", s.image + 1, s.index + 1,
                   s.steps, call.c_str(), static_cast<double>(s.timestep), s.seconds, s.latent.max_abs,
                   static_cast<long long>(s.latent.nonfinite()));
    }
  }
  void on_image(const pipeline::GeneratedImage& img, const pipeline::RunReport& r) override {
    end_bar();
    if (!dump_.empty()) {
      if (!img.image.pixels.empty()) {
        HostTensor px({1, 3, img.image.height, img.image.width}, DType::f32);
        const std::int64_t plane = static_cast<std::int64_t>(img.image.width) * img.image.height;
        for (std::int64_t i = 0; i < plane; ++i)
          for (int c = 0; c < 3; ++c) px.set(c * plane + i, img.image.pixels[static_cast<std::size_t>(i * 3 + c)]);
        tensors_.emplace_back("image_rgb8", px);
      }
      tensors_.emplace_back("final_latent", HostTensor::from_f32(img.latent_shape, img.latent));
      io::write_safetensors(fs::path(dump_) / ("image_" + std::to_string(r.image) + ".safetensors"), tensors_);
      tensors_.clear();
    }
    done.push_back({img, r});
  }

 private:
  void end_bar() {
    if (bar_open_) std::fputc('\n', stderr);
    bar_open_ = false;
  }
  bool tty_;
  bool bar_open_ = false;
  std::string dump_;
  std::vector<std::pair<std::string, HostTensor>> tensors_;
};

fs::path output_path(const std::string& out, std::size_t index, std::size_t count, std::uint64_t seed) {
  if (count == 1) return out;
  const fs::path p(out);
  return p.parent_path() / (p.stem().string() + "-" + std::to_string(seed) + p.extension().string());
}

int run_generate(const GlobalOptions& g, const GenerateOptions& o) {
  RunConfig cfg = o.preset.empty() ? RunConfig{} : load_preset(o.preset);
  if (!o.model.empty()) cfg.model = o.model;
  if (!o.vae.empty()) cfg.vae = o.vae;
  if (!o.prompt.empty()) cfg.prompt = o.prompt;
  if (!o.negative.empty()) cfg.negative_prompt = o.negative;
  if (o.steps) cfg.set("steps", std::to_string(*o.steps));
  if (o.cfg) cfg.set("cfg_scale", std::to_string(*o.cfg));
  if (o.seed) cfg.set("seed", std::to_string(*o.seed));
  if (o.batch) cfg.set("batch_size", std::to_string(*o.batch));
  if (!o.sampler.empty()) cfg.set("sampler", o.sampler);
  if (!o.schedule.empty()) cfg.set("schedule", o.schedule);
  if (!o.noise.empty()) cfg.set("noise", o.noise);
  if (!o.nan_policy.empty()) cfg.set("nan_policy", o.nan_policy);
  if (!o.size.empty()) {
    const auto x = o.size.find('x');
    if (x == std::string::npos) throw ConfigError("--size: expected WxH such as 512x512, found '" + o.size + "'");
    cfg.set("width", o.size.substr(0, x));
    cfg.set("height", o.size.substr(x + 1));
  }
  if (!g.device.empty()) cfg.device = g.device;
  for (const auto& s : o.sets) cfg.set(s);
  for (const auto& l : o.loras) add_loras(cfg, l, "--lora");
  cfg.validate();
  if (!o.save_preset.empty()) {
    save_preset(cfg, o.save_preset);
    log::info("saved the run configuration to {}", o.save_preset);
  }
  if (!o.dump.empty()) fs::create_directories(o.dump);

  pipeline::Session session(backend_options(g));
  CliObserver observer(o.dump);
  int failures = 0;
  // Fault emulation is the caller's decision (labelled in every output).
  const auto faults = inspect::make_fault_emulator(inspect_settings(cfg.inspect));
  session.generate(cfg, &observer, faults.get());
  const auto& done = observer.done;

  for (std::size_t i = 0; i < done.size(); ++i) {
    const auto& [img, report] = done[i];
    if (img.image.pixels.empty()) {
      std::fprintf(stderr, "image %zu: no image (%s)\n", i + 1, report.outcome.c_str());
      ++failures;
      continue;
    }
    const fs::path path = output_path(o.out, i, done.size(), img.config.seed);
    write_run_png(path, img.image, img.config, {{"report", studies::image_report_json(report)}});
    std::printf("%s  %dx%d  seed %llu  %.2f s sampling, %.2f s decode  %s\n", path.string().c_str(), img.image.width,
                img.image.height, static_cast<unsigned long long>(img.config.seed), report.sampling_seconds,
                report.decode_seconds, report.outcome.c_str());
    if (!report.reproducibility.empty()) std::printf("  note: %s\n", report.reproducibility.c_str());
    if (img.nonfinite_pixels > 0) ++failures;
  }
  // retry-layer-f32: the modules it computed in f32, as settings for the next run.
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    const auto& lr = it->report.layer_retry;
    if (lr.upcast.empty()) continue;
    std::string sets;
    for (const auto& u : lr.upcast) sets += " --set " + u + ".dtype=f32";
    std::printf("retry-layer-f32 computed %zu module%s in f32; the fix as settings:%s\n", lr.upcast.size(),
                lr.upcast.size() == 1 ? "" : "s", sets.c_str());
    break;
  }
  return failures == 0 ? 0 : 3;
}

int run_info(const std::string& path) {
  if (fs::path(path).extension() == ".safetensors") return run_checkpoint_info(path);
  const io::PngContents png = io::read_png(path);
  std::printf("%s: %dx%d\n", path.c_str(), png.image.width, png.image.height);
  if (const std::string* sw = png.find("Software")) std::printf("written by %s\n", sw->c_str());
  if (const std::string* p = png.find("parameters")) std::printf("\nparameters:\n%s\n", p->c_str());
  if (const std::string* n = png.find("nanscope")) {
    try {
      std::printf("\nnanscope:\n%s\n", nlohmann::json::parse(*n).dump(2).c_str());
    } catch (const nlohmann::json::exception&) {
      std::printf("\nnanscope (not valid JSON):\n%s\n", n->c_str());
    }
  }
  if (!png.find("parameters") && !png.find("nanscope")) std::printf("no generation metadata in this PNG\n");
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate images (txt2img) and save them as PNG with metadata");
  cmd->add_option("--preset", o->preset, "Start from a preset JSON file");
  cmd->add_option("--model", o->model,
                  "Diffusers model folder or single-file SD 1.x/2.x/XL .safetensors (default: the embedded "
                  "nanscope-tiny model)");
  cmd->add_option("--vae", o->vae,
                  "A VAE folder or .safetensors file to use instead of the model's own (e.g. an fp16-fix VAE)");
  cmd->add_option("-p,--prompt", o->prompt, "The prompt");
  cmd->add_option("-n,--negative", o->negative, "The negative prompt");
  cmd->add_option("--steps", o->steps, "Sampling steps");
  cmd->add_option("--cfg", o->cfg, "Classifier-free guidance scale (<= 1 turns guidance off)");
  cmd->add_option("--seed", o->seed, "Seed of the first image");
  cmd->add_option("--batch", o->batch, "Images to make (seeds seed, seed+1, ...)");
  cmd->add_option("--size", o->size, "Image size WxH (default: the model's)");
  cmd->add_option("--sampler", o->sampler,
                  "euler, euler_a, ddim, dpmpp_2m, dpmpp_2m_sde, dpmpp_sde, heun, lms, unipc, ddpm, lcm "
                  "(dpmpp_2m_karras: dpmpp_2m with --schedule karras)");
  cmd->add_option("--schedule", o->schedule,
                  "Sigma schedule: default (the sampler's diffusers class), karras, exponential, sgm_uniform, simple, "
                  "normal, ddim_uniform");
  cmd->add_option("--noise", o->noise,
                  "Noise source: nanscope (same on every device), torch-cpu (as diffusers on the CPU) or torch-cuda "
                  "(torch.randn on a CUDA GPU: A1111's default)");
  cmd->add_option("--nan-policy", o->nan_policy,
                  "report, stop, retry-vae-f32, retry-vae:PATH or retry-layer-f32 (upcast only the module "
                  "that broke to f32 and redo that call)");
  cmd->add_option("--set", o->sets, "Any run setting as key=value, e.g. unet.dtype=f16 (repeatable)");
  cmd->add_option("--lora", o->loras,
                  "A LoRA to apply as FILE[:WEIGHT] or FILE:TE:UNET (text encoder and UNet apart; repeatable; added "
                  "to the lora setting; lora.mode=unmerged traces it apart as <module>.lora)");
  cmd->add_option("--save-preset", o->save_preset, "Also save the resulting run configuration as a preset");
  cmd->add_option("--dump", o->dump,
                  "Write text embeddings, initial noise, every step's latent and the image "
                  "as safetensors into this folder");
  cmd->add_option("-o,--output", o->out, "Output PNG (batches add -SEED to the name)");
  cmd->callback([&g, &action, o] { action = [&g, o] { return run_generate(g, *o); }; });

  auto path = std::make_shared<std::string>();
  CLI::App* info = app.add_subcommand(
      "info", "Show the generation metadata stored in a PNG, or a single-file checkpoint's contents");
  info->add_option("png", *path, "A PNG written by NaNscope (or A1111), or a .safetensors checkpoint")->required();
  info->callback([&action, path] { action = [path] { return run_info(*path); }; });
}

}  // namespace nanscope::cli
