"""PyTorch CPU baseline for bench_ops: times the same ops at the same shapes.

usage: torch_ops.py THREADS [SHAPES_JSON]
SHAPES_JSON: a file with bench_ops --shapes' case list ({"name", "kind": conv |
linear | attention, "p": [...]}, bench/unet_shapes.hpp), timed instead of the
default set. Prints one JSON object {name: seconds_per_call}. Run by bench_ops with OpenBLAS
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


def classic_attention(q, k, v, scale):
    """diffusers' classic AttnProcessor: baddbmm -> softmax -> bmm."""
    s = torch.baddbmm(torch.empty(q.shape[0], q.shape[1], k.shape[1]), q, k.transpose(1, 2), beta=0, alpha=scale)
    return torch.bmm(s.softmax(dim=-1), v)


def time_shapes(path):
    out = {}
    with open(path) as f:
        cases = json.load(f)
    with torch.no_grad():
        for c in cases:
            p = c["p"]
            if c["kind"] == "conv":
                n, ch, h, w, o, k, stride = p
                x, wt, b = torch.randn(n, ch, h, w), torch.randn(o, ch, k, k), torch.randn(o)
                out[c["name"]] = timed(lambda: torch.nn.functional.conv2d(x, wt, b, stride, k // 2))
            elif c["kind"] == "linear":
                rows, i, o = p
                x, wt, b = torch.randn(rows, i), torch.randn(o, i), torch.randn(o)
                out[c["name"]] = timed(lambda: torch.nn.functional.linear(x, wt, b))
            else:
                b, sq, sk, heads, d = p
                q, k, v = torch.randn(b * heads, sq, d), torch.randn(b * heads, sk, d), torch.randn(b * heads, sk, d)
                out[c["name"]] = timed(lambda: classic_attention(q, k, v, d ** -0.5))
    return out


if len(sys.argv) > 2:
    print(json.dumps(time_shapes(sys.argv[2])))
    sys.exit(0)

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

        results[f"attention_{tokens}x8x40"] = timed(lambda: classic_attention(q, k, v, scale))
print(json.dumps(results))
