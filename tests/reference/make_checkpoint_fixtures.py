#!/usr/bin/env python3
"""Reference fixtures for the checkpoint module (merged export).

Usage: make_checkpoint_fixtures.py OUTDIR

For each case, OUTDIR/<case>/ holds
  base/         a tiny model of tiny_models.py (save_pretrained)
  adapter/      a PEFT LoRA adapter on it with random non-zero lora_A and lora_B
                (PeftModel.save_pretrained: adapter_config.json + adapter_model.safetensors)
  peft_merged/  PEFT's merge_and_unload() of that adapter, saved with save_pretrained
and OUTDIR/cases.json lists the cases with the base dtype.
"""
import json
import os
import sys

import torch
import transformers
from peft import LoraConfig, get_peft_model

import tiny_models

# name -> (tiny model, dtype, LoraConfig kwargs)
CASES = {
    "llama_fp32": ("llama", torch.float32,
                   dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"])),
    # bf16 base with fp32 adapters (PEFT's autocast_adapter_dtype), tied embeddings, rsLoRA.
    "qwen3_bf16_tied_rslora": ("qwen3", torch.bfloat16,
                               dict(r=8, lora_alpha=16, use_rslora=True,
                                    target_modules=["q_proj", "v_proj", "o_proj", "up_proj"])),
}


def make_case(name, out):
    model_case, dtype, lora_kwargs = CASES[name]
    base_dir, adapter_dir, merged_dir = (os.path.join(out, name, d) for d in ("base", "adapter", "peft_merged"))
    model = tiny_models.make_model(model_case, base_dir, seed=3, dtype=dtype)
    peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                                                  **lora_kwargs))
    g = torch.Generator().manual_seed(11)
    adapters = 0
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_A" in pname or "lora_B" in pname:
                assert p.dtype == torch.float32, pname
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
                adapters += 1
    assert adapters > 0
    peft_model.save_pretrained(adapter_dir)
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(merged_dir)
    return {"dtype": str(dtype).replace("torch.", "")}


def main():
    transformers.logging.set_verbosity_error()
    if len(sys.argv) != 2:
        sys.exit("usage: make_checkpoint_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = {name: make_case(name, out) for name in CASES}
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    main()
