"""Gemma-2's soft-capped attention on the GPU's padding-free path, before and after a change, in one
device call (Note [Batched packed attention] in include/finetune/model/attention_kernels.h):

  1. with --core_tests: the after tree's finetune_core_tests cases PackedEagerAttention* (the CPU
     equality with the per-sample path, the bf16 CUDA comparison) and the disabled timing case
     PackedEagerAttentionTiming.DISABLED_Gemma2Row (one layer's attention, forward + backward, at
     Gemma-2-9B's head shapes on a packed row of ten samples: per-sample vs batched, bf16 on CUDA);
  2. bench/bench.py's "best" setting (packed 2048-token rows) on the gemma-2-9b shape for each
     finetune binary, alternating (--order, default before, after, after, before), tokens/s and
     peak memory per run.

  python3 bench/gpu_softcap_attention.py --before /tmp/trees/before/build-gpu/finetune \\
      --after /tmp/trees/after/build-gpu/finetune --core_tests /tmp/trees/after/build-gpu/finetune_core_tests

bench.py's "best" tables name no gemma shape yet: this script takes 1 packed row per micro-batch with
layer recompute for gemma-2-9b (the 8B shape's choice) unless bench.py already names one.
Output: one JSON line per step and run on stdout, and a summary table at the end.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import shapes  # noqa: E402


def core_tests(binary, timeout):
    """The PackedEagerAttention* cases (disabled timing case included); their printed lines."""
    cmd = [binary, "--gtest_also_run_disabled_tests", "--gtest_filter=PackedEagerAttention*"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in proc.stdout.splitlines()
             if "forward+backward" in l or "relative L2" in l or l.startswith(("[  FAILED", "[  PASSED", "[  SKIPPED"))]
    return {"step": "core_tests", "exit": proc.returncode, "lines": lines,
            "tail": proc.stdout[-2000:] if proc.returncode else ""}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--before", required=True, help="the finetune binary before the change")
    p.add_argument("--after", required=True, help="the finetune binary after the change")
    p.add_argument("--core_tests", help="the after tree's finetune_core_tests (step 1; skipped without it)")
    p.add_argument("--shape", default="gemma-2-9b")
    p.add_argument("--rows", type=int, default=1, help="packed 2048-token rows per micro-batch")
    p.add_argument("--order", default="before,after,after,before")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
    p.add_argument("--timeout", type=int, default=900)
    args = p.parse_args()
    args.finetune, args.dry_run = None, False  # read by bench.ours
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    if args.core_tests:
        print(json.dumps(core_tests(args.core_tests, args.timeout)), flush=True)

    bench.PACKED_ROWS.setdefault(args.shape, args.rows)
    bench.BEST_CHECKPOINTING.setdefault(args.shape, True)
    model = os.path.join(args.work, args.shape)
    data = os.path.join(args.work, f"{args.shape}.jsonl")
    started = time.time()
    shapes.make_model(args.shape, model)
    if not os.path.exists(data):
        with open(data, "w") as f:
            for row in shapes.make_rows(4000, shapes.SHAPES[args.shape][2]["vocab_size"]):
                f.write(json.dumps(row) + "\n")
    print(json.dumps({"step": "model", "shape": args.shape, "seconds": round(time.time() - started, 1)}), flush=True)

    binaries = {"before": args.before, "after": args.after}
    runs = []
    for name in args.order.split(","):
        args.finetune = binaries[name]
        try:
            result = bench.ours(args, model, data, "best", 1, args.work)
        except Exception as e:  # noqa: BLE001 (the failure is the run's result; its log is under --work)
            result = {"error": str(e)[-500:]}
        runs.append((name, result))
        print(json.dumps({"step": "bench", "tree": name, "shape": args.shape, "setting": "best", **result}), flush=True)

    print(f"\n{'tree':7} {'tok/s':>9} {'peak GiB':>9} {'loss':>8}")
    for name, r in runs:
        if "error" in r:
            print(f"{name:7} failed: {r['error'][-200:]}")
        else:
            print(f"{name:7} {r['tokens_per_s_per_gpu']:>9.0f} {r['peak_memory_gib'] or 0:>9.2f} {r['final_loss']:>8.4f}")
    done = {name: [r["tokens_per_s_per_gpu"] for n, r in runs if n == name and "error" not in r] for name in binaries}
    if done["before"] and done["after"]:
        before = sum(done["before"]) / len(done["before"])
        after = sum(done["after"]) / len(done["after"])
        print(f"after / before: {after / before:.3f} ({after:.0f} vs {before:.0f} tok/s, means of the runs)")


if __name__ == "__main__":
    main()
