"""diffusers baseline for bench_txt2img: the same txt2img on the same folder.

usage: torch_txt2img.py MODEL_DIR STEPS CFG RUNS THREADS [SIZE]
SIZE: the image's width and height (0 or absent: the model's own); from 1024
on with attention slicing (one head at a time), as diffusers' docs advise for
large images: the classic processor would hold every head's score matrix.
Prints one JSON object: {"end_to_end": s, "per_step": s, "load": s, "peak_rss_mb": MB}. Run by
bench_txt2img with OpenBLAS and malloc set up as a well-set-up user would."""
import json
import resource
import sys
import time

import torch
from diffusers import StableDiffusionPipeline
from diffusers.models.attention_processor import AttnProcessor

model, steps, cfg, runs, threads = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
size = int(sys.argv[6]) if len(sys.argv) > 6 else 0
torch.set_num_threads(threads)

t0 = time.perf_counter()
pipe = StableDiffusionPipeline.from_pretrained(model, safety_checker=None, requires_safety_checker=False)
pipe.unet.set_attn_processor(AttnProcessor())
pipe.vae.set_attn_processor(AttnProcessor())
pipe.set_progress_bar_config(disable=True)
if size >= 1024:
    pipe.enable_attention_slicing(1)
load = time.perf_counter() - t0

stamps = []


def on_step(p, i, t, kw):
    stamps.append(time.perf_counter())
    return kw


def run(seed):
    stamps.clear()
    g = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        pipe("a red circle on a blue background", num_inference_steps=steps, guidance_scale=cfg, generator=g,
             height=size or None, width=size or None,
             output_type="np", callback_on_step_end=on_step)
    total = time.perf_counter() - start
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else total / steps
    return total, per_step


run(0)  # warm-up
totals, steps_s = [], []
for r in range(runs):
    a, b = run(r + 1)
    totals.append(a)
    steps_s.append(b)
print(json.dumps({"end_to_end": sorted(totals)[len(totals) // 2], "per_step": sorted(steps_s)[len(steps_s) // 2],
                  "load": load, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
