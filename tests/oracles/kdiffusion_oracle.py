"""Oracle for tests/test_samplers_kdiffusion.cpp: k-diffusion's schedules and
sampling functions (k-diffusion 0.1.1.post1 from PyPI, the code A1111 runs and
ComfyUI forked), plus the A1111 / ComfyUI schedule definitions that k-diffusion
lacks, transcribed from A1111's modules/sd_schedulers.py (sgm_uniform, simple)
and ComfyUI's comfy/samplers.py (ddim_uniform) over k-diffusion's
DiscreteSchedule.

usage:
  kdiffusion_oracle.py REQUEST.json RESPONSE.json BLOB.f32

REQUEST: {"cases": [{"config": {scheduler_config.json keys}, "schedule": NAME,
                     "steps": N, "sampler": "euler"|...|"" , "shape": [..], "seed": S}]}
The training sigmas come from diffusers' EulerDiscreteScheduler for `config`
(bit-identical to NaNscope's). With a sampler, the oracle runs k-diffusion's
sample_<sampler> on those sigmas with a test model that both sides compute:
  eps(x_in, t) = 0.8 * x_in + 0.05 * cos(0.01 * t),  x_in = x / sqrt(sigma^2 + 1),
  t = DiscreteSchedule.sigma_to_t(sigma) (continuous), denoised = x - sigma * eps,
the initial x = randn(shape, generator=torch.Generator().manual_seed(S)) * sigmas[0],
and every noise_sampler call (Euler a, DPM++ SDE, DPM++ 2M SDE) answered with
the next torch.randn(shape, generator=...) of that same generator: the noise
NaNscope's torch-cpu source draws, in place of k-diffusion's default
(Brownian-tree noise for the SDE samplers, which no other tool reproduces).

RESPONSE: per case {"sigmas": ref, "final": ref, "calls": n} with refs into BLOB
as scheduler_oracle.py writes them.

k-diffusion is loaded without its package __init__ (which imports training
code: clip, kornia, wandb...): sampling.py and external.py need torch, scipy,
torchsde, torchdiffeq and utils.py, whose one torchvision import is unused by
these functions and is stubbed here.
"""
import importlib.util
import json
import math
import os
import sys
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import EulerDiscreteScheduler  # noqa: E402
from diffusers.utils import logging as diffusers_logging  # noqa: E402

diffusers_logging.set_verbosity_error()


def load_kdiffusion():
    spec = importlib.util.find_spec("k_diffusion")
    if spec is None:
        raise SystemExit("k-diffusion is not installed in this venv: run tools/setup.sh")
    root = os.path.dirname(spec.origin)
    pkg = types.ModuleType("k_diffusion")
    pkg.__path__ = [root]
    sys.modules["k_diffusion"] = pkg
    if "torchvision" not in sys.modules:
        tv = types.ModuleType("torchvision")
        tv.transforms = types.ModuleType("torchvision.transforms")
        tv.transforms.functional = types.ModuleType("torchvision.transforms.functional")
        sys.modules.update({"torchvision": tv, "torchvision.transforms": tv.transforms,
                            "torchvision.transforms.functional": tv.transforms.functional})
    mods = {}
    for name in ("utils", "sampling", "external"):
        s = importlib.util.spec_from_file_location(f"k_diffusion.{name}", os.path.join(root, f"{name}.py"))
        m = importlib.util.module_from_spec(s)
        sys.modules[f"k_diffusion.{name}"] = m
        setattr(pkg, name, m)
        s.loader.exec_module(m)
        mods[name] = m
    return mods["sampling"], mods["external"]


K, EXT = load_kdiffusion()


class Blob:
    def __init__(self):
        self.parts = []
        self.size = 0

    def add(self, values):
        a = np.ascontiguousarray(np.asarray(values, dtype=np.float32).ravel())
        ref = {"offset": self.size, "size": int(a.size)}
        self.parts.append(a)
        self.size += a.size
        return ref

    def write(self, path):
        data = np.concatenate(self.parts) if self.parts else np.zeros(0, np.float32)
        data.astype("<f4").tofile(path)


def schedule_sigmas(ds, name, n):
    """n sigmas plus the final 0, as A1111 / ComfyUI compute them."""
    sig = ds.sigmas
    if name == "normal":
        return ds.get_sigmas(n)
    if name == "karras":
        return K.get_sigmas_karras(n, sig[0].item(), sig[-1].item())
    if name == "exponential":
        return K.get_sigmas_exponential(n, sig[0].item(), sig[-1].item())
    if name == "sgm_uniform":  # A1111 sd_schedulers.sgm_uniform
        start = ds.sigma_to_t(torch.tensor(sig[-1].item()))
        end = ds.sigma_to_t(torch.tensor(sig[0].item()))
        sigs = [ds.t_to_sigma(ts) for ts in torch.linspace(start, end, n + 1)[:-1]]
        sigs += [0.0]
        return torch.FloatTensor(sigs)
    if name == "simple":  # A1111 sd_schedulers.simple_scheduler (= ComfyUI's)
        sigs = []
        ss = len(sig) / n
        for x in range(n):
            sigs += [float(sig[-(1 + int(x * ss))])]
        sigs += [0.0]
        return torch.FloatTensor(sigs)
    if name == "ddim_uniform":  # ComfyUI samplers.ddim_scheduler
        sigs = []
        x = 1
        if math.isclose(float(sig[x]), 0, abs_tol=0.00001):
            n += 1
            sigs = []
        else:
            sigs = [0.0]
        ss = max(len(sig) // n, 1)
        while x < len(sig):
            sigs += [float(sig[x])]
            x += ss
        sigs = sigs[::-1]
        return torch.FloatTensor(sigs)
    raise SystemExit(f"unknown schedule {name}")


def run_case(case, blob):
    s = EulerDiscreteScheduler.from_config(case["config"])
    train_sigmas = ((1 - s.alphas_cumprod) / s.alphas_cumprod) ** 0.5
    ds = EXT.DiscreteSchedule(train_sigmas, quantize=False)
    sigmas = schedule_sigmas(ds, case["schedule"], case["steps"]).to(torch.float32)
    res = {"sigmas": blob.add(sigmas.numpy())}
    sampler = case.get("sampler", "")
    if not sampler:
        return res
    shape = case["shape"]
    generator = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(shape, generator=generator, dtype=torch.float32) * sigmas[0]
    calls = [0]

    def model(x, sigma):
        calls[0] += 1
        sigma = sigma.reshape(-1)[0]
        t = ds.sigma_to_t(sigma)
        x_in = x / (sigma ** 2 + 1) ** 0.5
        eps = 0.8 * x_in + 0.05 * torch.cos(0.01 * t)
        return x - sigma * eps

    def noise_sampler(sigma, sigma_next):
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    fn = getattr(K, "sample_" + sampler)
    kwargs = {"disable": True}
    if sampler in ("euler_ancestral", "dpmpp_sde", "dpmpp_2m_sde"):
        kwargs["noise_sampler"] = noise_sampler
    out = fn(model, x, sigmas, **kwargs)
    res["final"] = blob.add(out.numpy())
    res["calls"] = calls[0]
    return res


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        request = json.load(f)
    blob = Blob()
    results = [run_case(case, blob) for case in request["cases"]]
    blob.write(sys.argv[3])
    with open(sys.argv[2], "w") as f:
        json.dump({"cases": results}, f)


if __name__ == "__main__":
    main()
