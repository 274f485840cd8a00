"""Export and evaluation stages of tools/train_tiny_sd.py.

export(args): builds the diffusers folder at args.out from the checkpoints in
  args.work_dir: text_encoder/, tokenizer/, unet/ (EMA weights), scheduler/,
  vae-fp16-fix/ (the trained VAE, force_upcast=false) and vae/ (the same
  function with one decoder conv re-parameterised so that an activation
  exceeds the float16 range, force_upcast=true; model_index.json points here).
evaluate(args): samples fixed prompts with StableDiffusionPipeline and checks
  colours and shapes; writes samples.png into the folder and eval.json into
  the work dir.
"""
import copy
import json
import math
import os
import shutil
import time

import numpy as np
import torch

from tiny_sd import common as T

F16_MAX = 65504.0


def log(msg):
    T.log(msg)


# ---------------------------------------------------------------------------
# Image checks
# ---------------------------------------------------------------------------
def nearest_colour(rgb):
    d = ((np.asarray(rgb, np.float32)[..., None, :] - T.COLOUR_RGB) ** 2).sum(-1)
    return d.argmin(-1)


def _open3(mask):
    """Binary opening with a 3x3 square (drops stray pixels and thin lines)."""
    def shifted(m, fill):
        p = np.pad(m, 1, constant_values=fill)
        return np.stack([p[dy:dy + m.shape[0], dx:dx + m.shape[1]] for dy in range(3) for dx in range(3)])
    eroded = shifted(mask, True).all(0)
    return shifted(eroded, False).any(0)


def check_shape(img):
    """img uint8 [64,64,3] -> (fg index or -1, bg index, shape name or None, features).

    Background: nearest canonical colour of the median of a 2-px border.
    Foreground mask: pixels nearer the foreground colour (median of pixels > 60
    RGB units from the background) than the background colour, opened 3x3.
    Shape: triangle if >= 62% of the mask lies in the lower half of its
    bounding box (apex-up triangle: 75%); otherwise square if the four corner
    patches (20% of the box side) are more than half filled, else circle."""
    f = img.astype(np.float32)
    border = np.concatenate([f[:2].reshape(-1, 3), f[-2:].reshape(-1, 3),
                             f[:, :2].reshape(-1, 3), f[:, -2:].reshape(-1, 3)])
    bg_rgb = np.median(border, axis=0)
    bg = int(nearest_colour(bg_rgb))
    dist = np.sqrt(((f - bg_rgb) ** 2).sum(-1))
    rough = dist > 60
    if rough.sum() < 12:
        return -1, bg, None, {}
    fg_rgb = np.median(f[rough], axis=0)
    fg = int(nearest_colour(fg_rgb))
    mask = _open3(np.sqrt(((f - fg_rgb) ** 2).sum(-1)) < dist)
    if mask.sum() < 12:
        return fg, bg, None, {}
    ys, xs = np.nonzero(mask)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    box = mask[y0:y1, x0:x1].astype(np.float32)
    h, w = box.shape
    lower = box[h // 2:].sum() + (0.5 * box[h // 2].sum() if h % 2 else 0.0)
    lower_frac = float(lower / box.sum())
    ch, cw = max(1, int(round(0.2 * h))), max(1, int(round(0.2 * w)))
    corners = float(np.mean([box[:ch, :cw].mean(), box[:ch, -cw:].mean(),
                             box[-ch:, :cw].mean(), box[-ch:, -cw:].mean()]))
    if lower_frac >= 0.62:
        shape = "triangle"
    elif corners > 0.5:
        shape = "square"
    else:
        shape = "circle"
    return fg, bg, shape, {"lower_frac": lower_frac, "corners": corners, "fill": float(box.mean())}


def check_stripes(img):
    """-> (set of the two dominant colours, orientation name or None)."""
    cls = nearest_colour(img.astype(np.float32))
    counts = np.bincount(cls.ravel(), minlength=8)
    top = np.argsort(-counts)[:2]
    if counts[top[1]] < 0.15 * cls.size:
        return set(int(t) for t in top), None
    ind = (cls == top[0]).astype(np.float32)
    vr, vc = ind.mean(axis=1).var(), ind.mean(axis=0).var()
    return set(int(t) for t in top), ("horizontal" if vr > vc else "vertical")


def check(img, spec):
    """spec: dict(kind, fg, bg, orient). Returns dict fg_ok, bg_ok, shape_ok."""
    if spec["kind"] == "stripes":
        cols, orient = check_stripes(img)
        return {"fg_ok": spec["fg"] in cols, "bg_ok": spec["bg"] in cols,
                "shape_ok": orient is not None and (spec.get("orient") in (None, orient))}
    fg, bg, shape, _ = check_shape(img)
    return {"fg_ok": fg == spec["fg"], "bg_ok": bg == spec["bg"], "shape_ok": shape == spec["kind"]}


def spec_from_attrs(a):
    kind = T.SHAPES[a[T.A_KIND]]
    return {"kind": kind, "fg": int(a[T.A_FG]), "bg": int(a[T.A_BG]),
            "orient": T.ORIENT[a[T.A_ORIENT]] if kind == "stripes" else None}


def accuracy(results):
    n = len(results)
    keys = ("fg_ok", "bg_ok", "shape_ok")
    acc = {k: sum(r[k] for r in results) / n for k in keys}
    acc["all_ok"] = sum(all(r[k] for k in keys) for r in results) / n
    return acc


def eval_prompts():
    """50 fixed prompts: 40 shapes (20 'large', 20 without size) + 10 stripes."""
    rng = np.random.default_rng(12345)
    out = []
    for i in range(40):
        shape = ["circle", "square", "triangle"][i % 3]
        fg = int(rng.integers(0, 8))
        bg = int((fg + rng.integers(1, 8)) % 8)
        size = "large " if i < 20 else ""
        fgn, bgn = T.COLOUR_NAMES[fg], T.COLOUR_NAMES[bg]
        if i % 2 == 0:
            p = f"a {size}{fgn} {shape} on a {bgn} background"
        else:
            p = f"a {bgn} background with a {size}{fgn} {shape}"
        out.append((p, {"kind": shape, "fg": fg, "bg": bg, "orient": None}))
    for i in range(10):
        c1 = int(rng.integers(0, 8))
        c2 = int((c1 + rng.integers(1, 8)) % 8)
        o = T.ORIENT[i % 2]
        out.append((f"{T.COLOUR_NAMES[c1]} and {T.COLOUR_NAMES[c2]} {o} stripes",
                    {"kind": "stripes", "fg": c1, "bg": c2, "orient": o}))
    return out


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------
def record_max_abs(module, fn):
    """Runs fn() with forward hooks on every leaf module of `module`; returns
    {module path: max |output|} in f32."""
    stats, hooks = {}, []
    for name, m in module.named_modules():
        if len(list(m.children())) == 0:
            def hook(mod, inp, out, name=name):
                o = out[0] if isinstance(out, tuple) else out
                if torch.is_tensor(o):
                    stats[name] = max(stats.get(name, 0.0), float(o.detach().abs().max()))
            hooks.append(m.register_forward_hook(hook))
    try:
        fn()
    finally:
        for h in hooks:
            h.remove()
    return stats


def f16_emulated(module, fn):
    """Runs fn() with every leaf module's output rounded to float16 (overflow
    -> inf, like half storage between ops). Returns fn()'s result."""
    hooks = []
    for _, m in module.named_modules():
        if len(list(m.children())) == 0:
            def hook(mod, inp, out):
                if torch.is_tensor(out):
                    return out.half().float()
                return out
            hooks.append(m.register_forward_hook(hook))
    try:
        return fn()
    finally:
        for h in hooks:
            h.remove()


def export(args):
    from transformers import CLIPTokenizer
    from diffusers import EulerDiscreteScheduler, StableDiffusionPipeline
    wd = args.work_dir
    lat = torch.load(os.path.join(wd, "latents.pt"))
    sf = lat["scaling_factor"]
    vae = T.make_vae(args, scaling_factor=sf)
    vae.load_state_dict(torch.load(os.path.join(wd, "vae_ft.final.pt"))["model"])
    vae.eval()
    tok = CLIPTokenizer.from_pretrained(os.path.join(wd, "tokenizer"))
    # The last UNet stage configured: unet_more (warm restart) when it has iterations.
    name = "unet_more" if args.unet_more_iters > 0 else "unet"
    planned = args.unet_iters + (args.unet_more_iters if name == "unet_more" else 0)
    unet_src = os.path.join(wd, f"{name}.final.pt")
    if os.path.exists(unet_src):
        st = torch.load(unet_src)
        unet_it = planned
    else:  # interim export while training is still running
        unet_src = os.path.join(wd, f"{name}.ckpt.pt")
        if not os.path.exists(unet_src):
            raise SystemExit(f"export: neither {name}.final.pt nor {name}.ckpt.pt in {wd}; run stage {name} first")
        st = torch.load(unet_src)
        unet_it = st["it"] + (args.unet_iters if name == "unet_more" else 0)
        log(f"export: WARNING {name}.final.pt missing, exporting EMA weights of the checkpoint at "
            f"iteration {unet_it}/{planned} (interim model)")
    te = T.make_text_encoder(args, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    te.load_state_dict(st["ema_te"])
    unet = T.make_unet(args)
    unet.load_state_dict(st["ema_unet"])
    te.eval()
    unet.eval()
    sched = EulerDiscreteScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
        prediction_type="v_prediction", timestep_spacing="trailing", rescale_betas_zero_snr=True,
        steps_offset=1, interpolation_type="linear", use_karras_sigmas=False, final_sigmas_type="zero")

    # --- the f16-overflowing re-parameterisation -------------------------------
    z = lat["latents"][-256:] / sf  # held-out images' latents, unscaled
    stats = record_max_abs(vae.decoder, lambda: vae.decode(z))
    top = sorted(stats.items(), key=lambda kv: -kv[1])[:8]
    log("vae-fp16-fix: largest |activation| per module (f32, 256 held-out latents): "
        + ", ".join(f"{k} {v:.1f}" for k, v in top))
    nup = len(vae.decoder.up_blocks)
    path = f"decoder.up_blocks.{nup - 1}.resnets.0.conv1"
    key = path[len("decoder."):]
    # at least 2**vae_scale_log2, and enough that the activation max lands at
    # >= 2x the f16 limit on these latents
    log2f = max(args.vae_scale_log2, int(math.ceil(math.log2(2 * F16_MAX / stats[key]))))
    factor = 2.0 ** log2f
    vae_big = copy.deepcopy(vae)
    conv = vae_big.decoder.up_blocks[nup - 1].resnets[0].conv1
    with torch.no_grad():
        conv.weight.mul_(factor)
        conv.bias.mul_(factor)
    stats_big = record_max_abs(vae_big.decoder, lambda: vae_big.decode(z))
    with torch.no_grad():
        a = vae.decode(z).sample
        b = vae_big.decode(z).sample
        diff = float((a - b).abs().max())
        a16 = f16_emulated(vae.decoder, lambda: vae.decode(z).sample)
        b16 = f16_emulated(vae_big.decoder, lambda: vae_big.decode(z).sample)
    rep = {
        "scaled_module": path, "factor": factor, "factor_log2": log2f,
        "max_abs_activation_fp16_fix": max(stats.values()),
        "max_abs_activation_fp16_fix_module": top[0][0],
        "scaled_conv_max_abs_before": stats[key], "scaled_conv_max_abs_after": stats_big[key],
        "max_abs_activation_vae": max(stats_big.values()),
        "scaled_weight_max_abs": float(conv.weight.abs().max()),
        "scaled_bias_max_abs": float(conv.bias.abs().max()),
        "f32_decode_max_abs_diff": diff,
        "f16_emulated_fp16_fix_max_abs_err": float((a16 - a).abs().max()),
        "f16_emulated_fp16_fix_finite": bool(torch.isfinite(a16).all()),
        "f16_emulated_vae_nonfinite_fraction": float((~torch.isfinite(b16)).float().mean()),
        "scaling_factor": sf,
        "unet_source": os.path.basename(unet_src), "unet_iterations_trained": unet_it,
        "vae_val_mse": torch.load(os.path.join(wd, "vae.final.pt"))["val_mse"],
        "vae_ft_val_mse": torch.load(os.path.join(wd, "vae_ft.final.pt"))["val_mse"],
    }
    log("vae/ construction: " + json.dumps(rep))
    assert diff < 1e-4, diff
    assert rep["scaled_conv_max_abs_after"] > F16_MAX
    assert rep["max_abs_activation_fp16_fix"] < F16_MAX / 16
    assert rep["scaled_weight_max_abs"] < F16_MAX and rep["scaled_bias_max_abs"] < F16_MAX

    # --- write the folder ---------------------------------------------------------
    out = args.out
    os.makedirs(out, exist_ok=True)
    for sub in ("text_encoder", "tokenizer", "unet", "vae", "vae-fp16-fix", "scheduler"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    for m in (te, unet, vae, vae_big):
        for p in m.parameters():
            p.data = p.data.contiguous()
    vae.register_to_config(force_upcast=False)
    vae_big.register_to_config(force_upcast=True)
    pipe = StableDiffusionPipeline(vae=vae_big, text_encoder=te, tokenizer=tok, unet=unet, scheduler=sched,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)
    vae.save_pretrained(os.path.join(out, "vae-fp16-fix"), safe_serialization=True)
    with open(os.path.join(wd, "export.json"), "w") as f:
        json.dump(rep, f, indent=2)
    sizes = {}
    for sub in sorted(os.listdir(out)):
        p = os.path.join(out, sub)
        if os.path.isdir(p):
            sizes[sub] = sum(os.path.getsize(os.path.join(p, x)) for x in os.listdir(p))
    total = sum(os.path.getsize(os.path.join(dp, x)) for dp, _, fs in os.walk(out) for x in fs)
    log("export: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()) + f"; total {total / 1e6:.2f} MB")
    log(f"export: params text_encoder {T.nparams(te)}, unet {T.nparams(unet)}, vae {T.nparams(vae)}")
    rep.update(sizes_bytes=sizes, total_bytes=total,
               params={"text_encoder": T.nparams(te), "unet": T.nparams(unet), "vae": T.nparams(vae)})
    with open(os.path.join(wd, "export.json"), "w") as f:
        json.dump(rep, f, indent=2)
    write_readme(args)


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------
def eval_reference(args):
    """Checker sanity on real held-out images, and VAE reconstruction colours."""
    from diffusers import AutoencoderKL
    imgs, attrs, _ = T.load_data(args)
    n0 = len(imgs) - args.num_val
    sel = range(n0, min(n0 + 500, len(imgs)))
    gt = [check(imgs[i], spec_from_attrs(attrs[i])) for i in sel]
    res = {"checker_on_real": accuracy(gt)}
    vae = AutoencoderKL.from_pretrained(os.path.join(args.out, "vae"))
    vae.eval()
    with torch.no_grad():
        x = T.to_tensor(imgs[n0:n0 + 500])
        y = vae.decode(vae.encode(x).latent_dist.mean).sample
    rec = ((y.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
    res["checker_on_vae_reconstructions"] = accuracy(
        [check(rec[k], spec_from_attrs(attrs[i])) for k, i in enumerate(sel)])
    err = np.abs(rec.astype(np.float32) - imgs[n0:n0 + 500].astype(np.float32))
    res["vae_recon_mse_01"] = float(((err / 255) ** 2).mean())
    # per-pixel nearest-colour agreement away from edges (flat regions)
    c_ref = nearest_colour(imgs[n0:n0 + 500].astype(np.float32))
    c_rec = nearest_colour(rec.astype(np.float32))
    res["vae_pixel_colour_agreement"] = float((c_ref == c_rec).mean())
    return res


def evaluate(args):
    from diffusers import StableDiffusionPipeline
    from PIL import Image
    t0 = time.time()
    pipe = StableDiffusionPipeline.from_pretrained(args.out, safety_checker=None)
    pipe.set_progress_bar_config(disable=True)
    log(f"eval: scheduler {type(pipe.scheduler).__name__} {dict(pipe.scheduler.config)}")
    prompts = eval_prompts()
    seeds = [int(s) for s in args.eval_seeds.split(",")]
    report = {}
    try:
        report.update(eval_reference(args))
        log("eval: checker on real images " + json.dumps(report["checker_on_real"]))
        log("eval: VAE reconstructions " + json.dumps(report["checker_on_vae_reconstructions"])
            + f" recon MSE {report['vae_recon_mse_01']:.5f} pixel colour agreement "
            f"{report['vae_pixel_colour_agreement']:.4f}")
    except FileNotFoundError as e:  # no data cache (e.g. fresh checkout): skip
        log(f"eval: reference checks skipped ({e})")
    sheet_rows = []
    for gr in (0.0, 0.7):
        results, imgs_seed0 = [], []
        for seed in seeds:
            for b in range(0, len(prompts), 25):
                batch = prompts[b:b + 25]
                gens = [torch.Generator().manual_seed(seed * 1000 + b + k) for k in range(len(batch))]
                with torch.no_grad():
                    ims = pipe([p for p, _ in batch], height=64, width=64, num_inference_steps=20,
                               guidance_scale=7.0, guidance_rescale=gr, generator=gens,
                               output_type="np").images
                ims = (np.clip(ims, 0, 1) * 255).round().astype(np.uint8)
                for (p, spec), im in zip(batch, ims):
                    r = check(im, spec)
                    r.update(prompt=p, seed=seed)
                    results.append(r)
                    if seed == seeds[0]:
                        imgs_seed0.append(im)
        acc = accuracy(results)
        shp = accuracy([r for r, (_, s) in zip(results, prompts * len(seeds)) if s["kind"] != "stripes"])
        stp = accuracy([r for r, (_, s) in zip(results, prompts * len(seeds)) if s["kind"] == "stripes"])
        report[f"guidance_rescale_{gr}"] = {"all_prompts": acc, "shape_prompts": shp, "stripe_prompts": stp,
                                            "results": results}
        log(f"eval: CFG 7, 20 Euler steps, guidance_rescale {gr}, {len(results)} images: "
            f"fg {acc['fg_ok']:.3f} bg {acc['bg_ok']:.3f} shape {acc['shape_ok']:.3f} all {acc['all_ok']:.3f} "
            f"| shapes only fg {shp['fg_ok']:.3f} bg {shp['bg_ok']:.3f} shape {shp['shape_ok']:.3f} "
            f"| stripes colours {stp['fg_ok']:.3f}/{stp['bg_ok']:.3f} direction {stp['shape_ok']:.3f}")
        grid = np.stack(imgs_seed0).reshape(5, 10, 64, 64, 3).transpose(0, 2, 1, 3, 4).reshape(320, 640, 3)
        sheet_rows.append(grid)
    sheet = np.concatenate([sheet_rows[0], np.full((4, 640, 3), 128, np.uint8), sheet_rows[1]])
    Image.fromarray(sheet).save(os.path.join(args.out, "samples.png"), optimize=True)
    report["prompts"] = [p for p, _ in prompts]
    report["seconds"] = time.time() - t0
    with open(os.path.join(args.work_dir, "eval.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(f"eval: table (fg / bg / shape / all-three), {len(prompts)} prompts x {len(seeds)} seeds")
    for gr in (0.0, 0.7):
        a = report[f"guidance_rescale_{gr}"]["all_prompts"]
        log(f"  guidance_rescale {gr}: {a['fg_ok']:.3f} / {a['bg_ok']:.3f} / {a['shape_ok']:.3f} / {a['all_ok']:.3f}")
    write_readme(args)
    log(f"eval: wrote {os.path.join(args.out, 'samples.png')} and {os.path.join(args.work_dir, 'eval.json')} "
        f"in {report['seconds']:.0f} s")


# ---------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------
def _stage_times(log_path):
    """Per stage: summed wall-clock minutes from 'stage X finished in M min'
    lines plus, for sessions that were killed mid-stage, the span of that
    stage's progress lines. Returns {stage: minutes}."""
    import re
    if not os.path.exists(log_path):
        return {}
    out, first, last = {}, {}, {}

    def secs(ts):
        h, m, s = (int(x) for x in ts.split(":"))
        return h * 3600 + m * 60 + s

    prev = None
    for line in open(log_path, errors="replace"):
        m = re.match(r"\[(\d\d:\d\d:\d\d)\] (\w+)[: ]", line)
        if not m:
            continue
        t = secs(m.group(1))
        if prev is not None and t < prev:  # past midnight
            t += 86400
        prev = t
        mf = re.match(r"\[[\d:]+\] stage (\w+) finished in ([\d.]+) min", line)
        if mf:
            out[mf.group(1)] = out.get(mf.group(1), 0.0) + float(mf.group(2))
            first.pop(mf.group(1), None)
            continue
        name = m.group(2)
        if name == "args":  # a new session: close open spans of killed stages
            for k in list(first):
                out[k] = out.get(k, 0.0) + (last[k] - first[k]) / 60
            first.clear()
            continue
        if name in T.ALL_STAGES:
            first.setdefault(name, t)
            last[name] = t
    return out


def write_readme(args):
    wd = args.work_dir
    ex = json.load(open(os.path.join(wd, "export.json"))) if os.path.exists(os.path.join(wd, "export.json")) else {}
    ev = json.load(open(os.path.join(wd, "eval.json"))) if os.path.exists(os.path.join(wd, "eval.json")) else {}
    from transformers import CLIPTokenizer
    tok = CLIPTokenizer.from_pretrained(os.path.join(args.out, "tokenizer"))
    times = _stage_times(os.path.join(wd, "train.log"))
    mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
    sz = ex.get("sizes_bytes", {})
    pa = ex.get("params", {})
    cmd = ("HF_HUB_OFFLINE=1 .venv/bin/python tools/train_tiny_sd.py "
           f"--seed {args.seed}")
    L = []
    w = L.append
    w("# nanscope-tiny: NaNscope's embedded default model\n")
    w("A Stable-Diffusion-1.x-shaped text-to-image model (CLIPTextModel -> UNet2DConditionModel with "
      "cross-attention -> AutoencoderKL), trained from scratch by `tools/train_tiny_sd.py` on "
      "procedurally generated 64x64 pictures of coloured shapes and stripes. It exists so that a "
      "fresh checkout generates real images in seconds on a CPU and so that the engine's numerics "
      "(f16 overflow, v-prediction, zero-terminal-SNR, trailing spacing) are exercised by a model whose "
      "right answer is known. It is a diffusers folder: `StableDiffusionPipeline.from_pretrained` "
      "loads it (`safety_checker`/`feature_extractor` are null).\n")
    if ex.get("unet_source", "").endswith(".ckpt.pt"):
        w(f"**Interim export**: the UNet/text encoder are the EMA weights at iteration "
          f"{ex['unet_iterations_trained']} of {args.unet_iters + args.unet_more_iters}; training had not finished. "
          "Re-run the export (below) when it has.\n")
    w("## Components\n")
    w("| folder | class | configuration | parameters | size (f32 safetensors) |")
    w("|---|---|---|---|---|")
    w(f"| text_encoder/ | CLIPTextModel | hidden {args.text_hidden}, {args.text_layers} layers, "
      f"{args.text_heads} heads, MLP {4 * args.text_hidden}, quick_gelu, 77 positions, vocab {len(tok)} | "
      f"{pa.get('text_encoder', '?')} | {mb(sz.get('text_encoder', 0))} |")
    w(f"| unet/ | UNet2DConditionModel | block_out_channels ({args.unet_channels}), layers_per_block "
      f"{args.unet_layers}, DownBlock2D/CrossAttnDownBlock2D x2, UNetMidBlock2DCrossAttn, "
      f"CrossAttnUpBlock2D x2/UpBlock2D, attention_head_dim {args.unet_heads}, cross_attention_dim "
      f"{args.text_hidden}, sample_size 16, groups {args.unet_groups} | {pa.get('unet', '?')} | "
      f"{mb(sz.get('unet', 0))} |")
    w(f"| vae/ | AutoencoderKL | block_out_channels ({args.vae_channels}), layers_per_block "
      f"{args.vae_layers}, latent_channels 4, 64x64x3 <-> 16x16x4, groups {args.vae_groups}, "
      f"scaling_factor {ex.get('scaling_factor', float('nan')):.5f}, force_upcast true | "
      f"{pa.get('vae', '?')} | {mb(sz.get('vae', 0))} |")
    w(f"| vae-fp16-fix/ | AutoencoderKL | same, force_upcast false | {pa.get('vae', '?')} | "
      f"{mb(sz.get('vae-fp16-fix', 0))} |")
    w("| tokenizer/ | CLIPTokenizer | own BPE in CLIP format (vocab.json, merges.txt) | | |")
    w("| scheduler/ | EulerDiscreteScheduler | scaled_linear 0.00085..0.012, 1000 steps, "
      "rescale_betas_zero_snr, v_prediction, timestep_spacing trailing | | |")
    w(f"\nWhole folder: {mb(ex.get('total_bytes', 0))}.\n")
    w("## Scheduler notes\n")
    w("Zero terminal SNR: the training schedule has alphas_cumprod[999] = 0 exactly (the model sees "
      "pure noise at t=999 and must take the whole picture, background colour included, from the "
      "prompt). diffusers' EulerDiscreteScheduler replaces alphas_cumprod[999] by 2**-24 so the first "
      "sigma is finite: sigma_max = sqrt((1 - 2**-24) / 2**-24) ~= 4096 and init_noise_sigma = "
      "sqrt(sigma_max**2 + 1). With 'trailing' spacing the first of 20 steps is t = 999. "
      "guidance_rescale (0.7) is recommended with CFG on zero-terminal-SNR v-prediction models.\n")
    w("## Tokenizer\n")
    w(f"CLIP format, {len(tok)} tokens: the 256 byte-level symbols and their `</w>` forms (so any text "
      "tokenizes), merges learned on the caption words until each grammar word is one token, then "
      f"`<|startoftext|>` = {tok.bos_token_id}, `<|endoftext|>` = {tok.eos_token_id} (also pad and "
      f"unk, like SD 1.x). model_max_length 77, padding with `<|endoftext|>`. The text encoder config "
      f"has bos_token_id {tok.bos_token_id}, eos_token_id {tok.eos_token_id}, pad_token_id "
      f"{tok.pad_token_id} (transformers >= 4.31 pools at the first eos; SD uses last_hidden_state).\n")
    w("## Data: colours and caption grammar\n")
    w("Canonical colours (the C++ colour classifier uses these; nearest colour wins):\n")
    w("| word | RGB |")
    w("|---|---|")
    for n, c in T.COLOURS:
        w(f"| {n} | {c} |")
    w("\nImages are 64x64, a flat background colour and one foreground colour (never equal), drawn "
      "with analytic anti-aliasing (1-pixel coverage ramp):\n")
    w("- shapes: `circle`, `square` (side 1.8 r), `triangle` (upright, apex up, base 2 r), each "
      "`small` (r 7..10 px, centred at one of `top left` (16,16), `top right` (48,16), `bottom left` "
      "(16,48), `bottom right` (48,48), `center`/`centre` (32,32), +-2 px jitter) or `large` "
      "(r 17..22 px, centred); 27% each.")
    w("- stripes (19%): alternating colours, stripe width 4..8 px, random phase, `horizontal` or "
      "`vertical`.")
    w("- caption templates (one drawn per sample per iteration; size word present 70%, position "
      "phrase 75% for small shapes and 30% (`in the center`) for large ones):")
    w("  - `a [size] <fg> <shape> [at the <pos> | in the center] on a <bg> background`")
    w("  - `a <bg> background with a [size] <fg> <shape> [at the <pos>]`")
    w("  - `a [size] <fg> <shape> on a <bg> background [at the <pos>]`")
    w("  - `<c1> and <c2> <horizontal|vertical> stripes`, `<horizontal|vertical> <c1> and <c2> stripes`, "
      "`a <dir> <c1> and <c2> stripes`, `<c1> and <c2> stripes` (colour order random)")
    w(f"- vocabulary: {', '.join(T.WORDS)}.")
    w(f"- {args.num_images} images rendered once from seed {args.seed} (the last {args.num_val} held "
      "out); 10% of training captions replaced by the empty prompt (for classifier-free guidance).\n")
    w("## vae/ versus vae-fp16-fix/ (field report R2)\n")
    if ex:
        w(f"`vae-fp16-fix/` is the trained VAE. Decoding 256 held-out latents in f32, the largest "
          f"|activation| of any decoder module is {ex['max_abs_activation_fp16_fix']:.1f} "
          f"(`{ex['max_abs_activation_fp16_fix_module']}`), far below the f16 limit 65504; with every "
          f"module output rounded to f16 (emulated) the decoded image stays finite, max error "
          f"{ex['f16_emulated_fp16_fix_max_abs_err']:.4f} (on the -1..1 scale).\n")
        w(f"`vae/` computes the same function: the weight and bias of `{ex['scaled_module']}` (the "
          f"first conv of the first resnet of the highest-resolution decoder block, like SDXL's "
          f"overflow) are multiplied by 2**{ex['factor_log2']} = {ex['factor']:.0f}. That conv's "
          "output feeds only `norm2` (a GroupNorm, scale invariant: GN(k x) = GN(x) up to its eps "
          "1e-6), so f32 outputs are unchanged: max |decoded difference| over 256 latents "
          f"{ex['f32_decode_max_abs_diff']:.2e}. The activation max at that conv goes from "
          f"{ex['scaled_conv_max_abs_before']:.1f} to {ex['scaled_conv_max_abs_after']:.0f} > 65504, so "
          "f16 storage overflows to inf and GroupNorm turns it into NaN (emulated f16 decode: "
          f"{100 * ex['f16_emulated_vae_nonfinite_fraction']:.1f}% non-finite output values). Scaled "
          f"weights stay representable in f16 (max |w| {ex['scaled_weight_max_abs']:.1f}, max |b| "
          f"{ex['scaled_bias_max_abs']:.1f}). vae/ has force_upcast true, vae-fp16-fix/ false; "
          "model_index.json points at vae/, as SDXL's default VAE would.\n")
    w("## Training (reproduce)\n")
    w("```\ntools/setup.sh   # venv over Debian's torch 1.13.1, diffusers 0.31.0, transformers 4.47.1\n"
      f"{cmd}\n```\n")
    w("Defaults of that command are the shipped configuration; stages data, tokenizer, vae, vae_ft, "
      "latents, unet, export, eval run in order, each resumable from checkpoints in the work dir "
      "(`--work-dir`, default `$XDG_CACHE_HOME/nanscope/train-tiny-sd`; saved every 3 minutes; re-run the same command after a kill). Export and evaluation alone: "
      "`--stages export,eval`; evaluation of the folder alone: `--eval-only`.\n")
    w(f"- VAE: {args.vae_iters} iterations, batch {args.vae_batch}, AdamW lr {args.vae_lr} (200 warm-up, "
      f"cosine to 10%), loss L1 + MSE + {args.vae_kl} KL; then {args.vae_ft_iters} decoder-only "
      "iterations (lr x0.3, no warm-up) on posterior samples. Held-out MSE (0-1 pixel scale): "
      f"{ex.get('vae_val_mse', float('nan')):.5f} after stage 1, {ex.get('vae_ft_val_mse', float('nan')):.5f} "
      "after the decoder fine-tune. scaling_factor = 1 / std of the posterior means over all images.")
    w(f"- UNet + text encoder jointly: {args.unet_iters} iterations, batch {args.batch}, AdamW lr "
      f"{args.lr} (wd 0.01, 200 warm-up, cosine to 10%), grad clip 1, EMA {args.ema} (shipped), "
      f"v-prediction on the zero-terminal-SNR schedule, t uniform in 0..999, {int(100 * args.cond_drop)}% "
      "empty captions. Loss weight (min(snr, 5) + 1) / (snr + 1) on the v-MSE: the min-SNR-5 idea "
      "written for v-prediction so that it is 1 (not 0) at t=999 where snr = 0 -- the plain "
      "min(snr, 5)/(snr + 1) form would give the zero-SNR step, which decides the background "
      "colour, no gradient at all.")
    if args.unet_more_iters > 0:
        w(f"- Then a warm restart (stage unet_more): {args.unet_more_iters} more iterations from the "
          f"phase-one weights and their EMA, fresh AdamW, lr {args.more_lr} (100 warm-up, cosine to 10%), "
          "its own sample stream; same loss. Phase one alone drew the requested shape 56-62% of the time.")
    w("- Latents are pre-encoded once (posterior mean x scaling_factor).")
    w("- Batches, captions and noise come from generators seeded by (seed, stage, iteration), so a "
      "resumed run draws the same samples. The trainer uses 2 intra-op threads, dropping to 1 while "
      "the machine's load average is high (this changes float summation order only).\n")
    if times:
        w("Wall-clock of the shipped run (2-core machine shared with C++ builds; minutes): "
          + ", ".join(f"{k} {v:.1f}" for k, v in times.items()) + ".\n")
    notes = os.path.join(wd, "run_notes.md")
    if os.path.exists(notes):
        w(open(notes).read().strip() + "\n")
    w("## Evaluation\n")
    if ev:
        w("`--eval-only`: StableDiffusionPipeline on this folder, EulerDiscreteScheduler from "
          f"scheduler/, 20 steps, CFG 7, {len(ev['prompts'])} fixed prompts x {args.eval_seeds} seeds. "
          "Checks: background = nearest canonical colour of the median of a 2-px border; foreground = "
          "nearest colour of the median of pixels > 60 RGB units from the background; shape from the "
          "mask of pixels nearer that colour than the background (3x3 opening): triangle if >= 62% of "
          "it lies in the lower half of its bounding box, else square if the 20% corner patches of the "
          "box are > 50% filled, else circle; "
          "stripes: the two dominant nearest colours and the direction of the larger row/column "
          "variance.\n")
        w("| guidance_rescale | fg colour | bg colour | shape | all three | shapes: fg / bg / shape | "
          "stripes: colours / direction |")
        w("|---|---|---|---|---|---|---|")
        for gr in ("0.0", "0.7"):
            r = ev.get(f"guidance_rescale_{gr}")
            if not r:
                continue
            a, s, t = r["all_prompts"], r["shape_prompts"], r["stripe_prompts"]
            w(f"| {gr} | {a['fg_ok']:.2f} | {a['bg_ok']:.2f} | {a['shape_ok']:.2f} | {a['all_ok']:.2f} | "
              f"{s['fg_ok']:.2f} / {s['bg_ok']:.2f} / {s['shape_ok']:.2f} | "
              f"{(t['fg_ok'] + t['bg_ok']) / 2:.2f} / {t['shape_ok']:.2f} |")
        if "checker_on_real" in ev:
            c, v = ev["checker_on_real"], ev["checker_on_vae_reconstructions"]
            w(f"\nSame checks on 500 held-out training images: fg {c['fg_ok']:.3f}, bg {c['bg_ok']:.3f}, "
              f"shape {c['shape_ok']:.3f}; on their VAE reconstructions: fg {v['fg_ok']:.3f}, bg "
              f"{v['bg_ok']:.3f}, shape {v['shape_ok']:.3f} (reconstruction MSE {ev['vae_recon_mse_01']:.5f}, "
              f"per-pixel nearest-colour agreement {ev['vae_pixel_colour_agreement']:.4f}).")
        w("\n`samples.png`: the 50 prompts with seed 0, ten per row in prompt order; upper half "
          "guidance_rescale 0, lower half 0.7. Prompts:\n")
        for i, p in enumerate(ev["prompts"]):
            w(f"{i}. {p}")
    else:
        w("Not evaluated yet: run `tools/train_tiny_sd.py --eval-only`.")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    log(f"wrote {os.path.join(args.out, 'README.md')}")
