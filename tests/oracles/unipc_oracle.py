"""Oracle for tests/test_unipc_reference.cpp: UniPC as A1111 and ComfyUI run it.

Neither tool uses diffusers' UniPCMultistepScheduler: both run the UniPC
authors' reference code (github.com/wl-zhao/UniPC uni_pc.py), A1111 from
modules/models/diffusion/uni_pc/uni_pc.py through
modules/sd_samplers_timesteps_impl.py unipc(), ComfyUI from
comfy/extra_samplers/uni_pc.py sample_unipc(). Neither is installable here, so
this is a small reimplementation of what they compute, written from those
files, in torch float32 as they run:
  - NoiseScheduleVP('discrete') over LDM's alphas_cumprod (float64 betas and
    cumprod, stored float32), its piecewise-linear interpolate_fn, marginal_*
    and inverse_lambda; get_time_steps for time_uniform, time_quadratic, logSNR;
  - ComfyUI's SigmaConvert over k-diffusion sigmas (kdiffusion_oracle.py's
    schedules), the final 0 replaced by 0.001, the result divided by alpha;
  - UniPC.sample (multistep) and multistep_uni_pc_bh_update with predict_x0,
    torch.linalg.solve for the rhos.
A1111's step count is len(range(0, 1000, 1000 // steps))
(sd_samplers_timesteps.CompVisSampler.get_timesteps) and its model input time
(t - 1/1000) * 1000 (UniPCCFG.get_model_input_time); ComfyUI's model sees the
integer timestep nearest its sigma (ModelSamplingDiscrete.timestep).

Test model, computed by both sides: eps(x_in, t) = 0.8 * x_in + 0.05 * cos(0.01 * t)
with x_in the latent the model is given (A1111: x; ComfyUI: x * sqrt(s^2+1) scaled
back by c_in = 1/sqrt(s^2+1)) and t its timestep. The initial latent is
randn(shape, generator=torch.Generator().manual_seed(seed)) (ComfyUI at full denoise:
that noise times sqrt(1 + s0^2), divided by it again in sample_unipc).

usage:
  unipc_oracle.py REQUEST.json RESPONSE.json BLOB.f32

A1111 cases with "start" > 0 run A1111's img2img ("hires": false) or hires pass ("hires": true) from
the clean latent randn(shape, generator seeded S + 1), noised with the seed's randn.

REQUEST: {"cases": [{"impl": "a1111"|"comfyui", "config": {...}, "steps": N, "start": I, "hires": bool,
                     "variant": "bh1"|"bh2", "order": K, "lower_order_final": bool,
                     "skip_type": ..., "schedule": ..., "shape": [..], "seed": S}]}
RESPONSE: per case {"timesteps": ref (the model's timestep at each call),
"final": ref, "calls": n} with refs into BLOB as scheduler_oracle.py writes them.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kdiffusion_oracle as kd  # noqa: E402  (k-diffusion's schedules, the training sigmas)
from diffusers import EulerDiscreteScheduler  # noqa: E402


def ldm_alphas_cumprod(config):
    n = config.get("num_train_timesteps", 1000)
    bs, be = config["beta_start"], config["beta_end"]
    if config.get("beta_schedule", "linear") == "scaled_linear":
        betas = (torch.linspace(bs ** 0.5, be ** 0.5, n, dtype=torch.float64) ** 2).numpy()
    else:
        betas = torch.linspace(bs, be, n, dtype=torch.float64).numpy()
    return torch.tensor(np.cumprod(1.0 - betas, axis=0), dtype=torch.float32)


def interp(x, xp, yp):
    """The reference's interpolate_fn for x [N, 1], keys xp [1, K], values yp [1, K]."""
    n, k = x.shape[0], xp.shape[1]
    both = torch.cat([x.unsqueeze(2), xp.unsqueeze(0).repeat((n, 1, 1))], dim=2)
    ordered, order = torch.sort(both, dim=2)
    pos = torch.argmin(order, dim=2)
    cand = pos - 1
    lo = torch.where(pos == 0, torch.tensor(1), torch.where(pos == k, torch.tensor(k - 2), cand))
    hi = torch.where(lo == cand, lo + 2, lo + 1)
    x0 = torch.gather(ordered, 2, lo.unsqueeze(2)).squeeze(2)
    x1 = torch.gather(ordered, 2, hi.unsqueeze(2)).squeeze(2)
    lo2 = torch.where(pos == 0, torch.tensor(0), torch.where(pos == k, torch.tensor(k - 2), cand))
    ys = yp.unsqueeze(0).expand(n, -1, -1)
    y0 = torch.gather(ys, 2, lo2.unsqueeze(2)).squeeze(2)
    y1 = torch.gather(ys, 2, (lo2 + 1).unsqueeze(2)).squeeze(2)
    return y0 + (x - x0) * (y1 - y0) / (x1 - x0)


class Discrete:
    """NoiseScheduleVP('discrete', alphas_cumprod=...)."""

    def __init__(self, alphas_cumprod):
        self.total_n = len(alphas_cumprod)
        self.t_array = torch.linspace(0.0, 1.0, self.total_n + 1)[1:].reshape((1, -1))
        self.log_alpha_array = (0.5 * torch.log(alphas_cumprod)).reshape((1, -1))

    def log_alpha(self, t):
        return interp(t.reshape((-1, 1)), self.t_array, self.log_alpha_array).reshape((-1))

    def inverse_lambda(self, lamb):
        la = -0.5 * torch.logaddexp(torch.zeros((1,)), -2.0 * lamb)
        t = interp(la.reshape((-1, 1)), torch.flip(self.log_alpha_array, [1]), torch.flip(self.t_array, [1]))
        return t.reshape((-1,))


class Sigmas:
    """ComfyUI's SigmaConvert: the time is sigma."""

    def log_alpha(self, s):
        return 0.5 * torch.log(1 / ((s * s) + 1))


def alpha(ns, t):
    return torch.exp(ns.log_alpha(t))


def std(ns, t):
    return torch.sqrt(1.0 - torch.exp(2.0 * ns.log_alpha(t)))


def lam(ns, t):
    la = ns.log_alpha(t)
    return la - 0.5 * torch.log(1.0 - torch.exp(2.0 * la))


def bh_update(ns, variant, x, models, times, t, order, data_fn, use_corrector):
    """multistep_uni_pc_bh_update with predict_x0 (x_t given: never)."""
    s0, m0 = times[-1], models[-1]
    h = lam(ns, t) - lam(ns, s0)
    rks, d1s = [], []
    for i in range(1, order):
        rk = ((lam(ns, times[-(i + 1)]) - lam(ns, s0)) / h)[0]
        rks.append(rk)
        d1s.append((models[-(i + 1)] - m0) / rk)
    rks.append(1.0)
    rks = torch.tensor(rks)
    hh = -h[0]
    h_phi_1 = torch.expm1(hh)
    h_phi_k = h_phi_1 / hh - 1
    b_h = hh if variant == "bh1" else torch.expm1(hh)
    rows, b, fact = [], [], 1
    for i in range(1, order + 1):
        rows.append(torch.pow(rks, i - 1))
        b.append(h_phi_k * fact / b_h)
        fact *= i + 1
        h_phi_k = h_phi_k / hh - 1 / fact
    r = torch.stack(rows)
    b = torch.tensor(b)
    if d1s:
        d1s = torch.stack(d1s, dim=1)
        rhos_p = torch.tensor([0.5]) if order == 2 else torch.linalg.solve(r[:-1, :-1], b[:-1])
    alpha_t = torch.exp(ns.log_alpha(t))
    x_t_ = (std(ns, t) / std(ns, s0))[:, None, None, None] * x - (alpha_t * h_phi_1)[:, None, None, None] * m0
    pred = torch.einsum("k,bkchw->bchw", rhos_p, d1s) if len(d1s) > 0 else 0
    x_t = x_t_ - (alpha_t * b_h)[:, None, None, None] * pred
    model_t = None
    if use_corrector:
        rhos_c = torch.tensor([0.5]) if order == 1 else torch.linalg.solve(r, b)
        model_t = data_fn(x_t, t)
        corr = torch.einsum("k,bkchw->bchw", rhos_c[:-1], d1s) if len(d1s) > 0 else 0
        x_t = x_t_ - (alpha_t * b_h)[:, None, None, None] * (corr + rhos_c[-1] * (model_t - m0))
    return x_t, model_t


def sample(ns, variant, x, times, order, lower_order_final, data_fn):
    """UniPC.sample, method multistep (A1111's loop; ComfyUI's is the same sequence of updates)."""
    steps = len(times) - 1
    assert steps >= order
    vec = lambda i: times[i].expand(x.shape[0])  # noqa: E731
    models, tlist = [data_fn(x, vec(0))], [vec(0)]
    for init in range(1, order):
        x, m = bh_update(ns, variant, x, models, tlist, vec(init), init, data_fn, True)
        models.append(m)
        tlist.append(vec(init))
    for step in range(order, steps + 1):
        o = min(order, steps + 1 - step) if lower_order_final else order
        x, m = bh_update(ns, variant, x, models, tlist, vec(step), o, data_fn, step != steps)
        models, tlist = models[1:] + [m], tlist[1:] + [vec(step)]
    return x


def eps_model(x_in, t):
    return 0.8 * x_in + 0.05 * torch.cos(0.01 * t)


def run_case(case, blob):
    config, shape, n = case["config"], case["shape"], case["steps"]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(case["seed"]), dtype=torch.float32)
    seen = []
    if case["impl"] == "a1111":
        ns = Discrete(ldm_alphas_cumprod(config))
        steps = len(range(0, 1000, 1000 // n))
        t_T, t_0 = 1.0, 1.0 / ns.total_n
        if case.get("start", 0) > 0:
            # sd_samplers_timesteps.sample_img2img (setup_img2img_steps): the hires pass runs t_enc =
            # requested - 1 steps, img2img int(min(strength, 0.999) * steps) (the steps left, strength < 0.999).
            left = n - case["start"]
            t_enc = left - 1 if case["hires"] else min(left, int(0.999 * n))
            ts = torch.clip(torch.asarray(list(range(0, 1000, 1000 // n))) + 1, 0, 999)
            ac = ldm_alphas_cumprod(config)
            x0 = torch.randn(shape, generator=torch.Generator().manual_seed(case["seed"] + 1), dtype=torch.float32)
            x = x0 * torch.sqrt(ac[ts[t_enc]]) + x * torch.sqrt(1 - ac[ts[t_enc]])
            t_T = ts[:t_enc][-1] / 1000 + 1 / 1000
            steps = t_enc
        skip = case.get("skip_type", "time_uniform")
        if skip == "time_uniform":
            times = torch.linspace(float(t_T), t_0, steps + 1)
        elif skip == "time_quadratic":
            times = torch.linspace(float(t_T ** 0.5), t_0 ** 0.5, steps + 1).pow(2)
        else:
            l_T = lam(ns, torch.as_tensor(t_T, dtype=torch.float32))
            l_0 = lam(ns, torch.tensor(t_0))
            times = ns.inverse_lambda(torch.linspace(l_T.item(), l_0.item(), steps + 1))

        def data_fn(xx, t):
            t_in = (t - 1.0 / ns.total_n) * 1000.0
            seen.append(float(t_in[0]))
            e = eps_model(xx, t_in[0])
            return (xx - std(ns, t)[:, None, None, None] * e) / alpha(ns, t)[:, None, None, None]

        out = sample(ns, case["variant"], x, times, case["order"], case["lower_order_final"], data_fn)
    else:
        s = EulerDiscreteScheduler.from_config(config)
        train = ((1 - s.alphas_cumprod) / s.alphas_cumprod) ** 0.5
        ds = kd.EXT.DiscreteSchedule(train, quantize=False)
        sigmas = kd.schedule_sigmas(ds, case["schedule"], n).to(torch.float32)
        times = sigmas.clone()
        if times[-1] == 0:
            times[-1] = 0.001
        ns = Sigmas()
        log_sigmas = train.log().float()
        smax = float(train[-1])
        s0 = float(sigmas[0])
        full = abs(s0 - smax) <= 1e-5 * max(abs(s0), abs(smax)) or s0 > smax
        x = x * ((1.0 + sigmas[0] ** 2) ** 0.5 if full else sigmas[0])  # KSAMPLER's noise_scaling
        x = x / torch.sqrt(1.0 + times[0] ** 2.0)

        def data_fn(xx, sig):
            sigma = sig[0]
            t = torch.abs(torch.log(sigma) - log_sigmas).argmin().float()  # ModelSamplingDiscrete.timestep
            seen.append(float(t))
            inp = xx * ((sigma ** 2 + 1.0) ** 0.5)  # predict_eps_sigma
            denoised = inp - sigma * eps_model(inp / (sigma ** 2 + 1.0) ** 0.5, t)
            e = (inp - denoised) / sigma
            return (xx - std(ns, sig)[:, None, None, None] * e) / alpha(ns, sig)[:, None, None, None]

        order = min(3, len(times) - 2)
        out = sample(ns, case["variant"], x, times, order, True, data_fn)
        out = out / alpha(ns, times[-1])
    return {"timesteps": blob.add(np.array(seen, np.float32)), "final": blob.add(out.numpy()), "calls": len(seen)}


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        request = json.load(f)
    blob = kd.Blob()
    results = [run_case(case, blob) for case in request["cases"]]
    blob.write(sys.argv[3])
    with open(sys.argv[2], "w") as f:
        json.dump({"cases": results}, f)


if __name__ == "__main__":
    main()
