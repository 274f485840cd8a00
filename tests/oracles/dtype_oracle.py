"""Oracle for tests/test_dtype.cpp: PyTorch's f16 and bf16 conversions, bit for bit.

usage: dtype_oracle.py IN.safetensors OUT.safetensors
  IN  holds "x" (F32 [n]): the float32 inputs to round.
  OUT gets "f16_decoded", "bf16_decoded" (F32 [65536]): torch's float32 value of
      every 16-bit pattern read as float16 / bfloat16, in pattern order; and
      "x_f16", "x_bf16" (I16 [n]): the bit patterns of x.to(float16/bfloat16).
"""
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file


def main(inp, out):
    x = load_file(inp)["x"]
    assert x.dtype == torch.float32, x.dtype
    patterns = torch.from_numpy(np.arange(65536, dtype=np.uint16).view(np.int16).copy())
    result = {
        "f16_decoded": patterns.view(torch.float16).float(),
        "bf16_decoded": patterns.view(torch.bfloat16).float(),
        "x_f16": x.to(torch.float16).view(torch.int16),
        "x_bf16": x.to(torch.bfloat16).view(torch.int16),
    }
    save_file({k: v.contiguous() for k, v in result.items()}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
