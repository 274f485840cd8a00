"""PyTorch CPU baseline for bench_ops: times the same ops at the same shapes.

Prints one JSON object {name: seconds_per_call}. Run by bench_ops with OpenBLAS
tuned as a well-set-up user would (see bench_ops.cpp)."""
import json
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
torch.manual_seed(0)


def timed(fn, min_seconds=1.0):
    fn()  # warm-up
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and n >= 3:
            return elapsed / n


results = {}
with torch.no_grad():
    for size in (1024, 2048):
        a = torch.randn(size, size)
        b = torch.randn(size, size)
        results[f"gemm_{size}"] = timed(lambda: torch.mm(a, b))
    x = torch.randn(1, 320, 64, 64)
    conv = torch.nn.Conv2d(320, 320, 3, padding=1)
    results["conv3x3_320_64"] = timed(lambda: conv(x))
    scale = 40 ** -0.5
    for tokens in (1024, 4096):  # 16384: the 8 score matrices alone would be 8.6 GB
        q = torch.randn(8, tokens, 40)
        k = torch.randn(8, tokens, 40)
        v = torch.randn(8, tokens, 40)

        def attn():
            # diffusers' classic AttnProcessor: baddbmm -> softmax -> bmm
            s = torch.baddbmm(torch.empty(8, tokens, tokens), q, k.transpose(1, 2), beta=0, alpha=scale)
            return torch.bmm(s.softmax(dim=-1), v)

        results[f"attention_{tokens}x8x40"] = timed(attn)
print(json.dumps(results))
