"""diffusers baseline for bench_unet --component vae: one AutoencoderKL decode
on the same folder and the same latent ([1, 4, LATENT, LATENT], an image of
8x that size).

usage: torch_vae.py VAE_DIR LATENT_SIZE RUNS THREADS
Prints one JSON object: {"load": s, "first": s, "call": s (median), "peak_rss_mb": MB, "loaded_rss_mb": MB}.
Runs in its own process so that the peak resident memory is this baseline's alone;
diffusers' classic AttnProcessor (torch 1.13 has no SDPA)."""
import json
import resource
import sys
import time

import torch
from diffusers import AutoencoderKL
from diffusers.models.attention_processor import AttnProcessor

folder, size, runs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
t0 = time.perf_counter()
vae = AutoencoderKL.from_pretrained(folder, torch_dtype=torch.float32)
vae.set_attn_processor(AttnProcessor())
vae.eval()
load = time.perf_counter() - t0
loaded_rss = 0.0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmRSS:"):
            loaded_rss = int(line.split()[1]) / 1024.0
latent = torch.randn(1, 4, size, size, generator=torch.Generator().manual_seed(0))


def call():
    start = time.perf_counter()
    with torch.no_grad():
        vae.decode(latent / vae.config.scaling_factor)
    return time.perf_counter() - start


first = call()
cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
times = sorted(call() for _ in range(runs))
cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
cores = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / wall
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(json.dumps({"load": load, "first": first, "call": times[len(times) // 2], "cores": cores, "peak_rss_mb": rss,
                  "loaded_rss_mb": loaded_rss}))
