"""What the trainer (tools/train_tiny_sd.py) and its export and evaluation
(tiny_sd/export_eval.py) share: the data grammar (colours, shapes, captions,
rendering), the model constructors, the stage list and small helpers. Both
import this module; neither imports the other's internals.
"""
import math
import os
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAXLEN = 77

# ---------------------------------------------------------------------------
# Data grammar
# ---------------------------------------------------------------------------
# Canonical colours (sRGB, 0-255). The C++ tests classify decoded pixels by the
# nearest of these values; keep this table and the model README in sync.
COLOURS = [
    ("red", (255, 0, 0)),
    ("green", (0, 160, 0)),
    ("blue", (0, 0, 255)),
    ("yellow", (255, 255, 0)),
    ("orange", (255, 140, 0)),
    ("purple", (128, 0, 160)),
    ("white", (255, 255, 255)),
    ("black", (0, 0, 0)),
]
COLOUR_NAMES = [c[0] for c in COLOURS]
COLOUR_RGB = np.array([c[1] for c in COLOURS], dtype=np.float32)
SHAPES = ["circle", "square", "triangle", "stripes"]  # kind index 0..3
SIZES = ["small", "large"]
POSITIONS = ["top left", "top right", "bottom left", "bottom right", "center"]
POS_XY = [(16, 16), (48, 16), (16, 48), (48, 48), (32, 32)]  # (x, y) centres
ORIENT = ["horizontal", "vertical"]
WORDS = (["a", "on", "background", "with", "at", "the", "in", "and",
          "top", "bottom", "left", "right", "center", "centre"]
         + COLOUR_NAMES + ["circle", "square", "triangle", "stripes"]
         + SIZES + ORIENT)

# attribute columns
A_KIND, A_FG, A_BG, A_SIZE, A_POS, A_ORIENT = range(6)


def sample_attributes(rng, n):
    """Returns (attrs int32 [n,6], geom float32 [n,4]=cx,cy,r_or_period,phase)."""
    attrs = np.zeros((n, 6), np.int32)
    geom = np.zeros((n, 4), np.float32)
    attrs[:, A_KIND] = rng.choice(4, size=n, p=[0.27, 0.27, 0.27, 0.19])
    attrs[:, A_FG] = rng.integers(0, 8, n)
    attrs[:, A_BG] = (attrs[:, A_FG] + rng.integers(1, 8, n)) % 8  # never equal
    attrs[:, A_SIZE] = rng.integers(0, 2, n)
    attrs[:, A_POS] = rng.integers(0, 5, n)
    attrs[:, A_ORIENT] = rng.integers(0, 2, n)
    for i in range(n):
        if attrs[i, A_KIND] == 3:
            geom[i] = (0, 0, rng.uniform(4.0, 8.0), rng.uniform(0, 1))
            continue
        if attrs[i, A_SIZE] == 0:
            r = rng.uniform(7.0, 10.0)
            x, y = POS_XY[attrs[i, A_POS]]
        else:
            r = rng.uniform(17.0, 22.0)
            attrs[i, A_POS] = 4
            x, y = 32, 32
        geom[i] = (x + rng.uniform(-2, 2), y + rng.uniform(-2, 2), r, 0)
    return attrs, geom


def render(attrs, geom):
    """Anti-aliased (analytic coverage) 64x64 RGB uint8 image."""
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) + 0.5
    kind = attrs[A_KIND]
    cx, cy, r, phase = geom
    if kind == 0:  # circle
        cov = np.clip(r - np.hypot(xx - cx, yy - cy) + 0.5, 0, 1)
    elif kind == 1:  # square, half side 0.9 r
        h = 0.9 * r
        cov = (np.clip(h - np.abs(xx - cx) + 0.5, 0, 1)
               * np.clip(h - np.abs(yy - cy) + 0.5, 0, 1))
    elif kind == 2:  # upright triangle: apex (cx, cy-r), base (cx+-r, cy+r)
        d_base = (cy + r) - yy
        s5 = math.sqrt(5.0)
        # side edges pass through the apex with direction (+-1, 2); signed
        # distances, positive inside
        d_right = ((cx - xx) * 2.0 + (yy - (cy - r)) * 1.0) / s5
        d_left = ((xx - cx) * 2.0 + (yy - (cy - r)) * 1.0) / s5
        d = np.minimum(np.minimum(d_base, d_right), d_left)
        cov = np.clip(d + 0.5, 0, 1)
    else:  # stripes with half-period r, phase in periods
        coord = yy if attrs[A_ORIENT] == 0 else xx
        pos = ((coord / (2 * r) + phase) % 1.0) * 2 * r  # [0, 2r): first half fg
        # signed distance (px) to the nearest boundary, positive inside fg half
        dfg = np.where(pos < r, np.minimum(pos, r - pos), -np.minimum(pos - r, 2 * r - pos))
        cov = np.clip(dfg + 0.5, 0, 1)
    fg = COLOUR_RGB[attrs[A_FG]]
    bg = COLOUR_RGB[attrs[A_BG]]
    img = bg[None, None, :] * (1 - cov[..., None]) + fg[None, None, :] * cov[..., None]
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def make_caption(a, rng):
    """One random caption for attribute row a (word order varies)."""
    fg, bg = COLOUR_NAMES[a[A_FG]], COLOUR_NAMES[a[A_BG]]
    kind = a[A_KIND]
    if kind == 3:
        c1, c2 = (fg, bg) if rng.random() < 0.5 else (bg, fg)
        o = ORIENT[a[A_ORIENT]]
        t = rng.integers(0, 3) if rng.random() < 0.7 else 3
        return [f"{c1} and {c2} {o} stripes", f"{o} {c1} and {c2} stripes",
                f"a {o} {c1} and {c2} stripes", f"{c1} and {c2} stripes"][t]
    shape = SHAPES[kind]
    size = (SIZES[a[A_SIZE]] + " ") if rng.random() < 0.7 else ""
    if a[A_SIZE] == 0:
        p = POSITIONS[a[A_POS]] if rng.random() < 0.75 else None
    else:
        p = "center" if rng.random() < 0.3 else None
    if p is None:
        pos = ""
    elif p == "center":
        pos = " in the " + ("centre" if rng.random() < 0.3 else "center")
    else:
        pos = " at the " + p
    t = rng.integers(0, 3)
    if t == 0:
        return f"a {size}{fg} {shape}{pos} on a {bg} background"
    if t == 1:
        return f"a {bg} background with a {size}{fg} {shape}{pos}"
    return f"a {size}{fg} {shape} on a {bg} background{pos}"


# ---------------------------------------------------------------------------
# Utilities
# ---------------------------------------------------------------------------
def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_data(args):
    d = np.load(os.path.join(args.work_dir, "data.npz"))
    return d["images"], d["attrs"], d["geom"]


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------
def parse_ch(s):
    return tuple(int(x) for x in s.split(","))


def make_vae(args, scaling_factor=1.0):
    from diffusers import AutoencoderKL
    ch = parse_ch(args.vae_channels)
    return AutoencoderKL(
        in_channels=3, out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(ch),
        up_block_types=("UpDecoderBlock2D",) * len(ch),
        block_out_channels=ch, layers_per_block=args.vae_layers, latent_channels=4,
        norm_num_groups=args.vae_groups, sample_size=64, scaling_factor=scaling_factor)


def make_text_encoder(args, vocab_size, bos, eos, pad):
    from transformers import CLIPTextConfig, CLIPTextModel
    cfg = CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=args.text_hidden,
        intermediate_size=4 * args.text_hidden, num_hidden_layers=args.text_layers,
        num_attention_heads=args.text_heads, max_position_embeddings=MAXLEN,
        hidden_act="quick_gelu", projection_dim=args.text_hidden,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)
    return CLIPTextModel(cfg)


def make_unet(args):
    from diffusers import UNet2DConditionModel
    ch = parse_ch(args.unet_channels)
    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        mid_block_type="UNetMidBlock2DCrossAttn",
        block_out_channels=ch, layers_per_block=args.unet_layers,
        cross_attention_dim=args.text_hidden, attention_head_dim=args.unet_heads,
        norm_num_groups=args.unet_groups)


def nparams(m):
    return sum(p.numel() for p in m.parameters())


def to_tensor(imgs):
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


ALL_STAGES = ["data", "tokenizer", "vae", "vae_ft", "latents", "unet", "unet_more", "export", "eval"]
