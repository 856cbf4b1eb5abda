"""Benchmark driver (GPU machine): our `finetune` against the transformers + PEFT (+ DDP) loop on
the same workload, same call. Prints a table and writes JSON.

  python3 bench/bench.py --finetune build/finetune --shapes llama-3.2-1b --settings seed,b8 --gpus 1 --out OUT

settings: seed = per-device batch 1, accumulation 4 (Unsloth multi-GPU guide); b8 = batch 8,
accumulation 1; best = packing for us (when available), batch 8 for the reference.
variants: lora = bf16 base; qlora = 4-bit NF4 base (--load_in_4bit; the reference quantizes with
transformers + bitsandbytes); qlora8 = qlora with 8-bit AdamW on both sides (Unsloth's defaults);
lora_eager, qlora_eager = ours without CUDA graphs (--cuda_graphs false), for on/off comparisons.
--peers unsloth,liger also runs the real peers right after ours and the reference, on the same rows and
setting (bench/peers.py; their wheels: bench/peer_wheels.sh); the table gains ours/peer ratios.
--dry_run prints every command instead of running it.
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

SETTINGS = {"seed": dict(batch=1, accum=4), "b8": dict(batch=8, accum=1), "best": dict(batch=8, accum=1),
            "fast": dict(batch=2, accum=1)}
# "fast" (ours only): packed rows without layer recompute, as many rows as keep the run within 80 GiB
# (so it also fits an H100); the 1B shape's "best" already runs without recompute.
FAST_ROWS = {"llama-3.2-1b": 8, "qwen3-8b": 4}
# "best" for us: packed rows of max_seq_length (2048) tokens, this many rows per micro-batch
# (the 8B shape keeps one row to stay within its memory target; so does the 9B Gemma-2 shape, whose
# soft-capped attention is eager).
PACKED_ROWS = {"llama-3.2-1b": 8, "qwen3-8b": 1, "gemma-3-4b": 2, "gemma-2-9b": 1, "phi-4-mini": 2,
               "qwen3-30b-a3b-8l": 4, "mixtral-8x7b-4l": 4}
# "best" for us also drops layer recompute where memory allows (the 1B shape: about 30 GiB of
# activations at 8 x 2048 tokens; the 4B shapes, scaled by layers x hidden size: about 20 GiB at
# 2 x 2048); the 8B and 9B shapes keep it (the 8B shape's 18 GiB target).
BEST_CHECKPOINTING = {"llama-3.2-1b": False, "qwen3-8b": True, "gemma-3-4b": False, "gemma-2-9b": True,
                      "phi-4-mini": False, "qwen3-30b-a3b-8l": False, "mixtral-8x7b-4l": False}
# "best" for the reference: the largest batch that fits (batch 8 on the 8B shape runs out of the
# H200's 141 GB: it materialises fp32 logits over the 152k vocabulary; the Gemma and Phi-4-mini
# vocabularies are 200k-262k).
REFERENCE_BEST_BATCH = {"llama-3.2-1b": 8, "qwen3-8b": 2, "gemma-3-4b": 4, "gemma-2-9b": 2, "phi-4-mini": 4,
                        "qwen3-30b-a3b-8l": 4, "mixtral-8x7b-4l": 4}
# Each variant's flags, ours and the reference's.
VARIANTS = {"lora": ([], []),
            "qlora": (["--load_in_4bit"], ["--load_in_4bit"]),
            "qlora8": (["--load_in_4bit", "--optim", "adamw_8bit"], ["--load_in_4bit", "--optim", "adamw_8bit"]),
            "lora_eager": (["--cuda_graphs", "false"], []),
            "qlora_eager": (["--load_in_4bit", "--cuda_graphs", "false"], ["--load_in_4bit"])}


def launcher(n):
    return [] if n == 1 else ["torchrun", "--no-python", "--standalone", f"--nproc_per_node={n}"]


def run(cmd, log_path, timeout, dry_run=False):
    if dry_run:
        print("dry-run:", " ".join(cmd), flush=True)
        return "", 0.0
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(open(log_path).read()[-3000:])
        raise RuntimeError(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout, time.time() - t0


def ours(args, model, data, setting, n, work, profile=False, variant="lora"):
    s = dict(SETTINGS[setting])
    checkpointing = True
    if setting == "best":
        s = dict(batch=PACKED_ROWS[os.path.basename(model)], accum=1)
        checkpointing = BEST_CHECKPOINTING[os.path.basename(model)]
    if setting == "fast":
        s = dict(batch=FAST_ROWS[os.path.basename(model)], accum=1)
        checkpointing = False
    out = os.path.join(work, f"ours-{os.path.basename(model)}-{setting}-{variant}-{n}" + ("-profile" if profile else ""))
    steps = args.warmup + args.steps if not profile else 6
    cmd = launcher(n) + [args.finetune, "--model_name", model, "--dataset", data, "--max_steps", str(steps),
                         "--per_device_train_batch_size", str(s["batch"]), "--gradient_accumulation_steps",
                         str(s["accum"]), "--learning_rate", "2e-4",  # r=16, alpha=16: the defaults (torchrun rejects --r)
                         "--max_seq_length", "2048", "--warmup_steps", "5", "--logging_steps", str(args.warmup),
                         "--output_dir", out, "--overwrite_output_dir", "--dtype", "bfloat16",
                         "--use_gradient_checkpointing", "true" if checkpointing else "false"]
    if setting in ("best", "fast"):
        cmd += ["--packing", "true"]
    cmd += VARIANTS[variant][0]
    if profile:  # steps 4-6 after 3 warm-up steps: kernel time breakdown and a Chrome trace
        cmd += ["--profile_start_step", "4", "--profile_steps", "3"]
        run(cmd, out + ".log", args.timeout, args.dry_run)
        if args.dry_run:
            return None
        summary = os.path.join(out, "kernel_summary-rank0.txt")
        name = f"kernel_summary-{os.path.basename(model)}-{setting}-{variant}.txt"
        with open(summary) as src, open(os.path.join(args.out, name), "w") as dst:
            text = src.read()
            dst.write(" ".join(cmd) + "\n\n" + text)
        print(f"\n== profile {os.path.basename(model)} {setting} {variant} (1 GPU) ==\n" + text, flush=True)
        return None
    stdout, wall = run(cmd, out + ".log", args.timeout, args.dry_run)
    if args.dry_run:
        return None
    summary = json.loads(stdout.strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    first, last = lines[0], lines[-1]  # exclude the first (warm-up) window
    tokens = last["tokens"] - first["tokens"]
    seconds = last["elapsed_s"] - first["elapsed_s"]
    # The peak so far at each logged step: a peer that runs fewer steps is compared at its own last step,
    # over the same samples (ours logs every --warmup steps).
    peak_by_step = {line["step"]: line["peak_memory_gib"] for line in lines if "peak_memory_gib" in line}
    return {"tool": "finetune", "tokens_per_s_per_gpu": tokens / seconds / n,
            "steps_per_s": (last["step"] - first["step"]) / seconds,
            "peak_memory_gib": summary.get("peak_memory_gib"), "peak_memory_gib_by_step": peak_by_step,
            "final_loss": last["loss"], "wall_s": wall}


def reference(args, model, data, setting, n, work, variant="lora"):
    s = dict(SETTINGS[setting])
    if setting == "best":
        s["batch"] = REFERENCE_BEST_BATCH[os.path.basename(model)]
    script = os.path.join(HERE, "reference_train.py")
    cmd = (["python3", script] if n == 1 else ["torchrun", "--standalone", f"--nproc_per_node={n}", script])
    cmd += ["--model", model, "--data", data, "--batch", str(s["batch"]), "--accum", str(s["accum"]),
            "--steps", str(args.ref_steps), "--warmup_steps", str(args.ref_warmup)] + VARIANTS[variant][1]
    stdout, wall = run(cmd, os.path.join(work, f"ref-{os.path.basename(model)}-{setting}-{variant}-{n}.log"),
                       args.timeout, args.dry_run)
    if args.dry_run:
        return None
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="llama-3.2-1b")
    p.add_argument("--settings", default="seed,b8")
    p.add_argument("--gpus", default="1")
    p.add_argument("--variants", default="lora", help="comma-separated: " + ", ".join(VARIANTS))
    p.add_argument("--qlora_check", action="store_true",
                   help="first check bf16 QLoRA logits against fp32 on the same dequantized weights (gpu_qlora_check.py)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ref_steps", type=int, default=10)
    p.add_argument("--ref_warmup", type=int, default=3, help="the reference's warm-up steps before timing")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
    p.add_argument("--skip_reference", action="store_true")
    p.add_argument("--skip_ours", action="store_true",
                   help="the reference (and --peers) only: a failing run of one does not cost the other's figures")
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--parity", action="store_true",
                   help="first check bf16 logits against transformers (bf16 and fp32) on each shape")
    p.add_argument("--train_parity", action="store_true",
                   help="first check a few bf16 training steps against transformers + PEFT (bf16 and fp32)")
    p.add_argument("--profile", action="store_true",
                   help="also profile 3 steps of ours per shape and setting on 1 GPU (kernel time breakdown)")
    p.add_argument("--peers", default="",
                   help="comma-separated, run after ours and the reference: " + ", ".join(peers.PEERS))
    p.add_argument("--peer_quick", action="store_true", help="peers try only their first 'best' configuration")
    p.add_argument("--peer_warmup", type=int, default=5,
                   help="peers' warm-up steps before timing (Unsloth compiles parts of its step lazily); "
                        "then --ref_steps timed steps")
    p.add_argument("--labels", choices=shapes.LABELS, default="completions",
                   help="the rows' labels: completions-only (the second half of each row) or every token")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args()
    peer_names = [name for name in args.peers.split(",") if name]
    unknown = set(peer_names) - set(peers.PEERS)
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}: choose from {', '.join(peers.PEERS)}")
    if args.dry_run:  # the checks before timing need the models; a dry run lists the timed commands only
        args.parity = args.train_parity = args.qlora_check = False
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for shape in args.shapes.split(","):
        model = os.path.join(args.work, shape)
        # --labels all: the same rows with every token labelled (Note in shapes.make_rows), so that
        # the pair of runs measures what the prompt positions would cost the LM head.
        data = os.path.join(args.work, f"{shape}.jsonl" if args.labels == "completions" else f"{shape}-{args.labels}-labels.jsonl")
        if args.dry_run:
            print(f"dry-run: make {model} and {data}", flush=True)
        else:
            shapes.make_model(shape, model)
        if not args.dry_run and not os.path.exists(data):
            with open(data, "w") as f:
                for row in shapes.make_rows(4000, shapes.SHAPES[shape][2]["vocab_size"], labels=args.labels):
                    f.write(json.dumps(row) + "\n")
        if args.parity:  # correctness first: bf16 logits vs transformers bf16 and fp32 (gpu_parity.py)
            stdout, _ = run(["python3", os.path.join(HERE, "gpu_parity.py"), "--finetune", args.finetune, "--model",
                             model, "--data", data, "--work", args.work], os.path.join(args.work, f"parity-{shape}.log"),
                            args.timeout)
            worst = json.loads(stdout[stdout.index("{"):])["worst"]
            print(json.dumps({"shape": shape, "parity_worst": worst}), flush=True)
        if args.train_parity:  # bf16 training steps vs transformers + PEFT in bf16 and fp32 (gpu_train_parity.py)
            proc = subprocess.run(["python3", os.path.join(HERE, "gpu_train_parity.py"), "--finetune", args.finetune,
                                   "--model", model, "--data", data, "--work", args.work], capture_output=True,
                                  text=True, timeout=args.timeout)
            with open(os.path.join(args.out, f"train_parity-{shape}.json"), "w") as f:
                f.write(proc.stdout + proc.stderr[-3000:])
            print(proc.stdout, flush=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:])
                raise RuntimeError(f"GPU training parity failed on {shape}")
        if args.qlora_check:  # bf16 QLoRA vs fp32 on the same dequantized weights, before any timing
            stdout, _ = run(["python3", os.path.join(HERE, "gpu_qlora_check.py"), "--finetune", args.finetune,
                             "--model", model, "--data", data, "--work", args.work],
                            os.path.join(args.work, f"qlora_check-{shape}.log"), args.timeout)
            with open(os.path.join(args.out, f"qlora_check-{shape}.json"), "w") as f:
                f.write(stdout)
            print(stdout, flush=True)
        variants = args.variants.split(",")
        if args.profile:
            for setting in args.settings.split(","):
                for variant in variants:
                    ours(args, model, data, setting, 1, args.work, profile=True, variant=variant)
        for setting in args.settings.split(","):
            for n in map(int, args.gpus.split(",")):
                for variant in variants:
                    row = {"shape": shape, "setting": setting, "variant": variant, "gpus": n, "labels": args.labels}
                    if not args.skip_ours:
                        row["ours"] = ours(args, model, data, setting, n, args.work, variant=variant)
                    # "fast" is ours only (the reference and the peers have their "best").
                    if not args.skip_reference and setting != "fast":
                        row["reference"] = reference(args, model, data, setting, n, args.work, variant=variant)
                    for peer in (peer_names if setting != "fast" else []):
                        row[peer] = peers.run(peer, model, data, setting, SETTINGS, n, variant, VARIANTS[variant][1],
                                              args)
                    if args.dry_run:
                        continue
                    results.append(row)
                    print(json.dumps(row), flush=True)
                    with open(os.path.join(args.out, "bench-" + args.shapes.replace(",", "_") + ".json"), "w") as f:
                        json.dump(results, f, indent=1)
    if args.dry_run or args.skip_ours:  # the table compares with ours; the JSON lines above hold the rest
        return
    print(f"\n{'shape':14} {'setting':7} {'variant':7} {'gpus':>4} {'ours tok/s/gpu':>15} {'ref tok/s/gpu':>14} "
          f"{'ratio':>6} {'ours GiB':>9} {'ref GiB':>8} {'ours steps/s':>12}"
          + "".join(f" {peer + ' tok/s':>14} {'ours/' + peer:>13} {peer + ' GiB':>12}" for peer in peer_names))
    base, lora = {}, {}
    for r in results:
        lora.setdefault((r["shape"], r["setting"], r["gpus"]), {})[r["variant"]] = r["ours"]["tokens_per_s_per_gpu"]
    for r in results:
        o, ref = r["ours"], r.get("reference", {})
        ratio = o["tokens_per_s_per_gpu"] / ref["tokens_per_s_per_gpu"] if ref else float("nan")
        key = (r["shape"], r["setting"], r["variant"])
        base.setdefault(key, o["tokens_per_s_per_gpu"])
        eff = o["tokens_per_s_per_gpu"] / base[key]
        same = lora[(r["shape"], r["setting"], r["gpus"])]
        vs_lora = f"  vs our bf16 LoRA {o['tokens_per_s_per_gpu'] / same['lora']:.2f}" \
            if r["variant"] != "lora" and "lora" in same else ""
        print(f"{r['shape']:14} {r['setting']:7} {r['variant']:7} {r['gpus']:>4} {o['tokens_per_s_per_gpu']:>15.0f} "
              f"{ref.get('tokens_per_s_per_gpu', float('nan')):>14.0f} {ratio:>6.2f} {o['peak_memory_gib'] or 0:>9.2f} "
              f"{ref.get('peak_memory_gib', float('nan')):>8.2f} {o['steps_per_s']:>12.2f}"
              + "".join(peer_columns(o, r.get(peer)) for peer in peer_names)
              + f"  scaling {eff:.3f}{vs_lora}")
    for r in results:  # why a peer has no figures
        for peer in peer_names:
            if peer in r and "error" in r[peer]:
                print(f"{peer} failed on {r['shape']} {r['setting']} {r['variant']} {r['gpus']} GPU: "
                      f"{r[peer]['error']}")


def peer_columns(ours_result, peer_result):
    """A peer's tokens/s, ours/peer and its peak GiB for the table, or 'failed' (the reason is printed
    below the table and kept in the JSON), or '-' where the setting runs no peers ("fast")."""
    if peer_result is None:
        return f" {'-':>14} {'-':>13} {'-':>12}"
    if "error" in peer_result:
        return f" {'failed':>14} {'-':>13} {'-':>12}"
    speed = peer_result["tokens_per_s_per_gpu"]
    return (f" {speed:>14.0f} {ours_result['tokens_per_s_per_gpu'] / speed:>13.2f}"
            f" {peer_result.get('peak_memory_gib') or float('nan'):>12.2f}")


if __name__ == "__main__":
    main()
