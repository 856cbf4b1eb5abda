#!/usr/bin/env python3
"""Reference fixtures for the train module's optimizer, learning-rate schedules and clipping.

Usage: make_train_fixtures.py OUTDIR

  OUTDIR/adamw.json + adamw_<case>.safetensors
      torch.optim.AdamW (single-tensor path, the CPU default) run on fixed gradients: several
      parameters of different shapes, several steps with a different lr each, weight decay on.
      Tensors: param.<i>.initial, grad.<i>.<step>, param.<i>.<step> (after that step).
  OUTDIR/lr_schedule.json
      transformers.get_scheduler's multiplier (the LambdaLR lambda) at every step 0..total for
      linear, cosine, constant, constant_with_warmup and several (warmup, total) pairs; the same
      for every other offered type (cosine_with_restarts, polynomial, inverse_sqrt,
      cosine_with_min_lr, cosine_warmup_with_min_lr, warmup_stable_decay) with and without
      scheduler_specific_kwargs (--lr_scheduler_kwargs) and the optimizer's lr; and
      TrainingArguments.get_warmup_steps(total) for (warmup_steps, warmup_ratio) pairs.
  OUTDIR/optimizers.json + optimizer_<name>.safetensors
      The other --optim updates on fixed gradients, as HF's Trainer builds them: torch.optim.SGD
      (lr, weight_decay; single-tensor path), transformers' Adafactor (scale_parameter=False,
      relative_step=False, weight_decay) and bitsandbytes' PagedAdamW32bit (--optim
      paged_adamw_32bit, on the CPU its non-paged 32-bit path). Tensors as adamw_<case>.
  OUTDIR/checkpoint_policy.json
      HF's own timing of evaluations and saves, best metric and early stopping: TrainingArguments,
      DefaultFlowCallback, EarlyStoppingCallback and Trainer._determine_best_metric driven by the
      order of Trainer._inner_training_loop (on_step_end, then log/evaluate/save; on_epoch_end at
      an epoch's end or when training stops) over given eval losses: the steps evaluated and
      saved, the step training stopped after, the best metric and its step.
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


def scaled_gradient(g):
    """Gradients of very different scales across steps, with some exact zeros."""
    def draw(step, i, p):
        grad = torch.randn(p.shape, generator=g) * (10.0 ** (step % 4 - 2))
        grad[torch.rand(p.shape, generator=g) < 0.1] = 0.0
        return grad
    return draw


def optimizer_trajectory(params, optimizer, lrs, gradient, after_step=lambda step, tensors: None):
    """`optimizer` stepped once per learning rate of `lrs` on the gradients `gradient(step, i, p)`
    draws: the parameters' initial values, each step's gradients and the parameters after each
    step, by name (and what `after_step` adds)."""
    tensors = {f"param.{i}.initial": p.detach().clone() for i, p in enumerate(params)}
    for step, lr in enumerate(lrs):
        for i, p in enumerate(params):
            p.grad = gradient(step, i, p)
            tensors[f"grad.{i}.{step}"] = p.grad.clone()
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        for i, p in enumerate(params):
            tensors[f"param.{i}.{step}"] = p.detach().clone()
        after_step(step, tensors)
    return tensors


def adamw_fixtures(out):
    cases = []
    for case_index, (name, options) in enumerate(ADAMW_CASES.items()):
        g = torch.Generator().manual_seed(100 + case_index)
        params = [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ADAMW_SHAPES]
        optimizer = torch.optim.AdamW(params, lr=ADAMW_LRS[0], foreach=False, **options)
        tensors = optimizer_trajectory(params, optimizer, ADAMW_LRS, scaled_gradient(g))
        save_file(tensors, os.path.join(out, f"adamw_{name}.safetensors"))
        cases.append({"name": name, "beta1": options["betas"][0], "beta2": options["betas"][1],
                      "eps": options["eps"], "weight_decay": options["weight_decay"], "lrs": ADAMW_LRS,
                      "parameter_count": len(params)})
    return {"cases": cases}


SCHEDULE_TYPES = ["linear", "cosine", "constant", "constant_with_warmup"]
# (warmup, total): no warmup, usual, warmup == total, one step, warmup longer than training.
SCHEDULE_PAIRS = [(0, 10), (3, 10), (5, 5), (0, 1), (1, 1), (2, 17), (10, 100), (7, 4)]
# The other types, each with the kwargs cases its function takes ({} = its defaults).
KWARGS_SCHEDULES = {
    "cosine": [{"num_cycles": 1.5}],
    "cosine_with_restarts": [{}, {"num_cycles": 3}, {"num_cycles": 2.5}],
    "polynomial": [{}, {"lr_end": 1e-5, "power": 2.0}, {"power": 0.5}],
    "inverse_sqrt": [{}, {"timescale": 7}],
    "cosine_with_min_lr": [{"min_lr_rate": 0.1}, {"min_lr": 1e-5}, {"min_lr_rate": 0.05, "num_cycles": 1.0}],
    "cosine_warmup_with_min_lr": [{"min_lr_rate": 0.1}, {"min_lr": 2e-5, "warmup_lr_rate": 0.25}],
    "warmup_stable_decay": [{"num_decay_steps": 4}, {"num_decay_steps": 3, "num_stable_steps": 2},
                            {"num_decay_steps": 5, "warmup_type": "cosine", "decay_type": "1-sqrt",
                             "min_lr_ratio": 0.1},
                            {"num_decay_steps": 6, "warmup_type": "1-sqrt", "decay_type": "linear",
                             "num_cycles": 1.0}],
}
KWARGS_PAIRS = [(0, 10), (3, 10), (5, 5), (2, 17), (1, 1), (10, 100)]
SCHEDULE_LRS = [2e-4, 3e-3]
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
    for kind, kwargs_cases in KWARGS_SCHEDULES.items():
        for kwargs in kwargs_cases:
            for lr in SCHEDULE_LRS:
                for warmup, total in KWARGS_PAIRS:
                    if kind == "polynomial" and warmup == total:
                        continue  # Python divides by zero at step == total there
                    if kind == "warmup_stable_decay" and kwargs.get("num_decay_steps", 0) > total:
                        continue
                    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
                    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=total,
                                              scheduler_specific_kwargs=dict(kwargs))
                    multiplier = scheduler.lr_lambdas[0]
                    schedules.append({"type": kind, "warmup": warmup, "total": total, "lr": lr, "kwargs": kwargs,
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


OPTIMIZER_SHAPES = [(4, 8), (16,), (3, 2, 5), (1,), (64, 33)]
OPTIMIZER_LRS = [1e-3, 3e-3, 2e-3, 5e-4, 0.0, 1e-2, 7e-4]


def make_reference_optimizer(name, params, weight_decay):
    if name == "sgd":
        return torch.optim.SGD(params, lr=OPTIMIZER_LRS[0], weight_decay=weight_decay, foreach=False)
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=OPTIMIZER_LRS[0], scale_parameter=False, relative_step=False,
                         weight_decay=weight_decay)
    import warnings
    import bitsandbytes as bnb
    with warnings.catch_warnings():  # "Paged optimizers are not supported on CPU": its 32-bit path runs
        warnings.simplefilter("ignore")
        return bnb.optim.PagedAdamW32bit(params, lr=OPTIMIZER_LRS[0], betas=(0.9, 0.999), eps=1e-8,
                                         weight_decay=weight_decay)


def optimizer_fixtures(out):
    cases = []
    for case_index, (name, weight_decay) in enumerate([("sgd", 0.0), ("sgd", 0.1), ("adafactor", 0.0),
                                                       ("adafactor", 0.01), ("paged_adamw_32bit", 0.01)]):
        g = torch.Generator().manual_seed(200 + case_index)
        params = [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in OPTIMIZER_SHAPES]
        optimizer = make_reference_optimizer(name, params, weight_decay)
        tensors = optimizer_trajectory(params, optimizer, OPTIMIZER_LRS, scaled_gradient(g))
        file = f"optimizer_{name}_{case_index}.safetensors"
        save_file(tensors, os.path.join(out, file))
        cases.append({"optim": name, "weight_decay": weight_decay, "lrs": OPTIMIZER_LRS, "file": file,
                      "parameter_count": len(params)})
    return {"cases": cases}


# (eval_strategy, save_strategy, eval_steps, save_steps, steps_per_epoch, max_steps, patience,
#  threshold, greater_is_better, eval losses in evaluation order)
POLICY_CASES = [
    ("steps", "steps", 2, 4, 5, 12, 0, 0.0, False, [3.0, 2.5, 2.7, 2.4, 2.6, 2.2]),
    ("steps", "steps", 5, 5, 4, 13, 0, 0.0, False, [2.0, 1.5, 1.7]),
    ("steps", "steps", 1, 1, 10, 10, 2, 0.0, False, [3.0, 2.0, 2.1, 1.9, 2.0, 2.05, 1.8]),
    ("steps", "steps", 2, 2, 10, 20, 2, 0.15, False, [3.0, 2.9, 2.5, 2.45, 2.44, 2.0, 1.0]),
    ("steps", "steps", 1, 3, 10, 9, 3, 0.0, True, [0.5, 0.6, 0.55, 0.6, 0.59, 0.58, 0.57]),
    ("epoch", "epoch", 0, 0, 3, 10, 0, 0.0, False, [2.0, 1.8, 1.9, 1.7]),
    ("epoch", "epoch", 0, 0, 4, 20, 1, 0.0, False, [2.0, 1.8, 1.9, 1.7, 1.6]),
    ("epoch", "steps", 0, 3, 4, 10, 0, 0.0, False, [2.0, 1.9, 1.8]),
    ("no", "epoch", 0, 0, 3, 7, 0, 0.0, False, []),
    ("steps", "no", 3, 0, 5, 10, 0, 0.0, False, [2.0, 1.0, 1.5, 0.5]),
]


def policy_fixtures(out):
    import types
    import numpy as np  # noqa: F401  (EarlyStoppingCallback compares with numpy)
    from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import DefaultFlowCallback, EarlyStoppingCallback

    cases = []
    for (eval_strategy, save_strategy, eval_steps, save_steps, steps_per_epoch, max_steps, patience, threshold,
         greater, losses) in POLICY_CASES:
        kwargs = dict(output_dir=out, report_to=[], eval_strategy=eval_strategy, save_strategy=save_strategy,
                      max_steps=max_steps, metric_for_best_model="eval_loss", greater_is_better=greater)
        if eval_steps:
            kwargs["eval_steps"] = eval_steps
        if save_steps:
            kwargs["save_steps"] = save_steps
        args = TrainingArguments(**kwargs)
        state = TrainerState()
        state.max_steps = max_steps
        state.eval_steps = args.eval_steps
        state.save_steps = args.save_steps
        state.logging_steps = 1
        control = TrainerControl()
        flow = DefaultFlowCallback()
        stopper = EarlyStoppingCallback(patience, threshold) if patience else None
        trainer = types.SimpleNamespace(args=args, state=state)
        events = []
        remaining = list(losses)

        def maybe_evaluate_and_save():
            nonlocal control
            if control.should_evaluate:
                control.should_evaluate = False
                metrics = {"eval_loss": remaining.pop(0)}
                events.append(["evaluate", state.global_step])
                if stopper:
                    stopper.on_evaluate(args, state, control, metrics)
                Trainer._determine_best_metric(trainer, metrics, None)
            if control.should_save:
                control.should_save = False
                events.append(["save", state.global_step])

        epochs = -(-max_steps // steps_per_epoch)
        for epoch in range(epochs):
            for _ in range(steps_per_epoch):
                state.global_step += 1
                state.epoch = state.global_step / steps_per_epoch
                control = flow.on_step_end(args, state, control)
                maybe_evaluate_and_save()
                if control.should_training_stop:
                    break
            control = flow.on_epoch_end(args, state, control)
            maybe_evaluate_and_save()
            if control.should_training_stop:
                break
        cases.append({"eval_strategy": eval_strategy, "save_strategy": save_strategy, "eval_steps": eval_steps,
                      "save_steps": save_steps, "steps_per_epoch": steps_per_epoch, "max_steps": max_steps,
                      "patience": patience, "threshold": threshold, "greater_is_better": greater,
                      "losses": losses, "events": events, "last_step": state.global_step,
                      "best_metric": state.best_metric, "best_step": state.best_global_step})
    return {"cases": cases}


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
                          ("optimizers", optimizer_fixtures(out)), ("checkpoint_policy", policy_fixtures(out)),
                          ("grad_clip", grad_clip_fixtures(out))]:
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(fixture, f, indent=1)


if __name__ == "__main__":
    main()
