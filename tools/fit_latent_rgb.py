"""Fits the inspector's latent -> RGB preview factors for a model's VAE.

Draws procedural pictures (flat background, one shape or stripes, in the
embedded model's canonical colours), encodes them with the VAE (posterior
mean x scaling_factor: the sampler's latent space), average-pools each picture
to the latent grid and solves rgb = latent @ F + b by least squares on the
-1..1 scale. Prints the C++ initialiser that engine/inspect/latent_rgb_tiny.inc
holds, and the fit's error.

usage: fit_latent_rgb.py VAE_FOLDER [OUT.inc]
Re-run it when the embedded model (resources/models/nanscope-tiny) is retrained.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import AutoencoderKL  # noqa: E402

COLOURS = [(255, 0, 0), (0, 160, 0), (0, 0, 255), (255, 255, 0), (255, 140, 0), (128, 0, 160), (255, 255, 255),
           (0, 0, 0)]


def picture(rng, size=64):
    bg, fg = rng.choice(len(COLOURS), 2, replace=False)
    img = np.empty((size, size, 3), np.float32)
    img[:] = COLOURS[bg]
    yy, xx = np.mgrid[0:size, 0:size]
    kind = rng.integers(4)
    cx, cy, r = rng.integers(12, 52), rng.integers(12, 52), rng.integers(7, 22)
    if kind == 0:
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    elif kind == 1:
        mask = (abs(xx - cx) <= 0.9 * r) & (abs(yy - cy) <= 0.9 * r)
    elif kind == 2:
        mask = (yy <= cy + r) & (yy >= cy - r) & (abs(xx - cx) <= (yy - (cy - r)) / 2)
    else:
        w = rng.integers(4, 9)
        mask = ((yy if rng.integers(2) else xx) // w) % 2 == 0
    img[mask] = COLOURS[fg]
    return img / 127.5 - 1.0


def main():
    folder = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else None
    torch.manual_seed(0)
    rng = np.random.default_rng(20240611)
    vae = AutoencoderKL.from_pretrained(folder).eval()
    imgs = np.stack([picture(rng) for _ in range(512)]).transpose(0, 3, 1, 2)
    with torch.no_grad():
        x = torch.from_numpy(imgs)
        lat = vae.encode(x).latent_dist.mean * vae.config.scaling_factor
        f = x.shape[-1] // lat.shape[-1]
        pooled = torch.nn.functional.avg_pool2d(x, f)
    L = lat.permute(0, 2, 3, 1).reshape(-1, lat.shape[1]).double().numpy()
    Y = pooled.permute(0, 2, 3, 1).reshape(-1, 3).double().numpy()
    A = np.concatenate([L, np.ones((L.shape[0], 1))], 1)
    coef, *_ = np.linalg.lstsq(A, Y, rcond=None)
    rms = float(np.sqrt(np.mean((A @ coef - Y) ** 2)))
    lines = [f"// Fitted by tools/fit_latent_rgb.py on {os.path.basename(os.path.normpath(folder))}: "
             f"rms error {rms:.4f} on the -1..1 scale over {L.shape[0]} latent pixels.",
             "f.factors = {"]
    for c in range(L.shape[1]):
        lines.append("    {" + ", ".join(f"{v:.5f}f" for v in coef[c]) + "},")
    lines.append("};")
    lines.append("f.bias = {" + ", ".join(f"{v:.5f}f" for v in coef[-1]) + "};")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        with open(out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
