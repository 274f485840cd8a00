"""Times a 2048 x 2048 SGEMM through PyTorch under the OPENBLAS_CORETYPE this
process was started with (unset: OpenBLAS detects the CPU itself), for the
benches' choice of the fastest core type. OpenBLAS reads the variable when it
loads, so each candidate runs in its own process.

usage: openblas_coretype.py THREADS
Prints one JSON object: {"core": the kernel OpenBLAS chose, "gflops": GFLOP/s}."""
import ctypes
import json
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
core = "?"
for lib in ("libblas.so.3", "libopenblas.so.0"):
    try:
        f = ctypes.CDLL(lib).openblas_get_corename
        f.restype = ctypes.c_char_p
        core = f().decode()
        break
    except (OSError, AttributeError):
        continue
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
torch.mm(a, b)  # warm-up
best = 0.0
for _ in range(3):  # the best of three windows: another process that takes a core lowers one, never raises it
    n, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= 0.25 and n >= 2:
            break
    best = max(best, 2.0 * 2048**3 * n / elapsed / 1e9)
print(json.dumps({"core": core, "gflops": best}))
