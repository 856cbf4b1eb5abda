#!/usr/bin/env python3
"""Reference fixtures for the 8-bit AdamW (train/adamw_8bit.h): bitsandbytes 0.50.2 on the CPU.

Usage: make_adamw8bit_fixtures.py OUTDIR

  OUTDIR/adamw8bit.json + adamw8bit_<case>.safetensors
      bnb.optim.AdamW(optim_bits=8), the optimizer HF's Trainer builds for optim="adamw_8bit"
      (lr, betas, eps and weight_decay passed as the Trainer passes them), run for STEPS steps on
      seeded gradients with a different lr each step. Parameters below and at or above
      min_8bit_size (4096 elements; fp32 state below, 8-bit blockwise state from it), with sizes
      that are and are not multiples of the 256-element block, one whose gradient is zero for the
      first steps (LoRA A while B is still zero). Weight decay on.
      Tensors: param.<i>.initial, grad.<i>.<step>, param.<i>.<step> (after that step), and the
      state after the last step and after the first: <field>.<i>.final / <field>.<i>.first for
      bnb's state1, state2 (uint8 codes or fp32 moments) and absmax1, absmax2 (8-bit only).
"""
import json
import os
import sys

import bitsandbytes as bnb
import torch
from safetensors.torch import save_file

from make_train_fixtures import optimizer_trajectory

STEPS = 20
# name -> shape; 8-bit from 4096 elements (min_8bit_size).
SHAPES = {
    "small": (8, 16),          # 128: fp32 state
    "below_min": (63, 65),     # 4095: fp32 state, one element short of 8-bit
    "at_min": (16, 256),       # 4096: 8-bit, whole blocks
    "lora_a": (8, 600),        # 4800: 8-bit, last block 192 of 256
    "lora_b": (1000, 8),       # 8000: 8-bit, last block 64
    "vector": (12345,),        # 8-bit, last block 57
    "zero_first": (16, 520),   # 8320: 8-bit, gradient zero for the first ZERO_STEPS steps
}
ZERO_STEPS = 2
# A schedule's shape: warmup, then linear decay (a step with lr 0 at the end).
LRS = [2e-3 * min(1.0, (s + 1) / 4) * (1 - s / (STEPS - 1)) for s in range(STEPS)]
CASES = {
    "hf_defaults": dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "custom": dict(betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
}
FIELDS = ("state1", "absmax1", "state2", "absmax2")


def state_tensors(optimizer, params, suffix):
    out = {}
    for i, p in enumerate(params):
        for field in FIELDS:
            if field in optimizer.state[p]:
                out[f"{field}.{i}.{suffix}"] = optimizer.state[p][field].clone()
    return out


def run_case(index, options):
    g = torch.Generator().manual_seed(200 + index)
    params = [torch.nn.Parameter(torch.randn(shape, generator=g) * 0.1) for shape in SHAPES.values()]
    optimizer = bnb.optim.AdamW([{"params": params, "weight_decay": options["weight_decay"]}], lr=LRS[0],
                                betas=options["betas"], eps=options["eps"], optim_bits=8, is_paged=False)
    names = list(SHAPES)

    def gradient(step, i, p):
        # Scales from 1e-4 to 1 across parameters and steps, some exact zeros, a few large values.
        grad = torch.randn(p.shape, generator=g) * (10.0 ** -((i + step) % 5))
        grad[torch.rand(p.shape, generator=g) < 0.05] = 0.0
        grad[torch.rand(p.shape, generator=g) < 0.002] *= 30.0
        if names[i] == "zero_first" and step < ZERO_STEPS:
            grad.zero_()
        return grad

    def after_step(step, tensors):
        if step == 0:
            tensors.update(state_tensors(optimizer, params, "first"))

    tensors = optimizer_trajectory(params, optimizer, LRS, gradient, after_step)
    tensors.update(state_tensors(optimizer, params, "final"))
    eight_bit = [optimizer.state[p]["state1"].dtype == torch.uint8 for p in params]
    return tensors, eight_bit


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_adamw8bit_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = []
    for index, (name, options) in enumerate(CASES.items()):
        tensors, eight_bit = run_case(index, options)
        save_file(tensors, os.path.join(out, f"adamw8bit_{name}.safetensors"))
        cases.append({"name": name, "beta1": options["betas"][0], "beta2": options["betas"][1], "eps": options["eps"],
                      "weight_decay": options["weight_decay"], "lrs": LRS, "steps": STEPS,
                      "parameters": [{"name": n, "shape": list(s), "eight_bit": e}
                                     for (n, s), e in zip(SHAPES.items(), eight_bit)]})
    with open(os.path.join(out, "adamw8bit.json"), "w") as f:
        json.dump({"bitsandbytes": bnb.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
