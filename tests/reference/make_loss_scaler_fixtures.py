#!/usr/bin/env python3
"""Reference fixtures for fp16 dynamic loss scaling: torch.amp.GradScaler("cpu") itself, driven the
way HF Trainer with fp16=True drives it through accelerate (per optimizer step: unscale_ before
clipping, then scaler.step(optimizer), then scaler.update()).

Usage: make_loss_scaler_fixtures.py OUTDIR

  OUTDIR/loss_scaler.json
      {"defaults": GradScaler's constructor defaults (HF Trainer passes none),
       "cases": [{name, init_scale, growth_factor, backoff_factor, growth_interval, parameter_count,
                  steps: [{skipped, state_dict}]}]}
      `skipped`: whether GradScaler left optimizer.step() out; `state_dict`: scaler.state_dict()
      after update() (the "scale" and "_growth_tracker" HF's scaler.pt holds).
  OUTDIR/<case>.safetensors
      scale.<s>           the fp32 scale the step's loss was multiplied by (before update)
      scaled.<s>.<i>      parameter i's gradient as backward left it (true gradient x scale; some
                          steps carry inf / -inf / NaN, or a finite gradient that overflows when scaled)
      unscaled.<s>.<i>    the same after scaler.unscale_
      found_inf.<s>       the fp32 flag unscale_ set (0 or 1)
      scale_after.<s>, growth_tracker_after.<s>   the scale (fp32) and tracker (int32) after update()
      Parameter 0 is bf16 (GradScaler unscales it in its own dtype group); one parameter without a
      gradient is part of the optimizer but has no tensors here (GradScaler skips it).
"""
import inspect
import json
import os
import sys

import torch
from safetensors.torch import save_file

SHAPES = [(5,), (4, 8), (16,), (3, 2, 5)]
DTYPES = [torch.bfloat16, torch.float32, torch.float32, torch.float32]

# name -> scaler settings, steps, and per step the damage done to the gradients (step -> kind).
CASES = {
    # HF's settings except a growth interval of 3, so growth and backoff both happen in a few steps.
    "hf_defaults_interval_3": dict(
        init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=3, steps=15,
        damage={1: "inf", 5: "nan", 6: "-inf", 11: "overflow", 12: "inf_bf16"}),
    # A scale that is no power of two (the fp64 reciprocal and the unscale multiply are inexact),
    # other factors and interval.
    "odd_scale": dict(
        init_scale=3000.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2, steps=9,
        damage={3: "nan", 4: "overflow"}),
    # Growth that would reach infinity keeps the scale (and still resets the tracker).
    "growth_saturates": dict(
        init_scale=2.0 ** 127, growth_factor=2.0, backoff_factor=0.5, growth_interval=1, steps=3, damage={},
        magnitude=1e-9),
}


def true_gradients(g, step, magnitude):
    """Gradients of very different magnitudes per step and parameter, some exact zeros."""
    grads = []
    for i, (shape, dtype) in enumerate(zip(SHAPES, DTYPES)):
        grad = torch.randn(shape, generator=g) * (magnitude * 10.0 ** ((step + i) % 5 - 3))
        grad[torch.rand(shape, generator=g) < 0.15] = 0.0
        grads.append(grad.to(dtype))
    return grads


def damage_gradients(scaled, kind, scale):
    if kind == "inf":
        scaled[2].view(-1)[3] = float("inf")
    elif kind == "-inf":
        scaled[1].view(-1)[7] = float("-inf")
    elif kind == "nan":
        scaled[3].view(-1)[0] = float("nan")
    elif kind == "inf_bf16":
        scaled[0].view(-1)[1] = float("inf")
    elif kind == "overflow":  # a finite true gradient the scale pushes past fp32's range
        scaled[1].view(-1)[0] = torch.tensor(3e38 / scale * 8.0) * torch.tensor(scale)
        assert torch.isinf(scaled[1].view(-1)[0])


def run_case(name, settings, out):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    params = [torch.nn.Parameter(torch.zeros(shape, dtype=dtype)) for shape, dtype in zip(SHAPES, DTYPES)]
    without_grad = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD(params + [without_grad], lr=0.0)
    stepped = []
    original_step = optimizer.step

    def recording_step(*args, **kwargs):
        stepped[-1] = True
        return original_step(*args, **kwargs)

    optimizer.step = recording_step
    scaler = torch.amp.GradScaler("cpu", init_scale=settings["init_scale"], growth_factor=settings["growth_factor"],
                                  backoff_factor=settings["backoff_factor"],
                                  growth_interval=settings["growth_interval"])
    scaler.scale(torch.zeros(()))  # creates the scale and tracker tensors, as the first scale(loss) does
    tensors, steps = {}, []
    for step in range(settings["steps"]):
        scale = scaler._scale.clone()
        tensors[f"scale.{step}"] = scale
        scaled = [grad * scale.to(grad.dtype) for grad in true_gradients(g, step, settings.get("magnitude", 1.0))]
        damage_gradients(scaled, settings["damage"].get(step), float(scale))
        for i, (p, grad) in enumerate(zip(params, scaled)):
            p.grad = grad.clone()
            tensors[f"scaled.{step}.{i}"] = grad
        without_grad.grad = None
        stepped.append(False)
        scaler.unscale_(optimizer)  # HF: accelerator.clip_grad_norm_ unscales before clipping
        found_inf = scaler._found_inf_per_device(optimizer)[torch.device("cpu")]
        tensors[f"found_inf.{step}"] = found_inf.clone()
        for i, p in enumerate(params):
            tensors[f"unscaled.{step}.{i}"] = p.grad.clone()
        scaler.step(optimizer)
        scaler.update()
        tensors[f"scale_after.{step}"] = scaler._scale.clone()
        tensors[f"growth_tracker_after.{step}"] = scaler._growth_tracker.clone()
        assert stepped[-1] == (float(found_inf) == 0.0)
        steps.append({"skipped": not stepped[-1], "state_dict": scaler.state_dict()})
        optimizer.zero_grad()
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, f"{name}.safetensors"))
    return {"name": name, "parameter_count": len(params), "steps": steps,
            **{k: settings[k] for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")}}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = [run_case(name, settings, out) for name, settings in CASES.items()]
    signature = inspect.signature(torch.amp.GradScaler.__init__).parameters
    defaults = {k: signature[k].default for k in ("init_scale", "growth_factor", "backoff_factor", "growth_interval")}
    with open(os.path.join(out, "loss_scaler.json"), "w") as f:
        json.dump({"torch": torch.__version__, "defaults": defaults, "cases": cases}, f, indent=1)
    for case in cases:
        skipped = [i for i, s in enumerate(case["steps"]) if s["skipped"]]
        scales = [s["state_dict"]["scale"] for s in case["steps"]]
        print(f"{case['name']}: skipped steps {skipped}, scales {scales}")


if __name__ == "__main__":
    main()
