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
    """Seconds per call: the median of calls repeated for >= min_seconds (as bench_ops times its own)."""
    fn()  # warm-up
    calls, start = [], time.perf_counter()
    while True:
        t = time.perf_counter()
        fn()
        calls.append(time.perf_counter() - t)
        if time.perf_counter() - start >= min_seconds and len(calls) >= 3:
            return sorted(calls)[len(calls) // 2]


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
    # The UNet's, then the VAE's at a 512x512 decode, then those a 1024x1024 decode adds.
    for ch, res in ((320, 64), (512, 64), (512, 128), (256, 256), (128, 512), (512, 256), (256, 512), (128, 1024)):
        x = torch.randn(1, ch, res, res)
        conv = torch.nn.Conv2d(ch, ch, 3, padding=1)
        results[f"conv3x3_{ch}_{res}"] = timed(lambda: conv(x))
    scale = 40 ** -0.5
    for tokens in (1024, 4096):  # 16384: the 8 score matrices alone would be 8.6 GB
        q = torch.randn(8, tokens, 40)
        k = torch.randn(8, tokens, 40)
        v = torch.randn(8, tokens, 40)

        results[f"attention_{tokens}x8x40"] = timed(lambda: classic_attention(q, k, v, scale))
    q, k, v = torch.randn(1, 4096, 512), torch.randn(1, 4096, 512), torch.randn(1, 4096, 512)  # the VAE's mid-block
    results["attention_4096x1x512"] = timed(lambda: classic_attention(q, k, v, 512 ** -0.5))
    # The transformer block's feed-forward projection and its GEGLU (bench_ops' ff_proj_geglu rows).
    F = torch.nn.functional
    xf = torch.randn(2, 4096, 320)
    wf, bf = torch.randn(2560, 320), torch.randn(2560)

    def ff_proj_geglu():
        h, gate = F.linear(xf, wf, bf).chunk(2, dim=-1)
        return h * F.gelu(gate)

    results["ff_proj_geglu_8192_320_2560"] = timed(ff_proj_geglu)
    # The memory-bound ops (bench_ops' second table).
    x = torch.randn(2, 320, 64, 64)
    g, b = torch.randn(320), torch.randn(320)
    results["group_norm_2x320x64x64"] = timed(lambda: F.group_norm(x, 32, g, b, 1e-5))
    results["silu_2x320x64x64"] = timed(lambda: F.silu(x))
    residual = torch.randn(2, 320, 64, 64)
    results["add_2x320x64x64"] = timed(lambda: x + residual)
    xv, gv, bv = torch.randn(1, 128, 512, 512), torch.randn(128), torch.randn(128)
    results["group_norm_1x128x512x512"] = timed(lambda: F.group_norm(xv, 32, gv, bv, 1e-6))
    xt = torch.randn(2, 4096, 320)
    results["layer_norm_2x4096x320"] = timed(lambda: F.layer_norm(xt, (320,), g, b, 1e-5))
    xg = torch.randn(2, 4096, 2560)

    def geglu():
        h, gate = xg.chunk(2, dim=-1)
        return h * F.gelu(gate)

    results["geglu_2x4096x2560"] = timed(geglu)
    xu = torch.randn(1, 512, 128, 128)
    results["upsample2x_1x512x128x128"] = timed(lambda: F.interpolate(xu, scale_factor=2.0, mode="nearest"))
print(json.dumps(results))
