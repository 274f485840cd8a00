"""diffusers baseline for bench_unet --component vae: one AutoencoderKL decode
on the same folder and the same latent ([1, 4, LATENT, LATENT], an image of
8x that size).

usage: torch_vae.py VAE_DIR LATENT_SIZE RUNS THREADS
Prints one JSON object: {"load": s, "first": s, "call": s (median), "peak_rss_mb": MB, "loaded_rss_mb": MB}.
Runs in its own process so that the peak resident memory is this baseline's alone;
diffusers' classic AttnProcessor (torch 1.13 has no SDPA)."""
import json
import sys
import time

import torch
from diffusers import AutoencoderKL
from diffusers.models.attention_processor import AttnProcessor

from call_timing import measure, rss_mb

folder, size, runs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
t0 = time.perf_counter()
vae = AutoencoderKL.from_pretrained(folder, torch_dtype=torch.float32)
vae.set_attn_processor(AttnProcessor())
vae.eval()
load = time.perf_counter() - t0
loaded_rss = rss_mb()
latent = torch.randn(1, 4, size, size, generator=torch.Generator().manual_seed(0))


def call():
    start = time.perf_counter()
    with torch.no_grad():
        vae.decode(latent / vae.config.scaling_factor)
    return time.perf_counter() - start


result = measure(call, runs)
result.update({"load": load, "loaded_rss_mb": loaded_rss})
print(json.dumps(result))
