"""Oracle for tests/test_noise.cpp.

usage:
  noise_oracle.py torch CAPABILITY REQUEST.json OUT.f32 INFO.json
      CAPABILITY: avx2 | default | auto. Sets ATEN_CPU_CAPABILITY (before torch is
      imported) so torch's own dispatch picks that randn kernel. REQUEST is
      {"cases": [{"seed": S, "sizes": [n1, n2, ...]}]}: per case a fresh
      torch.Generator().manual_seed(S), then torch.randn(n_i, generator=g) for each
      size in order. OUT is every value, float32 little-endian, in that order.
      INFO is {"capability": "<the 'CPU capability usage' line of torch's config>"}.
  noise_oracle.py philox REQUEST.json OUT.f32
      NaNscope's counter-based noise, written independently of the C++ code with
      numpy: REQUEST is {"cases": [{"seed": S, "draw": D, "count": N}]}; OUT holds
      elements 0..N-1 of draw D per case. Philox4x32-10 after Salmon et al. (SC
      2011) / Random123, checked here against Random123's known-answer vectors.
  noise_oracle.py cuda REQUEST.json OUT.f32
      torch.randn(..., device="cuda") after torch.manual_seed(S), as A1111's "NV"
      source computes it on the CPU (modules/rng_philox.py), written here from its
      description: REQUEST is {"cases": [{"seed": S, "offset": D, "count": N}]};
      element i of the randn call at Philox offset D (0 for the first call after
      manual_seed, +1 per call) is Philox4x32-10 of counter (D, 0, i, 0) with key
      (S & 0xffffffff, S >> 32), and of its words x0, x1:
      u = x0 * 2^-32 + 2^-33, v = x1 * K + K/2 with K = float32(2^-32 * 2 pi),
      value = float32(sqrt(-2 ln u) * sin(v)), in float64 as rng_philox.py's numpy
      arithmetic promotes it (uint32 times a float32 array is float64).
"""
import json
import os
import sys


def torch_mode(capability, request_path, out_path, info_path):
    if capability != "auto":
        os.environ["ATEN_CPU_CAPABILITY"] = capability
    import numpy as np
    import torch

    with open(request_path) as f:
        request = json.load(f)
    parts = []
    for case in request["cases"]:
        g = torch.Generator().manual_seed(case["seed"])
        for n in case["sizes"]:
            parts.append(torch.randn(n, generator=g, dtype=torch.float32).numpy())
    np.concatenate(parts).astype("<f4").tofile(out_path)
    line = next((ln.strip() for ln in torch.__config__.show().splitlines() if "CPU capability usage" in ln), "")
    with open(info_path, "w") as f:
        json.dump({"capability": line}, f)


M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorised over uint64 arrays holding 32-bit words."""
    import numpy as np

    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3))
    k0 = np.uint64(k0)
    k1 = np.uint64(k1)
    for r in range(10):
        if r:
            k0 = np.uint64((int(k0) + W0) & MASK32)
            k1 = np.uint64((int(k1) + W1) & MASK32)
        p0 = np.uint64(M0) * c0  # < 2^64: both factors are 32-bit
        p1 = np.uint64(M1) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(MASK32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(MASK32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def check_known_answers():
    # Random123 kat_vectors, "philox4x32 10" lines: counter, key -> output.
    kats = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for ctr, key, want in kats:
        got = tuple(int(v) for v in philox4x32_10(*ctr, *key))
        if got != want:
            raise SystemExit(f"oracle Philox self-check failed: {ctr} {key} -> {got}, want {want}")


def nanscope_noise(seed, draw, count):
    import numpy as np

    i = np.arange(count, dtype=np.uint64)
    x0, x1, x2, x3 = philox4x32_10(i & np.uint64(MASK32), i >> np.uint64(32),
                                   np.full(count, draw & MASK32, np.uint64), np.full(count, draw >> 32, np.uint64),
                                   seed & MASK32, seed >> 32)
    a = ((x0 << np.uint64(32)) | x1) >> np.uint64(11)
    b = ((x2 << np.uint64(32)) | x3) >> np.uint64(11)
    u1 = (a + np.uint64(1)).astype(np.float64) * 2.0**-53  # a + 1 <= 2^53: exact in float64
    u2 = b.astype(np.float64) * 2.0**-53
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(np.float32)


def cuda_noise(seed, offset, count):
    import numpy as np

    i = np.arange(count, dtype=np.uint64)
    zeros = np.zeros(count, np.uint64)
    x0, x1, _, _ = philox4x32_10(np.full(count, offset, np.uint64), zeros, i, zeros, seed & MASK32, seed >> 32)
    inv = float(np.float32(2.3283064e-10))  # 2^-32 exactly
    k = np.float32(2.3283064e-10 * 6.2831855)
    u = x0.astype(np.float64) * inv + float(np.float32(inv) / np.float32(2))
    v = x1.astype(np.float64) * float(k) + float(k / np.float32(2))
    return (np.sqrt(-2.0 * np.log(u)) * np.sin(v)).astype(np.float32)


def cuda_mode(request_path, out_path):
    import numpy as np

    check_known_answers()
    with open(request_path) as f:
        request = json.load(f)
    parts = [cuda_noise(c["seed"], c["offset"], c["count"]) for c in request["cases"]]
    np.concatenate(parts).astype("<f4").tofile(out_path)


def philox_mode(request_path, out_path):
    import numpy as np

    check_known_answers()
    with open(request_path) as f:
        request = json.load(f)
    parts = [nanscope_noise(c["seed"], c["draw"], c["count"]) for c in request["cases"]]
    np.concatenate(parts).astype("<f4").tofile(out_path)


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "torch":
        torch_mode(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "philox":
        philox_mode(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "cuda":
        cuda_mode(*sys.argv[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
