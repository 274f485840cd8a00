"""Writes a UNet2DConditionModel with Stable Diffusion 1.5's or SDXL's
configuration and seeded random weights (diffusers' own initialisation,
torch.manual_seed(SEED)) as a diffusers unet folder (config.json +
diffusion_pytorch_model.safetensors, f32: 3.4 GB for SD 1.5, 10.3 GB for SDXL)
for bench_unet. Random weights time exactly like trained ones.

usage: make_sd15_unet.py [--config sd15|sdxl] [--tiny] OUT_DIR [SEED]
--tiny writes the same configuration with every width cut down (channels
32/64/128, context 128; 35 MB for SD 1.5, 98 MB for SDXL): the same blocks,
transformer depths and added conditions, for checking the bench and its
scripts, never for timing.
Does nothing when OUT_DIR already holds this configuration (an error when it
holds another). Prints {"dir": OUT_DIR, "made": bool}."""
import argparse
import json
import os
import sys

# runwayml/stable-diffusion-v1-5 unet/config.json (diffusers 0.31 spelling).
SD15 = dict(
    sample_size=64, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    mid_block_type="UNetMidBlock2DCrossAttn",
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1,
    act_fn="silu", norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8,
)

# stabilityai/stable-diffusion-xl-base-1.0 unet/config.json, every key but the
# _class_name / _diffusers_version metadata. attention_head_dim is, as in
# SD 1.5, diffusers' historical name for the number of heads per block
# (64 channels each).
SDXL = dict(
    act_fn="silu", addition_embed_type="text_time", addition_embed_type_num_heads=64, addition_time_embed_dim=256,
    attention_head_dim=(5, 10, 20), block_out_channels=(320, 640, 1280), center_input_sample=False,
    class_embed_type=None, class_embeddings_concat=False, conv_in_kernel=3, conv_out_kernel=3,
    cross_attention_dim=2048, cross_attention_norm=None,
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"), downsample_padding=1,
    dual_cross_attention=False, encoder_hid_dim=None, encoder_hid_dim_type=None, flip_sin_to_cos=True, freq_shift=0,
    in_channels=4, layers_per_block=2, mid_block_only_cross_attention=None, mid_block_scale_factor=1,
    mid_block_type="UNetMidBlock2DCrossAttn", norm_eps=1e-05, norm_num_groups=32, num_attention_heads=None,
    num_class_embeds=None, only_cross_attention=False, out_channels=4, projection_class_embeddings_input_dim=2816,
    resnet_out_scale_factor=1.0, resnet_skip_time_act=False, resnet_time_scale_shift="default", sample_size=128,
    time_cond_proj_dim=None, time_embedding_act_fn=None, time_embedding_dim=None, time_embedding_type="positional",
    timestep_post_act=None, transformer_layers_per_block=(1, 2, 10),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), upcast_attention=None,
    use_linear_projection=True,
)

CONFIGS = {"sd15": SD15, "sdxl": SDXL}

# --tiny: widths divided by 10 (heads of 4 or 32 channels), context 128; SDXL's
# pooled text embedding 128 wide and time ids embedded in 32 (128 + 6 x 32).
TINY = {
    "sd15": dict(block_out_channels=(32, 64, 128, 128), cross_attention_dim=128),
    "sdxl": dict(block_out_channels=(32, 64, 128), attention_head_dim=(1, 2, 4), cross_attention_dim=128,
                 addition_time_embed_dim=32, projection_class_embeddings_input_dim=128 + 6 * 32),
}


def as_json(v):
    return json.loads(json.dumps(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", metavar="OUT_DIR")
    ap.add_argument("seed", metavar="SEED", nargs="?", type=int, default=0)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="sd15",
                    help="the UNet configuration: sd15 (SD 1.5, default) or sdxl (SDXL base 1.0)")
    ap.add_argument("--tiny", action="store_true",
                    help="every width cut down (35 / 98 MB): for checking the bench, never for timing")
    args = ap.parse_args()
    config = dict(CONFIGS[args.config], **(TINY[args.config] if args.tiny else {}))
    out = args.out_dir

    existing = os.path.join(out, "config.json")
    if os.path.exists(existing):
        with open(existing) as f:
            have = json.load(f)
        for key, want in config.items():
            if key in have and have[key] != as_json(want):
                sys.exit(f"make_sd15_unet.py: {out} holds another UNet ({key} is {have[key]!r}, "
                         f"--config {args.config}{' --tiny' if args.tiny else ''} wants {as_json(want)!r}); "
                         "remove it or choose another folder")
        print(json.dumps({"dir": out, "made": False}))
        return

    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(args.seed)
    unet = UNet2DConditionModel(**config)
    tmp = out + ".tmp"
    # One weights file (SDXL's 10.3 GB would otherwise be split at diffusers' 10 GB default).
    unet.save_pretrained(tmp, safe_serialization=True, max_shard_size="100GB")
    os.replace(tmp, out)
    print(json.dumps({"dir": out, "made": True}))
    print(f"wrote {out}: {args.config}{' (tiny)' if args.tiny else ''}, "
          f"{sum(p.numel() for p in unet.parameters()) / 1e6:.1f} M parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
