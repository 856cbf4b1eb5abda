#!/usr/bin/env python3
"""Reference fixtures for the train module's optimizer, learning-rate schedules and clipping.

Usage: make_train_fixtures.py OUTDIR

  OUTDIR/adamw.json + adamw_<case>.safetensors
      torch.optim.AdamW (single-tensor path, the CPU default) run on fixed gradients: several
      parameters of different shapes, several steps with a different lr each, weight decay on.
      Tensors: param.<i>.initial, grad.<i>.<step>, param.<i>.<step> (after that step).
  OUTDIR/lr_schedule.json
      transformers.get_scheduler's multiplier (the LambdaLR lambda) at every step 0..total for
      linear, cosine, constant, constant_with_warmup and several (warmup, total) pairs; and
      TrainingArguments.get_warmup_steps(total) for (warmup_steps, warmup_ratio) pairs.
  OUTDIR/grad_clip.json + grad_clip.safetensors
      torch.nn.utils.clip_grad_norm_ on fixed gradients (grad.<i>) for several max_norm values:
      the returned total norm (norm.<case>) and the gradients after clipping (clipped.<case>.<i>).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

ADAMW_SHAPES = [(4, 8), (16,), (3, 2, 5), (1,), (64, 33)]  # (64, 33): vector loops and a tail
ADAMW_LRS = [1e-3, 3e-3, 2e-3, 5e-4, 0.0, 1e-2, 7e-4]
ADAMW_CASES = {
    "defaults": dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "custom": dict(betas=(0.85, 0.95), eps=1e-6, weight_decay=0.1),
}


def adamw_fixtures(out):
    cases = []
    for case_index, (name, options) in enumerate(ADAMW_CASES.items()):
        g = torch.Generator().manual_seed(100 + case_index)
        params = [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ADAMW_SHAPES]
        tensors = {f"param.{i}.initial": p.detach().clone() for i, p in enumerate(params)}
        optimizer = torch.optim.AdamW(params, lr=ADAMW_LRS[0], foreach=False, **options)
        for step, lr in enumerate(ADAMW_LRS):
            for i, p in enumerate(params):
                # Gradients of very different scales across steps, with some exact zeros.
                grad = torch.randn(p.shape, generator=g) * (10.0 ** (step % 4 - 2))
                grad[torch.rand(p.shape, generator=g) < 0.1] = 0.0
                p.grad = grad
                tensors[f"grad.{i}.{step}"] = grad.clone()
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            for i, p in enumerate(params):
                tensors[f"param.{i}.{step}"] = p.detach().clone()
        save_file(tensors, os.path.join(out, f"adamw_{name}.safetensors"))
        cases.append({"name": name, "beta1": options["betas"][0], "beta2": options["betas"][1],
                      "eps": options["eps"], "weight_decay": options["weight_decay"], "lrs": ADAMW_LRS,
                      "parameter_count": len(params)})
    return {"cases": cases}


SCHEDULE_TYPES = ["linear", "cosine", "constant", "constant_with_warmup"]
# (warmup, total): no warmup, usual, warmup == total, one step, warmup longer than training.
SCHEDULE_PAIRS = [(0, 10), (3, 10), (5, 5), (0, 1), (1, 1), (2, 17), (10, 100), (7, 4)]
# (warmup_steps, warmup_ratio, total); --warmup_ratio is in [0, 1) (src/config/options.cpp).
WARMUP_CASES = [(0, 0.0, 100), (5, 0.0, 100), (5, 0.5, 100), (0, 0.1, 25), (0, 0.03, 1000), (0, 0.05, 7),
                (0, 0.33, 3), (0, 0.999, 12345), (0, 0.07, 100), (0, 0.15, 1), (120, 0.0, 100), (1, 0.0, 1)]


def lr_schedule_fixtures(out):
    from transformers import TrainingArguments, get_scheduler

    schedules = []
    for kind in SCHEDULE_TYPES:
        for warmup, total in SCHEDULE_PAIRS:
            optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
            scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total)
            multiplier = scheduler.lr_lambdas[0]
            schedules.append({"type": kind, "warmup": warmup, "total": total,
                              "multipliers": [float(multiplier(step)) for step in range(total + 1)]})
    warmups = []
    for steps, ratio, total in WARMUP_CASES:
        # transformers 5 has one argument: warmup_steps >= 1 is a count, < 1 a ratio of the total.
        # Ours keeps the 4.x pair (steps win when > 0); the same choice maps onto that argument.
        args = TrainingArguments(output_dir=out, report_to=[],
                                 warmup_steps=steps if steps > 0 else ratio)
        warmups.append({"warmup_steps": steps, "warmup_ratio": ratio, "total": total,
                        "expected": args.get_warmup_steps(total)})
    return {"schedules": schedules, "warmup_steps": warmups}


GRAD_SHAPES = [(10, 7), (33,), (2, 3, 4), (5, 1)]
# name -> max_norm; the gradients' total norm is about 9.8.
# 7.5: reciprocal() * max_norm and max_norm / x differ in the last bit there, so the test tells them apart.
CLIP_CASES = {"not_clipped": 1000.0, "clipped": 1.0, "clipped_7_5": 7.5, "barely_clipped": 9.0, "tiny": 1e-3,
              "disabled_zero": 0.0, "disabled_negative": -1.0}


def grad_clip_fixtures(out):
    g = torch.Generator().manual_seed(7)
    grads = [torch.randn(shape, generator=g) for shape in GRAD_SHAPES]
    grads[1] *= 1e-3  # very different magnitudes in one total
    tensors = {f"grad.{i}": grad.clone() for i, grad in enumerate(grads)}
    cases = []
    for name, max_norm in CLIP_CASES.items():
        params = [torch.nn.Parameter(torch.zeros(shape)) for shape in GRAD_SHAPES]
        params.append(torch.nn.Parameter(torch.zeros(3)))  # no gradient: left out of the norm
        for p, grad in zip(params, grads):
            p.grad = grad.clone()
        if max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            # HF Trainer does not clip when max_grad_norm <= 0, and neither do we (options.h); the
            # norm is still reported (torch itself would scale every gradient by 0 here).
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        assert params[-1].grad is None
        tensors[f"norm.{name}"] = norm.detach().clone()
        for i, p in enumerate(params[:-1]):
            tensors[f"clipped.{name}.{i}"] = p.grad.clone()
        cases.append({"name": name, "max_norm": max_norm,
                      "changed": not all(torch.equal(p.grad, grad) for p, grad in zip(params, grads))})
    save_file(tensors, os.path.join(out, "grad_clip.safetensors"))
    return {"parameter_count": len(GRAD_SHAPES), "cases": cases}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_train_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fixture in [("adamw", adamw_fixtures(out)), ("lr_schedule", lr_schedule_fixtures(out)),
                          ("grad_clip", grad_clip_fixtures(out))]:
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(fixture, f, indent=1)


if __name__ == "__main__":
    main()
