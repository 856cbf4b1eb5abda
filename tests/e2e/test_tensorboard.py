"""--report_to tensorboard / all / none / jsonl: event files under OUTPUT_DIR/runs/<date>_<host>
named and framed as HF Trainer + torch's SummaryWriter write them, read back by TensorBoard's own
EventAccumulator and compared with metrics.jsonl float32-exactly; the summary's train_loss is the
mean of the run's step losses; a run killed with SIGKILL keeps a readable event file, and its
resumed run starts a new one."""
import json
import re
import socket
import struct
import subprocess
import time
from datetime import datetime

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

from conftest import finetune_bin, last_json_line
from ddp_launch import wait_for
import tiny_models

# metrics.jsonl field -> TensorBoard tag (report/metrics_scalars.h: HF's log key, then rewrite_logs).
STEP_TAGS = {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/learning_rate",
             "epoch": "train/epoch", "tokens": "train/num_input_tokens_seen",
             "tokens_per_s": "train/tokens_per_second", "elapsed_s": "train/elapsed_s", "eval_loss": "eval/loss",
             "rank_imbalance": "train/rank_imbalance"}
# End-of-run summary field -> tag (HF's train_loss / train_runtime / train_tokens_per_second).
SUMMARY_TAGS = {"train_loss": "train/train_loss", "elapsed_s": "train/train_runtime",
                "tokens_per_s": "train/train_tokens_per_second"}
RUN_NAME = re.compile(r"^([A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2})_(.+)$")
EVENT_FILE = re.compile(r"^events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+)$")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("tensorboard")
    tiny_models.make_model("qwen2", root / "base")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(20, seed=1, completion_only=True))
    tiny_models.write_jsonl(root / "eval.jsonl", tiny_models.make_tokenized_rows(7, seed=2, completion_only=True))
    return root


def train_args(root, out, report_to, max_steps, extra=()):
    return ["--model_name", root / "base", "--dataset", root / "train.jsonl", "--output_dir", out,
            "--max_steps", max_steps, "--per_device_train_batch_size", 2, "--learning_rate", 5e-3,
            "--dtype", "float32", "--device", "cpu", "--logging_steps", 1, "--report_to", report_to,
            "--use_gradient_checkpointing", "false"] + list(extra)


def start(args):
    return subprocess.Popen([finetune_bin()] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run(args):
    """(summary, pid, start time, end time, stderr) of a finished run."""
    t0 = time.time()
    job = start(args)
    stdout, stderr = job.communicate(timeout=300)
    t1 = time.time()
    assert job.returncode == 0, f"exit {job.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return last_json_line(stdout), job.pid, t0, t1, stderr


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def event_files(out):
    return sorted((out / "runs").glob("*/events.out.tfevents.*"))


def check_names(event_file, pid, t0, t1):
    """HF's runs/<%b%d_%H-%M-%S>_<host> (local time) and tensorboard's events.out.tfevents.<s>.<host>.<pid>.0."""
    run_name = RUN_NAME.match(event_file.parent.name)
    assert run_name, event_file.parent.name
    assert run_name.group(2) == socket.gethostname()
    stamp = datetime.strptime(f"{datetime.fromtimestamp(t0).year} {run_name.group(1)}", "%Y %b%d_%H-%M-%S")
    assert int(t0) - 1 <= stamp.timestamp() <= t1, (run_name.group(1), t0, t1)
    name = EVENT_FILE.match(event_file.name)
    assert name, event_file.name
    assert int(t0) <= int(name.group(1)) <= t1
    assert (name.group(2), int(name.group(3)), int(name.group(4))) == (socket.gethostname(), pid, 0)


def records(event_file):
    """Every TFRecord of the file, its length and data CRCs checked with tensorboard's masked_crc32c;
    the file ends at a record boundary (no torn record)."""
    data = event_file.read_bytes()
    out, at = [], 0
    while at < len(data):
        assert at + 12 <= len(data), f"torn header at byte {at}"
        (length,), (length_crc,) = struct.unpack_from("<Q", data, at), struct.unpack_from("<I", data, at + 8)
        assert length_crc == masked_crc32c(data[at:at + 8])
        assert at + 12 + length + 4 <= len(data), f"torn record at byte {at}"
        payload = data[at + 12:at + 12 + length]
        assert struct.unpack_from("<I", data, at + 12 + length)[0] == masked_crc32c(payload)
        out.append(event_pb2.Event.FromString(payload))
        at += 12 + length + 4
    return out


def scalars(event_file):
    """{tag: [(step, value)]} as TensorBoard's EventAccumulator reads the file."""
    accumulator = EventAccumulator(str(event_file), size_guidance={SCALARS: 0})
    accumulator.Reload()
    assert accumulator.file_version == 2.0  # "brain.Event:2"
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def f32(value):
    return float(np.float32(value))


def expected_step_scalars(lines):
    series = {}
    for line in lines:
        assert set(line) - {"step"} <= set(STEP_TAGS), sorted(line)  # every numeric field has a tag
        for field, tag in STEP_TAGS.items():
            if field in line:
                series.setdefault(tag, []).append((line["step"], f32(line[field])))
    return series


def check_first_event(event_file, t0, t1):
    events = records(event_file)
    assert events[0].file_version == "brain.Event:2" and events[0].source_metadata.writer == "finetune"
    assert all(t0 <= e.wall_time <= t1 for e in events)
    assert [e.wall_time for e in events] == sorted(e.wall_time for e in events)
    return events


@pytest.mark.parametrize("report_to", ["tensorboard", "all"])
def test_event_file_holds_every_metrics_line_and_the_summary(setup, report_to):
    out = setup / report_to
    summary, pid, t0, t1, _ = run(train_args(setup, out, report_to, 6, ["--eval_dataset", setup / "eval.jsonl",
                                                                     "--eval_steps", 4]))
    (event_file,) = event_files(out)
    check_names(event_file, pid, t0, t1)
    events = check_first_event(event_file, t0, t1)
    lines = metrics(out)
    assert [l["step"] for l in lines] == [1, 2, 3, 4, 5, 6] and "eval_loss" in lines[3]
    expected = expected_step_scalars(lines)
    # The end-of-run log at the last step; the final evaluation (step 6 is no multiple of 4) only here.
    for field, tag in SUMMARY_TAGS.items():
        expected[tag] = [(6, f32(summary[field]))]
    expected["eval/loss"].append((6, f32(summary["eval_loss"])))
    assert scalars(event_file) == expected
    assert len(events) == 1 + sum(len(v) for v in expected.values())  # nothing else was written
    # train_loss is the mean of the step losses (Python's sum in step order), not the last one.
    losses = [l["loss"] for l in lines]
    assert summary["train_loss"] == sum(losses) / len(losses)
    assert summary["train_loss"] != losses[-1]


@pytest.mark.parametrize("report_to", ["none", "jsonl"])
def test_no_event_files_without_tensorboard(setup, report_to):
    out = setup / report_to
    summary, _, _, _, _ = run(train_args(setup, out, report_to, 3))
    assert not (out / "runs").exists()
    losses = [l["loss"] for l in metrics(out)]
    assert len(losses) == 3 and summary["train_loss"] == sum(losses) / len(losses)


def test_killed_run_keeps_its_event_file_and_the_resumed_run_starts_another(setup):
    out = setup / "killed"
    steps = 60  # a checkpoint every step: the kill lands a few steps after checkpoint-3, far from the end
    args = train_args(setup, out, "tensorboard", steps, ["--save_steps", 1])
    t0 = time.time()
    job = start(args)
    wait_for(lambda: (out / "checkpoint-3").is_dir() or job.poll() is not None, 120, "checkpoint-3", poll=0.002)
    job.kill()  # SIGKILL
    job.communicate(timeout=60)
    t1 = time.time()
    assert not (out / "adapter_model.safetensors").exists(), "the run finished before it was killed"
    killed_lines = metrics(out)
    (killed_file,) = event_files(out)
    check_names(killed_file, job.pid, t0, t1)
    check_first_event(killed_file, t0, t1)  # every record whole, CRCs good
    got = scalars(killed_file)
    logged = [l["step"] for l in killed_lines]
    # metrics.jsonl is written just before the event file: the kill may fall between the two.
    steps_in_file = [step for step, _ in got["train/loss"]]
    assert len(steps_in_file) >= 3 and steps_in_file in (logged, logged[:-1]), (steps_in_file, logged)
    expected = expected_step_scalars([l for l in killed_lines if l["step"] in steps_in_file])
    assert got == expected  # whole steps only, values float32-exact

    summary, pid, t2, t3, stderr = run(args + ["--resume_from_checkpoint", "true"])
    files = event_files(out)
    assert len(files) == 2 and killed_file in files
    (resumed_file,) = [f for f in files if f != killed_file]
    check_names(resumed_file, pid, t2, t3)
    check_first_event(resumed_file, t2, t3)
    lines = metrics(out)
    assert [l["step"] for l in lines] == list(range(1, steps + 1))
    resumed_from = int(re.search(r"resuming from \S+ at step (\d+)", stderr).group(1))
    assert resumed_from >= 3
    new_lines = [l for l in lines if l["step"] > resumed_from]
    expected = expected_step_scalars(new_lines)  # only what this run logged, as HF's new SummaryWriter
    for field, tag in SUMMARY_TAGS.items():
        expected[tag] = [(steps, f32(summary[field]))]
    assert scalars(resumed_file) == expected
    # The mean over all the run's steps, the ones before the resume included.
    losses = [l["loss"] for l in lines]
    assert summary["train_loss"] == sum(losses) / len(losses)
