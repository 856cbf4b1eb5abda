"""CUDA graphs of micro-steps (issue 15) on the GPU machine: ours with --cuda_graphs true and false on
the benchmark workload (bench/shapes.py), same call; tokens/s after the first logging window, peak
memory, final loss, and the graph counts the run logs. Optionally a profile of 3 steps with graphs.

  python3 bench/gpu_graphs_check.py --finetune build/finetune --shapes llama-3.2-1b --work /tmp/bench --out $OUT
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shapes  # noqa: E402

SETTINGS = {"seed": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4"],
            "b8": ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1"]}


def run(args, model, data, setting, graphs, extra=()):
    out = os.path.join(args.work, f"graphs-{os.path.basename(model)}-{setting}-{graphs}")
    cmd = [args.finetune, "--model_name", model, "--dataset", data, "--max_steps", str(args.warmup + args.steps),
           "--learning_rate", "2e-4", "--max_seq_length", "2048", "--warmup_steps", "5",
           "--logging_steps", str(args.warmup), "--output_dir", out, "--overwrite_output_dir", "--dtype", "bfloat16",
           "--use_gradient_checkpointing", "true", "--cuda_graphs", graphs] + SETTINGS[setting] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    with open(out + ".log", "w") as f:
        f.write(proc.stderr)
    if proc.returncode != 0:
        print(proc.stderr[-4000:])
        return {"error": f"exit {proc.returncode}"}
    if "--profile_start_step" in extra:
        return {"profile": os.path.join(out, "kernel_summary-rank0.txt")}
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    first, last = lines[0], lines[-1]
    counts = re.search(r"CUDA graphs: (\d+) micro-step shapes captured, (\d+) replays", proc.stderr)
    return {"tokens_per_s": (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"]),
            "peak_memory_gib": summary.get("peak_memory_gib"), "losses": [l["loss"] for l in lines],
            "graphs": counts.groups() if counts else None}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="llama-3.2-1b")
    p.add_argument("--settings", default="seed")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rows = []
    for shape in args.shapes.split(","):
        model = os.path.join(args.work, shape)
        shapes.make_model(shape, model)
        data = os.path.join(args.work, f"{shape}.jsonl")
        if not os.path.exists(data):
            with open(data, "w") as f:
                for row in shapes.make_rows(4000, shapes.SHAPES[shape][2]["vocab_size"]):
                    f.write(json.dumps(row) + "\n")
        for setting in args.settings.split(","):
            row = {"shape": shape, "setting": setting}
            for graphs in ("true", "false"):
                row[f"graphs_{graphs}"] = run(args, model, data, setting, graphs)
            on, off = row["graphs_true"], row["graphs_false"]
            if "tokens_per_s" in on and "tokens_per_s" in off:
                row["speedup"] = on["tokens_per_s"] / off["tokens_per_s"]
                # Same data, same order: the losses differ only by the padded layout's rounding.
                row["max_loss_relative_difference"] = max(abs(a - b) / abs(b) for a, b in zip(on["losses"], off["losses"]))
            if args.profile:
                prof = run(args, model, data, setting, "true", ["--profile_start_step", "12", "--profile_steps", "3"])
                if "profile" in prof and os.path.exists(prof["profile"]):
                    text = open(prof["profile"]).read()
                    with open(os.path.join(args.out, f"graphs_profile-{shape}-{setting}.txt"), "w") as f:
                        f.write(text)
                    print(f"== profile {shape} {setting} (graphs)\n" + text[:3000])
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "graphs_check.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
