"""Long-context probe (issue 31, GPU machine): the longest single row that trains, for us, Unsloth and
the transformers + PEFT loop, in the same call.

For each tool, shape (bench/shapes.py) and variant (lora: bf16 base; qlora: 4-bit NF4 base), gradient
checkpointing on (ours: --use_gradient_checkpointing true; Unsloth: use_gradient_checkpointing="unsloth",
its offloaded checkpointing; the loop: transformers' non-reentrant checkpointing), batch 1: a row of L
tokens (completions-only: the second half labelled, as the benchmark's rows) trains for 3 optimizer
steps. L doubles from --start while that succeeds, then bisects between the longest success and the
shortest failure down to --resolution tokens (1k). Every attempt is its own subprocess, so an
out-of-memory failure leaves the next attempt a clean device. An attempt's tokens/s is measured over
steps 2-3 (step 1 warms up), as bench.py measures.

Device calls last at most 10 minutes: --budget_s (or LONGCTX_BUDGET_S) stops starting attempts that
would not finish in time, and every attempt's result is written to --state at once, so a later call
given the same --state (and the same --work, while the machine stays warm) goes on where this one
stopped. Prints a table; the state file is the JSON record.

  python3 bench/long_context_probe.py --finetune build/finetune --shapes qwen3-8b --variants qlora \\
      --tools finetune,unsloth,loop --state OUT/long_context.json --work /tmp/longctx
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402
import shapes  # noqa: E402

TOOLS = ("finetune", "unsloth", "loop")
VARIANT_FLAGS = {"lora": [], "qlora": ["--load_in_4bit"]}
STEPS = 3


def rows_file(work, shape, length):
    """STEPS rows of `length` tokens (one per optimizer step), the second half of each labelled."""
    path = os.path.join(work, f"rows-{shape}-{length}.jsonl")
    if not os.path.exists(path):
        import torch
        vocab = shapes.SHAPES[shape][2]["vocab_size"]
        g = torch.Generator().manual_seed(length)
        with open(path + ".tmp", "w") as f:
            for _ in range(STEPS):
                ids = torch.randint(100, vocab - 100, (length,), generator=g).tolist()
                f.write(json.dumps({"input_ids": ids, "labels": [-100] * (length // 2) + ids[length // 2:]}) + "\n")
        os.rename(path + ".tmp", path)
    return path


def command(tool, args, model, data, length, variant, out_dir):
    flags = VARIANT_FLAGS[variant]
    if tool == "finetune":
        return [args.finetune, "--model_name", model, "--dataset", data, "--max_steps", str(STEPS),
                "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1",
                "--max_seq_length", str(length), "--logging_steps", "1", "--warmup_steps", "0",
                "--output_dir", out_dir, "--overwrite_output_dir", "--dtype", "bfloat16",
                "--use_gradient_checkpointing", "true"] + flags + args.finetune_flags.split()
    script = "peer_unsloth_train.py" if tool == "unsloth" else "reference_train.py"
    cmd = [sys.executable, os.path.join(HERE, script), "--model", model, "--data", data, "--batch", "1",
           "--accum", "1", "--steps", str(STEPS - 1), "--warmup_steps", "1", "--max_seq_length", str(length)] + flags
    return cmd + (["--out", out_dir] if tool == "unsloth" else [])


def finetune_result(stdout, out_dir):
    """tokens/s over steps 2-3 from metrics.jsonl (logging every step), peak memory from the summary line."""
    summary = json.loads(stdout.strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if '"step"' in l]
    first, last = lines[0], lines[-1]
    return {"tokens_per_s": (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"]),
            "peak_memory_gib": summary.get("peak_memory_gib")}


def attempt(tool, args, shape, variant, length):
    """One subprocess run of `length` tokens: {"ok": bool, "tokens_per_s", "peak_memory_gib", "wall_s", "error"}."""
    model = os.path.join(args.work, shape)
    data = rows_file(args.work, shape, length)
    name = f"{tool}-{shape}-{variant}-{length}"
    out_dir = os.path.join(args.work, name)
    log_path = out_dir + ".log"
    t0 = time.time()
    try:
        with open(log_path, "w") as log:
            proc = subprocess.run(command(tool, args, model, data, length, variant, out_dir), stdout=subprocess.PIPE,
                                  stderr=log, text=True, timeout=args.attempt_timeout, cwd=args.work,
                                  env=peers.environment(args.work))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {args.attempt_timeout} s", "wall_s": time.time() - t0}
    with open(log_path, "a") as log:
        log.write("\n--- stdout ---\n" + proc.stdout)
    wall = time.time() - t0
    if proc.returncode != 0:
        text = open(log_path, errors="replace").read().lower()
        oom = "out of memory" in text or "outofmemory" in text
        return {"ok": False, "oom": oom, "error": peers.failure_reason(log_path, proc.returncode), "wall_s": wall}
    try:
        result = finetune_result(proc.stdout, out_dir) if tool == "finetune" else peers.result_line(proc.stdout)
        result = {"tokens_per_s": result.get("tokens_per_s", result.get("tokens_per_s_per_gpu")),
                  "peak_memory_gib": result.get("peak_memory_gib")}
    except (ValueError, KeyError, IndexError, AttributeError, OSError) as e:
        return {"ok": False, "error": f"no result: {e} (log: {log_path})", "wall_s": wall}
    return dict(result, ok=True, wall_s=wall)


class Probe:
    """The doubling-then-bisection search of one (tool, shape, variant), its attempts kept in `state`."""

    def __init__(self, args, state, tool, shape, variant):
        self.args, self.state, self.key = args, state, f"{tool}/{shape}/{variant}"
        self.tool, self.shape, self.variant = tool, shape, variant
        self.attempts = state.setdefault("attempts", {}).setdefault(self.key, {})

    def run(self, length, deadline):
        """The attempt at `length` (from the state when already made); None when out of time."""
        if str(length) in self.attempts:
            return self.attempts[str(length)]
        expected = max((a.get("wall_s", 0) for a in self.attempts.values()), default=self.args.first_attempt_s)
        if time.time() + expected > deadline:
            return None
        print(f"[probe] {self.key} {length} tokens ...", flush=True)
        result = attempt(self.tool, self.args, self.shape, self.variant, length)
        print(f"[probe] {self.key} {length}: " + ("ok %.0f tokens/s" % result["tokens_per_s"] if result["ok"]
                                                  else "failed: " + result["error"][:200]), flush=True)
        self.attempts[str(length)] = result
        save_state(self.args.state, self.state)
        return result

    def search(self, deadline):
        """The longest length that trained, and whether the search finished. Only out-of-memory failures
    bound the search; any other failure ends it (see the state's "error" of that attempt)."""
        ok, failed = 0, None
        length = self.args.start
        while length <= self.args.max_length:  # doubling
            result = self.run(length, deadline)
            if result is None:
                return ok, False
            if not result["ok"]:
                if not result.get("oom"):  # a broken run (missing wheel, a bug): bisecting would repeat it
                    return ok, True
                failed = length
                break
            ok, length = length, length * 2
        if failed is None:
            return ok, True  # trained at --max_length
        while failed - ok > self.args.resolution:  # bisection on multiples of the resolution
            middle = (ok + failed) // 2 // self.args.resolution * self.args.resolution
            if middle in (ok, failed):
                break
            result = self.run(middle, deadline)
            if result is None:
                return ok, False
            if result["ok"]:
                ok = middle
            elif not result.get("oom"):
                return ok, True
            else:
                failed = middle
        return ok, True


def save_state(path, state):
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="qwen3-8b")
    p.add_argument("--variants", default="lora,qlora")
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--start", type=int, default=16384, help="the first length tried")
    p.add_argument("--max_length", type=int, default=1 << 20)
    p.add_argument("--resolution", type=int, default=1024)
    p.add_argument("--budget_s", type=float, default=float(os.environ.get("LONGCTX_BUDGET_S", 540)))
    p.add_argument("--attempt_timeout", type=int, default=420)
    p.add_argument("--first_attempt_s", type=float, default=90, help="expected time of a probe's first attempt")
    p.add_argument("--finetune_flags", default="", help="extra flags of ours, e.g. '--offload_activations false'")
    p.add_argument("--state", required=True, help="JSON record of every attempt; read first when it exists")
    p.add_argument("--work", default="/tmp/longctx")
    args = p.parse_args()
    deadline = time.time() + args.budget_s
    os.makedirs(args.work, exist_ok=True)
    state = json.load(open(args.state)) if os.path.exists(args.state) else {}
    for shape in args.shapes.split(","):
        shapes.make_model(shape, os.path.join(args.work, shape))
    summary = state.setdefault("longest", {})
    for shape in args.shapes.split(","):
        for variant in args.variants.split(","):
            for tool in args.tools.split(","):
                probe = Probe(args, state, tool, shape, variant)
                longest, finished = probe.search(deadline)
                summary[probe.key] = {"longest": longest, "finished": finished,
                                      "tokens_per_s": probe.attempts.get(str(longest), {}).get("tokens_per_s"),
                                      "peak_memory_gib": probe.attempts.get(str(longest), {}).get("peak_memory_gib")}
                save_state(args.state, state)
            # Ours at the longest row Unsloth trained: the tokens/s comparison at its maximum.
            peer = summary.get(f"unsloth/{shape}/{variant}", {})
            if "finetune" in args.tools and peer.get("finished") and peer.get("longest"):
                Probe(args, state, "finetune", shape, variant).run(peer["longest"], deadline)
    print(f"{'tool/shape/variant':40s} {'longest':>9s} {'tokens/s':>10s} {'peak GiB':>9s}  finished")
    for key, row in summary.items():
        tps = "%.0f" % row["tokens_per_s"] if row.get("tokens_per_s") else "-"
        peak = "%.1f" % row["peak_memory_gib"] if row.get("peak_memory_gib") else "-"
        print(f"{key:40s} {row['longest']:9d} {tps:>10s} {peak:>9s}  {row['finished']}")
    save_state(args.state, state)


if __name__ == "__main__":
    main()
