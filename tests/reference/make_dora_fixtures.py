#!/usr/bin/env python3
"""Reference fixtures for DoRA (PEFT 0.21's LoraConfig(use_dora=True)) on the lora module.

Usage: make_dora_fixtures.py OUTDIR

For each case, OUTDIR/<case>/ holds
  base/                      a tiny model of tiny_models.py (save_pretrained), fp32 or bf16
  init_magnitude.safetensors get_peft_model's fresh lora_magnitude_vector of every adapted
                             projection (lora_B = 0), under PEFT's saved names
  adapter/                   the DoRA adapter with random non-zero lora_A, lora_B and a magnitude
                             moved off its initial value (PeftModel.save_pretrained)
  projections.safetensors    for the projections in PROJECTIONS, through PEFT's lora.Linear:
                             <p>.x (2, 5, in) in the base dtype, <p>.grad_output (2, 5, out) and,
                             for mode eval (no dropout) and train (dropout drawn right after
                             torch.manual_seed(DROPOUT_SEED)): <p>.<mode>.y, <p>.<mode>.grad_x,
                             <p>.<mode>.grad.lora_A, .grad.lora_B, .grad.lora_magnitude_vector
  logits.safetensors         input_ids (2, 9) and the PeftModel's logits (eval) with the adapter
                             (logits) and without it (base_logits), in the base dtype
  peft_merged/               merge_and_unload() of the adapter, saved with save_pretrained
and OUTDIR/cases.json lists the cases: dtype, lora_dropout, projections.
The C++ tests compare bit for bit: generate under the MKL_CBWR they run with (scripts/test.sh
exports MKL_CBWR=AUTO for both), since MKL's code path changes the low bits of fp32 products.
"""
import json
import os
import sys

import torch
import transformers
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from safetensors.torch import save_file

import tiny_models

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name -> (tiny model, dtype, LoraConfig kwargs). Qwen2's q/k/v carry a bias (DoRA subtracts it).
CASES = {
    "llama_fp32": ("llama", torch.float32, dict(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=ALL_PROJECTIONS)),
    "qwen2_bf16_rslora": ("qwen2", torch.bfloat16,
                          dict(r=8, lora_alpha=16, use_rslora=True, lora_dropout=0.2,
                               target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"])),
}
PROJECTIONS = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"]
DROPOUT_SEED = 1234


def module_at(peft_model, name):
    module = peft_model.base_model.model
    for part in name.split("."):
        module = getattr(module, part)
    return module


def projection_tensors(peft_model, name, dtype, g):
    """x, the upstream gradient, and PEFT's output and gradients in eval and in train mode."""
    module = module_at(peft_model, name)
    params = {"lora_A": module.lora_A["default"].weight, "lora_B": module.lora_B["default"].weight,
              "lora_magnitude_vector": module.lora_magnitude_vector["default"].weight}
    x = torch.randn(2, 5, module.in_features, generator=g).to(dtype)
    grad_output = torch.randn(2, 5, module.out_features, generator=g).to(dtype)
    out = {f"{name}.x": x, f"{name}.grad_output": grad_output}
    for mode in ("eval", "train"):
        peft_model.train(mode == "train")
        for p in params.values():
            p.grad = None
        x_leaf = x.clone().requires_grad_(True)
        torch.manual_seed(DROPOUT_SEED)
        y = module(x_leaf)
        y.backward(grad_output)
        out[f"{name}.{mode}.y"] = y.detach().clone()
        out[f"{name}.{mode}.grad_x"] = x_leaf.grad.clone()
        for pname, p in params.items():
            out[f"{name}.{mode}.grad.{pname}"] = p.grad.clone()
    peft_model.eval()
    for p in params.values():
        p.grad = None
    return out


def make_case(name, out):
    model_case, dtype, lora_kwargs = CASES[name]
    case_dir = os.path.join(out, name)
    base_dir, adapter_dir, merged_dir = (os.path.join(case_dir, d) for d in ("base", "adapter", "peft_merged"))
    tiny_models.make_model(model_case, base_dir, seed=3, dtype=dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
    config = LoraConfig(use_dora=True, bias="none", task_type="CAUSAL_LM", **lora_kwargs)
    peft_model = get_peft_model(model, config)

    state = get_peft_model_state_dict(peft_model)
    magnitudes = {k: v.detach().clone() for k, v in state.items() if k.endswith(".lora_magnitude_vector")}
    assert magnitudes and all(v.dtype == torch.float32 for v in magnitudes.values())
    save_file(magnitudes, os.path.join(case_dir, "init_magnitude.safetensors"))

    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_A" in pname or "lora_B" in pname:
                assert p.dtype == torch.float32, pname
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "lora_magnitude_vector" in pname:
                assert p.dtype == torch.float32, pname
                p.mul_(1 + 0.1 * torch.randn(p.shape, generator=g))
    peft_model.save_pretrained(adapter_dir)

    tensors = {}
    for projection in PROJECTIONS:
        tensors.update(projection_tensors(peft_model, projection, dtype, g))
    save_file(tensors, os.path.join(case_dir, "projections.safetensors"))

    peft_model.eval()
    input_ids = torch.randint(3, tiny_models.VOCAB, (2, 9), generator=g)
    with torch.no_grad():
        logits = peft_model(input_ids=input_ids).logits
        with peft_model.disable_adapter():
            base_logits = peft_model(input_ids=input_ids).logits
    save_file({"input_ids": input_ids, "logits": logits.contiguous(), "base_logits": base_logits.contiguous()},
              os.path.join(case_dir, "logits.safetensors"))

    merged = peft_model.merge_and_unload()
    merged.save_pretrained(merged_dir)
    return {"dtype": str(dtype).replace("torch.", ""), "lora_dropout": lora_kwargs["lora_dropout"],
            "projections": PROJECTIONS}


def main():
    transformers.logging.set_verbosity_error()
    if len(sys.argv) != 2:
        sys.exit("usage: make_dora_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = {name: make_case(name, out) for name in CASES}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    main()
