"""Oracle for tests/test_safetensors.cpp: files written and read by the Python
`safetensors` package and by torch.save, so the C++ reader is checked against
the reference implementation of the format rather than against itself.

usage:
  safetensors_oracle.py write OUT.safetensors   # tensors with known values (see expected())
  safetensors_oracle.py check IN.safetensors    # verify a file the C++ writer produced
  safetensors_oracle.py pickles OUT_DIR          # torch.save in zip and legacy pickle formats
"""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def expected():
    """Tensors whose values both sides compute from a formula."""
    a = torch.arange(2 * 3 * 5, dtype=torch.float32).reshape(2, 3, 5) * 0.25 - 3.0
    b = (torch.arange(7, dtype=torch.float32) * 0.5 - 2.0).to(torch.float16)
    c = (torch.arange(4 * 4, dtype=torch.float32).reshape(4, 4) * 1000.5).to(torch.bfloat16)  # rounds
    big = torch.tensor([65504.0, -65504.0, 1e-7, 0.0], dtype=torch.float16)
    ids = torch.arange(5, dtype=torch.int64)
    return {"a": a, "b.half": b, "c.bf16": c, "big": big, "ids": ids}


def write(path):
    save_file(expected(), path, metadata={"format": "pt", "producer": "safetensors_oracle"})


def check(path):
    # What tests/test_safetensors.cpp writes: see its WrittenByCppReadByPython test.
    want = {
        "x": torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5,
        "y": (torch.arange(5, dtype=torch.float32) * 0.1).to(torch.float16),
        "z": (torch.arange(3, dtype=torch.float32) * 1000.5).to(torch.bfloat16),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
    }
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        if meta != {"k": "v", "seed": "42"}:
            sys.exit(f"metadata {meta!r}")
        keys = sorted(f.keys())
        if keys != sorted(want):
            sys.exit(f"keys {keys!r}")
        for name, w in want.items():
            t = f.get_tensor(name)
            if t.dtype != w.dtype or t.shape != w.shape or not torch.equal(t, w):
                sys.exit(f"tensor {name}: got {t.dtype} {tuple(t.shape)} {t.flatten()[:8]}, want {w.flatten()[:8]}")


def pickles(out_dir):
    sd = {"w": torch.ones(2, 2)}
    torch.save(sd, f"{out_dir}/model.ckpt")
    torch.save(sd, f"{out_dir}/legacy.pt", _use_new_zipfile_serialization=False)


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    {"write": write, "check": check, "pickles": pickles}[mode](arg)
