// Reading other tools' images (A1111 infotext, ComfyUI's API graph), finding
// their files by A1111's hashes, and `nanscope-cli reproduce`.
//
// The images are made here: A1111's text as its create_infotext writes it
// (values quoted by infotext_utils.quote(): JSON strings when they hold ',',
// ':' or a newline), ComfyUI's "prompt" chunk as its API format holds it
// ({"id": {"class_type", "inputs"}}, links ["id", output]).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/foreign_generation.hpp"
#include "config/png_metadata.hpp"
#include "core/error.hpp"
#include "io/file_hash.hpp"
#include "io/png.hpp"
#include "io/safetensors.hpp"
#include "studies/reproduce.hpp"
#include "support/errors.hpp"
#include "support/oracle.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::error_of;
using test::expect_contains;

const char* kA1111 =
    "a castle on a hill, <lora:add_detail:0.8>, night\n"
    "Negative prompt: blurry, lowres\n"
    "Steps: 28, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6.5, Seed: 3141592653, Size: 512x768, "
    "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, VAE hash: 735e4c3a44, VAE: vae-ft-mse.safetensors, "
    "Clip skip: 2, Denoising strength: 0.45, Hires upscale: 1.5, Hires steps: 12, "
    "Hires upscaler: \"4x-UltraSharp, v2\", Lora hashes: \"add_detail: 0123456789ab, other: ba9876543210\", "
    "ENSD: 31337, Eta: 0.67, RNG: NV, Template: \"a, \\\"b\\\": c\", Version: v1.9.3";

TEST(ForeignA1111, ReadsEveryFieldIncludingQuotedOnes) {
  const ForeignGeneration g = foreign_from_a1111(kA1111);
  EXPECT_EQ(g.tool, ForeignTool::a1111);
  EXPECT_EQ(g.prompt, "a castle on a hill, <lora:add_detail:0.8>, night");
  EXPECT_EQ(g.negative_prompt, "blurry, lowres");
  EXPECT_EQ(g.steps, 28);
  EXPECT_EQ(g.sampler, "DPM++ 2M");
  EXPECT_EQ(g.schedule, "Karras");
  EXPECT_EQ(g.cfg_scale, 6.5);
  EXPECT_EQ(g.seed, 3141592653ULL);
  EXPECT_EQ(g.width, 512);
  EXPECT_EQ(g.height, 768);
  EXPECT_EQ(g.model, "v1-5-pruned-emaonly");
  EXPECT_EQ(g.model_hash, "6ce0161689");
  EXPECT_EQ(g.vae, "vae-ft-mse.safetensors");
  EXPECT_EQ(g.vae_hash, "735e4c3a44");
  EXPECT_EQ(g.clip_skip, 2);
  EXPECT_EQ(g.denoise, 0.45);
  EXPECT_EQ(g.hires_upscale, 1.5);
  EXPECT_EQ(g.hires_steps, 12);
  EXPECT_EQ(g.hires_upscaler, "4x-UltraSharp, v2");
  EXPECT_EQ(g.hires_denoise, 0.45);  // A1111 writes the second pass's denoising as "Denoising strength"
  EXPECT_EQ(g.ensd, 31337);
  EXPECT_EQ(g.eta, 0.67);
  EXPECT_EQ(g.rng, "NV");
  EXPECT_EQ(g.version, "v1.9.3");
  ASSERT_EQ(g.loras.size(), 2u);
  EXPECT_EQ(g.loras[0].name, "add_detail");
  EXPECT_EQ(g.loras[0].weight, 0.8);
  EXPECT_EQ(g.loras[0].hash, "0123456789ab");
  EXPECT_EQ(g.loras[1].name, "other");  // named only by Lora hashes
  EXPECT_EQ(g.loras[1].source, "Lora hashes");
  ASSERT_EQ(g.unknown_fields.size(), 1u);
  EXPECT_EQ(g.unknown_fields[0].first, "Template");
  EXPECT_EQ(g.unknown_fields[0].second, "a, \"b\": c");
}

TEST(ForeignA1111, MissingFieldsTakeA1111sDefaults) {
  const ForeignGeneration g = foreign_from_a1111("just a prompt\nSteps: 5, Sampler: Euler, Seed: 7");
  EXPECT_EQ(g.rng, "GPU");    // infotext_utils: a missing RNG means the GPU generator
  EXPECT_EQ(g.clip_skip, 1);  // and a missing Clip skip means 1
  EXPECT_FALSE(g.width);
  EXPECT_FALSE(g.cfg_scale);
  EXPECT_TRUE(g.model.empty());
  EXPECT_TRUE(g.loras.empty());
  // Fewer than 3 fields: the last line is prompt (A1111's rule).
  const ForeignGeneration p = foreign_from_a1111("line one\nSteps: 5, Seed: 7");
  EXPECT_EQ(p.prompt, "line one\nSteps: 5, Seed: 7");
  EXPECT_FALSE(p.steps);
}

TEST(ForeignA1111, BadValuesNameTheField) {
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p\nSteps: many, Sampler: Euler, Seed: 1"); }),
                  {"Steps: many", "integer"});
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p\nSteps: 4, Size: 512by512, Seed: 1"); }),
                  {"Size: 512by512", "WxH"});
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p\nSteps: 4, Seed: -3, CFG scale: 7"); }),
                  {"Seed: -3"});
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p\nSteps: 4, Seed: 1, Model hash: xyz"); }),
                  {"Model hash: xyz", "hexadecimal"});
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p <lora:x:heavy>\nSteps: 4, Seed: 1, RNG: CPU"); }),
                  {"<lora:x:heavy>", "weight"});
  expect_contains(error_of<ConfigError>([] { foreign_from_a1111("p\nSteps: 4, Seed: 1, RNG: TPU"); }),
                  {"RNG: TPU", "GPU, CPU or NV"});
}

// ------------------------------------------------------------- ComfyUI ----

json link(const char* node, int output) { return json::array({node, output}); }

// The default ComfyUI graph plus a LoRA chain, clip skip, an external VAE and
// a ControlNet on the positive prompt.
json comfy_graph() {
  json g;
  g["4"] = {{"class_type", "CheckpointLoaderSimple"}, {"inputs", {{"ckpt_name", "sd15/dreamy.safetensors"}}}};
  g["10"] = {{"class_type", "LoraLoader"},
             {"inputs",
              {{"model", link("4", 0)},
               {"clip", link("4", 1)},
               {"lora_name", "detail.safetensors"},
               {"strength_model", 0.7},
               {"strength_clip", 0.5}}}};
  g["11"] = {{"class_type", "LoraLoader"},
             {"inputs",
              {{"model", link("10", 0)},
               {"clip", link("10", 1)},
               {"lora_name", "style/ink.safetensors"},
               {"strength_model", 1.0},
               {"strength_clip", 1.0}}}};
  g["12"] = {{"class_type", "CLIPSetLastLayer"}, {"inputs", {{"clip", link("11", 1)}, {"stop_at_clip_layer", -2}}}};
  g["6"] = {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", "a lighthouse, storm"}, {"clip", link("12", 0)}}}};
  g["7"] = {{"class_type", "CLIPTextEncode"}, {"inputs", {{"text", "text, watermark"}, {"clip", link("12", 0)}}}};
  g["20"] = {{"class_type", "ControlNetLoader"}, {"inputs", {{"control_net_name", "canny.safetensors"}}}};
  g["21"] = {{"class_type", "LoadImage"}, {"inputs", {{"image", "edges.png"}}}};
  g["22"] = {
      {"class_type", "ControlNetApply"},
      {"inputs",
       {{"conditioning", link("6", 0)}, {"control_net", link("20", 0)}, {"image", link("21", 0)}, {"strength", 0.9}}}};
  g["5"] = {{"class_type", "EmptyLatentImage"}, {"inputs", {{"width", 640}, {"height", 448}, {"batch_size", 1}}}};
  g["3"] = {{"class_type", "KSampler"},
            {"inputs",
             {{"seed", 156680208700286ULL},
              {"steps", 20},
              {"cfg", 8},
              {"sampler_name", "dpmpp_2m"},
              {"scheduler", "karras"},
              {"denoise", 1},
              {"model", link("11", 0)},
              {"positive", link("22", 0)},
              {"negative", link("7", 0)},
              {"latent_image", link("5", 0)}}}};
  g["13"] = {{"class_type", "VAELoader"}, {"inputs", {{"vae_name", "kl-f8.safetensors"}}}};
  g["8"] = {{"class_type", "VAEDecode"}, {"inputs", {{"samples", link("3", 0)}, {"vae", link("13", 0)}}}};
  g["9"] = {{"class_type", "SaveImage"}, {"inputs", {{"filename_prefix", "ComfyUI"}, {"images", link("8", 0)}}}};
  return g;
}

TEST(ForeignComfyUI, FollowsTheSamplersLinks) {
  const ForeignGeneration g = foreign_from_comfyui(comfy_graph().dump(), R"({"nodes": []})");
  EXPECT_EQ(g.tool, ForeignTool::comfyui);
  EXPECT_EQ(g.sampler_node, "3");
  EXPECT_EQ(g.seed, 156680208700286ULL);
  EXPECT_EQ(g.steps, 20);
  EXPECT_EQ(g.cfg_scale, 8.0);
  EXPECT_EQ(g.sampler, "dpmpp_2m");
  EXPECT_EQ(g.schedule, "karras");
  EXPECT_EQ(g.denoise, 1.0);
  EXPECT_EQ(g.prompt, "a lighthouse, storm");  // read through the ControlNetApply
  EXPECT_EQ(g.negative_prompt, "text, watermark");
  EXPECT_EQ(g.width, 640);
  EXPECT_EQ(g.height, 448);
  EXPECT_EQ(g.clip_skip, 2);
  EXPECT_EQ(g.model, "sd15/dreamy.safetensors");
  EXPECT_EQ(g.vae, "kl-f8.safetensors");
  EXPECT_EQ(g.rng, "CPU");
  ASSERT_EQ(g.loras.size(), 2u);
  EXPECT_EQ(g.loras[0].name, "style/ink.safetensors");  // nearest the sampler first
  EXPECT_EQ(g.loras[1].name, "detail.safetensors");
  EXPECT_EQ(g.loras[1].weight, 0.7);
  EXPECT_EQ(g.loras[1].clip_weight, 0.5);
  ASSERT_EQ(g.unsupported_nodes.size(), 3u);
  EXPECT_EQ(g.unsupported_nodes[0].id, "22");
  EXPECT_EQ(g.unsupported_nodes[0].class_type, "ControlNetApply");
  EXPECT_EQ(g.unsupported_nodes[0].reached_by, "node 3 'KSampler' input 'positive'");
  EXPECT_TRUE(g.workflow.is_object());
}

TEST(ForeignComfyUI, BrokenGraphsNameTheNodeAndInput) {
  {
    json g = comfy_graph();  // a cycle: 10's model comes from 11, whose model comes from 10
    g["10"]["inputs"]["model"] = link("11", 0);
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"cycle", "'LoraLoader' input '", "10 -> 11 -> 10"});
  }
  {
    json g = comfy_graph();
    g["3"]["inputs"]["model"] = link("99", 0);
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"node 3 'KSampler' input 'model'", "node 99", "dangling"});
  }
  {
    json g = comfy_graph();
    g["3"]["inputs"]["steps"] = "twenty";
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"node 3 'KSampler' input 'steps'", "expected an integer", "twenty"});
  }
  {
    json g = comfy_graph();
    g["3"]["inputs"].erase("seed");
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"node 3 'KSampler' input 'seed'", "missing"});
  }
  {
    json g = comfy_graph();
    g["8"]["inputs"]["vae"] = link("4", 1);  // the checkpoint's CLIP where a VAE belongs
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"node 8 'VAEDecode' input 'vae'", "output 1", "'CheckpointLoaderSimple'", "output 2"});
  }
  {
    json g = comfy_graph();
    g["12"]["inputs"]["stop_at_clip_layer"] = 3;
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }),
                    {"node 12 'CLIPSetLastLayer' input 'stop_at_clip_layer'"});
  }
  {
    json g = comfy_graph();
    g.erase("3");
    g["8"]["inputs"]["samples"] = link("5", 0);
    expect_contains(error_of<ConfigError>([&] { foreign_from_comfyui(g.dump()); }), {"no KSampler"});
  }
  expect_contains(error_of<ConfigError>([] { foreign_from_comfyui("[1, 2]"); }), {"expected an object of nodes"});
  expect_contains(error_of<ConfigError>([] { foreign_from_comfyui("{\"3\": "); }), {"not valid JSON"});
  expect_contains(error_of<ConfigError>([] { foreign_from_comfyui(R"({"3": {"inputs": {}}})"); }),
                  {"node 3", "class_type"});
}

TEST(ForeignComfyUI, KSamplerAdvancedAndAnImg2ImgLatent) {
  json g = comfy_graph();
  g["3"] = {{"class_type", "KSamplerAdvanced"},
            {"inputs",
             {{"add_noise", "enable"},
              {"noise_seed", 5},
              {"steps", 30},
              {"cfg", 7.5},
              {"sampler_name", "dpmpp_3m_sde"},
              {"scheduler", "exponential"},
              {"start_at_step", 4},
              {"end_at_step", 10000},
              {"return_with_leftover_noise", "disable"},
              {"model", link("11", 0)},
              {"positive", link("6", 0)},
              {"negative", link("7", 0)},
              {"latent_image", link("30", 0)}}}};
  g["30"] = {{"class_type", "VAEEncode"}, {"inputs", {{"pixels", link("21", 0)}, {"vae", link("13", 0)}}}};
  const ForeignGeneration f = foreign_from_comfyui(g.dump());
  EXPECT_EQ(f.seed, 5u);
  EXPECT_EQ(f.start_step, 4);
  EXPECT_EQ(f.latent_source, "VAEEncode");
  EXPECT_FALSE(f.width);
  studies::ReproducePlan plan;
  plan.generation = f;
  studies::map_onto_run_config(plan);
  std::string all;
  for (const auto& n : plan.not_reproducible) all += n.reason + "\n";
  expect_contains(all, {"sampler 'dpmpp_3m_sde' with schedule 'exponential' unknown", "starts at step 4", "'VAEEncode'",
                        "node 30 'VAEEncode'", "node 21 'LoadImage'", "LoRA 'detail.safetensors'"});
}

// ------------------------------------------------------------ PNG files ----

io::RgbImage tiny_image() { return io::RgbImage{2, 2, std::vector<std::uint8_t>(12, 128)}; }

TEST(ForeignPng, TellsTheFormatsApartThroughRealPngFiles) {
  test::TempDir dir;
  const fs::path comfy = dir / "comfy.png";
  io::write_png(comfy, tiny_image(), {{"prompt", comfy_graph().dump()}, {"workflow", "{\"links\": []}"}});
  auto g = foreign_generation_from_png(io::read_png(comfy), comfy.string());
  ASSERT_TRUE(g);
  EXPECT_EQ(g->tool, ForeignTool::comfyui);

  const fs::path a1111 = dir / "a1111.png";
  io::write_png(a1111, tiny_image(), {{"parameters", kA1111}});
  g = foreign_generation_from_png(io::read_png(a1111), a1111.string());
  ASSERT_TRUE(g);
  EXPECT_EQ(g->tool, ForeignTool::a1111);
  EXPECT_EQ(g->hires_upscaler, "4x-UltraSharp, v2");

  const fs::path own = dir / "own.png";
  write_run_png(own, tiny_image(), RunConfig{});
  EXPECT_FALSE(foreign_generation_from_png(io::read_png(own), own.string()));

  // A broken graph's error names the file and the node.
  json broken = comfy_graph();
  broken["3"]["inputs"]["latent_image"] = link("77", 0);
  const fs::path bad = dir / "bad.png";
  io::write_png(bad, tiny_image(), {{"prompt", broken.dump()}});
  expect_contains(error_of<ConfigError>([&] { foreign_generation_from_png(io::read_png(bad), bad.string()); }),
                  {bad.string(), "node 3 'KSampler' input 'latent_image'", "node 77"});
}

TEST(ForeignPng, HugeTextChunksAreReadAndAnOverlongPromptIsNamed) {
  test::TempDir dir;
  const std::string prompt(300000, 'x');  // 300 KB: beyond what a RunConfig holds (64 KiB)
  const fs::path png = dir / "huge.png";
  io::write_png(png, tiny_image(), {{"parameters", prompt + "\nSteps: 4, Sampler: Euler, Seed: 9, Size: 64x64"}});
  const auto g = foreign_generation_from_png(io::read_png(png), png.string());
  ASSERT_TRUE(g);
  EXPECT_EQ(g->prompt.size(), prompt.size());
  EXPECT_EQ(g->steps, 4);
  studies::ReproducePlan plan;
  plan.generation = *g;
  studies::map_onto_run_config(plan);
  ASSERT_FALSE(plan.not_reproducible.empty());
  EXPECT_EQ(plan.not_reproducible.front().what, "prompt");
  expect_contains(plan.not_reproducible.front().reason, {"prompt", "65536"});

  // A graph with thousands of nodes on the sampler's path (a long chain of unknown nodes).
  json graph = comfy_graph();
  std::string prev = "11";
  for (int i = 0; i < 3000; ++i) {
    const std::string id = "n" + std::to_string(i);
    graph[id] = {{"class_type", "ModelPatch"}, {"inputs", {{"model", json::array({prev, 0})}}}};
    prev = id;
  }
  graph["3"]["inputs"]["model"] = json::array({prev, 0});
  const ForeignGeneration big = foreign_from_comfyui(graph.dump());
  EXPECT_EQ(big.model, "sd15/dreamy.safetensors");
  EXPECT_EQ(big.unsupported_nodes.size(), 3003u);  // 3000 patches + the ControlNet's three
}

// -------------------------------------------------------------- hashing ----

std::string shell_sha256(const std::string& pipeline) {
  const auto r = test::run_process({"/bin/sh", "-c", pipeline + " | sha256sum"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.substr(0, 64);
}

void write_bytes(const fs::path& p, std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  unsigned x = seed * 2654435761u + 1;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 16);
  }
  std::ofstream(p, std::ios::binary) << s;
}

TEST(FileHash, AutoV2AutoV1AndTheLoraHashAgreeWithSha256sum) {
  test::TempDir dir;
  const fs::path abc = dir / "abc.bin";
  std::ofstream(abc, std::ios::binary) << "abc";
  const io::FileHashes small = io::hash_file(abc);
  // FIPS 180-2's test vector.
  EXPECT_EQ(small.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(small.autov1, "e3b0c442");  // nothing at 1 MiB: sha256 of no bytes, as A1111's model_hash gives
  EXPECT_TRUE(small.addnet_sha256.empty());

  const fs::path big = dir / "big.bin";
  write_bytes(big, 0x100000 + 0x10000 + 777, 3);
  const io::FileHashes h = io::hash_file(big);
  EXPECT_EQ(h.sha256, shell_sha256("cat '" + big.string() + "'"));
  EXPECT_EQ(h.autov1, shell_sha256("tail -c +1048577 '" + big.string() + "' | head -c 65536").substr(0, 8));

  const fs::path st = dir / "lora.safetensors";
  io::write_safetensors(st, {{"w", HostTensor::from_f32({3, 5}, std::vector<float>(15, 0.25f))}});
  std::ifstream in(st, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ(io::hash_file(st).addnet_sha256,
            shell_sha256("tail -c +" + std::to_string(8 + n + 1) + " '" + st.string() + "'"));
}

// A models folder: a checkpoint renamed since the image was made, an old
// checkpoint known by its AutoV1 hash, a VAE and a LoRA.
struct Models {
  test::TempDir dir;
  fs::path ckpt, old_ckpt, vae, lora;
  io::FileHashes ckpt_h, old_h, vae_h, lora_h;
  Models() {
    fs::create_directories(dir / "checkpoints/sd15");
    fs::create_directories(dir / "vae");
    fs::create_directories(dir / "loras/style");
    ckpt = dir / "checkpoints/sd15/renamed.safetensors";
    io::write_safetensors(ckpt, {{"a", HostTensor::from_f32({4}, {1, 2, 3, 4})}});
    old_ckpt = dir / "checkpoints/old-model.ckpt.safetensors";
    write_bytes(old_ckpt, 0x110000 + 100, 5);
    vae = dir / "vae/kl-f8.safetensors";
    io::write_safetensors(vae, {{"v", HostTensor::from_f32({2}, {5, 6})}});
    lora = dir / "loras/style/ink.safetensors";
    io::write_safetensors(lora, {{"l", HostTensor::from_f32({2}, {7, 8})}});
    ckpt_h = io::hash_file(ckpt);
    old_h = io::hash_file(old_ckpt);
    vae_h = io::hash_file(vae);
    lora_h = io::hash_file(lora);
  }
};

TEST(Reproduce, FindsFilesByA1111HashesAndByName) {
  Models m;
  const std::string text =
      "a cat <lora:ink:0.6>\nSteps: 4, Sampler: Euler a, CFG scale: 5, Seed: 11, Size: 64x64, "
      "Model hash: " +
      m.ckpt_h.sha256.substr(0, 10) +
      ", Model: the-old-name, VAE: kl-f8.safetensors, Lora hashes: \"ink: " + m.lora_h.addnet_sha256.substr(0, 12) +
      "\", RNG: CPU";
  io::FileHashCache cache(m.dir / "cache.json");
  const auto plan = studies::plan_reproduction(foreign_from_a1111(text), m.dir.path(), cache);
  EXPECT_EQ(plan.checkpoint.path, m.ckpt);
  expect_contains(plan.checkpoint.how, {"AutoV2"});
  EXPECT_EQ(plan.vae.path, m.vae);
  EXPECT_EQ(plan.vae.how, "file name");
  ASSERT_EQ(plan.loras.size(), 1u);
  EXPECT_EQ(plan.loras[0].path, m.lora);
  expect_contains(plan.loras[0].how, {"LoRA hash"});
  EXPECT_TRUE(plan.runnable());
  EXPECT_EQ(plan.config.model, m.ckpt.string());
  EXPECT_EQ(plan.config.vae, m.vae.string());
  // The LoRA tag is not text for the encoder; A1111 removes the tag alone, the space before it stays.
  EXPECT_EQ(plan.config.prompt, "a cat ");
  EXPECT_EQ(plan.config.sampler, SamplerId::euler_a);
  EXPECT_EQ(plan.config.noise, NoiseKind::torch_cpu);
  EXPECT_EQ(plan.config.width, 64);
  EXPECT_EQ(plan.config.seed, 11u);
  // The LoRA found by its hash is applied with the tag's weight.
  ASSERT_EQ(plan.config.loras.size(), 1u);
  EXPECT_EQ(plan.config.loras[0].path, m.lora.string());
  EXPECT_EQ(plan.config.loras[0].weight, 0.6);
  EXPECT_TRUE(plan.not_reproducible.empty()) << plan.not_reproducible[0].reason;

  // AutoV1: the old 8-digit hash of 64 KiB at 1 MiB.
  const std::string old = "x\nSteps: 4, Sampler: Euler, Seed: 1, Model hash: " + m.old_h.autov1 + ", Model: gone";
  const auto plan1 = studies::plan_reproduction(foreign_from_a1111(old), m.dir.path(), cache);
  EXPECT_EQ(plan1.checkpoint.path, m.old_ckpt);
  expect_contains(plan1.checkpoint.how, {"AutoV1"});

  // ComfyUI names files by their path under its models folder.
  const auto comfy = studies::plan_reproduction(foreign_from_comfyui(comfy_graph().dump()), m.dir.path(), cache);
  EXPECT_TRUE(comfy.checkpoint.path.empty());  // sd15/dreamy.safetensors is not there
  EXPECT_FALSE(comfy.runnable());
  EXPECT_EQ(comfy.vae.path, m.vae);
  EXPECT_EQ(comfy.loras[0].path, m.lora);  // "style/ink.safetensors" under loras/
  std::string all;
  for (const auto& n : comfy.not_reproducible) all += n.reason + "\n";
  expect_contains(
      all, {"LoRA 'detail.safetensors' not found in " + m.dir.path().string(),
            "ControlNet node 22 'ControlNetApply' on the sampler's path", "checkpoint 'sd15/dreamy", "nothing is run"});

  // An unknown sampler is named, not replaced silently.
  const auto unknown = studies::plan_reproduction(
      foreign_from_a1111("x\nSteps: 4, Sampler: DPM++ 3M SDE, Seed: 1, RNG: CPU"), m.dir.path(), cache);
  expect_contains(unknown.not_reproducible.at(0).reason, {"sampler 'DPM++ 3M SDE' unknown"});
}

TEST(Reproduce, TheHashCacheHashesAFolderOnceAndAChangedFileAgain) {
  Models m;
  const fs::path cache_file = m.dir / "cache" / "hashes.json";
  // A hash no file has: every candidate is hashed.
  const ForeignGeneration g = foreign_from_a1111("x\nSteps: 4, Seed: 1, Model hash: 0000000000, Model: nothing");
  {
    io::FileHashCache cache(cache_file);
    const auto plan = studies::plan_reproduction(g, m.dir.path(), cache);
    EXPECT_EQ(plan.hashed_files, 4);  // every .safetensors file can be a checkpoint: the VAE and LoRA too
    EXPECT_FALSE(plan.runnable());
  }
  {
    io::FileHashCache cache(cache_file);
    const auto plan = studies::plan_reproduction(g, m.dir.path(), cache);
    EXPECT_EQ(plan.hashed_files, 0);
  }
  {
    // A touched file is hashed again; the others come from the cache.
    fs::last_write_time(m.vae, fs::last_write_time(m.vae) + std::chrono::seconds(5));
    io::FileHashCache cache(cache_file);
    const auto plan = studies::plan_reproduction(g, m.dir.path(), cache);
    EXPECT_EQ(plan.hashed_files, 1);
  }
  {
    // A corrupt cache is ignored with a warning, and rewritten.
    std::ofstream(cache_file) << "{ not json";
    io::FileHashCache cache(cache_file);
    ASSERT_EQ(cache.warnings().size(), 1u);
    expect_contains(cache.warnings()[0], {cache_file.string(), "ignoring it"});
    const auto plan = studies::plan_reproduction(g, m.dir.path(), cache);
    EXPECT_GT(plan.hashed_files, 0);
    io::FileHashCache again(cache_file);
    EXPECT_TRUE(again.warnings().empty());
  }
}

// ------------------------------------------------------------------ CLI ----

TEST(ReproduceCli, RunsAnA1111ImageOnTheEmbeddedModel) {
  test::TempDir dir;
  const fs::path models = dir / "models";
  fs::create_directories(models / "checkpoints");
  fs::create_directory_symlink(fs::path(NANSCOPE_SOURCE_DIR) / "resources/models/nanscope-tiny",
                               models / "checkpoints/nanscope-tiny");
  const fs::path png = dir / "from-a1111.png";
  io::write_png(png, tiny_image(),
                {{"parameters",
                  "a red circle, <lora:missing_lora:0.5>\nNegative prompt: blue\nSteps: 2, Sampler: Euler a, CFG "
                  "scale: 5, Seed: 42, Size: 32x32, Model: nanscope-tiny, RNG: CPU, Hires upscale: 2"}});
  const fs::path report = dir / "report.json";
  const fs::path out = dir / "out.png";
  const auto r = test::run_process({NANSCOPE_CLI_PATH, "--device", "reference", "reproduce", png.string(), "--models",
                                    models.string(), "--hash-cache", (dir / "hashes.json").string(), "--run", "--json",
                                    report.string(), "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_contains(r.out,
                  {"--set steps=2", "--set sampler=euler_a", "--set width=32", "nanscope-tiny (by file name)",
                   "LoRA 'missing_lora' not found in " + models.string(), "--set hires.scale=2", "verdict: clean"});
  std::ifstream in(report);
  const json j = json::parse(in);
  EXPECT_EQ(j["plan"]["generation"]["tool"], "A1111");
  EXPECT_EQ(j["plan"]["runnable"], true);
  EXPECT_EQ(j["plan"]["not_reproducible"].size(), 1u);  // the missing LoRA
  EXPECT_TRUE(j["run"].is_object());
  const io::PngContents made = io::read_png(out);
  EXPECT_EQ(made.image.width, 64);  // 32x32 and the hires fix at 2x
  const auto cfg = config_from_png(made, out.string());
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->prompt, "a red circle, ");  // the LoRA tag alone is removed, as A1111 does
  EXPECT_EQ(cfg->hires_scale, 2.0);
  EXPECT_EQ(cfg->seed, 42u);

  // Without --models, an image from another tool is refused with a message that says what to pass.
  const auto no_models = test::run_process({NANSCOPE_CLI_PATH, "reproduce", png.string()});
  EXPECT_NE(no_models.exit_code, 0);
  expect_contains(no_models.err, {"--models DIR"});
}

}  // namespace
}  // namespace nanscope
