"""Oracle for tests/test_lora.cpp: LoRA files for the tiny random-weight SD 1.x
pipeline of pipeline_oracle.py, and that pipeline run with a LoRA loaded by diffusers' own
load_lora_weights.

The run is diffusers' own LoRA loading (diffusers 0.31 with peft 0.13.2, accelerate 1.1.1; tools/setup.sh
pins them): StableDiffusionPipeline.load_lora_weights reads each file (kohya keys converted by
loaders/lora_conversion_utils.py, network alphas kept as PEFT's alpha_pattern), then either
fuse_lora(lora_scale=W) (NaNscope's lora.mode=merge) or the adapter left unfused with
set_adapters(weights=W) (lora.mode=unmerged).

usage:
  lora_oracle.py make MODEL_DIR OUT_DIR
    writes kohya.safetensors, kohya_ldm.safetensors (the same LoRA under LDM UNet names, written
    by hand here), peft.safetensors (written by diffusers' save_lora_weights), and prints a JSON map
    file -> A1111 short hash (kohya-ss addnet_hash_safetensors, first 12 hex digits).
  lora_oracle.py run MODEL_DIR IN.safetensors OUT.safetensors PROMPT NEGATIVE STEPS CFG SEED JOB...
    JOB is FILE:WEIGHT[:MODE] or FILE:TE:UNET[:MODE], MODE merged (default) or unmerged. IN holds
    "noise"; OUT gets "latent_I" and "image_I" for the I-th job. FILE:TE:UNET scales the text
    encoder's deltas by TE and the UNet's by UNET (A1111's <lora:NAME:TE:UNET>; diffusers'
    set_adapters with per-component weights {"text_encoder": TE, "unet": UNET}, unfused).
"""
import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

torch.set_num_threads(2)

# (module, rank) of the UNet and the text encoder the test LoRA patches: linear layers of
# both attentions and the feed-forward, a 1x1 conv (proj_in) and a 3x3 conv (kohya's LoCon).
UNET = [
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", 4),
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0", 4),
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k", 4),
    ("down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj", 4),
    ("down_blocks.0.attentions.0.proj_in", 2),
    ("up_blocks.1.resnets.0.conv1", 4),
    ("up_blocks.1.attentions.1.transformer_blocks.0.attn2.to_v", 4),
]
# Real kohya files patch all of q, k, v and out_proj: diffusers 0.31 recognises the text encoder's old key
# form by "to_out_lora" (state_dict_utils.convert_state_dict_to_diffusers), so out_proj must be there.
TEXT = [
    ("text_model.encoder.layers.0.self_attn.q_proj", 4),
    ("text_model.encoder.layers.0.self_attn.out_proj", 4),
    ("text_model.encoder.layers.1.mlp.fc1", 4),
]
ALPHA = 2.0  # one alpha for every module: diffusers keeps per-module alphas only through alpha_pattern
# The original (LDM) names of the UNet modules above in this 2-level UNet, written out by hand.
LDM = {
    "down_blocks.0.attentions.0.": "input_blocks.1.1.",
    "up_blocks.1.resnets.0.conv1": "output_blocks.2.0.in_layers.2",
    "up_blocks.1.attentions.1.": "output_blocks.3.1.",
}


def load_pipe(model_dir):
    from diffusers import StableDiffusionPipeline
    from diffusers.models.attention_processor import AttnProcessor
    pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
    pipe.unet.set_attn_processor(AttnProcessor())
    pipe.vae.set_attn_processor(AttnProcessor())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def module_of(root, name):
    m = root
    for part in name.split("."):
        m = getattr(m, part) if not part.isdigit() else m[int(part)]
    return m


def lora_pair(weight, rank, g):
    w = weight.shape
    if len(w) == 2:
        down = torch.randn(rank, w[1], generator=g) * 0.3
        up = torch.randn(w[0], rank, generator=g) * 0.3
    else:
        down = torch.randn(rank, w[1], w[2], w[3], generator=g) * 0.3
        up = torch.randn(w[0], rank, 1, 1, generator=g) * 0.3
    return down, up


def ldm_name(module):
    for d, l in LDM.items():
        if module.startswith(d):
            return l + module[len(d):]
    raise SystemExit(f"no LDM name for {module}")


def addnet_hash(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(n + 8)
        return hashlib.sha256(f.read()).hexdigest()[:12]


def make(model_dir, out):
    from diffusers import StableDiffusionPipeline
    pipe = load_pipe(model_dir)
    g = torch.Generator().manual_seed(777)
    kohya, kohya_ldm, unet_layers, te_layers = {}, {}, {}, {}
    for root, modules, prefix in ((pipe.unet, UNET, "lora_unet_"), (pipe.text_encoder, TEXT, "lora_te_")):
        for name, rank in modules:
            down, up = lora_pair(module_of(root, name).weight, rank, g)
            for target, key in ((kohya, name), (kohya_ldm, ldm_name(name) if prefix == "lora_unet_" else name)):
                base = prefix + key.replace(".", "_")
                target[base + ".lora_down.weight"] = down.contiguous()
                target[base + ".lora_up.weight"] = up.contiguous()
                target[base + ".alpha"] = torch.tensor(ALPHA)
            # The PEFT file has no alphas: diffusers then takes lora_alpha from the first module's rank
            # (utils/peft_utils.py get_peft_kwargs), so with mixed ranks the scale would hang on key order.
            # diffusers' trainers write one rank: so does this file (rank 4 everywhere, scale 1).
            if rank != 4:
                down, up = lora_pair(module_of(root, name).weight, 4, g)
            (unet_layers if prefix == "lora_unet_" else te_layers)[name + ".lora_A.weight"] = down.contiguous()
            (unet_layers if prefix == "lora_unet_" else te_layers)[name + ".lora_B.weight"] = up.contiguous()
    os.makedirs(out, exist_ok=True)
    save_file(kohya, os.path.join(out, "kohya.safetensors"), metadata={"ss_network_module": "networks.lora"})
    save_file(kohya_ldm, os.path.join(out, "kohya_ldm.safetensors"))
    StableDiffusionPipeline.save_lora_weights(out, unet_lora_layers=unet_layers, text_encoder_lora_layers=te_layers,
                                              weight_name="peft.safetensors", safe_serialization=True)
    print(json.dumps({f: addnet_hash(os.path.join(out, f))
                      for f in ("kohya.safetensors", "kohya_ldm.safetensors", "peft.safetensors")}))


def apply(pipe, path, lora_scale, mode, unet_scale=None):
    """diffusers' own LoRA loading: load_lora_weights (PEFT layers on the UNet and the text encoder),
    then fuse_lora(lora_scale) for NaNscope's merged mode, or the adapter kept apart with its weight
    (set_adapters, PEFT's unfused forward: base(x) + lora_B(lora_A(x)) * scaling) for unmerged."""
    # low_cpu_mem_usage=False: diffusers 0.31 turns it on for peft >= 0.13.1, and peft then calls
    # load_state_dict(assign=True), which Debian's torch 1.13 does not have.
    pipe.load_lora_weights(os.path.dirname(path), weight_name=os.path.basename(path), adapter_name="test",
                           low_cpu_mem_usage=False)
    # diffusers found every module this oracle's files patch (none silently dropped).
    from peft.tuners.lora import LoraLayer
    for root, modules in ((pipe.unet, UNET), (pipe.text_encoder, TEXT)):
        patched = {n for n, m in root.named_modules() if isinstance(m, LoraLayer)}
        assert patched == {n for n, _ in modules}, sorted(patched)
    if unet_scale is not None:
        # Per-component weights: PEFT's unfused forward with each component's own scale.
        pipe.set_adapters(["test"], adapter_weights=[{"text_encoder": lora_scale, "unet": unet_scale}])
    elif mode == "merged":
        pipe.fuse_lora(lora_scale=lora_scale, adapter_names=["test"])
        pipe.unload_lora_weights()  # the fused weights stay; the PEFT layers go
    else:
        pipe.set_adapters(["test"], adapter_weights=[lora_scale])


def run(model_dir, inp, out, prompt, negative, steps, cfg, seed, jobs):
    noise = load_file(inp)["noise"]
    result = {}
    for i, job in enumerate(jobs):
        parts = job.split(":")  # the test's paths have no ':'
        mode = parts.pop() if parts[-1] in ("merged", "unmerged") else "merged"
        path, weights = parts[0], [float(w) for w in parts[1:]]
        pipe = load_pipe(model_dir)
        apply(pipe, path, weights[0], mode, weights[1] if len(weights) > 1 else None)
        with torch.no_grad():
            latent = pipe(prompt=prompt, negative_prompt=negative or None, num_inference_steps=steps,
                          guidance_scale=cfg, latents=noise.clone(), generator=torch.Generator().manual_seed(seed),
                          output_type="latent").images
            # The pipeline's own decode and postprocess (what output_type="pt" runs after the loop).
            image = pipe.vae.decode(latent / pipe.vae.config.scaling_factor, return_dict=False)[0]
            image = pipe.image_processor.postprocess(image, output_type="pt", do_denormalize=[True])
        result[f"latent_{i}"] = latent.float().contiguous()
        result[f"image_{i}"] = image.float().contiguous()
    save_file(result, out)


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "make":
        make(a[2], a[3])
    elif a[1] == "run":
        run(a[2], a[3], a[4], a[5], a[6], int(a[7]), float(a[8]), int(a[9]), a[10:])
    else:
        raise SystemExit(__doc__)
