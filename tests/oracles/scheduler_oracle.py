"""Oracle for tests/test_schedulers.cpp: the installed diffusers schedulers, run
on the cases the test asks for, all in one process.

usage:
  scheduler_oracle.py REQUEST.json RESPONSE.json BLOB.f32

REQUEST: {"cases": [{"kind": "euler"|"euler_a"|"ddim"|"dpmpp_2m"|"dpmpp_2m_sde"|"dpmpp_sde"|
                             "heun"|"lms"|"ddpm"|"lcm"|"unipc", "config": {...},
                     "steps": N, "run_steps": K, "shape": [..], "seed": S}]}
dpmpp_2m_sde is DPMSolverMultistepScheduler with algorithm_type "sde-dpmsolver++".
The samplers that draw noise in step() (Euler a, DPM++ 2M SDE, DDPM, LCM) get the
generator; DPMSolverSDEScheduler's Brownian-tree noise sampler is replaced by the
next torch.randn of that generator (what NaNscope's torch-cpu source gives), so
both sides add the same noise. Heun and DPM++ SDE call the model twice per
step: the run goes through all of scheduler.timesteps (one entry per call).
Each case builds the scheduler with `from_config(config)` (as a pipeline loads
scheduler_config.json) and calls set_timesteps(N). With run_steps K > 0 it then
does what StableDiffusionPipeline does for K steps: latents = randn(shape,
generator=torch.Generator().manual_seed(S)) * init_noise_sigma, and per step
scale_model_input, step(model_output, t, latents, generator=...) with the model
outputs drawn from numpy's default_rng(S) (standard normal, float32).

RESPONSE: per case {"timesteps": ref, "sigmas": ref, "init_noise_sigma": x,
"num_inference_steps": n, "initial": ref, "model_outputs": [ref..], "model_inputs":
[ref..], "latents": [ref..], "denoised": [ref..]}, where a ref is {"offset", "size"}
into BLOB, the float32 little-endian concatenation of all arrays (so NaN/Inf and
every bit survive), or {"error": why} for a DDIM schedule whose timesteps leave
the training range (diffusers would fail in step()). DDIM has no sigma table: its "sigmas" are sqrt((1-a)/a) of the
alphas it uses, the final one from final_alpha_cumprod.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import (DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler,  # noqa: E402
                       DPMSolverSDEScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       HeunDiscreteScheduler, LCMScheduler, LMSDiscreteScheduler, UniPCMultistepScheduler)
from diffusers.utils import logging as diffusers_logging  # noqa: E402

diffusers_logging.set_verbosity_error()

CLASSES = {
    "euler": EulerDiscreteScheduler,
    "euler_a": EulerAncestralDiscreteScheduler,
    "ddim": DDIMScheduler,
    "dpmpp_2m": DPMSolverMultistepScheduler,
    "dpmpp_2m_sde": DPMSolverMultistepScheduler,
    "dpmpp_sde": DPMSolverSDEScheduler,
    "heun": HeunDiscreteScheduler,
    "lms": LMSDiscreteScheduler,
    "ddpm": DDPMScheduler,
    "lcm": LCMScheduler,
    "unipc": UniPCMultistepScheduler,
}
NOISE = ("euler_a", "dpmpp_2m_sde", "ddpm", "lcm")
# Timestep samplers: their "sigmas" are derived from the alphas they use.
DISCRETE = ("ddim", "ddpm", "lcm")


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


def tensor_values(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@np.errstate(divide="ignore")  # zero terminal SNR: alpha 0, sigma inf
def ddim_sigmas(s):
    ac = s.alphas_cumprod.numpy()
    out = []
    for t in s.timesteps.numpy():
        a = ac[int(t)]  # Python indexing: -1 is the last entry, as in DDIMScheduler.step
        out.append(np.sqrt((np.float32(1) - a) / a))
    fa = np.float32(s.final_alpha_cumprod.item())
    out.append(np.sqrt((np.float32(1) - fa) / fa))
    return np.array(out, dtype=np.float32)


@np.errstate(divide="ignore")
def discrete_sigmas(s):
    ac = s.alphas_cumprod.numpy()
    out = [np.sqrt((np.float32(1) - ac[int(t)]) / ac[int(t)]) for t in s.timesteps.numpy()]
    out.append(np.float32(0))
    return np.array(out, dtype=np.float32)


def run_case(case, blob):
    kind = case["kind"]
    config = dict(case["config"])
    if kind == "dpmpp_2m_sde":
        config["algorithm_type"] = "sde-dpmsolver++"
    s = CLASSES[kind].from_config(config)
    s.set_timesteps(case["steps"])
    if kind == "ddim" and int(s.timesteps.max()) >= s.config.num_train_timesteps:
        # e.g. leading spacing, steps_offset 1, 1000 steps: t = 1000, and step() would fail indexing alphas.
        return {"error": f"timestep {int(s.timesteps.max())} out of range"}
    res = {
        "timesteps": blob.add(tensor_values(s.timesteps)),
        "sigmas": blob.add(ddim_sigmas(s) if kind == "ddim" else
                           discrete_sigmas(s) if kind in DISCRETE else tensor_values(s.sigmas)),
        "init_noise_sigma": float(tensor_values(s.init_noise_sigma)),
        "num_inference_steps": int(len(s.timesteps)),
    }
    k = int(case.get("run_steps", 0))
    if k <= 0:
        return res
    shape = case["shape"]
    seed = case["seed"]
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(shape, generator=generator, dtype=torch.float32) * s.init_noise_sigma
    rng = np.random.default_rng(seed)
    res["initial"] = blob.add(tensor_values(latents))
    res.update(model_outputs=[], model_inputs=[], latents=[], denoised=[])
    if kind == "dpmpp_sde":
        s.noise_sampler = lambda sigma, sigma_next: torch.randn(shape, generator=generator, dtype=torch.float32)
    for i, t in enumerate(s.timesteps[:k]):
        model_input = s.scale_model_input(latents, t)
        model_output = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        kwargs = {"generator": generator} if kind in NOISE else {}
        out = s.step(model_output, t, latents, **kwargs)
        if getattr(s, "step_index", i + 1) != i + 1:  # DDIM has no step counter
            raise SystemExit(f"{kind}: step index {s.step_index} after step {i}; the oracle's loop is off")
        latents = out.prev_sample
        res["model_inputs"].append(blob.add(tensor_values(model_input)))
        res["model_outputs"].append(blob.add(tensor_values(model_output)))
        res["latents"].append(blob.add(tensor_values(latents)))
        x0 = getattr(out, "pred_original_sample", getattr(out, "denoised", None))
        res["denoised"].append(blob.add(tensor_values(x0)) if x0 is not None else None)
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
