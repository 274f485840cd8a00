// Single-file (original LDM layout) checkpoints for SD 1.x, SD 2.x and SDXL,
// on tiny seeded diffusers pipelines made by tests/oracles/single_file_oracle.py:
//
// - the family's name table maps every diffusers tensor to an LDM key and back
//   (a bijection over the model's key set, fused q/k/v counted as three parts);
// - a single file written with the table, converted back by diffusers' own
//   convert_ldm_unet/vae/clip and convert_open_clip_checkpoint, gives exactly
//   the model's tensors (so the table agrees with diffusers');
// - the engine loads the single file with the configs it infers from the
//   tensors and gives bit-identical UNet, VAE and text encoder outputs to the
//   same model loaded from its diffusers folder (same backend, same dtype);
// - a lone VAE file (original or diffusers names) loads as --vae;
// - missing tensors, wrong shapes, pickles and non-checkpoints are refused
//   with messages naming the file, the LDM key, the diffusers path and shapes;
// - nanscope-cli info and generate take the file.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "models/ldm_checkpoint.hpp"
#include "pipeline/sd_model.hpp"
#include "pipeline/session.hpp"
#include "support/compare.hpp"
#include "support/ldm_writer.hpp"
#include "support/oracle.hpp"
#include "support/random.hpp"

namespace nanscope {
namespace {

namespace fs = std::filesystem;
using models::ModelFamily;

const char* family_arg(ModelFamily f) {
  switch (f) {
    case ModelFamily::sd1: return "sd1";
    case ModelFamily::sd2: return "sd2";
    case ModelFamily::sdxl: return "sdxl";
  }
  return "?";
}

std::vector<std::string> components(ModelFamily f) {
  std::vector<std::string> c{"unet", "vae", "text_encoder"};
  if (f == ModelFamily::sdxl) c.emplace_back("text_encoder_2");
  return c;
}

// Every tensor of the diffusers folder, named "<component>.<diffusers name>".
std::vector<std::pair<std::string, HostTensor>> folder_tensors(const fs::path& folder, ModelFamily f) {
  std::vector<std::pair<std::string, HostTensor>> out;
  for (const auto& comp : components(f)) {
    const fs::path dir = folder / comp;
    const fs::path file =
        fs::exists(dir / "model.safetensors") ? dir / "model.safetensors" : dir / "diffusion_pytorch_model.safetensors";
    const auto st = io::SafetensorsFile::open(file);
    for (const auto& e : st.entries()) out.emplace_back(comp + "." + e.name, st.read(e, DType::f32));
  }
  return out;
}

models::LdmStructure folder_structure(const fs::path& folder, ModelFamily f) {
  models::LdmStructure s;
  s.family = f;
  s.unet = models::UNetConfig::from_json(models::ConfigJson::load(folder / "unet" / "config.json"));
  s.vae = models::VaeConfig::from_json(models::ConfigJson::load(folder / "vae" / "config.json"));
  s.text_layers =
      models::ClipTextConfig::from_json(models::ConfigJson::load(folder / "text_encoder" / "config.json")).layers;
  if (f == ModelFamily::sdxl) {
    s.text_2_layers =
        models::ClipTextConfig::from_json(models::ConfigJson::load(folder / "text_encoder_2" / "config.json")).layers;
  }
  return s;
}

struct Made {
  fs::path folder;  // the diffusers pipeline
  fs::path file;    // the same model as one LDM .safetensors, with tokenizer(s) beside it
};

struct Fixture {
  test::TempDir dir;
  std::map<ModelFamily, Made> made;

  const Made& get(ModelFamily f) {
    if (auto it = made.find(f); it != made.end()) return it->second;
    const std::string name = family_arg(f);
    Made m;
    m.folder = dir / (name + "-diffusers");
    test::run_oracle("single_file_oracle.py", {"make", name, m.folder.string()});
    const fs::path single = dir / (name + "-single");
    fs::create_directories(single);
    m.file = single / ("tiny-" + name + ".safetensors");
    const models::LdmNameMap names(folder_structure(m.folder, f));
    test::write_ldm_checkpoint(m.file, names, folder_tensors(m.folder, f));
    fs::copy(m.folder / "tokenizer", single / "tokenizer");
    if (f == ModelFamily::sdxl) fs::copy(m.folder / "tokenizer_2", single / "tokenizer_2");
    return made[f] = m;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

class SingleFile : public ::testing::TestWithParam<ModelFamily> {};

std::string param_name(const ::testing::TestParamInfo<ModelFamily>& p) { return family_arg(p.param); }

// (a) diffusers -> LDM -> diffusers is the identity over the model's key set,
// and no two diffusers tensors land on the same LDM tensor (part).
TEST_P(SingleFile, TableRoundTripsEveryDiffusersName) {
  NANSCOPE_REQUIRE_PYTHON();
  const ModelFamily f = GetParam();
  const Made& m = fixture().get(f);
  const models::LdmNameMap names(folder_structure(m.folder, f));
  std::set<std::pair<std::string, int>> seen;
  std::size_t n = 0;
  for (const auto& [name, t] : folder_tensors(m.folder, f)) {
    ++n;
    const auto ref = names.to_ldm(name);
    ASSERT_TRUE(ref.has_value()) << "no table row for " << name;
    EXPECT_TRUE(seen.emplace(ref->key, ref->chunk).second) << name << " -> " << ref->key << " is taken twice";
    bool back = false;
    for (const auto& target : names.from_ldm(ref->key)) back |= target.diffusers == name && target.ref == *ref;
    EXPECT_TRUE(back) << name << " -> " << ref->key << " does not map back";
  }
  EXPECT_GT(n, 50u);
  // And the other way: every tensor of the written file maps to a model tensor or is a known extra.
  const auto file = io::SafetensorsFile::open(m.file);
  for (const auto& e : file.entries()) {
    EXPECT_TRUE(!names.from_ldm(e.name).empty() || names.ignored(e.name)) << e.name << " has no diffusers name";
  }
}

// (b) diffusers' own converters read the file we wrote back to the model's exact tensors.
TEST_P(SingleFile, DiffusersConvertsOurFileBackToTheSameTensors) {
  NANSCOPE_REQUIRE_PYTHON();
  const ModelFamily f = GetParam();
  const Made& m = fixture().get(f);
  const fs::path out = fixture().dir / (std::string(family_arg(f)) + "-convert.json");
  test::run_oracle("single_file_oracle.py",
                   {"convert", family_arg(f), m.folder.string(), m.file.string(), out.string()});
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  for (const auto& comp : components(f)) {
    SCOPED_TRACE(comp);
    ASSERT_TRUE(j.contains(comp));
    EXPECT_TRUE(j[comp]["missing"].empty()) << j[comp]["missing"].dump();
    EXPECT_TRUE(j[comp]["extra"].empty()) << j[comp]["extra"].dump();
    EXPECT_TRUE(j[comp]["differ"].empty()) << j[comp]["differ"].dump();
    EXPECT_GT(j[comp]["checked"].get<int>(), 5);
  }
}

// The configs inferred from the file equal the model's own where they matter.
TEST_P(SingleFile, InfersTheComponentConfigs) {
  NANSCOPE_REQUIRE_PYTHON();
  const ModelFamily f = GetParam();
  const Made& m = fixture().get(f);
  const auto ckpt = models::LdmCheckpoint::open(m.file);
  EXPECT_EQ(ckpt.family(), f);
  const auto want = folder_structure(m.folder, f);
  const auto unet = models::UNetConfig::from_json(models::ConfigJson(ckpt.unet_config(), "inferred"));
  EXPECT_EQ(unet.block_out_channels, want.unet.block_out_channels);
  EXPECT_EQ(unet.down_block_types, want.unet.down_block_types);
  EXPECT_EQ(unet.up_block_types, want.unet.up_block_types);
  EXPECT_EQ(unet.layers_per_block, want.unet.layers_per_block);
  EXPECT_EQ(unet.heads, want.unet.heads);
  EXPECT_EQ(unet.cross_attention_dim, want.unet.cross_attention_dim);
  EXPECT_EQ(unet.transformer_layers_per_block, want.unet.transformer_layers_per_block);
  EXPECT_EQ(unet.use_linear_projection, want.unet.use_linear_projection);
  EXPECT_EQ(unet.text_time, want.unet.text_time);
  EXPECT_EQ(unet.addition_time_embed_dim, want.unet.addition_time_embed_dim);
  EXPECT_EQ(unet.projection_class_embeddings_input_dim, want.unet.projection_class_embeddings_input_dim);
  const auto vae = models::VaeConfig::from_json(models::ConfigJson(ckpt.vae_config(), "inferred"));
  EXPECT_EQ(vae.block_out_channels, want.vae.block_out_channels);
  EXPECT_EQ(vae.layers_per_block, want.vae.layers_per_block);
  EXPECT_FLOAT_EQ(vae.scaling_factor, want.vae.scaling_factor);
  const auto te = models::ClipTextConfig::from_json(models::ConfigJson(ckpt.text_encoder_config(), "inferred"));
  EXPECT_EQ(te.layers, want.text_layers);
  EXPECT_EQ(te.quick_gelu, f != ModelFamily::sd2);
  EXPECT_TRUE(ckpt.unclaimed().empty()) << ckpt.unclaimed().front();
  std::size_t tensors = 0;
  for (const auto& c : ckpt.components()) {
    EXPECT_GT(c.tensors, 0u) << c.name;
    EXPECT_EQ(c.dtypes, "F32") << c.name;
    tensors += c.tensors;
  }
  // q, k and v (weight and bias) become one in_proj weight and bias per OpenCLIP layer.
  const int open_clip_layers = f == ModelFamily::sd2    ? want.text_layers
                               : f == ModelFamily::sdxl ? want.text_2_layers
                                                        : 0;
  EXPECT_EQ(tensors, folder_tensors(m.folder, f).size() - 4u * static_cast<std::size_t>(open_clip_layers));
}

OpContext context(Backend& be) {
  OpContext ctx;
  ctx.backend = &be;
  ctx.precision.dtype = DType::f32;
  return ctx;
}

// (c) the engine gives bit-identical outputs from the single file and from the folder.
TEST_P(SingleFile, SameOutputsAsTheDiffusersFolder) {
  NANSCOPE_REQUIRE_PYTHON();
  const ModelFamily f = GetParam();
  const Made& m = fixture().get(f);
  auto be = make_backend(select_device(enumerate_devices(), "reference"));
  const pipeline::ComponentDTypes dt;
  const auto a = pipeline::SdModel::load(m.folder, "", *be, dt);
  const auto b = pipeline::SdModel::load(m.file, "", *be, dt);
  EXPECT_EQ(a->family(), b->family());
  EXPECT_EQ(b->force_zeros_for_empty_prompt(), f == ModelFamily::sdxl);
  const OpContext ctx = context(*be);
  test::Rng rng(test::seed_from(std::string("single-file-") + family_arg(f)));

  // Text encoders: token ids from the model's own tokenizer.
  const auto ids = std::vector<std::vector<int>>{a->tokenizer.encode("a red circle, on a blue background!").ids};
  const auto ta = a->text_encoder->forward(ctx, ids, 0);
  const auto tb = b->text_encoder->forward(ctx, ids, 0);
  EXPECT_TRUE(test::bitwise_equal(be->download(tb.prompt_embeds), be->download(ta.prompt_embeds)));
  EXPECT_TRUE(test::bitwise_equal(be->download(tb.pooled), be->download(ta.pooled)));
  HostTensor text_embeds;
  if (f == ModelFamily::sdxl) {
    const auto ids2 = std::vector<std::vector<int>>{a->tokenizer_2->encode("a red circle").ids};
    const auto t2a = a->text_encoder_2->forward(ctx, ids2, 0);
    const auto t2b = b->text_encoder_2->forward(ctx, ids2, 0);
    EXPECT_TRUE(test::bitwise_equal(be->download(t2b.penultimate), be->download(t2a.penultimate)));
    EXPECT_TRUE(test::bitwise_equal(be->download(t2b.pooled), be->download(t2a.pooled)));
    text_embeds = be->download(t2a.pooled);
  }

  // UNet.
  const auto& uc = a->unet->config();
  const HostTensor sample = test::random_normal(rng, {1, 4, 8, 8}, DType::f32);
  const HostTensor context_h = test::random_normal(rng, {1, 77, uc.cross_attention_dim.front()}, DType::f32);
  const std::vector<float> timesteps{500.0f};
  models::AddedConditions added;
  if (f == ModelFamily::sdxl) {
    added.text_embeds = be->upload(text_embeds);
    added.time_ids = {64, 64, 0, 0, 64, 64};
  }
  const Tensor x = be->upload(sample), c = be->upload(context_h);
  const auto* add = f == ModelFamily::sdxl ? &added : nullptr;
  const HostTensor ua = be->download(a->unet->forward(ctx, x, timesteps, c, add));
  const HostTensor ub = be->download(b->unet->forward(ctx, x, timesteps, c, add));
  EXPECT_TRUE(test::bitwise_equal(ub, ua));

  // VAE decoder.
  const HostTensor latents = test::random_normal(rng, {1, 4, 8, 8}, DType::f32);
  const Tensor z = be->upload(latents);
  EXPECT_TRUE(test::bitwise_equal(be->download(b->vae->decode(ctx, z)), be->download(a->vae->decode(ctx, z))));
  EXPECT_EQ(b->vae->config().scaling_factor, a->vae->config().scaling_factor);
  // The VAE encoder too, through Vae::load on the file (the NaN policy's decode retry does this).
  const auto va = models::Vae::load(m.folder / "vae", *be, DType::f32, true);
  const auto vb = models::Vae::load(m.file, *be, DType::f32, true);
  const HostTensor image = test::random_uniform(rng, {1, 3, 16, 16}, DType::f32, -1.0, 1.0);
  const Tensor img = be->upload(image);
  EXPECT_TRUE(test::bitwise_equal(be->download(vb.encode(ctx, img)), be->download(va.encode(ctx, img))));
}

INSTANTIATE_TEST_SUITE_P(Families, SingleFile, ::testing::Values(ModelFamily::sd1, ModelFamily::sd2, ModelFamily::sdxl),
                         param_name);

// A VAE on its own in one file, in the original naming (encoder.down.0.block.0...,
// as vae-ft-mse-840000-ema-pruned.safetensors) and in the diffusers naming (the
// folder's own diffusion_pytorch_model.safetensors), as --vae or on its own.
TEST(SingleFileVae, LoneVaeFilesInEitherNamingMatchTheFolder) {
  NANSCOPE_REQUIRE_PYTHON();
  const Made& m = fixture().get(ModelFamily::sd1);
  const auto src = io::SafetensorsFile::open(m.file);
  const std::string prefix = "first_stage_model.";
  std::vector<std::pair<std::string, HostTensor>> vae_only;
  for (const auto& e : src.entries())
    if (e.name.starts_with(prefix)) vae_only.emplace_back(e.name.substr(prefix.size()), src.read(e, DType::f32));
  const fs::path original = fixture().dir / "vae-original.safetensors";
  io::write_safetensors(original, vae_only);
  const fs::path diffusers = m.folder / "vae" / "diffusion_pytorch_model.safetensors";

  auto be = make_backend(select_device(enumerate_devices(), "reference"));
  const OpContext ctx = context(*be);
  test::Rng rng(test::seed_from("single-file-vae"));
  const Tensor z = be->upload(test::random_normal(rng, {1, 4, 8, 8}, DType::f32));
  const Tensor img = be->upload(test::random_uniform(rng, {1, 3, 16, 16}, DType::f32, -1.0, 1.0));
  const auto want = models::Vae::load(m.folder / "vae", *be, DType::f32, true);
  const HostTensor want_dec = be->download(want.decode(ctx, z));
  const HostTensor want_enc = be->download(want.encode(ctx, img));
  for (const fs::path& p : {original, diffusers}) {
    SCOPED_TRACE(p.string());
    const auto vae = models::Vae::load(p, *be, DType::f32, true);
    EXPECT_TRUE(test::bitwise_equal(be->download(vae.decode(ctx, z)), want_dec));
    EXPECT_TRUE(test::bitwise_equal(be->download(vae.encode(ctx, img)), want_enc));
    // As the override of a single-file model.
    const auto model = pipeline::SdModel::load(m.file, p, *be, {});
    EXPECT_EQ(model->vae_folder(), p);
    EXPECT_TRUE(test::bitwise_equal(be->download(model->vae->decode(ctx, z)), want_dec));
  }
}

// A copy of the SD 1.x file with one tensor dropped, reshaped or added.
fs::path edited_copy(const std::string& name, const std::string& drop, const std::string& reshape) {
  const auto src = io::SafetensorsFile::open(fixture().get(ModelFamily::sd1).file);
  std::vector<std::pair<std::string, HostTensor>> t;
  for (const auto& e : src.entries()) {
    if (e.name == drop) continue;
    HostTensor h = src.read(e, DType::f32);
    if (e.name == reshape) h = HostTensor({h.shape[0] + 1, h.numel() / h.shape[0]}, DType::f32);
    t.emplace_back(e.name, std::move(h));
  }
  const fs::path dir = fixture().dir / name;
  fs::create_directories(dir);
  fs::copy(fixture().get(ModelFamily::sd1).folder / "tokenizer", dir / "tokenizer",
           fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  io::write_safetensors(dir / "model.safetensors", t);
  return dir / "model.safetensors";
}

std::string load_error(const fs::path& p) {
  auto be = make_backend(select_device(enumerate_devices(), "reference"));
  try {
    pipeline::SdModel::load(p, "", *be, {});
  } catch (const FileError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SingleFileErrors, MissingTensorNamesFileLdmKeyAndDiffusersPath) {
  NANSCOPE_REQUIRE_PYTHON();
  const std::string key = "model.diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_v.weight";
  const fs::path p = edited_copy("missing", key, "");
  const std::string msg = load_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(key), std::string::npos) << msg;
  EXPECT_NE(msg.find("unet.mid_block.attentions.0.transformer_blocks.0.attn2.to_v.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64,64]"), std::string::npos) << msg;
}

TEST(SingleFileErrors, WrongShapeNamesBothShapes) {
  NANSCOPE_REQUIRE_PYTHON();
  const std::string key = "first_stage_model.decoder.mid.attn_1.q.weight";
  const fs::path p = edited_copy("reshaped", "", key);
  const std::string msg = load_error(p);
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(key), std::string::npos) << msg;
  EXPECT_NE(msg.find("vae.decoder.mid_block.attentions.0.to_q.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[65,64]"), std::string::npos) << msg;  // found
  EXPECT_NE(msg.find("[64,64]"), std::string::npos) << msg;  // implied
}

TEST(SingleFileErrors, RefusesPickleAndNonCheckpoints) {
  NANSCOPE_REQUIRE_PYTHON();
  const fs::path pickle = fixture().dir / "model.ckpt";
  std::ofstream(pickle, std::ios::binary) << std::string("\x80\x02}q\x00.", 6);
  EXPECT_NE(load_error(pickle).find("pickle"), std::string::npos) << load_error(pickle);
  // A diffusers component file passed as a model.
  const fs::path unet = fixture().get(ModelFamily::sd1).folder / "unet" / "diffusion_pytorch_model.safetensors";
  const std::string msg = load_error(unet);
  EXPECT_NE(msg.find("diffusers"), std::string::npos) << msg;
  // No tokenizer beside the file.
  const fs::path lone = fixture().dir / "lone" / "model.safetensors";
  fs::create_directories(lone.parent_path());
  fs::copy_file(fixture().get(ModelFamily::sd1).file, lone);
  const std::string tok = load_error(lone);
  EXPECT_NE(tok.find("tokenizer"), std::string::npos) << tok;
  EXPECT_NE(tok.find((lone.parent_path() / "tokenizer").string()), std::string::npos) << tok;
}

TEST(SingleFileCli, InfoAndGenerate) {
  NANSCOPE_REQUIRE_PYTHON();
  const Made& m = fixture().get(ModelFamily::sd1);
  const auto info = test::run_process({NANSCOPE_CLI_PATH, "info", m.file.string()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("SD 1.x"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("unet"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("text_encoder"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("F32"), std::string::npos) << info.out;
  const fs::path png = fixture().dir / "single.png";
  const auto gen =
      test::run_process({NANSCOPE_CLI_PATH, "--device", "reference", "generate", "--model", m.file.string(), "-p",
                         "a red circle", "--steps", "2", "--size", "32x32", "--seed", "3", "-o", png.string()});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_TRUE(fs::exists(png));
  const auto back = test::run_process({NANSCOPE_CLI_PATH, "info", png.string()});
  EXPECT_NE(back.out.find(m.file.filename().string()), std::string::npos) << back.out;
}

}  // namespace
}  // namespace nanscope

namespace nanscope {
namespace {

// The NaN policy's f32 retry of an SDXL model with a lone VAE file (--vae)
// reloads that file: it must keep SDXL's scaling factor (0.13025, not SD 1.x's
// 0.18215), so the retried image equals the one an f32 VAE gives from the same
// latent.
TEST(SingleFileSession, F32RedecodeOfALoneVaeFileKeepsTheSdxlScalingFactor) {
  NANSCOPE_REQUIRE_PYTHON();
  const Made& m = fixture().get(ModelFamily::sdxl);
  const auto src = io::SafetensorsFile::open(m.file);
  const std::string prefix = "first_stage_model.";
  std::vector<std::pair<std::string, HostTensor>> vae_only;
  for (const auto& e : src.entries())
    if (e.name.starts_with(prefix)) vae_only.emplace_back(e.name.substr(prefix.size()), src.read(e, DType::f32));
  const fs::path lone = fixture().dir / "sdxl-vae-original.safetensors";
  io::write_safetensors(lone, vae_only);

  RunConfig config;
  config.model = m.file.string();
  config.vae = lone.string();
  config.width = config.height = 64;
  config.prompt = "a red circle";
  config.steps = 2;
  config.seed = 3;
  pipeline::Session session;
  const auto f32 = session.generate(config);
  config.set("vae.dtype", "f16");
  const auto f16 = session.generate(config);
  ASSERT_EQ(f32.size(), 1u);
  ASSERT_EQ(f16.size(), 1u);
  ASSERT_EQ(f16[0].latent, f32[0].latent) << "the VAE's dtype must not change the sampled latent";
  const auto retried = session.redecode(config, f16[0], lone, DType::f32);
  EXPECT_EQ(retried.image.pixels, f32[0].image.pixels);
}

}  // namespace
}  // namespace nanscope
