"""Writes a UNet2DConditionModel with Stable Diffusion 1.5's configuration and
seeded random weights (diffusers' own initialisation, torch.manual_seed(SEED))
as a diffusers unet folder (config.json + diffusion_pytorch_model.safetensors,
f32, 3.4 GB) for bench_unet. Random weights time exactly like trained ones.

usage: make_sd15_unet.py OUT_DIR [SEED]
Does nothing when OUT_DIR already holds the folder. Prints {"dir": OUT_DIR, "made": bool}."""
import json
import os
import sys

import torch
from diffusers import UNet2DConditionModel

# runwayml/stable-diffusion-v1-5 unet/config.json (diffusers 0.31 spelling).
SD15 = dict(
    sample_size=64, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    mid_block_type="UNetMidBlock2DCrossAttn",
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1, mid_block_scale_factor=1,
    act_fn="silu", norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=768, attention_head_dim=8,
)

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if os.path.exists(os.path.join(out, "diffusion_pytorch_model.safetensors")):
    print(json.dumps({"dir": out, "made": False}))
    sys.exit(0)
torch.manual_seed(seed)
unet = UNet2DConditionModel(**SD15)
tmp = out + ".tmp"
unet.save_pretrained(tmp, safe_serialization=True)
os.replace(tmp, out)
print(json.dumps({"dir": out, "made": True}))
print(f"wrote {out}: {sum(p.numel() for p in unet.parameters()) / 1e6:.1f} M parameters", file=sys.stderr)
