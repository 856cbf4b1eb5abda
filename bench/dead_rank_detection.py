"""How fast a survivor notices a dead peer: 2 plain processes (no launcher: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT in their environment, rank 0 hosting the rendezvous store)
train a tiny Llama with a long --ddp_timeout; each rank in turn is killed (SIGKILL) at a random
moment of training, several trials each. Prints, per trial, the time from the kill to the
survivor's exit and the survivor's last error line.

Exits 1 if any survivor took longer than --bound seconds (5: Note [Peer heartbeats] in
include/finetune/ddp/peer_monitor.h), exited 0, or did not name the dead rank.

  python3 bench/dead_rank_detection.py --finetune build/finetune                # 2 GPUs, NCCL
  python3 bench/dead_rank_detection.py --finetune build/finetune --device cpu   # Gloo, anywhere
Needs only python3 with torch and transformers (the model is generated, nothing is downloaded).
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import tiny_models  # noqa: E402

LAUNCHER_VARIABLES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                      "MASTER_ADDR", "MASTER_PORT"}
LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK", "SLURM_", "TORCHELASTIC_")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, port, device):
    """This shell's environment without any launcher's variables, plus torchrun's for `rank`."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and not k.startswith(LAUNCHER_PREFIXES)}
    env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    if device == "cpu":
        env["OMP_NUM_THREADS"] = "1"
    else:
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast on the shared machines
    return env


def prepare(work):
    model = os.path.join(work, "model")
    if not os.path.exists(os.path.join(model, "config.json")):
        tiny_models.make_model("llama", model)
    data = os.path.join(work, "rows.jsonl")
    if not os.path.exists(data):
        tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(256, seed=3, max_len=64, completion_only=True))
    return model, data


def error_lines(text):
    return [line for line in text.splitlines() if "[error]" in line]


def trial(args, model, data, victim, number, rng):
    out = os.path.join(args.work, f"victim{victim}_trial{number}")
    os.makedirs(out, exist_ok=True)
    metrics = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    port = free_port()
    command = [args.finetune, "--model_name", model, "--dataset", data, "--output_dir", out,
               "--max_steps", "1000000", "--per_device_train_batch_size", "2", "--learning_rate", "1e-4",
               "--logging_steps", "1", "--save_steps", "0", "--ddp_timeout", str(args.ddp_timeout),
               "--device", args.device, "--ddp_backend", "gloo" if args.device == "cpu" else "nccl",
               "--dtype", "float32" if args.device == "cpu" else "bfloat16", "--use_gradient_checkpointing", "false"]
    logs = [(os.path.join(out, f"rank{r}.out"), os.path.join(out, f"rank{r}.err")) for r in range(2)]
    processes = []
    for rank in range(2):
        with open(logs[rank][0], "w") as stdout, open(logs[rank][1], "w") as stderr:
            processes.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, env=rank_env(rank, port, args.device)))
    survivor = 1 - victim
    result = {"victim": victim, "trial": number, "ok": False}
    try:
        deadline = time.monotonic() + args.startup_timeout
        while not (os.path.exists(metrics) and open(metrics).read().count("\n") >= 1):
            early = [r for r, p in enumerate(processes) if p.poll() is not None]
            if early or time.monotonic() > deadline:
                what = f"rank {early[0]} exited {processes[early[0]].returncode}" if early else "no step logged"
                last_errors = [(error_lines(open(logs[r][1]).read()) or ["(none)"])[-1] for r in range(2)]
                result["problem"] = f"{what} before the kill; last errors: {last_errors}"
                return result
            time.sleep(0.05)
        delay = rng.uniform(0, args.max_delay)
        time.sleep(delay)
        steps = open(metrics).read().count("\n")
        processes[victim].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            code = processes[survivor].wait(timeout=args.give_up)
        except subprocess.TimeoutExpired:
            code = None
        elapsed = time.monotonic() - killed_at
    finally:
        for p in processes:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in processes:
            p.wait(timeout=60)
    errors = error_lines(open(logs[survivor][1]).read())
    named = any(re.search(rf"rank {survivor}: (.* )?rank {victim} (stopped sending heartbeats|is gone|exited with an "
                          rf"error)", line) for line in errors)
    result.update(delay_s=round(delay, 2), steps_before_kill=steps, exit_code=code,
                  detection_s=round(elapsed, 2) if code is not None else None,
                  error=errors[-1] if errors else "", named_dead_rank=named)
    result["ok"] = code is not None and code != 0 and elapsed <= args.bound and named
    if code is None:
        result["problem"] = f"rank {survivor} still running {args.give_up} s after rank {victim} was killed"
    elif code == 0:
        result["problem"] = f"rank {survivor} exited 0"
    elif elapsed > args.bound:
        result["problem"] = f"detection took {elapsed:.2f} s > {args.bound} s"
    elif not named:
        result["problem"] = f"rank {survivor}'s errors do not name rank {victim} as dead"
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finetune", default=os.path.join(ROOT, "build", "finetune"))
    parser.add_argument("--work", default="/tmp/dead_rank_detection")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cuda: NCCL on 2 GPUs; cpu: Gloo")
    parser.add_argument("--trials", type=int, default=4, help="kills of each rank")
    parser.add_argument("--bound", type=float, default=5.0, help="seconds a survivor may take to exit")
    parser.add_argument("--ddp_timeout", type=float, default=1800, help="long: the survivor must not wait for it")
    parser.add_argument("--max_delay", type=float, default=3.0, help="kill at a random moment up to this after step 1")
    parser.add_argument("--startup_timeout", type=float, default=180)
    parser.add_argument("--give_up", type=float, default=60, help="stop waiting for a survivor after this")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if not os.path.exists(args.finetune):
        raise SystemExit(f"no binary at {args.finetune} (build with scripts/setup.sh, or pass --finetune)")
    os.makedirs(args.work, exist_ok=True)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    model, data = prepare(args.work)
    print(f"dead-rank detection: {args.device}, --ddp_timeout {args.ddp_timeout:g}, {args.trials} kills per rank, "
          f"bound {args.bound:g} s, seed {seed}", flush=True)

    results = []
    for number in range(args.trials):
        for victim in (1, 0):
            r = trial(args, model, data, victim, number, rng)
            results.append(r)
            if "detection_s" in r:
                head = (f"kill rank {victim} (trial {number}, {r['delay_s']:.2f} s after step 1, {r['steps_before_kill']} "
                        f"steps logged): rank {1 - victim} exited {r['exit_code']} after "
                        f"{r['detection_s'] if r['detection_s'] is not None else '>' + str(args.give_up)} s")
            else:
                head = f"kill rank {victim} (trial {number}): not run"
            print(("ok    " if r["ok"] else "FAIL  ") + head, flush=True)
            if r.get("error"):
                print("      " + r["error"], flush=True)
            if r.get("problem"):
                print("      problem: " + r["problem"], flush=True)

    summary = {"device": args.device, "seed": seed, "bound_s": args.bound, "trials": len(results),
               "failed": sum(not r["ok"] for r in results)}
    for victim in (1, 0):
        times = [r["detection_s"] for r in results if r["victim"] == victim and r.get("detection_s") is not None]
        if times:
            summary[f"kill_rank{victim}_s"] = {"min": min(times), "median": statistics.median(times), "max": max(times)}
    print(json.dumps(summary))
    sys.exit(1 if summary["failed"] else 0)


if __name__ == "__main__":
    main()
