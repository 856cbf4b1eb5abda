#!/usr/bin/env python3
"""Bitwise resume on the GPU: kill -9 a bf16 training run at a random checkpoint, resume it with
--resume_from_checkpoint true, and compare every logged loss and grad norm and the final adapter
with an uninterrupted run, bit for bit. Exits non-zero on any difference.

  python3 bench/gpu_resume_check.py --finetune build/finetune [--trials 3] [--work /tmp/resume_check]
(--device cpu --dtype float32 runs the same check on the CPU.)
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import tiny_models  # noqa: E402


def train_args(args, model, data, out):
    return [args.finetune, "--model_name", model, "--dataset", data, "--output_dir", out,
            "--max_steps", args.steps, "--per_device_train_batch_size", 4, "--gradient_accumulation_steps", 2,
            "--learning_rate", 2e-3, "--warmup_steps", 2, "--r", 8, "--lora_dropout", 0.1,
            "--logging_steps", 3, "--save_steps", 1, "--dtype", args.dtype, "--device", args.device,
            "--use_gradient_checkpointing", "true", "--packing", "true", "--max_seq_length", 256]


def run(argv):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} exited {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def metrics(out):
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--work", default="/tmp/resume_check")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    model = os.path.join(args.work, "model")
    data = os.path.join(args.work, "train.jsonl")
    tiny_models.make_model("llama", model)
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(200, seed=3, max_len=120, completion_only=True))

    reference = os.path.join(args.work, "reference")
    run(train_args(args, model, data, reference))
    want_metrics, want_adapter = metrics(reference), load_file(os.path.join(reference, "adapter_model.safetensors"))
    # Determinism first: a second uninterrupted run must already agree, or resume cannot.
    again = os.path.join(args.work, "again")
    run(train_args(args, model, data, again))
    same = [m["loss"] for m in metrics(again)] == [m["loss"] for m in want_metrics]
    print(json.dumps({"uninterrupted_runs_identical": same}), flush=True)

    rng = random.Random(11)
    failures = 0
    for trial in range(args.trials):
        out = os.path.join(args.work, f"killed{trial}")
        stop = rng.randint(2, args.steps - 3)
        job = subprocess.Popen([str(a) for a in train_args(args, model, data, out)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not os.path.isdir(os.path.join(out, f"checkpoint-{stop}")) and job.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        job.send_signal(signal.SIGKILL)
        job.wait()
        killed_at = max(int(d.split("-")[1]) for d in os.listdir(out) if d.startswith("checkpoint-") and d[11:].isdigit())
        proc = run(train_args(args, model, data, out) + ["--resume_from_checkpoint", "true"])
        got_metrics = metrics(out)
        got_adapter = load_file(os.path.join(out, "adapter_model.safetensors"))
        losses = [m["loss"] for m in got_metrics] == [m["loss"] for m in want_metrics]
        norms = [m["grad_norm"] for m in got_metrics] == [m["grad_norm"] for m in want_metrics]
        adapter = all(torch.equal(got_adapter[k], want_adapter[k]) for k in want_adapter)
        ok = losses and norms and adapter and "resuming from" in proc.stderr
        failures += not ok
        print(json.dumps({"trial": trial, "killed_after_checkpoint": killed_at, "losses_bitwise": losses,
                          "grad_norms_bitwise": norms, "adapter_bitwise": adapter, "pass": ok}), flush=True)
    print(json.dumps({"trials": args.trials, "failures": failures, "pass": failures == 0 and same}))
    sys.exit(0 if failures == 0 and same else 1)


if __name__ == "__main__":
    main()
