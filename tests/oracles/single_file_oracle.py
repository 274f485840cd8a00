"""Oracle for tests/test_single_file.cpp: tiny seeded SD 1.x / SD 2.x / SDXL
pipeline folders built with diffusers' and transformers' own classes, and
diffusers' own single-file converters (loaders/single_file_utils.py, 0.31)
applied to an LDM single file the engine wrote.

The tiny models keep the rules a single file's configs are inferred by: 32
GroupNorm groups, SD 1.x 8 UNet heads, SD 2.x / SDXL 64-channel UNet heads,
64-channel CLIP heads, text encoder configs with eos_token_id 2 as the
published SD repositories have.

usage:
  single_file_oracle.py make FAMILY OUT_DIR                # FAMILY: sd1 sd2 sdxl
  single_file_oracle.py convert FAMILY MODEL_DIR LDM.safetensors OUT.json
    OUT.json: per component, the diffusers keys diffusers' converter did not produce ("missing"), the
    keys it produced that the model does not have ("extra"), and those whose tensors differ ("differ").
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import models_oracle  # noqa: E402
import tokenizer_oracle  # noqa: E402

torch.set_num_threads(2)

CLIP = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=1,
            max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1)


def unet_config(family):
    common = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, norm_num_groups=32)
    if family == "sd1":
        return dict(common, block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=8, cross_attention_dim=64)
    if family == "sd2":
        return dict(common, block_out_channels=(64, 128),
                    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=(1, 2),
                    use_linear_projection=True, cross_attention_dim=64)
    if family == "sdxl":
        return dict(common, block_out_channels=(64, 128), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(1, 2),
                    use_linear_projection=True, transformer_layers_per_block=(1, 2), cross_attention_dim=128,
                    addition_embed_type="text_time", addition_time_embed_dim=8,
                    projection_class_embeddings_input_dim=32 + 6 * 8)
    raise SystemExit(f"unknown family {family}")


def make(family, out):
    from diffusers import (AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline,
                           StableDiffusionXLPipeline, UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    tok_dir = os.path.join(out, "tokenizer")
    tokenizer_oracle.write_vocab(tok_dir, "sd2" if family == "sd2" else "sd1")
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    torch.manual_seed({"sd1": 11, "sd2": 12, "sdxl": 13}[family])
    act = "quick_gelu" if family in ("sd1", "sdxl") else "gelu"
    text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=len(tokenizer), hidden_act=act, **CLIP))
    unet = UNet2DConditionModel(**unet_config(family))
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        layers_per_block=1, norm_num_groups=32, sample_size=16,
                        scaling_factor=0.13025 if family == "sdxl" else 0.18215)
    models = [text_encoder, unet, vae]
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       steps_offset=1, timestep_spacing="leading")
    if family == "sdxl":
        tok2_dir = os.path.join(out, "tokenizer_2")
        tokenizer_oracle.write_vocab(tok2_dir, "sd2")
        tokenizer_2 = CLIPTokenizer.from_pretrained(tok2_dir)
        text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(
            vocab_size=len(tokenizer_2), hidden_act="gelu", projection_dim=32, **CLIP))
        models.append(text_encoder_2)
        for i, m in enumerate(models):
            models_oracle.perturb(m, 200 + i)
        pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2,
                                         tokenizer=tokenizer, tokenizer_2=tokenizer_2, unet=unet, scheduler=scheduler)
    else:
        for i, m in enumerate(models):
            models_oracle.perturb(m, 200 + i)
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                       scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)


def compare(want, got, drop=()):
    got = {k: v for k, v in got.items() if not any(k.startswith(d) for d in drop)}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(want) & set(got)
                    if want[k].shape != got[k].shape or not torch.equal(want[k], got[k].to(want[k].dtype)))
    return {"missing": missing, "extra": extra, "differ": differ, "checked": len(set(want) & set(got))}


def convert(family, model_dir, ldm_path, out):
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders import single_file_utils as sfu
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    ckpt = load_file(ldm_path)
    unet = UNet2DConditionModel.from_pretrained(model_dir, subfolder="unet")
    vae = AutoencoderKL.from_pretrained(model_dir, subfolder="vae")
    te = CLIPTextModel.from_pretrained(model_dir, subfolder="text_encoder")
    res = {
        "unet": compare(unet.state_dict(), sfu.convert_ldm_unet_checkpoint(ckpt, dict(unet.config))),
        "vae": compare(vae.state_dict(), sfu.convert_ldm_vae_checkpoint(ckpt, dict(vae.config))),
    }
    if family == "sd2":
        # diffusers skips the unused last OpenCLIP layer by its name in SD 2.x (resblocks.23); the tiny file's
        # unused layer has the index num_hidden_layers, dropped here the same way.
        last = f"text_model.encoder.layers.{te.config.num_hidden_layers}."
        res["text_encoder"] = compare(te.state_dict(), sfu.convert_open_clip_checkpoint(te, ckpt), drop=(last,))
    else:
        res["text_encoder"] = compare(te.state_dict(), sfu.convert_ldm_clip_checkpoint(ckpt))
    if family == "sdxl":
        te2 = CLIPTextModelWithProjection.from_pretrained(model_dir, subfolder="text_encoder_2")
        res["text_encoder_2"] = compare(
            te2.state_dict(), sfu.convert_open_clip_checkpoint(te2, ckpt, prefix="conditioner.embedders.1.model."))
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 6 and sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        raise SystemExit(__doc__)
