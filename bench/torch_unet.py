"""diffusers baseline for bench_unet: one UNet2DConditionModel call on the same
folder and the same shapes (latent [2, 4, H/8, W/8], context [2, 77, 768]).

usage: torch_unet.py UNET_DIR LATENT_SIZE RUNS THREADS
Prints one JSON object: {"load": s, "first": s, "call": s (median), "peak_rss_mb": MB, "loaded_rss_mb": MB}.
Runs in its own process so that the peak resident memory is this baseline's alone.
PyTorch 1.13 on the CPU has no f16 convolution, so the baseline is f32."""
import json
import resource
import sys
import time

import torch
from diffusers import UNet2DConditionModel
from diffusers.models.attention_processor import AttnProcessor

folder, size, runs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
t0 = time.perf_counter()
unet = UNet2DConditionModel.from_pretrained(folder)
unet.set_attn_processor(AttnProcessor())
unet.eval()
load = time.perf_counter() - t0
loaded_rss = 0.0
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmRSS:"):
            loaded_rss = int(line.split()[1]) / 1024.0
g = torch.Generator().manual_seed(0)
sample = torch.randn(2, 4, size, size, generator=g)
context = torch.randn(2, 77, unet.config.cross_attention_dim, generator=g)
t = torch.tensor([500.0, 500.0])


def call():
    start = time.perf_counter()
    with torch.no_grad():
        unet(sample, t, encoder_hidden_states=context)
    return time.perf_counter() - start


first = call()
times = sorted(call() for _ in range(runs))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(json.dumps({"load": load, "first": first, "call": times[len(times) // 2], "peak_rss_mb": rss, "loaded_rss_mb": loaded_rss}))
