#!/usr/bin/env python3
"""Train NaNscope's embedded default model ("nanscope-tiny") from scratch.

nanscope-tiny is a Stable-Diffusion-1.x-shaped model (CLIPTextModel +
UNet2DConditionModel with cross-attention + AutoencoderKL) small enough to
generate 64x64 images in well under a second on a CPU. Everything is trained
from procedurally generated data: coloured shapes and stripes with captions.

Stages (each resumable; a killed run resumes with the same command):
  data      generate N captioned 64x64 images (seeded), cached as uint8 .npz
  tokenizer learn a CLIP-format BPE vocabulary (vocab.json + merges.txt)
  vae       train AutoencoderKL (64x64x3 -> 16x16x4), L1+MSE + small KL
  vae_ft    decoder-only fine-tune of the VAE
  latents   encode the whole image set once (posterior mean x scaling_factor)
  unet      train CLIPTextModel + UNet2DConditionModel jointly (v-prediction,
            zero-terminal-SNR scaled_linear schedule, EMA 0.999)
  unet_more warm restart of the same training at a lower learning rate
  export    write the diffusers folder (model_index.json, text_encoder/,
            tokenizer/, unet/, vae/ (f16-overflowing re-parameterisation),
            vae-fp16-fix/, scheduler/)
  eval      generate fixed prompts with StableDiffusionPipeline, check colours
            and shapes, write samples.png

Usage:
  tools/train_tiny_sd.py                       # everything, default config
  tools/train_tiny_sd.py --stages export,eval  # re-export from checkpoints
  tools/train_tiny_sd.py --eval-only           # evaluate the shipped folder
  tools/train_tiny_sd.py --probe               # time one config, no training

Iteration counts are fixed (not wall-clock), batches and noise are drawn from
generators seeded by (seed, stage, iteration), so a resumed run follows the
same sample sequence as an uninterrupted one.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tiny_sd.common import (  # noqa: E402
    REPO, MAXLEN, WORDS, sample_attributes, render, make_caption, log, load_data, make_vae,
    make_text_encoder, make_unet, nparams, to_tensor, ALL_STAGES)


# ---------------------------------------------------------------------------
# Utilities
# ---------------------------------------------------------------------------
def atomic_save(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def lr_at(it, total, base, warmup=200, final_frac=0.1):
    if it < warmup:
        return base * (it + 1) / warmup
    p = (it - warmup) / max(1, total - warmup)
    return base * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * p)))


class Progress:
    def __init__(self, name, start, total, every):
        self.name, self.start, self.total, self.every = name, start, total, every
        self.t0 = time.time()
        self.acc, self.n = 0.0, 0

    def step(self, it, loss, extra=""):
        self.acc += loss
        self.n += 1
        if (it + 1) % self.every == 0 or it + 1 == self.total:
            el = time.time() - self.t0
            done = it + 1 - self.start
            ips = done / max(el, 1e-9)
            eta = (self.total - it - 1) / max(ips, 1e-9)
            log(f"{self.name} it {it + 1}/{self.total} loss {self.acc / self.n:.5f} "
                f"{ips:.2f} it/s eta {eta / 60:.1f} min threads {torch.get_num_threads()} "
                f"load {os.getloadavg()[0]:.1f} {extra}")
            self.acc, self.n = 0.0, 0


class ThreadGovernor:
    """Picks 1 or --threads intra-op threads from the load average.

    On an oversubscribed machine (other jobs compiling) two OpenMP threads
    waste most of their time at barriers waiting for a descheduled sibling
    (measured here: 20 s/it instead of 1 s/it for the VAE at load 13), so the
    trainer drops to one thread while the load is high. Only the summation
    order changes, not the sample sequence.
    """

    def __init__(self, max_threads, every=10, fixed=False):
        self.max, self.every, self.fixed = max_threads, every, fixed
        self.cur = torch.get_num_threads()

    def __call__(self, it):
        if self.fixed or self.max <= 1 or it % self.every:
            return
        load = os.getloadavg()[0]
        want = self.cur
        if load > self.max + 2.5:
            want = 1
        elif load < self.max + 1.0:
            want = self.max
        if want != self.cur:
            torch.set_num_threads(want)
            self.cur = want
            log(f"threads -> {want} (load average {load:.1f})")


def contiguous_state(model):
    return {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------------
# Stage: data
# ---------------------------------------------------------------------------
def stage_data(args):
    path = os.path.join(args.work_dir, "data.npz")
    if os.path.exists(path):
        return
    log(f"data: rendering {args.num_images} images (seed {args.seed})")
    rng = np.random.default_rng([args.seed, 0])
    attrs, geom = sample_attributes(rng, args.num_images)
    imgs = np.stack([render(attrs[i], geom[i]) for i in range(args.num_images)])
    tmp = path + ".tmp.npz"
    np.savez(tmp, images=imgs, attrs=attrs, geom=geom)
    os.replace(tmp, path)
    log(f"data: wrote {path} ({imgs.nbytes / 2**20:.0f} MiB images)")


# ---------------------------------------------------------------------------
# Stage: tokenizer (CLIP-format BPE)
# ---------------------------------------------------------------------------
def stage_tokenizer(args):
    out = os.path.join(args.work_dir, "tokenizer")
    if os.path.exists(os.path.join(out, "tokenizer_config.json")):
        return
    from transformers.models.clip.tokenization_clip import bytes_to_unicode
    from transformers import CLIPTokenizer
    log("tokenizer: learning BPE merges")
    _, attrs, _ = load_data(args)
    rng = np.random.default_rng([args.seed, 1])
    freq = {}
    for i in range(min(20000, len(attrs))):
        for w in make_caption(attrs[i], rng).split():
            freq[w] = freq.get(w, 0) + 1
    for w in WORDS:  # every grammar word, even if rare
        freq[w] = freq.get(w, 0) + 1
    words = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in freq}
    merges = []
    while any(len(s) > 1 for s in words.values()):
        pairs = {}
        for w, s in words.items():
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + freq[w]
        best = max(pairs.items(), key=lambda kv: (kv[1], [-ord(c) for c in kv[0][0] + kv[0][1]]))[0]
        merges.append(best)
        for w, s in words.items():
            ns, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and (s[j], s[j + 1]) == best:
                    ns.append(s[j] + s[j + 1])
                    j += 2
                else:
                    ns.append(s[j])
                    j += 1
            words[w] = tuple(ns)
    base = list(bytes_to_unicode().values())
    vocab_list = base + [b + "</w>" for b in base] + ["".join(m) for m in merges]
    vocab_list += ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(vocab_list)) == len(vocab_list)
    vocab = {t: i for i, t in enumerate(vocab_list)}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    cfg = {"model_max_length": MAXLEN, "bos_token": "<|startoftext|>",
           "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "do_lower_case": True,
           "clean_up_tokenization_spaces": True, "errors": "replace",
           "tokenizer_class": "CLIPTokenizer", "add_prefix_space": False}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}, f, indent=2)
    tok = CLIPTokenizer.from_pretrained(out)
    for w in WORDS:
        ids = tok(w, add_special_tokens=False).input_ids
        assert len(ids) == 1, (w, ids)
    for i in range(2000):
        cap = make_caption(attrs[i % len(attrs)], rng)
        ids = tok(cap, add_special_tokens=False).input_ids
        assert len(ids) == len(cap.split()), (cap, ids)
    log(f"tokenizer: {len(vocab)} tokens, {len(merges)} merges; bos "
        f"{tok.bos_token_id} eos {tok.eos_token_id} pad {tok.pad_token_id}; "
        "every grammar word is one token")


class FastTok:
    """Caption -> ids via a per-word table built from CLIPTokenizer (verified
    identical to the full tokenizer on random captions)."""

    def __init__(self, folder, attrs=None):
        from transformers import CLIPTokenizer
        self.tok = CLIPTokenizer.from_pretrained(folder)
        self.bos, self.eos = self.tok.bos_token_id, self.tok.eos_token_id
        self.pad = self.tok.pad_token_id
        self.table = {w: self.tok(w, add_special_tokens=False).input_ids for w in WORDS}
        if attrs is not None:
            rng = np.random.default_rng(99)
            for i in range(300):
                cap = make_caption(attrs[i % len(attrs)], rng)
                ref = self.tok(cap, padding="max_length", max_length=MAXLEN,
                               truncation=True).input_ids
                assert list(self.encode(cap)) == ref, cap
            assert list(self.encode("")) == self.tok("", padding="max_length", max_length=MAXLEN).input_ids

    def encode(self, cap):
        ids = [self.bos]
        for w in cap.split():
            ids += self.table[w]
        ids = ids[:MAXLEN - 1] + [self.eos]
        return np.array(ids + [self.pad] * (MAXLEN - len(ids)), np.int64)


# ---------------------------------------------------------------------------
# Stage: VAE
# ---------------------------------------------------------------------------
def vae_val_mse(vae, val_imgs, use_mean=True):
    vae.eval()
    tot = 0.0
    with torch.no_grad():
        for i in range(0, len(val_imgs), 64):
            x = to_tensor(val_imgs[i:i + 64])
            post = vae.encode(x).latent_dist
            z = post.mean if use_mean else post.sample()
            y = vae.decode(z).sample.clamp(-1, 1)
            tot += ((y - x) / 2).pow(2).mean().item() * len(x)
    vae.train()
    return tot / len(val_imgs)


def stage_vae(args, finetune=False):
    name = "vae_ft" if finetune else "vae"
    final = os.path.join(args.work_dir, f"{name}.final.pt")
    if os.path.exists(final):
        return
    ckpt = os.path.join(args.work_dir, f"{name}.ckpt.pt")
    imgs, _, _ = load_data(args)
    ntrain = len(imgs) - args.num_val
    val = imgs[ntrain:ntrain + 512]
    torch.manual_seed(args.seed)
    vae = make_vae(args)
    total = args.vae_ft_iters if finetune else args.vae_iters
    if finetune:
        vae.load_state_dict(torch.load(os.path.join(args.work_dir, "vae.final.pt"))["model"])
        for p in vae.encoder.parameters():
            p.requires_grad_(False)
        for p in vae.quant_conv.parameters():
            p.requires_grad_(False)
    params = [p for p in vae.parameters() if p.requires_grad]
    base_lr = args.vae_lr * (0.3 if finetune else 1.0)
    opt = torch.optim.AdamW(params, lr=base_lr, weight_decay=0.0)
    start = 0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        vae.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["it"]
        log(f"{name}: resumed at iteration {start}")
    log(f"{name}: {nparams(vae) / 1e6:.3f} M params, {total} iterations, batch {args.vae_batch}")
    vae.train()
    prog = Progress(name, start, total, args.log_every)
    last_save = time.time()
    gov = ThreadGovernor(args.threads, fixed=args.fixed_threads)
    for it in range(start, total):
        gov(it)
        rng = np.random.default_rng([args.seed, 10 + finetune, it])
        idx = rng.integers(0, ntrain, args.vae_batch)
        x = to_tensor(imgs[idx])
        g = torch.Generator().manual_seed(args.seed * 100003 + it + (7 if finetune else 0))
        for gr in opt.param_groups:
            gr["lr"] = lr_at(it, total, base_lr, warmup=0 if finetune else 200)
        if finetune:
            with torch.no_grad():
                post = vae.encode(x).latent_dist
                z = post.mean + post.std * torch.randn(post.mean.shape, generator=g)
            y = vae.decode(z).sample
            kl = torch.zeros(())
        else:
            post = vae.encode(x).latent_dist
            z = post.mean + post.std * torch.randn(post.mean.shape, generator=g)
            y = vae.decode(z).sample
            kl = post.kl().mean()
        rec = (y - x).abs().mean() + (y - x).pow(2).mean()
        loss = rec + args.vae_kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if not math.isfinite(loss.item()):
            raise SystemExit(f"{name}: non-finite loss at iteration {it}")
        extra = ""
        if (it + 1) % args.val_every == 0 or it + 1 == total:
            extra = f"val_mse {vae_val_mse(vae, val):.5f}"
        prog.step(it, loss.item(), extra)
        if time.time() - last_save > args.ckpt_seconds and it + 1 < total:
            atomic_save({"model": contiguous_state(vae), "opt": opt.state_dict(), "it": it + 1}, ckpt)
            last_save = time.time()
    vm = vae_val_mse(vae, imgs[ntrain:], use_mean=True)
    log(f"{name}: done, validation MSE (0-1 scale, posterior mean, {len(imgs) - ntrain} images) {vm:.6f}")
    atomic_save({"model": contiguous_state(vae), "val_mse": vm}, final)


# ---------------------------------------------------------------------------
# Stage: latents
# ---------------------------------------------------------------------------
def stage_latents(args):
    path = os.path.join(args.work_dir, "latents.pt")
    if os.path.exists(path):
        return
    imgs, _, _ = load_data(args)
    vae = make_vae(args)
    vae.load_state_dict(torch.load(os.path.join(args.work_dir, "vae_ft.final.pt"))["model"])
    vae.eval()
    lat = []
    with torch.no_grad():
        for i in range(0, len(imgs), 128):
            lat.append(vae.encode(to_tensor(imgs[i:i + 128])).latent_dist.mean)
    lat = torch.cat(lat)
    sf = float(1.0 / lat.std())
    log(f"latents: {tuple(lat.shape)} mean {lat.mean():.4f} std {lat.std():.4f} -> scaling_factor {sf:.5f}")
    atomic_save({"latents": (lat * sf).contiguous(), "scaling_factor": sf}, path)


# ---------------------------------------------------------------------------
# Stage: UNet + text encoder
# ---------------------------------------------------------------------------
def train_schedule():
    from diffusers import DDPMScheduler
    s = DDPMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                      beta_schedule="scaled_linear", rescale_betas_zero_snr=True,
                      prediction_type="v_prediction")
    return s.alphas_cumprod.clone().float()  # alphas_cumprod[999] == 0 exactly


def stage_unet(args, more=False):
    """Joint UNet + text encoder training.

    more=False: from scratch, --unet-iters iterations at --lr (stage "unet").
    more=True:  stage "unet_more", a warm restart (SGDR): starts from unet.final.pt
    (raw weights and their EMA), fresh AdamW, a new cosine of --unet-more-iters at
    --more-lr and its own sample stream. The first phase ends at 10% of its peak
    learning rate; a second, lower cosine lets the model settle shapes further
    (measured on the shipped model: shape accuracy 56-62% after phase one).
    """
    name = "unet_more" if more else "unet"
    final = os.path.join(args.work_dir, f"{name}.final.pt")
    if os.path.exists(final) or (more and args.unet_more_iters <= 0):
        return
    ckpt = os.path.join(args.work_dir, f"{name}.ckpt.pt")
    _, attrs, _ = load_data(args)
    lat = torch.load(os.path.join(args.work_dir, "latents.pt"))["latents"]
    ntrain = len(lat) - args.num_val
    ft = FastTok(os.path.join(args.work_dir, "tokenizer"), attrs)
    empty = ft.encode("")
    torch.manual_seed(args.seed + 1)
    te = make_text_encoder(args, len(ft.tok), ft.bos, ft.eos, ft.pad)
    unet = make_unet(args)
    log(f"unet: {nparams(unet) / 1e6:.3f} M params, text encoder {nparams(te) / 1e6:.3f} M; "
        f"{args.unet_more_iters if more else args.unet_iters} iterations ({name}), batch {args.batch}")
    params = list(unet.parameters()) + list(te.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-2)
    ema_u = {k: v.clone() for k, v in unet.state_dict().items()}
    ema_t = {k: v.clone() for k, v in te.state_dict().items()}
    start = 0
    if more and not os.path.exists(ckpt):
        st = torch.load(os.path.join(args.work_dir, "unet.final.pt"))
        unet.load_state_dict(st["unet"])
        te.load_state_dict(st["te"])
        ema_u, ema_t = st["ema_unet"], st["ema_te"]
        log("unet_more: starting from unet.final.pt (warm restart)")
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        unet.load_state_dict(st["unet"])
        te.load_state_dict(st["te"])
        opt.load_state_dict(st["opt"])
        ema_u, ema_t, start = st["ema_unet"], st["ema_te"], st["it"]
        log(f"{name}: resumed at iteration {start}")
    ab = train_schedule()
    total = args.unet_more_iters if more else args.unet_iters
    base_lr = args.more_lr if more else args.lr
    stream = 21 if more else 20
    unet.train()
    te.train()
    prog = Progress(name, start, total, args.log_every)
    last_save = time.time()
    gov = ThreadGovernor(args.threads, fixed=args.fixed_threads)
    for it in range(start, total):
        gov(it)
        rng = np.random.default_rng([args.seed, stream, it])
        idx = rng.integers(0, ntrain, args.batch)
        ids = np.stack([empty if rng.random() < args.cond_drop else ft.encode(make_caption(attrs[i], rng))
                        for i in idx])
        x0 = lat[idx]
        g = torch.Generator().manual_seed(args.seed * 1000003 + (stream - 20) * 7919 * 1000003 + it)
        noise = torch.randn(x0.shape, generator=g)
        t = torch.randint(0, 1000, (args.batch,), generator=g)
        a = ab[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        v = a.sqrt() * noise - (1 - a).sqrt() * x0
        for gr in opt.param_groups:
            gr["lr"] = lr_at(it, total, base_lr, warmup=100 if more else 200)
        cond = te(torch.from_numpy(ids))[0]
        pred = unet(xt, t, encoder_hidden_states=cond).sample
        snr = ab[t] / (1 - ab[t])
        # Min-SNR-gamma truncation applied to the v-loss: weight (min(snr, g)+1)/(snr+1).
        # Equals 1 for snr <= gamma (so the zero-SNR step t=999, where the
        # model must draw the image from the prompt alone, keeps full weight)
        # and (g+1)/(snr+1) above, down-weighting the easy low-noise steps.
        w = (snr.clamp(max=args.snr_gamma) + 1) / (snr + 1)
        loss = (w * (pred - v).pow(2).mean(dim=(1, 2, 3))).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = loss.item()
        if not math.isfinite(lv):
            raise SystemExit(f"{name}: non-finite loss at iteration {it}")
        d = min(args.ema, (1 + it) / (10 + it))
        with torch.no_grad():
            for ema, m in ((ema_u, unet), (ema_t, te)):
                for k, p in m.state_dict().items():
                    if p.dtype.is_floating_point:
                        ema[k].mul_(d).add_(p, alpha=1 - d)
                    else:
                        ema[k].copy_(p)
        prog.step(it, lv)
        if time.time() - last_save > args.ckpt_seconds and it + 1 < total:
            atomic_save({"unet": contiguous_state(unet), "te": contiguous_state(te),
                         "opt": opt.state_dict(), "ema_unet": ema_u, "ema_te": ema_t,
                         "it": it + 1}, ckpt)
            last_save = time.time()
    atomic_save({"ema_unet": {k: v.contiguous() for k, v in ema_u.items()},
                 "ema_te": {k: v.contiguous() for k, v in ema_t.items()},
                 "unet": contiguous_state(unet), "te": contiguous_state(te)}, final)
    log(f"{name}: done")


# ---------------------------------------------------------------------------
# Timing probe
# ---------------------------------------------------------------------------
def probe(args):
    torch.manual_seed(0)
    vae = make_vae(args)
    opt = torch.optim.AdamW(vae.parameters(), 1e-4)
    x = torch.randn(args.vae_batch, 3, 64, 64)
    for i in range(4):
        t0 = time.time()
        post = vae.encode(x).latent_dist
        y = vae.decode(post.sample()).sample
        ((y - x).abs().mean() + post.kl().mean() * 1e-6).backward()
        opt.step()
        opt.zero_grad()
        if i:
            log(f"probe vae {args.vae_channels} l{args.vae_layers} b{args.vae_batch}: "
                f"{time.time() - t0:.3f} s/it ({nparams(vae) / 1e6:.3f} M)")
    te = make_text_encoder(args, 620, 618, 619, 619)
    unet = make_unet(args)
    opt = torch.optim.AdamW(list(unet.parameters()) + list(te.parameters()), 1e-4)
    ids = torch.randint(0, 600, (args.batch, MAXLEN))
    xt = torch.randn(args.batch, 4, 16, 16)
    for i in range(5):
        t0 = time.time()
        c = te(ids)[0]
        out = unet(xt, torch.randint(0, 1000, (args.batch,)), encoder_hidden_states=c).sample
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if i:
            log(f"probe unet {args.unet_channels} l{args.unet_layers} text {args.text_hidden}x"
                f"{args.text_layers} b{args.batch}: {time.time() - t0:.3f} s/it "
                f"(unet {nparams(unet) / 1e6:.3f} M, te {nparams(te) / 1e6:.3f} M)")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_work = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                "nanscope", "train-tiny-sd")
    ap.add_argument("--work-dir", default=default_work,
                    help="data cache and checkpoints, outside the repo (default: $XDG_CACHE_HOME/nanscope/train-tiny-sd)")
    ap.add_argument("--out", default=os.path.join(REPO, "resources", "models", "nanscope-tiny"),
                    help="diffusers folder to write")
    ap.add_argument("--stages", default=",".join(ALL_STAGES), help="comma-separated subset of " + ",".join(ALL_STAGES))
    ap.add_argument("--eval-only", action="store_true", help="only evaluate the folder at --out")
    ap.add_argument("--probe", action="store_true", help="time the configured model sizes and exit")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fixed-threads", action="store_true",
                    help="always use --threads (when the other jobs on the machine run at a lower priority)")
    ap.add_argument("--num-images", type=int, default=32000)
    ap.add_argument("--num-val", type=int, default=1024, help="held-out images (end of the set)")
    # VAE
    ap.add_argument("--vae-channels", default="16,32,64")
    ap.add_argument("--vae-layers", type=int, default=1)
    ap.add_argument("--vae-groups", type=int, default=16)
    ap.add_argument("--vae-batch", type=int, default=16)
    ap.add_argument("--vae-lr", type=float, default=1e-3)
    ap.add_argument("--vae-kl", type=float, default=1e-6)
    ap.add_argument("--vae-iters", type=int, default=1100)
    ap.add_argument("--vae-ft-iters", type=int, default=500)
    # UNet / text encoder
    ap.add_argument("--unet-channels", default="32,64,64")
    ap.add_argument("--unet-layers", type=int, default=1)
    ap.add_argument("--unet-groups", type=int, default=32)
    ap.add_argument("--unet-heads", type=int, default=4)
    ap.add_argument("--text-hidden", type=int, default=128)
    ap.add_argument("--text-layers", type=int, default=3)
    ap.add_argument("--text-heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--snr-gamma", type=float, default=5.0)
    ap.add_argument("--cond-drop", type=float, default=0.1)
    ap.add_argument("--unet-iters", type=int, default=4000)
    ap.add_argument("--unet-more-iters", type=int, default=3000,
                    help="iterations of the warm-restart stage unet_more (0 skips it)")
    ap.add_argument("--more-lr", type=float, default=5e-4, help="peak learning rate of unet_more")
    # bookkeeping
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--val-every", type=int, default=500)
    ap.add_argument("--ckpt-seconds", type=float, default=180)
    ap.add_argument("--vae-scale-log2", type=int, default=14, help="power of two for the vae/ re-parameterisation")
    ap.add_argument("--eval-seeds", default="0,1")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    os.makedirs(args.work_dir, exist_ok=True)
    log("args: " + " ".join(f"{k}={v}" for k, v in sorted(vars(args).items())))
    if args.probe:
        return probe(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.eval_only:
        from tiny_sd import export_eval
        return export_eval.evaluate(args)
    stages = args.stages.split(",")
    for s in stages:
        if s not in ALL_STAGES:
            raise SystemExit(f"unknown stage {s}")
    t0 = time.time()
    for s in ALL_STAGES:
        if s not in stages:
            continue
        ts = time.time()
        if s == "data":
            stage_data(args)
        elif s == "tokenizer":
            stage_tokenizer(args)
        elif s == "vae":
            stage_vae(args)
        elif s == "vae_ft":
            stage_vae(args, finetune=True)
        elif s == "latents":
            stage_latents(args)
        elif s == "unet":
            stage_unet(args)
        elif s == "unet_more":
            stage_unet(args, more=True)
        elif s in ("export", "eval"):
            # imported late on purpose: lives in tools/tiny_sd/export_eval.py
            from tiny_sd import export_eval
            if s == "export":
                export_eval.export(args)
            else:
                export_eval.evaluate(args)
        log(f"stage {s} finished in {(time.time() - ts) / 60:.1f} min (total {(time.time() - t0) / 60:.1f} min)")


if __name__ == "__main__":
    main()
