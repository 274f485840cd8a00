"""PyTorch oracle for the op tests in tests/ops/.

usage: ops_oracle.py MANIFEST.json INPUTS.safetensors OUTPUTS.safetensors

MANIFEST is a list of cases: {"output": name, "case": test name, "dtype": storage
dtype, "out_dtype": ..., "inputs": [tensor names], "params": {"op": ..., ...}}.
Every op is computed in float64 from the inputs exactly as stored (f16/bf16
values widen exactly), which is an independent implementation of the engine's
accumulate=f32 semantics; the C++ side rounds the float64 result once into the
storage dtype. Where the semantics round an intermediate to the storage dtype
(attention probabilities before P.v), this script does too. Native accumulation
has no PyTorch equivalent: the tests compare those modes against this exact
result with a looser, documented tolerance.

torch 1.13 on CPU lacks many half kernels, one more reason to compute in float64.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def round_to(x, dtype):
    """Round a float64 tensor to the storage dtype and back (f32 rounding is exact for our use)."""
    return x.to(DTYPES[dtype]).double() if dtype != "f32" else x.float().double()


def matmul(p, xs, dtype):
    a, b = xs[0], xs[1]
    if p.get("trans_b"):
        b = b.transpose(-1, -2)
    out = torch.matmul(a, b) * p.get("alpha", 1.0)
    if p.get("bias"):
        out = out + xs[2]
    return out


def linear(p, xs, dtype):
    return F.linear(xs[0], xs[1], xs[2] if p.get("bias") else None)


def conv2d(p, xs, dtype):
    return F.conv2d(xs[0], xs[1], xs[2] if p.get("bias") else None, stride=p["stride"], padding=p["padding"])


def group_norm(p, xs, dtype):
    affine = p.get("affine", True)
    return F.group_norm(xs[0], p["groups"], xs[1] if affine else None, xs[2] if affine else None, p["eps"])


def layer_norm(p, xs, dtype):
    affine = p.get("affine", True)
    x = xs[0]
    return F.layer_norm(x, x.shape[-1:], xs[1] if affine else None, xs[2] if affine else None, p["eps"])


def gelu(p, xs, dtype):
    return F.gelu(xs[0], approximate=p.get("approximate", "none"))


def geglu(p, xs, dtype):
    x = xs[0]
    d = x.shape[-1] // 2
    return x[..., :d] * F.gelu(x[..., d:])


def timestep_embedding(p, xs, dtype):
    # diffusers' own function: the engine's op must match what the UNet expects.
    from diffusers.models.embeddings import get_timestep_embedding

    t = torch.tensor(p["timesteps"], dtype=torch.float32)
    return get_timestep_embedding(t, p["dim"], flip_sin_to_cos=p["flip_sin_to_cos"],
                                  downscale_freq_shift=p["shift"], max_period=p["max_period"]).double()


def attention(p, xs, dtype):
    q, k, v = xs
    h = p["heads"]
    b, sq, _ = q.shape
    sk = k.shape[1]
    qh = q.reshape(b, sq, h, -1).transpose(1, 2)
    kh = k.reshape(b, sk, h, -1).transpose(1, 2)
    vh = v.reshape(b, sk, h, -1).transpose(1, 2)
    out = torch.empty(b, h, sq, vh.shape[-1], dtype=torch.float64)
    mask = torch.ones(sq, sk, dtype=torch.bool).triu(1) if p.get("causal") else None
    for bi in range(b):  # one (batch, head) at a time: 4096^2 float64 scores are 128 MB each
        for hi in range(h):
            s = (qh[bi, hi] @ kh[bi, hi].T) * p["scale"]
            if mask is not None:
                s = s.masked_fill(mask, -math.inf)
            prob = torch.softmax(s, dim=-1)
            # softmax=f32 semantics: probabilities are rounded to the storage dtype before P.v.
            out[bi, hi] = round_to(prob, dtype) @ vh[bi, hi]
    return out.transpose(1, 2).reshape(b, sq, -1)


OPS = {
    "matmul": matmul,
    "linear": linear,
    "conv2d": conv2d,
    "group_norm": group_norm,
    "layer_norm": layer_norm,
    "silu": lambda p, xs, dt: F.silu(xs[0]),
    "gelu": gelu,
    "quick_gelu": lambda p, xs, dt: xs[0] * torch.sigmoid(1.702 * xs[0]),
    "geglu": geglu,
    "scale": lambda p, xs, dt: xs[0] * p["factor"],
    "softmax": lambda p, xs, dt: torch.softmax(xs[0], dim=-1),
    "upsample_nearest2x": lambda p, xs, dt: F.interpolate(xs[0], scale_factor=2.0, mode="nearest"),
    "add": lambda p, xs, dt: xs[0] + xs[1],
    "sub": lambda p, xs, dt: xs[0] - xs[1],
    "mul": lambda p, xs, dt: xs[0] * xs[1],
    "concat": lambda p, xs, dt: torch.cat(xs, dim=p["dim"]),
    "slice": lambda p, xs, dt: xs[0].narrow(p["dim"], p["begin"], p["end"] - p["begin"]),
    "permute": lambda p, xs, dt: xs[0].permute(*p["perm"]),
    "cast": lambda p, xs, dt: xs[0],
    "timestep_embedding": timestep_embedding,
    "attention": attention,
}


def main(manifest_path, inputs_path, outputs_path):
    with open(manifest_path) as f:
        manifest = json.load(f)
    inputs = load_file(inputs_path)
    outputs = {}
    for case in manifest:
        params = case["params"]
        xs = [inputs[n].double() for n in case["inputs"]]
        try:
            out = OPS[params["op"]](params, xs, case["dtype"])
        except Exception as e:  # name the case: one manifest holds a whole test file
            raise RuntimeError(f"case {case['case']} ({params}): {e}") from e
        outputs[case["output"]] = out.double().contiguous()
    save_file(outputs, outputs_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
