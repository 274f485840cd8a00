"""Writes an AutoencoderKL with Stable Diffusion's VAE configuration (the one
SD 1.x, 2.x and SDXL share) and seeded random weights (diffusers' own
initialisation, torch.manual_seed(SEED)) as a diffusers vae folder
(config.json + diffusion_pytorch_model.safetensors, f32, 335 MB) for
bench_unet --component vae. Random weights time exactly like trained ones.

usage: make_sd_vae.py OUT_DIR [SEED]
Does nothing when OUT_DIR already holds the folder. Prints {"dir": OUT_DIR, "made": bool}."""
import json
import os
import sys

import torch
from diffusers import AutoencoderKL

# runwayml/stable-diffusion-v1-5 vae/config.json (diffusers 0.31 spelling).
SD_VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, sample_size=512, scaling_factor=0.18215,
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
    block_out_channels=(128, 256, 512, 512), layers_per_block=2, act_fn="silu", norm_num_groups=32,
)

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if os.path.exists(os.path.join(out, "diffusion_pytorch_model.safetensors")):
    print(json.dumps({"dir": out, "made": False}))
    sys.exit(0)
torch.manual_seed(seed)
vae = AutoencoderKL(**SD_VAE)
tmp = out + ".tmp"
vae.save_pretrained(tmp, safe_serialization=True)
os.replace(tmp, out)
print(json.dumps({"dir": out, "made": True}))
print(f"wrote {out}: {sum(p.numel() for p in vae.parameters()) / 1e6:.1f} M parameters", file=sys.stderr)
