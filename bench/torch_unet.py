"""diffusers baseline for bench_unet: one UNet2DConditionModel call on the same
folder and the same shapes (latent [2, 4, H/8, W/8], context [2, 77, cross
attention dim]; for an SDXL UNet (addition_embed_type "text_time") also the
added conditions bench_unet passes: text_embeds [2, 1280] and time_ids [2, 6]
= original size, crop top-left 0,0, target size, the sizes 8x the latent).

usage: torch_unet.py UNET_DIR LATENT_SIZE RUNS THREADS [DEVICE [DTYPE]]
Prints one JSON object: {"load": s, "first": s, "call": s (median), "peak_rss_mb": MB, "loaded_rss_mb": MB}
(on CUDA also "peak_device_mb").
Runs in its own process so that the peak resident memory is this baseline's alone.
DEVICE cpu (default): PyTorch 1.13 on the CPU has no f16 convolution, so the
baseline is f32, with diffusers' classic AttnProcessor (no SDPA in 1.13); from
latent 128 (1024x1024) sliced one head at a time (set_attention_slice(1)), as
diffusers advises there: the classic processor would hold the scores of every
head at once (2 x 8 x 16384^2 floats, 17 GB).
DEVICE cuda: PyTorch at its best on the GPU: diffusers' default attention
(scaled_dot_product_attention, flash/memory-efficient kernels), cuDNN
autotuning on, and TF32 off for f32 (so f32 is f32)."""
import json
import sys
import time

import torch
from diffusers import UNet2DConditionModel
from diffusers.models.attention_processor import AttnProcessor

from call_timing import measure, rss_mb

folder, size, runs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[6] if len(sys.argv) > 6 else "f32"]
cuda = device.startswith("cuda")
torch.set_num_threads(threads)
if cuda:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def sync():
    if cuda:
        torch.cuda.synchronize()


t0 = time.perf_counter()
unet = UNet2DConditionModel.from_pretrained(folder, torch_dtype=dtype)
if not cuda:
    unet.set_attn_processor(AttnProcessor())
    if size >= 128:
        unet.set_attention_slice(1)
unet.eval().to(device)
sync()
load = time.perf_counter() - t0
loaded_rss = rss_mb()
g = torch.Generator().manual_seed(0)
sample = torch.randn(2, 4, size, size, generator=g).to(device, dtype)
context = torch.randn(2, 77, unet.config.cross_attention_dim, generator=g).to(device, dtype)
t = torch.tensor([500.0, 500.0]).to(device)
added_cond_kwargs = None
if unet.config.addition_embed_type == "text_time":
    pooled = unet.config.projection_class_embeddings_input_dim - 6 * unet.config.addition_time_embed_dim
    px = 8.0 * size
    added_cond_kwargs = {
        "text_embeds": torch.randn(2, pooled, generator=g).to(device, dtype),
        "time_ids": torch.tensor([[px, px, 0.0, 0.0, px, px]] * 2).to(device, dtype),
    }


def call():
    sync()
    start = time.perf_counter()
    with torch.no_grad():
        unet(sample, t, encoder_hidden_states=context, added_cond_kwargs=added_cond_kwargs)
    sync()
    return time.perf_counter() - start


result = measure(call, runs)
result.update({"load": load, "loaded_rss_mb": loaded_rss})
if cuda:
    result["device"] = torch.cuda.get_device_name(0)
    result["peak_device_mb"] = torch.cuda.max_memory_allocated() / 2**20
print(json.dumps(result))
