"""The benchmark's peers, raced in the same call as ours (bench.py --peers unsloth,liger):
  unsloth  Unsloth's FastLanguageModel + its patched TRL SFTTrainer (peer_unsloth_train.py)
  liger    the reference loop (transformers + PEFT) on Liger kernels (reference_train.py --liger)
Both report tokens/s per GPU the way reference_train.py does. A peer that cannot run (a missing
wheel, an error in its code, a timeout) gives {"error": <why>} instead of stopping the benchmark.
Their packages travel as wheels: bench/peer_wheels.sh. One peer alone, on one shape and setting (what
bench/gpu_families.sh runs beside ours on another GPU), prints its result as one JSON line:

  python3 bench/peers.py unsloth --model /tmp/bench/gemma-2-9b --data /tmp/bench/gemma-2-9b.jsonl \
      --setting seed --steps 8 --warmup 5 --work /tmp/bench --timeout 200
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = ("unsloth", "liger")
# "best" for each peer: the micro-batches tried (accumulation 1), the fastest reported. Unsloth packs
# rows into 2048-token sequences (its sample packing): our packed row counts and twice them. Liger
# pads each batch to its longest row, but keeps no logits, so it fits larger batches than the reference.
UNSLOTH_BEST_PACKED_ROWS = {"llama-3.2-1b": [8, 16], "qwen3-8b": [1, 4], "gemma-3-4b": [2, 4], "gemma-2-9b": [1, 4],
                            "phi-4-mini": [2, 4]}
LIGER_BEST_BATCH = {"llama-3.2-1b": [8, 16], "qwen3-8b": [4, 8]}


def configurations(peer, shape, setting, settings, quick=False):
    """The (batch, accumulation, packing) configurations a peer runs for a setting; `quick` keeps the
    first "best" candidate only (for device calls short of time)."""
    if setting != "best":
        return [dict(settings[setting], packing=False)]
    if peer == "unsloth":
        tries = [dict(batch=b, accum=1, packing=True) for b in UNSLOTH_BEST_PACKED_ROWS[shape]]
    else:
        tries = [dict(batch=b, accum=1, packing=False) for b in LIGER_BEST_BATCH[shape]]
    return tries[:1] if quick else tries


def command(peer, model, data, config, n, steps, warmup, variant_flags, out_dir):
    script = os.path.join(HERE, "peer_unsloth_train.py" if peer == "unsloth" else "reference_train.py")
    cmd = [sys.executable, script] if n == 1 else ["torchrun", "--standalone", f"--nproc_per_node={n}", script]
    cmd += ["--model", model, "--data", data, "--batch", str(config["batch"]), "--accum", str(config["accum"]),
            "--steps", str(steps), "--warmup_steps", str(warmup)] + list(variant_flags)
    if peer == "unsloth":
        cmd += ["--out", out_dir] + (["--packing"] if config["packing"] else [])
    else:
        cmd += ["--liger"]
    return cmd


def environment(work):
    """No hub access on the GPU machine: Unsloth must not try (statistics ping, model-name lookups), and
    its compiled-module cache goes to the work directory, not the repository."""
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", UNSLOTH_DISABLE_STATISTICS="1",
                UNSLOTH_COMPILE_LOCATION=os.path.join(work, "unsloth_compiled_cache"), TOKENIZERS_PARALLELISM="false")


def failure_reason(log_path, returncode):
    """The exception line a failed run ended on (or its last line), with the exit status."""
    try:
        lines = [l.rstrip() for l in open(log_path, errors="replace") if l.strip()]
    except OSError:
        lines = []
    errors = [l for l in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", l)]
    last = errors[-1] if errors else (lines[-1] if lines else "no output")
    return f"exit {returncode}: {last[:500]} (log: {log_path})"


def result_line(stdout):
    """The JSON result: the last stdout line that parses as an object with "tool" (Unsloth prints more)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                continue
            if "tool" in result:
                return result
    return None


def run_one(peer, cmd, log_path, work, timeout):
    t0 = time.time()
    try:
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, cwd=work,
                                  env=environment(work))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s (log: {log_path})"}
    with open(log_path, "a") as log:  # the log keeps both streams (stdout holds Unsloth's banners)
        log.write("\n--- stdout ---\n" + proc.stdout)
    result = result_line(proc.stdout) if proc.returncode == 0 else None
    if result is None:
        return {"error": failure_reason(log_path, proc.returncode) if proc.returncode
                else f"no result line in the output (log: {log_path})"}
    result["wall_s"] = time.time() - t0
    return result


def run(peer, model, data, setting, settings, n, variant, variant_flags, args):
    """Runs a peer's configurations for one row; returns the fastest result (all tries under "tries"
    when there were several), or the error of the last one when none ran."""
    shape = os.path.basename(model)
    results = []
    for config in configurations(peer, shape, setting, settings, args.peer_quick):
        name = f"{peer}-{shape}-{setting}-{variant}-{n}-b{config['batch']}a{config['accum']}" + \
            ("-packed" if config["packing"] else "")
        cmd = command(peer, model, data, config, n, args.ref_steps, args.peer_warmup, variant_flags,
                      os.path.join(args.work, name))
        if args.dry_run:
            print("dry-run:", " ".join(cmd), flush=True)
            continue
        result = run_one(peer, cmd, os.path.join(args.work, name + ".log"), args.work, args.timeout)
        result["config"] = config
        results.append(result)
    if not results:
        return None
    ran = [r for r in results if "error" not in r]
    best = dict(max(ran, key=lambda r: r["tokens_per_s_per_gpu"]) if ran else results[-1])
    if len(results) > 1:
        best["tries"] = results
    return best


def main():
    import bench  # its settings and variants (bench imports this module: not at the top)
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=PEERS)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--setting", default="seed", choices=list(bench.SETTINGS))
    p.add_argument("--variant", default="lora", choices=list(bench.VARIANTS))
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--steps", type=int, default=8, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="steps before timing")
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--timeout", type=int, default=300, help="seconds per configuration")
    p.add_argument("--quick", action="store_true", help="'best': the first configuration only")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    # run() reads the options under bench.py's names
    options = argparse.Namespace(peer_quick=args.quick, ref_steps=args.steps, peer_warmup=args.warmup,
                                 work=args.work, timeout=args.timeout, dry_run=args.dry_run)
    result = run(args.peer, args.model, args.data, args.setting, bench.SETTINGS, args.gpus, args.variant,
                 bench.VARIANTS[args.variant][1], options)
    if result is not None:
        print(json.dumps(dict(result, peer=args.peer, shape=os.path.basename(args.model), setting=args.setting)),
              flush=True)


if __name__ == "__main__":
    main()
