"""Exports a diffusers UNet2DConditionModel folder, or an AutoencoderKL
folder's decoder, to ONNX for bench_unet's ONNX Runtime and OpenVINO rows
(bench/peer_onnx.py), with the inputs bench/torch_unet.py and torch_vae.py
use and PyTorch's output on them, so that each engine's output can be checked
against PyTorch's before it is timed.

usage: export_onnx.py unet|vae MODEL_DIR LATENT_SIZE
Runs in the oracle venv (Debian's torch 1.13, diffusers 0.31; torch's own ONNX
exporter, which needs no `onnx` package). Writes MODEL_DIR/onnx/COMPONENT-SIZE/:
  model.onnx     opset 17, static shapes (the bench's one size; what a user of
                 these engines exports for speed); past 2 GB (the SD 1.5 UNet)
                 torch writes every weight as an external-data file beside it
  inputs.npz     the inputs by the graph's input names
  expected.npy   PyTorch's (diffusers') f32 output on them
  key.json       what the export was made from: config.json, the weights file's
                 size and modification time, the size, torch and diffusers
                 versions. A folder whose key differs is exported again.
UNet inputs: sample [2, 4, S, S], timestep [2] (500), encoder_hidden_states
[2, 77, cross attention dim]. SDXL UNets (added conditions) are refused: torch
1.13's exporter had not finished even the tiny SDXL UNet after 10 minutes.
VAE: latent [1, 4, S, S] / scaling_factor -> image [1, 3, 8S, 8S]. Attention is
diffusers' classic AttnProcessor, as in the PyTorch row, with its scores
computed as matmul x scale, for the export and for the expected output alike:
diffusers' baddbmm(torch.empty(...), q, k^T, beta=0) is exported as a zero
tensor the size of the scores that torch's constant folding stores in the
graph (1 GB per self-attention of the 512x512 UNet: the export ran out of
17 GB), and on torch 1.13's CPU it lets NaNs in the uninitialised tensor
through (0 x NaN): seen here in the output of the tiny UNet. From latent 128
the UNet's attention is sliced one head at a time (set_attention_slice(1)), as
in bench/torch_unet.py: unsliced, its scores alone would be 17 GB per layer.
Prints {"dir": EXPORT_DIR, "made": bool}."""
import json
import os
import shutil
import sys
import time

import numpy as np
import torch
import diffusers
from diffusers.models.attention_processor import AttnProcessor

OPSET = 17  # the newest opset torch 1.13 exports
FORMAT = 3  # bump when what this script writes changes


def export_attention_scores(self, query, key, attention_mask=None):
    """diffusers' Attention.get_attention_scores without baddbmm's beta-0 input."""
    dtype = query.dtype
    if self.upcast_attention:
        query, key = query.float(), key.float()
    scores = torch.matmul(query, key.transpose(-1, -2)) * self.scale
    if attention_mask is not None:
        scores = scores + attention_mask
    if self.upcast_softmax:
        scores = scores.float()
    return scores.softmax(dim=-1).to(dtype)


component, folder, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if component not in ("unet", "vae"):
    sys.exit(f"export_onnx.py: component must be unet or vae, not {component!r}")
out = os.path.join(folder, "onnx", f"{component}-{size}")
weights = os.path.join(folder, "diffusion_pytorch_model.safetensors")
with open(os.path.join(folder, "config.json")) as f:
    config = json.load(f)
st = os.stat(weights)
key = {"format": FORMAT, "component": component, "size": size, "opset": OPSET, "config": config,
       "weights_bytes": st.st_size, "weights_mtime_ns": st.st_mtime_ns, "torch": torch.__version__,
       "diffusers": diffusers.__version__}
sliced = component == "unet" and size >= 128
if sliced:
    key["attention_slice"] = 1
try:
    with open(os.path.join(out, "key.json")) as f:
        if json.load(f) == json.loads(json.dumps(key)):
            print(json.dumps({"dir": out, "made": False}))
            sys.exit(0)
except (OSError, ValueError):
    pass

torch.set_num_threads(os.cpu_count() or 1)
g = torch.Generator().manual_seed(0)
if component == "unet":
    if config.get("addition_embed_type") == "text_time":
        sys.exit("export_onnx.py: SDXL UNets are not exported (torch 1.13's ONNX exporter had not finished the tiny "
                 "SDXL UNet after 10 minutes); no ONNX Runtime / OpenVINO rows for SDXL")
    model = diffusers.UNet2DConditionModel.from_pretrained(folder, torch_dtype=torch.float32)
    model.set_attn_processor(AttnProcessor())
    if sliced:
        model.set_attention_slice(1)
    cfg = model.config
    # The same draws, in the same order, as bench/torch_unet.py.
    inputs = {"sample": torch.randn(2, 4, size, size, generator=g),
              "encoder_hidden_states": torch.randn(2, 77, cfg.cross_attention_dim, generator=g)}
    inputs["timestep"] = torch.tensor([500.0, 500.0])

    class Graph(torch.nn.Module):
        def __init__(self, unet):
            super().__init__()
            self.unet = unet

        def forward(self, sample, timestep, encoder_hidden_states):
            return self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]

    names = ["sample", "timestep", "encoder_hidden_states"]
else:
    model = diffusers.AutoencoderKL.from_pretrained(folder, torch_dtype=torch.float32)
    model.set_attn_processor(AttnProcessor())
    # bench/torch_vae.py's latent, divided by the scaling factor as it is before the decode.
    inputs = {"latent": torch.randn(1, 4, size, size, generator=g) / model.config.scaling_factor}

    class Graph(torch.nn.Module):
        def __init__(self, vae):
            super().__init__()
            self.vae = vae

        def forward(self, latent):
            return self.vae.decode(latent, return_dict=False)[0]

    names = ["latent"]

diffusers.models.attention_processor.Attention.get_attention_scores = export_attention_scores
graph = Graph(model).eval()
args = tuple(inputs[n] for n in names)
t0 = time.perf_counter()
with torch.no_grad():
    expected = graph(*args)
if not torch.isfinite(expected).all():
    sys.exit(f"export_onnx.py: PyTorch's output on {folder} is not finite (NaN or Inf): no reference to check against")
tmp = out + ".tmp"
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
np.savez(os.path.join(tmp, "inputs.npz"), **{n: inputs[n].numpy() for n in names})
np.save(os.path.join(tmp, "expected.npy"), expected.numpy())
with torch.no_grad():
    # Models past 2 GB (protobuf's limit) are written with external data: one
    # file per weight beside model.onnx (torch 1.13 decides this by itself).
    torch.onnx.export(graph, args, os.path.join(tmp, "model.onnx"), input_names=names, output_names=["out"],
                      opset_version=OPSET, do_constant_folding=True)
with open(os.path.join(tmp, "key.json"), "w") as f:
    json.dump(key, f)
shutil.rmtree(out, ignore_errors=True)
os.replace(tmp, out)
files = os.listdir(out)
mb = sum(os.path.getsize(os.path.join(out, n)) for n in files) / 2**20
print(f"export_onnx.py: exported {folder} ({component}, latent {size}) to {out}: {len(files)} files, {mb:.0f} MB, "
      f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
print(json.dumps({"dir": out, "made": True}))
