"""Oracle for tests/test_pipeline.cpp: a tiny random-weight SD 1.x pipeline
folder made with diffusers' and transformers' own classes, and diffusers'
StableDiffusionPipeline run on it from a given initial latent.

usage:
  pipeline_oracle.py make OUT_DIR
  pipeline_oracle.py run MODEL_DIR IN.safetensors OUT.safetensors PROMPT NEGATIVE STEPS CFG SAMPLER SEED
    IN holds "noise" (the initial latent before init_noise_sigma); OUT gets "image" (float, [0,1], NCHW),
    "latent" (the final latent) and "noise_check" (torch.randn from the seed, for the RNG check).
  pipeline_oracle.py run ... SEED ENSD SOURCE
    The same with A1111's ENSD rule for the sampler's step noise (modules/rng.py: a new generator seeded
    SEED + ENSD after the initial noise; 0: the seed's own stream continues); SOURCE cpu (torch's CPU
    generator) or cuda (A1111's NV source, noise_oracle.py's numpy Philox: "noise_check" is its first draw
    and euler_a's step noise comes from it). Euler a only for cuda.
  pipeline_oracle.py cases MODEL_DIR CASES.json OUT.safetensors
    Many img2img / hires-fix cases in one process (tests/test_img2img.cpp). CASES.json is a list of
    {"name", "kind": "img2img" | "hires" | "lanczos", ...}; OUT gets "<name>.latent" (the final latent) or,
    for "lanczos", "<name>.rgb" (PIL's LANCZOS resize of "image" to "width" x "height", uint8 as float).
    img2img: StableDiffusionImg2ImgPipeline with "init" (a PNG), "strength", "steps", "sampler", "seed".
    hires: diffusers composed as A1111's hires fix runs it: txt2img at the base size (latent), then
      torch.nn.functional.interpolate(latent, scale "scale", mode "mode") (or, mode "lanczos", decode ->
      PIL LANCZOS -> the img2img pipeline's own encode), then the img2img pipeline on it with a generator
      seeded again, strength "denoise" and num_inference_steps int(hires_steps / min(denoise, 0.999)).
      Optional: "width"/"height" (the first pass's size), "resize_x"/"resize_y" (A1111's Hires resize: the
      target computed and the upscaled latent cropped by hires_target() below, a transcription of A1111's
      processing.py), "hires_sampler", "hires_prompt", "hires_negative", "hires_cfg" (the second pass's own).
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import models_oracle  # noqa: E402
import tokenizer_oracle  # noqa: E402

torch.set_num_threads(2)


def make(out):
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tok_dir = os.path.join(out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tokenizer_oracle.write_vocab(tok_dir, "sd1")
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(4321)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=77, hidden_act="quick_gelu", bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    unet = UNet2DConditionModel(**models_oracle.unet_config("unet_sd1"))
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        layers_per_block=1, norm_num_groups=8, sample_size=16, scaling_factor=0.5)
    for i, m in enumerate((text_encoder, unet, vae)):
        models_oracle.perturb(m, 100 + i)
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       steps_offset=1, timestep_spacing="leading")
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(out, safe_serialization=True)


def run(model_dir, inp, out, prompt, negative, steps, cfg, sampler, seed, ensd=0, source="cpu"):
    from diffusers import (DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                           HeunDiscreteScheduler, StableDiffusionPipeline)
    from diffusers.models.attention_processor import AttnProcessor

    pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
    pipe.unet.set_attn_processor(AttnProcessor())
    pipe.vae.set_attn_processor(AttnProcessor())
    cls = {"euler": EulerDiscreteScheduler, "euler_a": EulerAncestralDiscreteScheduler, "heun": HeunDiscreteScheduler,
           "dpmpp_2m_sde": DPMSolverMultistepScheduler}[sampler]
    extra = {"algorithm_type": "sde-dpmsolver++"} if sampler == "dpmpp_2m_sde" else {}
    pipe.scheduler = cls.from_config(pipe.scheduler.config, **extra)
    pipe.set_progress_bar_config(disable=True)
    noise = load_file(inp)["noise"]
    g = torch.Generator().manual_seed(seed)
    noise_check = torch.randn(noise.shape, generator=g)  # what the engine's torch-cpu source drew first
    # A1111's ENSD (modules/rng.py ImageRNG.first): after the initial noise the step noise comes from
    # create_generator(seed + ENSD), a new generator of the same source. CPU: a torch CPU generator so seeded
    # (the pipeline's generator draws nothing but the step noise here: the latents are given).
    if ensd:
        g = torch.Generator().manual_seed(seed + ensd)
    if source == "cuda":
        # RNG NV / GPU: rng_philox.Generator(seed + ENSD) from offset 0, or with ENSD 0 the seed's own
        # generator after the initial noise (offset 1 on); computed by noise_oracle.py's numpy Philox.
        import noise_oracle
        from diffusers.schedulers import scheduling_euler_ancestral_discrete as ea

        noise_check = torch.from_numpy(noise_oracle.cuda_noise(seed, 0, noise.numel())).reshape(noise.shape)
        offsets = {"next": 0}

        def nv_randn(shape, generator=None, device=None, dtype=None, layout=None):
            k = offsets["next"]
            offsets["next"] += 1
            n = int(np.prod(shape))
            v = noise_oracle.cuda_noise(seed + ensd, k, n) if ensd else noise_oracle.cuda_noise(seed, k + 1, n)
            return torch.from_numpy(v).reshape(shape)

        ea.randn_tensor = nv_randn
    with torch.no_grad():
        common = dict(prompt=prompt, negative_prompt=negative or None, num_inference_steps=steps,
                      guidance_scale=cfg, latents=noise.clone(), generator=g)
        state = g.get_state()
        latent = pipe(output_type="latent", **common).images
        g.set_state(state)
        if source == "cuda":
            offsets["next"] = 0
        image = pipe(output_type="pt", **common).images
    save_file({"image": image.float().contiguous(), "latent": latent.float().contiguous(),
               "noise_check": noise_check}, out)


SCHEDULERS = {"euler": "EulerDiscreteScheduler", "euler_a": "EulerAncestralDiscreteScheduler",
              "ddim": "DDIMScheduler", "dpmpp_2m": "DPMSolverMultistepScheduler",
              "heun": "HeunDiscreteScheduler", "lms": "LMSDiscreteScheduler",
              "unipc": "UniPCMultistepScheduler", "ddpm": "DDPMScheduler"}


def hires_target(width, height, scale, resize_x, resize_y, opt_f):
    """A1111's StableDiffusionProcessingTxt2Img.calculate_target_resolution (modules/processing.py):
    (hr_upscale_to_x, hr_upscale_to_y, truncate_x, truncate_y)."""
    truncate_x = truncate_y = 0
    if resize_x == 0 and resize_y == 0:
        return int(width * scale), int(height * scale), 0, 0
    if resize_y == 0:
        to_x, to_y = resize_x, resize_x * height // width
    elif resize_x == 0:
        to_x, to_y = resize_y * width // height, resize_y
    else:
        src_ratio = width / height
        dst_ratio = resize_x / resize_y
        if src_ratio < dst_ratio:
            to_x, to_y = resize_x, resize_x * height // width
        else:
            to_x, to_y = resize_y * width // height, resize_y
        truncate_x = (to_x - resize_x) // opt_f
        truncate_y = (to_y - resize_y) // opt_f
    return to_x, to_y, truncate_x, truncate_y


def cases(model_dir, cases_json, out):
    import json

    import diffusers
    from diffusers import StableDiffusionImg2ImgPipeline, StableDiffusionPipeline
    from diffusers.models.attention_processor import AttnProcessor
    from PIL import Image

    with open(cases_json) as f:
        todo = json.load(f)
    pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
    pipe.unet.set_attn_processor(AttnProcessor())
    pipe.vae.set_attn_processor(AttnProcessor())
    pipe.set_progress_bar_config(disable=True)
    base_scheduler = pipe.scheduler
    result = {}
    for c in todo:
        if c["kind"] == "lanczos":
            img = Image.open(c["image"]).convert("RGB").resize((c["width"], c["height"]), resample=Image.LANCZOS)
            result[c["name"] + ".rgb"] = torch.tensor(list(img.tobytes()), dtype=torch.float32)
            continue
        pipe.scheduler = getattr(diffusers, SCHEDULERS[c["sampler"]]).from_config(base_scheduler.config)
        i2i = StableDiffusionImg2ImgPipeline(**pipe.components)
        i2i.set_progress_bar_config(disable=True)
        common = dict(prompt=c["prompt"], negative_prompt=c["negative"] or None, guidance_scale=c["cfg"])
        with torch.no_grad():
            if c["kind"] == "img2img":
                image = Image.open(c["init"]).convert("RGB")
                latent = i2i(image=image, strength=c["strength"], num_inference_steps=c["steps"],
                             generator=torch.Generator().manual_seed(c["seed"]), output_type="latent",
                             **common).images
            else:
                g = torch.Generator().manual_seed(c["seed"])
                size = dict(width=c["width"], height=c["height"]) if "width" in c else {}
                low = pipe(num_inference_steps=c["steps"], generator=g, output_type="latent", **common,
                           **size).images
                h, w = low.shape[2] * c["scale"], low.shape[3] * c["scale"]
                f = pipe.vae_scale_factor
                crop = (0, 0)
                if "resize_x" in c:
                    to_x, to_y, tx, ty = hires_target(low.shape[3] * f, low.shape[2] * f, 0, c["resize_x"],
                                                      c["resize_y"], f)
                    h, w, crop = to_y // f, to_x // f, (tx, ty)
                if "hires_sampler" in c:
                    pipe.scheduler = getattr(diffusers, SCHEDULERS[c["hires_sampler"]]).from_config(
                        base_scheduler.config)
                    i2i = StableDiffusionImg2ImgPipeline(**pipe.components)
                    i2i.set_progress_bar_config(disable=True)
                common = dict(prompt=c.get("hires_prompt", c["prompt"]),
                              negative_prompt=c.get("hires_negative", c["negative"]) or None,
                              guidance_scale=c.get("hires_cfg", c["cfg"]))
                if c["mode"] == "lanczos":
                    pil = pipe.image_processor.postprocess(pipe.vae.decode(low / pipe.vae.config.scaling_factor)[0],
                                                           output_type="pil")[0]
                    f = pipe.vae_scale_factor
                    up = pil.resize((w * f, h * f), resample=Image.LANCZOS)
                else:
                    up = torch.nn.functional.interpolate(low, size=(h, w), mode=c["mode"])
                    tx, ty = crop
                    up = up[:, :, ty // 2:up.shape[2] - (ty + 1) // 2, tx // 2:up.shape[3] - (tx + 1) // 2]
                d = c["denoise"]
                latent = i2i(image=up, strength=d, num_inference_steps=int(c["hires_steps"] / min(d, 0.999)),
                             generator=torch.Generator().manual_seed(c["seed"]), output_type="latent",
                             **common).images
        result[c["name"] + ".latent"] = latent.float().contiguous()
    save_file(result, out)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "cases":
        cases(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "run":
        a = sys.argv
        run(a[2], a[3], a[4], a[5], a[6], int(a[7]), float(a[8]), a[9], int(a[10]),
            int(a[11]) if len(a) > 11 else 0, a[12] if len(a) > 12 else "cpu")
    else:
        raise SystemExit(__doc__)
