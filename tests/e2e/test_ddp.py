"""Data-parallel training with the real binary and real launchers (CPU, Gloo).

2 ranks x per-device batch B must train exactly like 1 rank x batch 2B: with --shuffle false rank r
takes rows r, r+2, ... (DistributedSampler), so each optimizer step sees the same rows, and the loss
of every rank is normalised by the global trainable-token count with gradients summed (Note [Global
token normalisation] in trainer.cpp), so the update is the same up to float summation order. That
holds for either --step_planning (data/micro_batch_stream.h): balanced (the default) moves a step's
rows between ranks and micro-batches, literal keeps DistributedSampler's; both are checked, on
uneven rows, packed rows, QLoRA, DoRA, --group_by_length, with evaluation, and resumed mid-epoch.
With --group_by_length each rank sorts its own share, so the same global batch on one process is
the 2-rank run's step rows written out in step order (shuffle off, no grouping).
Then: a dead peer ends the job within seconds with an error naming it, whatever --ddp_timeout; a
stuck one within --ddp_timeout; only rank 0 writes output; bad launcher variables are reported by name.
"""
import json
import random
import re
import shutil
import signal
import subprocess
import time

import pytest
import torch
from safetensors.torch import load_file

from conftest import finetune_bin, last_json_line
from ddp_launch import ManualJob, check_ok, clean_env, run_launched, wait_for
from numerics import relative_error
import reference_loop
import tiny_models

TOLERANCE = 1e-6  # relative, fp32: only the summation order differs
SLACK_S = 20      # process start, model load and teardown on two busy cores
DEAD_PEER_BOUND_S = 5  # a dead peer ends the survivor within this (Note [Peer heartbeats], ddp/peer_monitor.h)
EXIT_NOISE_S = 3       # the survivor's teardown on two busy cores


def uneven_rows(count, seed):
    """Even rows are 3-5 tokens, odd rows 70-100: rank 0 gets only short rows, rank 1 only long ones,
    so the ranks' token counts differ by ~20x and any per-rank normalisation would show."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(count):
        low, high = (3, 5) if i % 2 == 0 else (70, 100)
        length = int(torch.randint(low, high + 1, (1,), generator=g))
        ids = torch.randint(3, tiny_models.VOCAB, (length,), generator=g).tolist()
        cut = length // 3
        rows.append({"input_ids": ids, "labels": [-100] * cut + ids[cut:]})
    return rows


# name -> (rows file, per-device batch B of each of the 2 ranks, accumulation, steps, extra flags);
# "{eval}" in the flags is the evaluation rows file.
CASES = {
    "even": ("train.jsonl", 2, 1, 5, []),           # 16 rows, 4 per step: wraps into a second epoch
    "uneven_accumulated": ("uneven.jsonl", 2, 2, 3, []),  # 16 rows, 8 per step over 2 micro-steps
    "uneven_literal": ("uneven.jsonl", 2, 2, 3, ["--step_planning", "literal"]),
    # QLoRA: 4-bit NF4 base projections, then also bitsandbytes' 8-bit AdamW (Unsloth's defaults).
    "uneven_4bit": ("uneven.jsonl", 2, 2, 3, ["--load_in_4bit"]),
    "even_4bit_adamw_8bit": ("train.jsonl", 2, 1, 5, ["--load_in_4bit", "--optim", "adamw_8bit"]),
    # Each long row alone in a row of 128 with short ones beside it: 8 packed rows, 4 per step.
    "uneven_packed": ("uneven.jsonl", 1, 2, 4, ["--packing", "--max_seq_length", 128]),
    "uneven_dora": ("uneven.jsonl", 2, 2, 3, ["--use_dora"]),  # from a DoRA adapter (setup)
    "uneven_grouped": ("uneven.jsonl", 2, 1, 5, ["--group_by_length"]),
    "uneven_eval": ("uneven.jsonl", 2, 2, 3, ["--eval_dataset", "{eval}", "--eval_steps", 1]),
    # 4 rows per step, 4 steps per epoch: the resume test continues from checkpoint-2, mid-epoch.
    "uneven_resumed": ("uneven.jsonl", 1, 2, 5, []),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    base = root / "base"
    tiny_models.make_model("llama", base)
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(16, seed=7, completion_only=True))
    tiny_models.write_jsonl(root / "uneven.jsonl", uneven_rows(16, seed=8))
    tiny_models.write_jsonl(root / "eval.jsonl", uneven_rows(7, seed=9))
    reference_loop.make_init_adapter(base, root / "init_dora_adapter", use_dora=True)
    return root, base, adapter


def train_args(setup, out, case, batch_size, steps=None, timeout_s=60, save_steps=2, data=None, extra=None):
    root, base, adapter = setup
    case_data, _, accumulation, case_steps, case_extra = CASES[case]
    data = data or root / case_data
    extra = [str(a).format(eval=root / "eval.jsonl") for a in (case_extra if extra is None else extra)]
    if "--use_dora" in extra:
        adapter = root / "init_dora_adapter"
    return ["--model_name", base, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
            "--max_steps", steps or case_steps, "--per_device_train_batch_size", batch_size,
            "--gradient_accumulation_steps", accumulation, "--learning_rate", 2e-2, "--warmup_steps", 1,
            "--lr_scheduler_type", "linear", "--max_grad_norm", 1.0, "--weight_decay", 0.01,
            "--lora_dropout", 0.0, "--dtype", "float32", "--device", "cpu", "--ddp_backend", "gloo",
            "--shuffle", "false", "--logging_steps", 1, "--save_steps", save_steps, "--ddp_timeout", timeout_s,
            "--use_gradient_checkpointing", "false"] + extra


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def json_lines(text):
    return [line for line in text.splitlines() if line.strip().startswith("{")]


def grouped_step_order(rows, batch_size, accumulation, world=2):
    """The rows of a --group_by_length --shuffle false run on `world` ranks, in step order: rank r
    takes rows r, r + world, ... (len(rows) a multiple of world), sorts them longest first (one
    window: HF's megabatches of 50 x batch), and step s holds every rank's micro-batches
    s*accumulation .. s*accumulation + accumulation - 1 (data/sampler.h, data/micro_batch_stream.h)."""
    assert len(rows) % world == 0 and len(rows) // world <= 50 * batch_size
    shares = [sorted(rows[r::world], key=lambda row: -len(row["input_ids"])) for r in range(world)]
    per_step = batch_size * accumulation
    ordered = []
    for start in range(0, len(shares[0]), per_step):
        for share in shares:
            ordered += share[start:start + per_step]
    return ordered


@pytest.fixture(scope="module")
def single_process(setup):
    """The 1-rank x batch 2B reference of each case (started by hand: no launcher at all): the same
    global batch every step."""
    root = setup[0]
    runs = {}
    for case, (data, batch_size, accumulation, _, extra) in CASES.items():
        out = root / f"single_{case}"
        args = train_args(setup, out, case, 2 * batch_size)
        if "--group_by_length" in extra:
            rows = [json.loads(line) for line in (root / data).read_text().splitlines()]
            ordered = root / f"{case}_step_order.jsonl"
            tiny_models.write_jsonl(ordered, grouped_step_order(rows, batch_size, accumulation))
            args = train_args(setup, out, case, 2 * batch_size, data=ordered,
                              extra=[a for a in extra if a != "--group_by_length"])
        proc = check_ok(run_launched("single", 1, args), "single process")
        runs[case] = (out, proc)
    return runs


def assert_same_training(out, ref_out, initial_adapter, steps):
    """Metrics and adapter of `out` against the single-process `ref_out`; (worst relative loss,
    worst relative adapter tensor) differences."""
    ours, ref = metrics(out), metrics(ref_out)
    assert [m["step"] for m in ours] == list(range(1, steps + 1))
    worst_loss = 0.0
    for got, want in zip(ours, ref):
        assert got["tokens"] == want["tokens"], f"step {got['step']}: tokens"  # same rows, every rank counted
        assert got["lr"] == want["lr"]
        assert ("eval_loss" in got) == ("eval_loss" in want)
        for key in ("loss", "grad_norm", "eval_loss"):
            if key not in want:
                continue
            error = abs(got[key] - want[key]) / abs(want[key])
            assert error <= TOLERANCE, f"step {got['step']}: {key} {got[key]} vs single-process {want[key]}"
            worst_loss = max(worst_loss, error) if key == "loss" else worst_loss
        assert want["rank_imbalance"] == 1.0 and got["rank_imbalance"] >= 1.0
    got_adapter = load_file(str(out / "adapter_model.safetensors"))
    want_adapter = load_file(str(ref_out / "adapter_model.safetensors"))
    initial = load_file(str(initial_adapter / "adapter_model.safetensors"))
    assert set(got_adapter) == set(want_adapter)
    worst_adapter = 0.0
    for name, want in want_adapter.items():
        assert relative_error(want, initial[name]) > 1e-3, f"{name} did not move: the comparison would be vacuous"
        error = relative_error(got_adapter[name], want)
        assert error <= TOLERANCE, f"{name}: relative difference {error}"
        worst_adapter = max(worst_adapter, error)
    return worst_loss, worst_adapter


@pytest.mark.parametrize("launcher, case", [
    ("mpirun", "even"), ("mpirun", "uneven_accumulated"),
    ("torchrun", "even"), ("torchrun", "uneven_accumulated"),
    ("mpirun-mpi-rendezvous", "uneven_accumulated"),
    ("mpirun", "uneven_4bit"), ("torchrun", "even_4bit_adamw_8bit"),
])
def test_two_ranks_train_like_one_rank_with_twice_the_batch(setup, single_process, launcher, case, capsys):
    root = setup[0]
    batch_size, steps = CASES[case][1], CASES[case][3]
    out = root / f"{launcher}_{case}"
    proc = check_ok(run_launched(launcher, 2, train_args(setup, out, case, batch_size)), launcher)
    log = proc.stderr + proc.stdout
    assert f"launcher {'torchrun' if launcher == 'torchrun' else 'OpenMPI'}" in log
    if launcher == "torchrun":
        assert "(torchrun agent store)" in log  # TORCHELASTIC_USE_AGENT_STORE honoured

    ref_out, ref_proc = single_process[case]
    worst_loss, worst_adapter = assert_same_training(out, ref_out, setup[2], steps)
    ours = metrics(out)
    assert ours[-1]["loss"] < ours[0]["loss"]  # it learns (the last step revisits the first step's rows)
    with capsys.disabled():
        print(f"\n[ddp equivalence] {launcher} {case}: worst loss rel {worst_loss:.2e}, "
              f"worst adapter tensor rel {worst_adapter:.2e}")

    # Rank discipline: the output of a 2-rank job is the output of a 1-rank job, written once.
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == \
           sorted(p.relative_to(ref_out).as_posix() for p in ref_out.rglob("*"))
    assert len(json_lines(proc.stdout)) == 1, proc.stdout  # one summary, from rank 0
    summary = last_json_line(proc.stdout)
    assert summary["steps"] == steps and summary["tokens"] == last_json_line(ref_proc.stdout)["tokens"]
    assert log.count("adapter saved to") == 1
    assert not re.search(r"\[rank 1\].*(adapter saved|finetune \| model|batch \d+ per device)", log)
    # A rank that finished first is not taken for dead by one still finishing (Note [Clean exit]).
    assert not re.search(r"heartbeats|is gone|exited with an error|did not confirm", log), log


@pytest.mark.parametrize("case", ["uneven_literal", "uneven_packed", "uneven_dora", "uneven_grouped", "uneven_eval",
                                  "uneven_resumed"])
def test_two_ranks_plan_steps_like_one_rank_with_twice_the_batch(setup, single_process, case, capsys):
    """Each step's rows, however the planning spreads them (balanced, or literally), train like one
    process with the same global batch; the banner names the planning; rank_imbalance is logged
    and summarised."""
    root = setup[0]
    batch_size, steps, extra = CASES[case][1], CASES[case][3], CASES[case][4]
    out = root / f"planned_{case}"
    proc = check_ok(run_launched("mpirun", 2, train_args(setup, out, case, batch_size)), case)
    planning = "literal" if "literal" in extra else "balanced"
    assert f"step planning {planning}" in proc.stderr
    ref_out, ref_proc = single_process[case]
    initial = root / "init_dora_adapter" if "--use_dora" in extra else setup[2]
    worst_loss, worst_adapter = assert_same_training(out, ref_out, initial, steps)
    if "--eval_dataset" in extra:
        assert all("eval_loss" in m for m in metrics(out))
    summary = last_json_line(proc.stdout)
    lines = metrics(out)
    assert summary["rank_imbalance"] == pytest.approx(sum(m["rank_imbalance"] for m in lines) / len(lines))
    assert last_json_line(ref_proc.stdout)["rank_imbalance"] == 1.0
    # The literal rule gives rank 0 only the short rows, rank 1 only the long ones; balanced
    # planning evens each step's tokens out.
    if planning == "literal":
        assert min(m["rank_imbalance"] for m in lines) > 1.5
    else:
        assert max(m["rank_imbalance"] for m in lines) < 1.15
    with capsys.disabled():
        print(f"\n[ddp equivalence] mpirun {case} ({planning}): worst loss rel {worst_loss:.2e}, "
              f"worst adapter tensor rel {worst_adapter:.2e}, mean rank_imbalance {summary['rank_imbalance']:.3f}")


def test_resumed_mid_epoch_on_two_ranks_is_bitwise_the_uninterrupted_run(setup, single_process):
    """Balanced plans are a function of (seed, epoch, step): a 2-rank run resumed from a checkpoint
    in the middle of an epoch trains bit for bit what the uninterrupted 2-rank run trains."""
    root = setup[0]
    case = "uneven_resumed"
    batch_size, steps = CASES[case][1], CASES[case][3]
    full = root / "resume_full"
    check_ok(run_launched("mpirun", 2, train_args(setup, full, case, batch_size, save_steps=1)), "uninterrupted")
    resumed = root / "resume_cut"
    shutil.copytree(full, resumed)
    for later in range(3, steps + 1):
        shutil.rmtree(resumed / f"checkpoint-{later}")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (resumed / name).unlink()
    proc = check_ok(run_launched("mpirun", 2, train_args(setup, resumed, case, batch_size, save_steps=1) +
                                 ["--resume_from_checkpoint", resumed / "checkpoint-2"]), "resumed")
    assert "resuming from" in proc.stderr
    state = json.loads((full / "checkpoint-2" / "trainer_state.json").read_text())["finetune"]
    assert (state["epoch_index"], state["steps_into_epoch"]) == (0, 2)  # mid-epoch: 4 steps per epoch
    for key in ("loss", "grad_norm", "lr", "tokens"):
        assert [m[key] for m in metrics(resumed)] == [m[key] for m in metrics(full)], key
    got, want = load_file(str(resumed / "adapter_model.safetensors")), load_file(str(full / "adapter_model.safetensors"))
    assert all(torch.equal(got[name], want[name]) for name in want)


def test_single_process_needs_no_launcher_or_port(setup, single_process):
    out, proc = single_process["even"]
    assert "launcher none" in proc.stderr and "rendezvous" not in proc.stderr
    assert len(metrics(out)) == CASES["even"][3]


def test_torchrun_restart_uses_fresh_rendezvous_keys(setup, tmp_path):
    """torchrun --max-restarts reuses its agent store: a restarted worker group must not read the
    dead group's keys (torch prefixes them per TORCHELASTIC_RESTART_COUNT). Rank 1 fails on the
    first attempt after rank 0 has registered itself; the second attempt must train normally."""
    wrapper = tmp_path / "flaky_rank1.sh"
    wrapper.write_text("#!/bin/sh\n"
                       'if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then sleep 2; exit 3; fi\n'
                       'exec "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    proc = run_launched("torchrun", 2, train_args(setup, out, "even", 2, steps=2, timeout_s=20),
                        program=[str(wrapper), finetune_bin()], launcher_args=["--max-restarts=1"], timeout=120)
    check_ok(proc, "torchrun --max-restarts=1")
    assert "(exitcode: 3)" in proc.stderr, proc.stderr  # the first attempt did fail and was restarted
    assert [m["step"] for m in metrics(out)] == [1, 2]


def start_long_job(setup, tmp_path, timeout_s):
    out = tmp_path / "out"
    args = train_args(setup, out, "even", 2, steps=100000, timeout_s=timeout_s, save_steps=0)
    job = ManualJob(2, args, tmp_path)
    metrics_file = out / "metrics.jsonl"

    def rank0_logged_a_step():
        for rank, p in enumerate(job.processes):
            if p.poll() is not None:
                raise AssertionError(f"rank {rank} exited {p.returncode} early: {job.output(rank)}")
        return metrics_file.exists() and metrics_file.read_text().count("\n") >= 1

    try:
        wait_for(rank0_logged_a_step, 60, "rank 0 to log its first step")
    except BaseException:
        job.kill_all()
        raise
    return job


@pytest.mark.parametrize("victim", [1, 0])
def test_killed_rank_ends_the_survivor_within_seconds_whatever_the_timeout(setup, tmp_path, victim, capsys):
    """SIGKILL of rank 1, or of rank 0 (which hosts the rendezvous store), at a random moment of
    training: the survivor must not wait out --ddp_timeout (600 s here) but exit with an error
    naming the dead rank: rank 1 falls silent (heartbeats), rank 0's store connection drops."""
    delay = random.uniform(0, 1.5)  # after the first step: in a step, in a collective or between
    job = start_long_job(setup, tmp_path, timeout_s=600)
    survivor = 1 - victim
    try:
        time.sleep(delay)
        job.signal(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        code = job.wait(survivor, DEAD_PEER_BOUND_S + EXIT_NOISE_S)
        elapsed = time.monotonic() - killed_at
    finally:
        job.kill_all()
    _, err = job.output(survivor)
    assert code is not None, f"rank {survivor} still running {elapsed:.1f} s after rank {victim} was killed:\n{err}"
    assert code > 0, f"rank {survivor} exited {code} (expected an error exit, not a crash or success):\n{err}"
    # e.g. "rank 0: loss of step 7 failed: rank 1 stopped sending heartbeats (last seen 2.6 s ago)"
    #      "rank 1: rank 0 is gone (the rendezvous store it hosts dropped the connection: ...)"
    death = r"stopped sending heartbeats \(last seen \d+\.\d s ago\)" if victim == 1 else r"is gone \(the rendezvous store"
    assert re.search(rf"\[error\].*rank {survivor}: (.* )?rank {victim} {death}", err), err
    with capsys.disabled():
        print(f"\n[dead rank] killed rank {victim} {delay:.2f} s after the first step: rank {survivor} exited "
              f"{code} after {elapsed:.2f} s: {[l for l in err.splitlines() if '[error]' in l][-1]}")


def test_stalled_rank_times_out_within_ddp_timeout(setup, tmp_path):
    """A peer that is alive but stuck is only caught by the timeout: its main thread is stopped,
    while its other threads, the heartbeat among them, run on, so nobody takes it for dead. (A
    process frozen as a whole, SIGSTOP, stops beating too, and is reported as silent.)"""
    timeout_s = 4
    job = start_long_job(setup, tmp_path, timeout_s)
    try:
        try:
            job.freeze_main_thread(1)
        except OSError as e:
            pytest.skip(f"cannot stop one thread here: {e}")
        stopped_at = time.monotonic()
        code = job.wait(0, timeout_s + SLACK_S)
        elapsed = time.monotonic() - stopped_at
        # Rank 1 reads rank 0's failure from the store; its main thread cannot act on it, so the
        # monitor's exit grace ends the process.
        code1 = job.wait(1, DEAD_PEER_BOUND_S + EXIT_NOISE_S)
    finally:
        job.kill_all()
    _, err = job.output(0)
    assert code is not None, f"rank 0 still running {timeout_s + SLACK_S} s after rank 1 stalled:\n{err}"
    assert code > 0, err
    assert timeout_s - 1 <= elapsed <= timeout_s + SLACK_S, elapsed  # waited for the timeout, then gave up
    assert re.search(r"rank 0: .*timed out after 4 s", err), err
    assert "heartbeats" not in err, err
    _, err1 = job.output(1)
    assert code1 == 1, f"rank 1 exited {code1}:\n{err1}"
    assert re.search(r"rank 1: rank 0 exited with an error: rank 0: .*timed out after 4 s.*terminating the process",
                     err1), err1


def test_missing_rank_fails_rendezvous_within_timeout(setup, tmp_path):
    timeout_s = 3
    started = time.monotonic()
    job = ManualJob(2, train_args(setup, tmp_path / "out", "even", 2, timeout_s=timeout_s), tmp_path,
                    ranks=[0])  # rank 1 never starts
    try:
        code = job.wait(0, timeout_s + SLACK_S)
    finally:
        job.kill_all()
    _, err = job.output(0)
    assert code is not None and code > 0, err
    assert time.monotonic() - started <= timeout_s + SLACK_S
    assert "rank 0" in err and re.search(r"rendezvous|store", err), err
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


@pytest.mark.parametrize("env, message", [
    ({"RANK": "0"}, "RANK is set but WORLD_SIZE is missing"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "RANK is set but LOCAL_RANK is missing"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "two", "LOCAL_RANK": "0"}, 'WORLD_SIZE="two" is not a non-negative integer'),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     "OMPI_COMM_WORLD_SIZE is missing"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     "conflicting launcher variables"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "99999"}, "MASTER_PORT=\"99999\""),
])
def test_bad_launch_environment_is_reported_by_name(setup, tmp_path, env, message):
    args = train_args(setup, tmp_path / "out", "even", 2, timeout_s=5)
    proc = subprocess.run([finetune_bin()] + [str(a) for a in args], capture_output=True, text=True,
                          env=clean_env(**env), timeout=60)
    assert proc.returncode > 0, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
