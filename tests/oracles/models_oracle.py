"""Oracle for tests/test_models.cpp: small seeded random-weight components built
with diffusers' and transformers' own classes, saved with save_pretrained, and
their outputs on given inputs computed in float64 with the classic attention.

usage:
  models_oracle.py make KIND OUT_DIR          # KIND: unet_sd1 unet_sd2 unet_sdxl vae clip clip_proj
  models_oracle.py run KIND MODEL_DIR IN.safetensors OUT.safetensors
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(2)


def unet_config(kind):
    common = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, norm_num_groups=8,
                  cross_attention_dim=32, block_out_channels=(32, 64))
    if kind == "unet_sd1":
        return dict(common, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=2)
    if kind == "unet_sd2":
        return dict(common, down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"), attention_head_dim=(2, 4),
                    use_linear_projection=True)
    if kind == "unet_sdxl":
        return dict(common, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4),
                    use_linear_projection=True, transformer_layers_per_block=(1, 2),
                    addition_embed_type="text_time", addition_time_embed_dim=8,
                    projection_class_embeddings_input_dim=16 + 6 * 8)
    raise SystemExit(f"unknown kind {kind}")


def perturb(model, seed):
    """Random init leaves some layers at zero or one (norms, zero-init outputs): spread every parameter so
    each op matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def make(kind, out):
    torch.manual_seed(1234)
    if kind.startswith("unet"):
        from diffusers import UNet2DConditionModel
        model = UNet2DConditionModel(**unet_config(kind))
    elif kind == "vae":
        from diffusers import AutoencoderKL
        model = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                              down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                              layers_per_block=1, norm_num_groups=8, sample_size=32, scaling_factor=0.5)
    elif kind in ("clip", "clip_proj"):
        from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
        if kind == "clip":
            cfg = CLIPTextConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                                 bos_token_id=0, eos_token_id=2, pad_token_id=1)
            model = CLIPTextModel(cfg)
        else:
            cfg = CLIPTextConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=4, max_position_embeddings=77, hidden_act="gelu",
                                 projection_dim=16, bos_token_id=998, eos_token_id=999, pad_token_id=0)
            model = CLIPTextModelWithProjection(cfg)
    else:
        raise SystemExit(f"unknown kind {kind}")
    perturb(model, 99)
    model.save_pretrained(out, safe_serialization=True)


def run(kind, model_dir, inp, out):
    x = load_file(inp)
    res = {}
    with torch.no_grad():
        if kind.startswith("unet"):
            from diffusers import UNet2DConditionModel
            from diffusers.models.attention_processor import AttnProcessor
            m = UNet2DConditionModel.from_pretrained(model_dir).double().eval()
            m.set_attn_processor(AttnProcessor())
            kwargs = {}
            if kind == "unet_sdxl":
                kwargs["added_cond_kwargs"] = {"text_embeds": x["text_embeds"].double(),
                                               "time_ids": x["time_ids"].double()}
            res["out"] = m(x["sample"].double(), x["timesteps"].double(), x["context"].double(), **kwargs).sample
        elif kind == "vae":
            from diffusers import AutoencoderKL
            from diffusers.models.attention_processor import AttnProcessor
            m = AutoencoderKL.from_pretrained(model_dir).double().eval()
            m.set_attn_processor(AttnProcessor())
            res["decoded"] = m.decode(x["latents"].double() / m.config.scaling_factor).sample
            res["encoded"] = m.encode(x["image"].double()).latent_dist.mean * m.config.scaling_factor
        else:
            from transformers import CLIPTextModel, CLIPTextModelWithProjection
            cls = CLIPTextModel if kind == "clip" else CLIPTextModelWithProjection
            # float32: transformers' causal mask (finfo.min of float32) cannot be applied in float64.
            m = cls.from_pretrained(model_dir, attn_implementation="eager").eval()
            ids = x["ids"].long()
            o = m(ids, output_hidden_states=True)
            res["last"] = m.text_model.final_layer_norm(o.hidden_states[-1])
            res["penultimate"] = o.hidden_states[-2]
            res["skip1"] = m.text_model.final_layer_norm(o.hidden_states[-2])
            res["pooled"] = o.text_embeds if kind == "clip_proj" else o.pooler_output
    save_file({k: v.float().contiguous() for k, v in res.items()}, out)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    else:
        raise SystemExit(__doc__)
