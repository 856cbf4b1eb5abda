"""fp16 training with dynamic loss scaling (train/loss_scaler.h) on the CPU, step for step against the
transformers + PEFT loop with torch.amp.GradScaler (fp16_reference_loop.py): which steps overflow
and are skipped, the scale after every step, the learning rate (the schedule holds on a skipped
step), the losses and the adapter.

The reference here computes what finetune computes: the fp16 model with PEFT's fp32 adapters as
PEFT's expression runs them (no autocast). HF Trainer's fp16=True also autocasts the LoRA matmuls
to fp16, which puts the adapters' weight gradients (sums over all tokens) in fp16: they overflow at
a lower scale (with autocast, this file's forced run also skips step 4). Which scale first fits
depends on which tensors are fp16, so the skipped steps are compared exactly with the loop that
computes the same tensors; bench/gpu_fp16_check.py holds the accuracy against HF's autocast recipe.

Overflow is forced the way a resumed run meets a large scale: checkpoint-1's saved loss scale is
set to 2^21 and the run resumes from it (as HF's resume loads scaler.pt). The tiny model's steps
overflow above 2^19.2 .. 2^20.4 (measured by bisection with the reference), so steps 2 and 3 (at
2^21, 2^20) overflow with margins of 1.7x and more and step 4 (at 2^19) fits by 1.7x.
"""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import run_finetune
from ddp_launch import check_ok, run_launched
from lora_parity import make_llama_run
from numerics import relative_error
import fp16_reference_loop
import reference_loop

STEPS = 8
FORCED_SCALE = 2.0 ** 21
SETTINGS = dict(batch_size=2, accumulation=2, lr=5e-3, warmup=3, scheduler="linear", max_grad_norm=0.5)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp16")
    return (root, *make_llama_run(root))


def finetune_args(base, adapter, data, out, dtype="float16", steps=STEPS):
    s = SETTINGS
    return ["--model_name", base, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
            "--max_steps", steps, "--per_device_train_batch_size", s["batch_size"],
            "--gradient_accumulation_steps", s["accumulation"], "--learning_rate", s["lr"],
            "--warmup_steps", s["warmup"], "--lr_scheduler_type", s["scheduler"], "--max_grad_norm", s["max_grad_norm"],
            "--weight_decay", 0.01, "--lora_dropout", 0.0, "--dtype", dtype, "--device", "cpu",
            "--shuffle", "false", "--logging_steps", 1, "--save_steps", 1, "--use_gradient_checkpointing", "true"]


def with_loss_scale(checkpoint, dest, scale=FORCED_SCALE):
    """A copy of `checkpoint` whose saved loss scale is `scale` (growth tracker 0)."""
    shutil.copytree(checkpoint, dest)
    state = json.load(open(dest / "trainer_state.json"))
    state["finetune"].update(loss_scale=scale, loss_scale_growth_tracker=0)
    (dest / "trainer_state.json").write_text(json.dumps(state))
    return dest


def metrics(out):
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def checkpoint_states(out, first=1):
    """trainer_state.json's finetune section of checkpoint-<first> .. checkpoint-<STEPS - 1>."""
    return [json.load(open(out / f"checkpoint-{step}" / "trainer_state.json"))["finetune"]
            for step in range(first, STEPS)]


def reference(setup, **kwargs):
    """(losses, adapter, per-step records) of the fp16 reference loop, and of the fp32 loop that
    skips the same steps (the accuracy baseline)."""
    root, base, adapter, rows, data = setup
    runs = []
    for fp16 in (True, False):
        skip = {i + 1 for i, r in enumerate(runs[0][2]) if r["skipped"]} if runs else ()
        losses, model, records = fp16_reference_loop.train(
            base, adapter, rows, steps=STEPS, fp16=fp16, autocast=False, gradient_checkpointing=True,
            skip_steps=skip, **SETTINGS, **(kwargs if fp16 else {}))
        runs.append((losses, reference_loop.lora_state(model), records))
    return runs


def check_against_reference(setup, out, refs, first_checkpoint=1):
    """The skipped steps, learning rates, scales and optimizer step counts exactly as the fp16
    reference's; losses and adapter updates as close to fp32 training as the reference's (1.5x its
    error, as bench/gpu_train_parity.py bounds bf16). Returns which steps were skipped."""
    (ref_losses, ref_adapter, records), (fp32_losses, fp32_adapter, _) = refs
    lines = metrics(out)
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    # Skipped steps: a non-finite gradient norm (metrics.jsonl writes null; HF logs inf / NaN).
    ours_skipped = [m["grad_norm"] is None for m in lines]
    assert ours_skipped == [r["skipped"] for r in records]
    for m, r in zip(lines, records):
        assert m["lr"] == pytest.approx(r["lr"], rel=1e-12, abs=1e-15), (m["step"], m["lr"], r["lr"])
    for step, state in enumerate(checkpoint_states(out, first_checkpoint), first_checkpoint):
        record = records[step - 1]
        assert state["loss_scale"] == record["scale_after"], step
        assert state["loss_scale_growth_tracker"] == record["growth_tracker_after"], step
        assert state["optimizer_steps"] == sum(not r["skipped"] for r in records[:step]), step

    def loss_error(losses):
        # The root mean square over the steps of each step's relative error: the largest of them
        # is one step's rounding luck (on an AMD EPYC, ours' worst step was 1.17e-5 against the
        # reference's 7.0e-6 at that step, while the RMS over the 8 steps was 4.46e-6 against 4.47e-6).
        errors = [(abs(a - b) / abs(b)) ** 2 for a, b in zip(losses, fp32_losses)]
        return (sum(errors) / len(errors)) ** 0.5

    initial = load_file(str(setup[2] / "adapter_model.safetensors"))
    ours_adapter = load_file(str(out / "adapter_model.safetensors"))
    assert set(ours_adapter) == set(initial) == set(ref_adapter)

    def update_error(adapter):
        def update(a):
            return torch.cat([(a[k].float() - initial[k].float()).flatten() for k in sorted(initial)])
        return relative_error(update(adapter), update(fp32_adapter))

    ours_loss, ref_loss = loss_error([m["loss"] for m in lines]), loss_error(ref_losses)
    ours_update, ref_update = update_error(ours_adapter), update_error(ref_adapter)
    print(f"vs fp32: loss {ours_loss:.3g} (reference fp16 {ref_loss:.3g}), "
          f"adapter update {ours_update:.3g} (reference fp16 {ref_update:.3g})")
    assert ours_loss <= 1.5 * ref_loss
    assert ours_update <= 1.5 * ref_update
    return ours_skipped


@pytest.fixture(scope="module")
def plain(setup):
    root, base, adapter, rows, data = setup
    out = root / "plain"
    run_finetune(finetune_args(base, adapter, data, out))
    return out


def test_default_scale_trains_like_the_reference(setup, plain):
    skipped = check_against_reference(setup, plain, reference(setup))
    assert not any(skipped)  # 2^16 leaves the tiny model's gradients finite
    states = checkpoint_states(plain)
    assert [s["loss_scale"] for s in states] == [65536.0] * (STEPS - 1)
    assert [s["loss_scale_growth_tracker"] for s in states] == list(range(1, STEPS))


@pytest.fixture(scope="module")
def forced(setup, plain):
    root, base, adapter, rows, data = setup
    out = root / "forced"
    start = with_loss_scale(plain / "checkpoint-1", root / "forced-checkpoint-1")
    run_finetune(finetune_args(base, adapter, data, out) + ["--resume_from_checkpoint", start])
    return out


def test_overflowed_steps_are_skipped_and_the_scale_backs_off(setup, plain, forced):
    refs = reference(setup, scale_after_step={1: (FORCED_SCALE, 0)})
    skipped = check_against_reference(setup, forced, refs, first_checkpoint=2)
    assert skipped == [False, True, True] + [False] * (STEPS - 3)
    states = checkpoint_states(forced, 2)
    assert [s["loss_scale"] for s in states[:3]] == [FORCED_SCALE / 2, FORCED_SCALE / 4, FORCED_SCALE / 4]
    # The skipped steps left the adapter as step 1 made it, bit for bit, and held the schedule.
    after_step_1 = load_file(str(plain / "checkpoint-1" / "adapter_model.safetensors"))
    after_step_3 = load_file(str(forced / "checkpoint-3" / "adapter_model.safetensors"))
    for name, tensor in after_step_1.items():
        assert (after_step_3[name] == tensor).all(), name
    lrs = [m["lr"] for m in metrics(forced)]
    assert lrs[1] == lrs[2] == lrs[3] > lrs[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_only_fp16_checkpoints_have_a_loss_scale(setup, tmp_path, dtype):
    root, base, adapter, rows, data = setup
    out = tmp_path / dtype
    run_finetune(finetune_args(base, adapter, data, out, dtype=dtype, steps=2))
    assert "loss_scale" not in json.load(open(out / "checkpoint-1" / "trainer_state.json"))["finetune"]


def test_two_ranks_skip_the_same_steps_as_one(setup, forced, tmp_path):
    """DDP sums the scaled gradients before they are unscaled, so every rank sees the same overflow
    and skips with the others: parameters are compared across ranks after every step, and the run
    skips what one process with twice the batch skips."""
    root, base, adapter, rows, data = setup
    ddp_args = ["--per_device_train_batch_size", SETTINGS["batch_size"] // 2, "--ddp_backend", "gloo",
                "--ddp_timeout", 60, "--ddp_check_consistency_steps", 1]
    first = tmp_path / "first"
    check_ok(run_launched("torchrun", 2, finetune_args(base, adapter, data, first, steps=2) + ddp_args),
             "2 ranks, plain")
    start = with_loss_scale(first / "checkpoint-1", tmp_path / "checkpoint-1")
    assert json.load(open(start / "trainer_state.json"))["finetune"]["run"]["world_size"] == 2
    out = tmp_path / "out"
    check_ok(run_launched("torchrun", 2, finetune_args(base, adapter, data, out) + ddp_args +
                          ["--resume_from_checkpoint", start]), "2 ranks, forced scale")
    # The first epoch's 6 full steps: its 7th step ends the 27 rows, and 2 ranks share out that odd
    # tail differently from one process.
    ranks, one = metrics(out)[:6], metrics(forced)[:6]
    assert [m["grad_norm"] is None for m in ranks] == [m["grad_norm"] is None for m in one]
    assert sum(m["grad_norm"] is None for m in ranks) == 2
    assert ([s["loss_scale"] for s in checkpoint_states(out, 2)][:5] ==
            [s["loss_scale"] for s in checkpoint_states(forced, 2)][:5])
    assert [m["lr"] for m in ranks] == [m["lr"] for m in one]
    worst = max(abs(got["loss"] - want["loss"]) / abs(want["loss"]) for got, want in zip(ranks, one))
    print(f"2 ranks vs 1 process, fp16 losses: {worst:.3g} (relative)")
    assert worst <= 1e-4  # fp16 rows batched 1 vs 2 at a time round differently
