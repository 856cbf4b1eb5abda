"""Runs that survive: exact resume after kill -9 (one process and 2 ranks under mpirun; and with
--optim adamw_8bit), atomic checkpoints under repeated kills, --output_dir reuse rules, divergence caught, seeded dropout, and a
failed final save that keeps the last checkpoint."""
import json
import os
import random
import shutil
import signal
import subprocess
import time

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from conftest import finetune_bin
from ddp_launch import check_ok, clean_env, free_port, launcher_command, run_launched, wait_for
import tiny_models

# LoRA dropout on (the generators must be restored), logging windows of 3 steps that saves cut
# (the pending window must be restored), gradient accumulation, warmup + linear decay.
STEPS = 12


def train_args(setup, out, extra=()):
    root, base = setup
    return ["--model_name", base, "--dataset", root / "train.jsonl", "--output_dir", out,
            "--max_steps", STEPS, "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 2,
            "--learning_rate", 5e-3, "--warmup_steps", 2, "--lr_scheduler_type", "linear", "--r", 4,
            "--lora_dropout", 0.1, "--logging_steps", 3, "--save_steps", 1, "--dtype", "float32",
            "--device", "cpu", "--ddp_backend", "gloo", "--ddp_timeout", 60,
            "--use_gradient_checkpointing", "false"] + list(extra)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    tiny_models.make_model("llama", root / "base")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(24, seed=3, completion_only=True))
    return root, root / "base"


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def adapter(out):
    return load_file(str(out / "adapter_model.safetensors"))


def processes_of(out):
    """pids of the finetune processes writing to `out` (by their command line)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"finetune") and str(out).encode() in argv:
            pids.append(int(entry))
    return pids


def kill_run(out, job=None):
    """SIGKILL to every finetune process writing to `out`, and to `job` itself: killed right after
    its start, the child may not have exec'd finetune yet, so its command line does not show `out`."""
    for pid in processes_of(out) + ([job.pid] if job is not None else []):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start(launcher, nproc, args):
    port = free_port()
    env = clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    command = launcher_command(launcher, nproc, port, [finetune_bin()]) + [str(a) for a in args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def assert_same_run(ours, reference):
    got, want = metrics(ours), metrics(reference)
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for key in ("loss", "grad_norm", "lr", "tokens"):
        assert [m[key] for m in got] == [m[key] for m in want], key  # bit for bit
    a, b = adapter(ours), adapter(reference)
    assert a.keys() == b.keys()
    for name in b:
        assert torch.equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def uninterrupted(setup):
    runs = {}
    for launcher, nproc, batch in (("single", 1, 2), ("mpirun", 2, 1)):
        out = setup[0] / f"full_{launcher}"
        check_ok(run_launched(launcher, nproc, train_args(setup, out, ["--per_device_train_batch_size", batch])),
                 launcher)
        runs[launcher] = out
    return runs


@pytest.mark.parametrize("launcher, nproc, batch", [("single", 1, 2), ("mpirun", 2, 1)])
def test_kill_and_resume_is_bitwise_identical(setup, uninterrupted, launcher, nproc, batch):
    out = setup[0] / f"killed_{launcher}"
    args = train_args(setup, out, ["--per_device_train_batch_size", batch])
    stop_after = random.Random(launcher).randint(2, STEPS - 3)
    job = start(launcher, nproc, args)
    wait_for(lambda: (out / f"checkpoint-{stop_after}").is_dir() or job.poll() is not None, 120,
             f"checkpoint-{stop_after}")
    kill_run(out)
    job.wait(timeout=60)
    assert not (out / "adapter_model.safetensors").exists(), "the run finished before it was killed"
    proc = check_ok(run_launched(launcher, nproc, args + ["--resume_from_checkpoint", "true"]), "resume")
    assert "resuming from" in proc.stderr
    assert_same_run(out, uninterrupted[launcher])


# 8-bit AdamW: at r 32 (the largest the tiny model's k/v projections allow) the gate/up lora_B
# (128 x 32) and down lora_A (32 x 128) reach min_8bit_size (4096 elements: 8-bit blockwise
# state, 16 blocks) and the other LoRA tensors stay below it (fp32 state), so both are resumed.
EIGHT_BIT = ["--optim", "adamw_8bit", "--r", 32]


@pytest.fixture(scope="module")
def uninterrupted_8bit(setup):
    out = setup[0] / "full_8bit"
    check_ok(run_launched("single", 1, train_args(setup, out, EIGHT_BIT)), "uninterrupted, 8-bit AdamW")
    return out


def test_kill_and_resume_with_8bit_adamw_is_bitwise_identical(setup, uninterrupted_8bit):
    out = setup[0] / "killed_8bit"
    args = train_args(setup, out, EIGHT_BIT)
    stop_after = random.Random("adamw_8bit").randint(2, STEPS - 3)
    job = start("single", 1, args)
    wait_for(lambda: (out / f"checkpoint-{stop_after}").is_dir() or job.poll() is not None, 120,
             f"checkpoint-{stop_after}")
    kill_run(out)
    job.wait(timeout=60)
    assert not (out / "adapter_model.safetensors").exists(), "the run finished before it was killed"
    proc = check_ok(run_launched("single", 1, args + ["--resume_from_checkpoint", "true"]), "resume")
    assert "resuming from" in proc.stderr
    assert_same_run(out, uninterrupted_8bit)
    with safe_open(str(out / f"checkpoint-{stop_after}" / "optimizer.safetensors"), "pt") as f:
        assert f.metadata()["optimizer"] == "adamw_8bit"
        state = {name: f.get_tensor(name) for name in f.keys()}
    codes = [name for name, t in state.items() if name.startswith("state1/") and t.dtype == torch.uint8]
    moments = [name for name, t in state.items() if name.startswith("state1/") and t.dtype == torch.float32]
    assert codes and moments, sorted(state)
    for name in codes:
        assert "absmax1/" + name[len("state1/"):] in state and "absmax2/" + name[len("state1/"):] in state


def test_resume_with_another_world_size_and_the_same_global_batch(setup, uninterrupted):
    out = setup[0] / "regrouped"
    shutil.copytree(uninterrupted["single"], out)
    shutil.rmtree(out / f"checkpoint-{STEPS - 1}")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (out / name).unlink()
    # 1 rank x batch 2 -> 2 ranks x batch 1 (x accumulation 2 both): the same global batch of 4.
    proc = check_ok(run_launched("mpirun", 2, train_args(setup, out, ["--per_device_train_batch_size", 1,
                                                                      "--resume_from_checkpoint", out / "checkpoint-8"])),
                    "resume on 2 ranks")
    assert "same global batch" in proc.stderr
    steps = [m["step"] for m in metrics(out)]
    assert steps == [3, 6, 9, 12]
    assert metrics(out)[:2] == metrics(uninterrupted["single"])[:2]  # the history before the checkpoint is kept


@pytest.mark.parametrize("extra, named", [
    (["--r", 8], "adapter r"),
    (["--gradient_accumulation_steps", 3], "global batch"),
    (["--seed", 1], "--seed"),
    (["--optim", "adamw_8bit"], "optimizer.safetensors holds the state of --optim adamw_torch"),
    # Note [Resume identity]: what decides where the saved data position points.
    (["--packing", "true"], "--packing false, this run has true"),
    (["--group_by_length", "true"], "--group_by_length false, this run has true"),
    (["--shuffle", "false"], "--shuffle true, this run has false"),
    (["--max_seq_length", 256], "--max_seq_length 2048, this run has 256"),
])
def test_resume_refuses_different_settings(setup, uninterrupted, tmp_path, extra, named):
    out = tmp_path / "run"
    shutil.copytree(uninterrupted["single"], out)
    proc = run_launched("single", 1, train_args(setup, out, extra + ["--resume_from_checkpoint", "true"]))
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr


def test_resume_refuses_other_training_data(setup, uninterrupted, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(uninterrupted["single"], out)
    other = tmp_path / "other.jsonl"  # the same number of rows, other tokens
    tiny_models.write_jsonl(other, tiny_models.make_tokenized_rows(24, seed=4, completion_only=True))
    proc = run_launched("single", 1, train_args(setup, out, ["--dataset", other, "--resume_from_checkpoint", "true"]))
    assert proc.returncode == 2, proc.stderr
    assert "the training data (--dataset)" in proc.stderr and str(other) in proc.stderr, proc.stderr
    assert str(setup[0] / "train.jsonl") in proc.stderr, proc.stderr


def test_resume_from_a_checkpoint_without_data_identity_warns_and_continues_exactly(setup, uninterrupted, tmp_path):
    """A checkpoint of an older version has no record of the data settings: accepted, with a warning."""
    out = tmp_path / "older"
    shutil.copytree(uninterrupted["single"], out)
    state_file = out / "checkpoint-10" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["finetune"]["run"]["data"]["samples"] == 24
    del state["finetune"]["run"]["data"]
    state_file.write_text(json.dumps(state))
    proc = check_ok(run_launched("single", 1, train_args(setup, out, ["--resume_from_checkpoint", out / "checkpoint-10"])),
                    "resume from an older checkpoint")
    assert "predates the recording of the training data" in proc.stderr
    assert_same_run(out, uninterrupted["single"])


def checkpoint_loads(directory):
    """Everything a resume reads, read the way other tools would."""
    state = json.loads((directory / "trainer_state.json").read_text())
    config = json.loads((directory / "adapter_config.json").read_text())
    weights = load_file(str(directory / "adapter_model.safetensors"))
    moments = load_file(str(directory / "optimizer.safetensors"))
    rng = load_file(str(directory / "rng_state.safetensors"))
    assert state["global_step"] == int(directory.name.split("-")[1])
    assert config["peft_type"] == "LORA" and config["r"] == 4
    assert len(moments) == 2 * len(weights) and "rank0/cpu" in rng
    assert all(torch.isfinite(t).all() for t in weights.values())


def test_repeated_kills_leave_only_whole_checkpoints_and_the_run_finishes_exactly(setup, tmp_path):
    """kill -9 at random moments, 30 times, each run resuming from the newest checkpoint (a crash
    loop): every checkpoint-N/ left behind loads, and the run that finally completes equals an
    uninterrupted one bit for bit."""
    # A run advances about 3 checkpoints (steps) between kills: the waits below poll every 2 ms, a
    # step with its checkpoint takes ~5 ms on a fast 2-core machine (at the earlier 50 ms polling,
    # 10+ steps slipped through per kill there and 120 steps finished before the 30th kill). 600
    # steps leave room for 30 kills even at several steps of overshoot each.
    steps = 600
    poll = 0.002
    reference = tmp_path / "reference"
    check_ok(run_launched("single", 1, train_args(setup, reference, ["--max_steps", steps, "--save_steps", 0])),
             "uninterrupted")
    out = tmp_path / "crash_loop"
    args = train_args(setup, out, ["--max_steps", steps, "--save_total_limit", 3])
    rng = random.Random(7)
    kills = kills_while_saving = 0

    def newest():
        return max([int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()],
                   default=0)

    while kills < 30:
        resume = ["--resume_from_checkpoint", "true"] if newest() else ["--overwrite_output_dir"]
        job = start("single", 1, args + resume)
        if rng.random() < 0.2:  # anywhere, start-up included, but before checkpoint newest + 3
            deadline = time.monotonic() + rng.uniform(0.0, 1.5)
            limit = newest() + 3
            wait_for(lambda: time.monotonic() >= deadline or any(out.glob(f"checkpoint-{limit}*")) or
                     job.poll() is not None, 120, f"a random moment before checkpoint-{limit}", poll=poll)
        else:  # while or right after checkpoint T is written, whatever the machine's speed
            target = newest() + rng.randint(1, 2)
            wait_for(lambda: any(out.glob(f"checkpoint-{target}*")) or job.poll() is not None, 120,
                     f"checkpoint-{target}", poll=poll)
            time.sleep(rng.uniform(0.0, 0.02))
        saving = any(".tmp-" in p.name for p in out.glob("checkpoint-*"))
        kill_run(out, job)
        job.wait(timeout=60)
        assert not (out / "adapter_model.safetensors").exists(), "the run finished before 30 kills: raise steps"
        kills += 1
        kills_while_saving += saving
        complete = [p for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
        # --save_total_limit 3, plus one when the kill fell between a save and its pruning
        assert len(complete) <= 4, [p.name for p in complete]
        for directory in complete:
            checkpoint_loads(directory)
    print(f"{kills} kills, {kills_while_saving} while a checkpoint was being written")
    check_ok(run_launched("single", 1, args + ["--resume_from_checkpoint", "true"]), "final resume")
    assert_same_run(out, reference)
    assert len([p for p in out.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]) <= 3


def test_output_dir_of_another_run_is_refused_unless_overwritten(setup, uninterrupted, tmp_path):
    out = tmp_path / "reused"
    shutil.copytree(uninterrupted["single"], out)
    args = train_args(setup, out, ["--max_steps", 2, "--save_steps", 0])
    proc = run_launched("single", 1, args)
    assert proc.returncode == 2
    assert "holds another run's files" in proc.stderr and "metrics.jsonl" in proc.stderr
    assert "12 checkpoint-N directories" in proc.stderr and "--overwrite_output_dir" in proc.stderr
    assert len(metrics(out)) == 4  # nothing was touched
    check_ok(run_launched("single", 1, args + ["--overwrite_output_dir"]), "overwrite")
    assert [m["step"] for m in metrics(out)] == [2]
    assert not list(out.glob("checkpoint-*"))


def test_temporary_directories_of_a_dead_run_are_removed_at_start(setup, tmp_path):
    out = tmp_path / "stale"
    out.mkdir()
    child = subprocess.Popen(["true"])
    child.wait()  # a pid that no longer runs
    stale = out / f"checkpoint-3.tmp-{child.pid}"
    stale.mkdir()
    (stale / "adapter_model.safetensors").write_bytes(b"partial")
    proc = check_ok(run_launched("single", 1, train_args(setup, out, ["--max_steps", 1])), "run")
    assert not stale.exists()
    assert f"removed {stale.name}" in proc.stderr


def test_divergence_stops_the_run_without_writing_a_nan_adapter(setup, tmp_path):
    out = tmp_path / "diverged"
    proc = run_launched("single", 1, train_args(setup, out, ["--learning_rate", 1e30, "--warmup_steps", 0,
                                                             "--logging_steps", 4, "--max_grad_norm", 0]))
    assert proc.returncode == 1, proc.stderr
    assert "is not finite" in proc.stderr and "step " in proc.stderr
    assert not (out / "adapter_model.safetensors").exists()
    for checkpoint in out.glob("checkpoint-*"):
        assert all(torch.isfinite(t).all() for t in load_file(str(checkpoint / "adapter_model.safetensors")).values())


def test_dropout_is_seeded_by_seed(setup, tmp_path):
    runs = {}
    for name, seed in (("a", 11), ("b", 11), ("c", 12)):
        out = tmp_path / name
        check_ok(run_launched("single", 1, train_args(setup, out, ["--seed", seed, "--max_steps", 3,
                                                                   "--logging_steps", 1, "--save_steps", 0])), name)
        runs[name] = [m["grad_norm"] for m in metrics(out)]
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_a_failed_final_save_keeps_the_last_checkpoint(setup, uninterrupted, tmp_path):
    out = tmp_path / "full_disk"
    shutil.copytree(uninterrupted["single"], out)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (out / name).unlink()
    (out / "adapter_model.safetensors").mkdir()  # the final adapter cannot be written
    (out / "adapter_model.safetensors" / "x").write_text("in the way")
    proc = run_launched("single", 1, train_args(setup, out, ["--resume_from_checkpoint", out / "checkpoint-10",
                                                             "--save_steps", 0]))
    assert proc.returncode == 1, proc.stderr
    assert "final save failed" in proc.stderr and "checkpoint-10, is intact" in proc.stderr
    checkpoint_loads(out / "checkpoint-10")


def test_moe_router_loss_window_resumes_bitwise(tmp_path):
    """A MoE model with output_router_logits, logged every 3 steps and resumed from step 4: the
    router loss is the objective's metric aux_loss, so the checkpoint keeps the aux_loss of the open
    window's step 4 and the resumed run logs every metrics.jsonl line, aux_loss included, as the
    uninterrupted run does."""
    import make_moe_fixtures as moe
    moe.make_model("qwen3_moe_top2", tmp_path / "base", output_router_logits=True, router_aux_loss_coef=0.05)
    tiny_models.write_jsonl(tmp_path / "train.jsonl",
                            tiny_models.make_tokenized_rows(24, seed=3, completion_only=True))
    setup = (tmp_path, tmp_path / "base")
    extra = ["--max_steps", 8, "--save_steps", 4]
    full = tmp_path / "full"
    check_ok(run_launched("single", 1, train_args(setup, full, extra)), "uninterrupted")
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    shutil.rmtree(resumed / "checkpoint-8")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (resumed / name).unlink()
    check_ok(run_launched("single", 1, train_args(setup, resumed, extra + ["--resume_from_checkpoint",
                                                                           resumed / "checkpoint-4"])), "resume")
    got, want = metrics(resumed), metrics(full)
    assert [m["step"] for m in want] == [3, 6, 8]
    assert all(m["aux_loss"] > 0 for m in want)
    assert_same_run(resumed, full)
    assert [m["aux_loss"] for m in got] == [m["aux_loss"] for m in want]  # bit for bit
