"""Runs that survive the real world's stops and mix-ups, with the real binary:

- SIGTERM / SIGUSR1 (Slurm, Kubernetes, torchrun on preemption; Note [Preemption]): every rank
  stops at the next step boundary, a resumable checkpoint of the steps done is saved, the run
  exits 143 within a bound, and --resume_from_checkpoint true continues bit for bit. One process,
  and two ranks where only one rank is signalled, and under torchrun and mpirun, which forward the
  signal to every rank. (That a second signal ends the process at once is tested on the handler
  itself, tests/launch/test_stop_request.cpp: two signals sent back to back merge into one.)
- Ranks started with different settings (Note [Ranks agree before the first step]): every rank
  exits within seconds naming the first differing option and both values, instead of training
  different models into one all-reduce or waiting out --ddp_timeout."""
import shutil
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

from conftest import finetune_bin
from ddp_launch import ManualJob, clean_env, launcher_command, free_port, wait_for
import tiny_models

STOP_BOUND_S = 20   # a step and a checkpoint of a tiny model, on 2 loaded cores
AGREE_BOUND_S = 20  # model load + data + the store exchange; --ddp_timeout is 600 s


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("preemption")
    tiny_models.make_model("llama", root / "base")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(24, seed=3, completion_only=True))
    return root


def train_args(root, out, steps, extra=(), batch_size=2, dropout=0.1):
    """LoRA dropout draws from the generators a checkpoint must carry; two ranks of batch 1 get
    dropout 0 where they are compared with other runs."""
    return ["--model_name", root / "base", "--dataset", root / "train.jsonl", "--output_dir", out,
            "--max_steps", steps, "--per_device_train_batch_size", batch_size, "--gradient_accumulation_steps", 1,
            "--learning_rate", 1e-2, "--warmup_steps", 1, "--dtype", "float32", "--device", "cpu",
            "--ddp_backend", "gloo", "--shuffle", "false", "--logging_steps", 1, "--save_steps", 1000,
            "--ddp_timeout", 600, "--use_gradient_checkpointing", "false", "--lora_dropout", dropout] + list(extra)


def logged_steps(out):
    path = out / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def adapter(path):
    return load_file(str(path / "adapter_model.safetensors"))


def assert_same_adapter(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equal(b[name]), name


def start(args, log):
    return subprocess.Popen([finetune_bin()] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=open(log, "w"), text=True, env=clean_env())


@pytest.fixture(scope="module")
def uninterrupted(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    proc = subprocess.run([finetune_bin()] + [str(a) for a in train_args(setup, out, 40)], capture_output=True,
                          text=True, env=clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return adapter(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_saves_a_checkpoint_and_resume_continues_bitwise(setup, uninterrupted, tmp_path, sig):
    out = tmp_path / "out"
    job = start(train_args(setup, out, 40), tmp_path / "stopped.err")  # batch 2, dropout 0.1
    try:
        wait_for(lambda: logged_steps(out) >= 3 or job.poll() is not None, 300, "3 logged steps")
        job.send_signal(sig)
        signalled = time.monotonic()
        code = job.wait(timeout=STOP_BOUND_S)
        elapsed = time.monotonic() - signalled
    finally:
        if job.poll() is None:
            job.kill()
    err = (tmp_path / "stopped.err").read_text()
    assert code == 143, err
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert len(checkpoints) == 1, checkpoints
    step = int(checkpoints[0].name.split("-")[1])
    assert step == logged_steps(out) and 3 <= step < 40  # the checkpoint holds every step done
    assert f"stopped after step {step} of 40" in err and "--resume_from_checkpoint true" in err, err
    print(f"\n[preemption] {signal.Signals(sig).name} after step {step}: exit 143 in {elapsed:.2f} s")

    resumed = subprocess.run([finetune_bin()] + [str(a) for a in train_args(setup, out, 40,
                                                                            ["--resume_from_checkpoint", "true"])],
                             capture_output=True, text=True, env=clean_env(), timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_adapter(adapter(out), uninterrupted)


def run_two_ranks(args, log_dir):
    log_dir.mkdir(parents=True, exist_ok=True)
    job = ManualJob(2, args, log_dir)
    try:
        codes = [job.wait(rank, 600) for rank in (0, 1)]
    finally:
        job.kill_all()
    assert codes == [0, 0], job.output(0)[1][-2000:] + job.output(1)[1][-2000:]


def test_one_signalled_rank_stops_both_at_the_same_step(setup, tmp_path):
    """Two ranks started by hand (torchrun's variables, no agent): only rank 1 gets SIGTERM; both
    stop after the same step, rank 0 saves, both exit 143, and the resumed run equals the
    uninterrupted two-rank run bit for bit."""
    straight = tmp_path / "straight"
    run_two_ranks(train_args(setup, straight, 40, batch_size=1), tmp_path / "straight-logs")

    out = tmp_path / "out"
    args = train_args(setup, out, 40, batch_size=1)
    job = ManualJob(2, args, tmp_path)
    try:
        wait_for(lambda: logged_steps(out) >= 3 or any(p.poll() is not None for p in job.processes), 300,
                 "3 logged steps")
        job.signal(1, signal.SIGTERM)
        codes = [job.wait(rank, STOP_BOUND_S) for rank in (0, 1)]
    finally:
        job.kill_all()
    assert codes == [143, 143], [job.output(r)[1][-2000:] for r in (0, 1)]
    step = logged_steps(out)
    assert (out / f"checkpoint-{step}").is_dir()
    for rank in (0, 1):
        assert f"stopped after step {step} of 40" in job.output(rank)[1]

    run_two_ranks(args + ["--resume_from_checkpoint", "true"], tmp_path / "resumed-logs")
    assert_same_adapter(adapter(out), adapter(straight))


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_launchers_forward_the_stop(setup, tmp_path, launcher):
    """SIGTERM to the launcher (what Slurm and Kubernetes send): it forwards the signal to its
    ranks, and they stop together with a checkpoint and exit 143."""
    out = tmp_path / "out"
    args = train_args(setup, out, 100000, batch_size=1)
    command = launcher_command(launcher, 2, free_port(), [finetune_bin()]) + [str(a) for a in args]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "w"), text=True,
                           env=clean_env(), start_new_session=True)
    try:
        wait_for(lambda: logged_steps(out) >= 2 or job.poll() is not None, 300, "2 logged steps")
        job.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        job.wait(timeout=STOP_BOUND_S + 10)
        elapsed = time.monotonic() - signalled
    finally:
        if job.poll() is None:
            subprocess.run(["kill", "-KILL", f"-{job.pid}"])
    err = (tmp_path / "err").read_text()
    step = logged_steps(out)
    assert (out / f"checkpoint-{step}" / "adapter_model.safetensors").exists(), err[-3000:]
    assert err.count(f"stopped after step {step} of 100000") == 2, err[-3000:]
    print(f"\n[preemption] {launcher}: both ranks stopped after step {step}, launcher gone in {elapsed:.2f} s")


def start_two_ranks(rank_args):
    """Ranks 0 and 1 with torchrun's variables, rank r given rank_args[r]."""
    port = free_port()
    processes = []
    for rank, args in enumerate(rank_args):
        env = clean_env(RANK=rank, WORLD_SIZE=2, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=2, MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=port)
        processes.append(subprocess.Popen([finetune_bin()] + [str(a) for a in args], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env))
    return processes


@pytest.mark.parametrize("option, rank1_value, shown", [
    ("--learning_rate", "0.02", "different --learning_rate"),
    ("--max_steps", "7", "different --max_steps / --num_train_epochs (steps)"),
    ("--seed", "1", "different --seed"),
])
def test_ranks_started_differently_stop_within_seconds(setup, tmp_path, option, rank1_value, shown):
    out = tmp_path / "out"
    args = train_args(setup, out, 5, batch_size=1)
    processes = start_two_ranks([args, args + [option, rank1_value]])  # a repeated flag's last value wins
    started = time.monotonic()
    results = [p.communicate(timeout=AGREE_BOUND_S + 60) for p in processes]
    elapsed = time.monotonic() - started
    for p, (_, err) in zip(processes, results):
        assert p.returncode == 2, err[-2000:]
        assert shown in err and "rank 0 has '" in err and f"rank 1 has '{rank1_value}'" in err, err[-2000:]
    assert elapsed < AGREE_BOUND_S, f"{elapsed:.1f} s"
    assert logged_steps(out) == 0
    print(f"\n[rank settings] {option}: both ranks refused in {elapsed:.2f} s")


def test_the_same_model_under_another_path_agrees(setup, tmp_path):
    """Each node may hold the model under its own path (its own cache): compared by content."""
    copy = tmp_path / "base-copy"
    shutil.copytree(setup / "base", copy)
    args = train_args(setup, tmp_path / "out", 2, batch_size=1)
    other = list(args)
    other[other.index("--model_name") + 1] = copy
    processes = start_two_ranks([args, other])
    results = [p.communicate(timeout=600) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [r[1][-2000:] for r in results]
