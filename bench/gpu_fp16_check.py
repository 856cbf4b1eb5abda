"""GPU fp16 training check: `finetune --dtype float16` (dynamic loss scaling, train/loss_scaler.h)
against HF Trainer's fp16=True recipe written out (tests/reference/fp16_reference_loop.py: fp16
base model, PEFT's fp32 adapters, autocast fp16, torch.amp.GradScaler), same samples, same
initial adapter (random non-zero A and B), and both against fp32 training that skips the same steps.

Three runs of ours, each matched by the reference:
  plain    HF's initial scale 2^16 for --steps steps, a checkpoint after every step.
  natural  resumed from plain's checkpoint-1 with its saved loss scale set to --forced_scale (as
           HF's resume loads scaler.pt; by default the smallest power of two for which the scaled
           loss's gradient of the fp16 logits alone exceeds fp16's 65504 twice over, so step 2
           overflows for certain), then the scale halves step by step until the gradients fit.
  forced   resumed from natural's checkpoint-2 with the scale set back to 2^16: exactly step 2 skipped.
Asserted (exit 1 when broken):
  - plain and forced: the skipped steps, the scale and growth tracker after every checkpointed step,
    and the learning rate of every step are the reference's (the schedule holds on a skipped step);
  - plain and forced: per-step losses and adapter updates (trained - initial) are as close to fp32
    training as the reference's own fp16 run is (ours-vs-fp32 <= 1.5 x reference-fp16-vs-fp32, plus
    one fp16 ulp, 2^-10, on the losses; the bound bench/gpu_train_parity.py puts on bf16);
  - a skipped step leaves the adapter bit for bit as it was, logs a non-finite gradient norm and
    does not stop the run; natural: step 2 is skipped on every side, and our scale halves on exactly
    the steps we skip (checkpoints' loss_scale and optimizer_steps).
Reported, not asserted: where natural's back-off ends. That step depends on which intermediate
tensors are fp16: under HF's autocast the LoRA matmuls and the adapters' weight gradients (sums
over all tokens) are fp16 and overflow first; finetune keeps the LoRA products at about fp32 (as
PEFT's expression without autocast, also reported as `reference_peft_fp16`).

One command (makes the random-init Llama-3.2-1B shape and data under --work, as bench.py does):
  python3 bench/gpu_fp16_check.py --finetune build/finetune --work /tmp/bench
Prints one JSON object (also written to --out/fp16_check.json when --out is given).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import fp16_reference_loop  # noqa: E402
import reference_loop  # noqa: E402
import shapes  # noqa: E402
from numerics import relative_error  # noqa: E402

SETTINGS = dict(batch_size=4, accumulation=2, lr=2e-4, warmup=2, scheduler="linear", max_grad_norm=1.0)
INIT_SCALE = 2.0 ** 16
FP16_MAX = 65504.0
FP16_ULP = 2.0 ** -10


def run_finetune(args, out, data, adapter, extra=()):
    s = SETTINGS
    cmd = [args.finetune, "--model_name", args.model, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
           "--max_steps", args.steps, "--per_device_train_batch_size", s["batch_size"],
           "--gradient_accumulation_steps", s["accumulation"], "--learning_rate", s["lr"],
           "--warmup_steps", s["warmup"], "--lr_scheduler_type", s["scheduler"], "--max_grad_norm", s["max_grad_norm"],
           "--weight_decay", 0.01, "--lora_dropout", 0.0, "--dtype", "float16", "--device", args.device,
           "--shuffle", "false", "--logging_steps", 1, "--save_steps", 1, "--max_seq_length", 2048,
           "--use_gradient_checkpointing", "true", *extra]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"finetune exited {proc.returncode} ({out})\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    checkpoints = {}
    for step in range(1, args.steps):
        path = os.path.join(out, f"checkpoint-{step}", "trainer_state.json")
        if os.path.exists(path):
            checkpoints[step] = json.load(open(path))["finetune"]
    adapter_state = load_file(os.path.join(out, "adapter_model.safetensors"))
    return {"metrics": lines, "checkpoints": checkpoints, "adapter": adapter_state}


def resume_with_scale(args, source, work_dir, data, adapter, scale, name):
    """Ours resumed from `source` (a checkpoint directory) whose saved loss scale is set to `scale`."""
    checkpoint = os.path.join(work_dir, name + "-start")
    shutil.rmtree(checkpoint, ignore_errors=True)
    shutil.copytree(source, checkpoint)
    state_path = os.path.join(checkpoint, "trainer_state.json")
    state = json.load(open(state_path))
    state["finetune"].update(loss_scale=scale, loss_scale_growth_tracker=0)
    with open(state_path, "w") as f:
        json.dump(state, f)
    out = os.path.join(work_dir, name)
    shutil.rmtree(out, ignore_errors=True)
    return run_finetune(args, out, data, adapter, ["--resume_from_checkpoint", checkpoint])


def reference(args, adapter, rows, fp16=True, autocast=True, **kwargs):
    losses, model, records = fp16_reference_loop.train(args.model, adapter, rows, steps=args.steps, device=args.device,
                                                       fp16=fp16, autocast=autocast, gradient_checkpointing=True,
                                                       **SETTINGS, **kwargs)
    state = {k: v.float().cpu() for k, v in reference_loop.lora_state(model).items()}
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"losses": losses, "records": records, "adapter": state}


def skipped_of(ours):
    return [m.get("grad_norm") is None or not math.isfinite(m["grad_norm"]) for m in ours["metrics"]]


def compare(name, ours, ref, fp32, initial, first_checkpoint, failures):
    """The exact checks and the accuracy bounds of one run; returns its JSON summary."""
    records = ref["records"]
    ours_skipped = skipped_of(ours)
    ref_skipped = [r["skipped"] for r in records]
    if ours_skipped != ref_skipped:
        failures.append(f"{name}: skipped steps {ours_skipped} vs reference {ref_skipped}")
    ours_lr = [m["lr"] for m in ours["metrics"]]
    ref_lr = [r["lr"] for r in records]
    if any(abs(a - b) > 1e-12 * max(abs(b), 1e-12) for a, b in zip(ours_lr, ref_lr)) or len(ours_lr) != len(ref_lr):
        failures.append(f"{name}: learning rates {ours_lr} vs reference {ref_lr}")
    scales = {}
    for step, state in sorted(ours["checkpoints"].items()):
        if step < first_checkpoint:
            continue
        want = (records[step - 1]["scale_after"], records[step - 1]["growth_tracker_after"])
        got = (state.get("loss_scale"), state.get("loss_scale_growth_tracker"))
        scales[step] = got
        if got != want:
            failures.append(f"{name}: after step {step} scale/tracker {got} vs reference {want}")

    def update(adapter_state):
        return torch.cat([(adapter_state[k].float() - initial[k].float()).flatten() for k in sorted(initial)])

    def loss_error(losses):
        return max(abs(a - b) / abs(b) for a, b in zip(losses, fp32["losses"]))

    ours_losses = [m["loss"] for m in ours["metrics"]]
    summary = {
        "skipped_steps": [i + 1 for i, s in enumerate(ours_skipped) if s],
        "reference_skipped_steps": [i + 1 for i, s in enumerate(ref_skipped) if s],
        "scale_after_step": {str(k): v[0] for k, v in scales.items()},
        "losses": {"ours": ours_losses, "reference_fp16": ref["losses"], "reference_fp32": fp32["losses"]},
        "loss_rel_error": {"ours_vs_fp32": loss_error(ours_losses),
                           "reference_fp16_vs_fp32": loss_error(ref["losses"])},
        "adapter_update_rel_error": {
            "ours_vs_fp32": relative_error(update(ours["adapter"]), update(fp32["adapter"])),
            "reference_fp16_vs_fp32": relative_error(update(ref["adapter"]), update(fp32["adapter"])),
            "ours_vs_reference_fp16": relative_error(update(ours["adapter"]), update(ref["adapter"]))},
    }
    loss = summary["loss_rel_error"]
    if loss["ours_vs_fp32"] > 1.5 * loss["reference_fp16_vs_fp32"] + FP16_ULP:
        failures.append(f"{name}: loss error vs fp32 {loss['ours_vs_fp32']:.3g}, reference fp16 "
                        f"{loss['reference_fp16_vs_fp32']:.3g}")
    upd = summary["adapter_update_rel_error"]
    if upd["ours_vs_fp32"] > 1.5 * upd["reference_fp16_vs_fp32"]:
        failures.append(f"{name}: adapter update error vs fp32 {upd['ours_vs_fp32']:.3g}, reference fp16 "
                        f"{upd['reference_fp16_vs_fp32']:.3g}")
    return summary


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--shape", default="llama-3.2-1b", choices=list(shapes.SHAPES))
    p.add_argument("--model", help="default: WORK/SHAPE (made if missing, as bench.py makes it)")
    p.add_argument("--data", help="default: WORK/SHAPE.jsonl (made if missing)")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--forced_scale", type=float, default=0,
                   help="0: the smallest power of two that overflows step 2 for certain (so the back-off is short)")
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script with a tiny --model")
    p.add_argument("--out", help="also write the JSON result here")
    args = p.parse_args()
    args.model = args.model or os.path.join(args.work, args.shape)
    args.data = args.data or os.path.join(args.work, f"{args.shape}.jsonl")
    os.makedirs(args.work, exist_ok=True)
    shapes.make_model(args.shape, args.model)
    if not os.path.exists(args.data):
        with open(args.data, "w") as f:
            for row in shapes.make_rows(4000, shapes.SHAPES[args.shape][2]["vocab_size"]):
                f.write(json.dumps(row) + "\n")
    work = os.path.join(args.work, "fp16_check-" + os.path.basename(args.model))
    rows, data, adapter, initial = reference_loop.parity_inputs(work, args.model, args.data, args.rows)
    # Step 2's certain overflow: the logits' gradient of the scaled loss reaches forced_scale / tokens
    # for a target token of probability ~0 (a random-init model gives every token ~1/vocab).
    per_step = SETTINGS["batch_size"] * SETTINGS["accumulation"]
    step2_tokens = sum(sum(t != -100 for t in r.get("labels", r["input_ids"])[1:]) for r in rows[per_step:2 * per_step])
    if args.forced_scale == 0:
        args.forced_scale = 2.0 ** math.ceil(math.log2(2 * FP16_MAX * step2_tokens))
    if args.forced_scale / step2_tokens < 2 * FP16_MAX:
        sys.exit(f"--forced_scale {args.forced_scale} does not overflow step 2 for certain ({step2_tokens} tokens)")

    failures = []
    plain_dir = os.path.join(work, "plain")
    shutil.rmtree(plain_dir, ignore_errors=True)
    ours_plain = run_finetune(args, plain_dir, data, adapter)
    ours_natural = resume_with_scale(args, os.path.join(plain_dir, "checkpoint-1"), work, data, adapter,
                                     args.forced_scale, "natural")
    ours_forced = resume_with_scale(args, os.path.join(work, "natural", "checkpoint-2"), work, data, adapter,
                                    INIT_SCALE, "forced")

    ref_plain = reference(args, adapter, rows)
    ref_natural = reference(args, adapter, rows, scale_after_step={1: (args.forced_scale, 0)})
    peft_natural = reference(args, adapter, rows, autocast=False, scale_after_step={1: (args.forced_scale, 0)})
    ref_forced = reference(args, adapter, rows, scale_after_step={1: (args.forced_scale, 0), 2: (INIT_SCALE, 0)})

    def fp32_like(ref):
        return reference(args, adapter, rows, fp16=False,
                         skip_steps={i + 1 for i, r in enumerate(ref["records"]) if r["skipped"]})

    result = {"model": os.path.basename(args.model), "steps": args.steps, "forced_scale": args.forced_scale,
              "settings": SETTINGS}
    result["plain"] = compare("plain", ours_plain, ref_plain, fp32_like(ref_plain), initial, 1, failures)
    result["forced"] = compare("forced", ours_forced, ref_forced, fp32_like(ref_forced), initial, 3, failures)

    # A skipped step changes nothing in the adapter.
    before = load_file(os.path.join(plain_dir, "checkpoint-1", "adapter_model.safetensors"))
    after = load_file(os.path.join(work, "natural", "checkpoint-2", "adapter_model.safetensors"))
    if any(not torch.equal(before[k], after[k]) for k in before):
        failures.append("natural: the skipped step 2 changed the adapter")
    # natural: step 2 skipped everywhere; our scale halves exactly on our skipped steps.
    natural_skipped = skipped_of(ours_natural)
    sides = {"ours": natural_skipped, "reference_fp16": [r["skipped"] for r in ref_natural["records"]],
             "reference_peft_fp16": [r["skipped"] for r in peft_natural["records"]]}
    for side, skipped in sides.items():
        if not skipped[1]:
            failures.append(f"natural: step 2 not skipped by {side}")
    scale, steps_taken = args.forced_scale, 1
    for step in range(2, args.steps):
        state = ours_natural["checkpoints"][step]
        scale = scale * 0.5 if natural_skipped[step - 1] else scale
        steps_taken += not natural_skipped[step - 1]
        if state.get("loss_scale") != scale or state["optimizer_steps"] != steps_taken:
            failures.append(f"natural: after step {step} scale {state.get('loss_scale')} / optimizer steps "
                            f"{state['optimizer_steps']}, expected {scale} / {steps_taken} from the skipped steps")
    final_scale = scale * 0.5 if natural_skipped[-1] else scale  # the last step writes no checkpoint
    result["natural"] = {
        "skipped_steps": {side: [i + 1 for i, s in enumerate(skipped) if s] for side, skipped in sides.items()},
        "final_scale": {"ours": final_scale, "reference_fp16": ref_natural["records"][-1]["scale_after"],
                        "reference_peft_fp16": peft_natural["records"][-1]["scale_after"]},
        "losses": {"ours": [m["loss"] for m in ours_natural["metrics"]], "reference_fp16": ref_natural["losses"]},
    }
    result["failures"] = failures
    result["pass"] = not failures
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "fp16_check.json"), "w") as f:
            f.write(text + "\n")
    print("PASS" if result["pass"] else "FAIL: " + "; ".join(failures))
    sys.exit(0 if result["pass"] else 1)


if __name__ == "__main__":
    main()
