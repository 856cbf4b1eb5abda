"""Preference training on the GPU machine (issue 32): `finetune dpo` against TRL's DPOTrainer with
PEFT (bench/trl_dpo_train.py) on the bench shapes (bench/shapes.py), batch 1 x accumulation 4,
1 and 2 GPUs: tokens/s per GPU (chosen + rejected tokens, no padding), peak memory, ours/TRL and
the 2-GPU scaling (2-GPU tokens/s per GPU over 1-GPU tokens/s); and ours eager (--cuda_graphs
false) on 1 GPU against ours graphed.

  python3 bench/dpo_bench.py --finetune build/finetune [--shapes llama-3.2-1b,qwen3-8b] [--gpus 1,2] \\
      [--budget_s 480] [--dry_run] --out OUT

Ours runs with the defaults a user gets (CUDA graphs on: --cuda_graphs defaults to true for
`finetune dpo` as for `train`). The widest run is timed over --steps optimizer steps after --warmup
steps; a run on g GPUs takes widest/g times as many of each, so every GPU count (and the eager run)
is timed over the same pairs. The warm-up window holds the one-time work (the CUDA graphs' eager
warm-up and their capture ahead, Note [Capture ahead] in train/micro_step_graphs.h). TRL runs
--ref_steps steps after --ref_warmup (it is far slower; its tokens/s settles after 2 steps).

Order (most wanted first) and time: the runs go one at a time, each alone on the machine, in the
order ours graphed (every shape and GPU count: the scaling), TRL on 1 GPU (ours/TRL), ours eager
on the first of --eager_shapes (graphed/eager), TRL on 2 GPUs, ours eager on the other shapes;
--tools keeps some of them; --previous (an earlier call's dpo_bench.json on the same warm
machine) keeps its finished runs and runs the rest. --budget_s bounds the whole: a run whose estimate no longer fits is
skipped, and each run's timeout is what is left (its process group is killed then, torchrun's
workers included). dpo_bench.json and dpo_summary.txt under --out are
rewritten after every run, so what finished is there even if the caller is stopped.

The models are bench/shapes.py's random-init ones with a small byte-level BPE tokenizer saved beside
them (the shapes ship none; its ids index the models' embeddings); the rows are --pairs explicit
prompt/chosen/rejected strings of random words, log-normal lengths (prompt ~120, completions ~100
tokens). TRL reads the first --ref_pairs of them (enough for its steps; its tokenisation is then
short). TRL's wheel: bench/peer_wheels.sh (carry .whl, install into /tmp/site, PYTHONPATH).
--shapes tiny (a 2-layer Llama, CPU-sized) with --dtype float32 runs the same code on a machine
without a GPU (a smoke test of this script).
"""
import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

WORDS = ("the a sun moon tree rock fox owl cat dog red blue green over under near behind shines hides stands looks "
         "answer question because therefore however quickly slowly bright dark river mountain city road").split()

# Seconds a run takes on an H100 (load, warm-up, the timed steps at the default --steps), from
# the shapes' SFT timings (bench/RESULTS.md) with DPO's reference forward and TRL's ~1 min 8B
# load: only to skip a run that cannot finish inside --budget_s.
# A 1-GPU run of ours (twice the steps of a 2-GPU one) is the longer; TRL on 2 GPUs starts slower.
ESTIMATE_S = {("ours", "llama-3.2-1b"): 35, ("ours", "qwen3-8b"): 75,
              ("trl", "llama-3.2-1b"): 40, ("trl", "qwen3-8b"): 100}
# Timed steps of the widest run when --steps is not given: the 1B's 60 steps last 3.5 s on two
# H200s, and its 5-step windows ranged 52k-82k tok/s there (bench/RESULTS.md, 2026-11-27), so it
# gets 200; the 8B's 60 last 14 s.
DEFAULT_STEPS = {"llama-3.2-1b": 200}
TINY = dict(vocab_size=600, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True)


def make_model(shape, model_dir):
    if shape != "tiny":
        import shapes
        shapes.make_model(shape, model_dir)
        return
    if os.path.exists(os.path.join(model_dir, "config.json")):
        return
    import torch
    import transformers
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).save_pretrained(model_dir)


def make_tokenizer(model_dir):
    if os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    import transformers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [" ".join(random.Random(i).choices(WORDS, k=50)) for i in range(200)]
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>"],
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                         pad_token="</s>").save_pretrained(model_dir)


def make_pairs(path, count, seed=0):
    if os.path.exists(path):
        return
    g = random.Random(seed)
    words = lambda median: " ".join(g.choices(WORDS, k=max(4, int(math.exp(math.log(median) + 0.6 * g.gauss(0, 1))))))
    with open(path + ".part", "w") as f:
        for _ in range(count):
            f.write(json.dumps({"prompt": words(100), "chosen": " " + words(80), "rejected": " " + words(80)}) + "\n")
    os.replace(path + ".part", path)


def first_lines(path, count, out_path):
    if not os.path.exists(out_path):
        with open(path) as f, open(out_path + ".part", "w") as out:
            for _, line in zip(range(count), f):
                out.write(line)
        os.replace(out_path + ".part", out_path)


def launcher(n, python=False):
    if n == 1:
        return [sys.executable] if python else []
    return ["torchrun", "--standalone", f"--nproc_per_node={n}"] + ([] if python else ["--no-python"])


class Run:
    """One measured run: its command, where it logs, how its result is read, its estimate."""

    def __init__(self, tool, shape, gpus, cmd, log, read, estimate_s, graphs=True):
        self.tool, self.shape, self.gpus, self.cmd, self.log = tool, shape, gpus, cmd, log
        self.read, self.estimate_s, self.graphs = read, estimate_s, graphs

    def key(self):
        return f"{self.tool}{'' if self.graphs else '-eager'} {self.shape} {self.gpus} GPU"


def ours_run(args, shape, n, factor, graphs):
    """`factor` = the widest run's GPUs / n: this run takes factor times the steps (and warm-up steps)
    so that its timed steps cover the same pairs as the widest run's."""
    model = os.path.join(args.work, shape)
    out = os.path.join(args.work, f"dpo-ours-{shape}-{n}{'' if graphs else '-eager'}")
    timed = args.steps if args.steps is not None else DEFAULT_STEPS.get(shape, 60)
    warmup, steps = args.warmup * factor, timed * factor
    cmd = launcher(n) + [args.finetune, "dpo", "--model_name", model, "--dataset", os.path.join(args.work, "dpo_pairs.jsonl"),
                         "--max_steps", str(warmup + steps), "--per_device_train_batch_size", "1",
                         "--gradient_accumulation_steps", "4", "--learning_rate", "2e-4", "--warmup_steps", "5",
                         "--max_length", "2048", "--logging_steps", str(warmup), "--output_dir", out,
                         "--overwrite_output_dir", "--dtype", args.dtype, "--use_gradient_checkpointing", "true"]
    if not graphs:
        cmd += ["--cuda_graphs", "false"]

    def read(stdout):
        summary = json.loads(stdout.strip().splitlines()[-1])
        return ours_result(summary, os.path.join(out, "metrics.jsonl"), n)

    estimate = ESTIMATE_S.get(("ours", shape), 30) * (1.0 if n == 1 else 0.8) * (1.0 if graphs else 1.3)
    return Run("ours", shape, n, cmd, out + ".log", read, estimate, graphs)


def ours_result(summary, metrics_path, n):
    """Tokens/s per GPU between the warm-up window's line and the last line of metrics.jsonl."""
    lines = [json.loads(l) for l in open(metrics_path)]
    first, last = lines[0], lines[-1]  # the first window is the warm-up
    seconds = last["elapsed_s"] - first["elapsed_s"]
    imbalance = [l["rank_imbalance"] for l in lines[1:] if "rank_imbalance" in l]
    return {"tokens_per_s_per_gpu": (last["tokens"] - first["tokens"]) / seconds / n,
            "steps_per_s": (last["step"] - first["step"]) / seconds, "timed_steps": last["step"] - first["step"],
            "peak_memory_gib": summary.get("peak_memory_gib"),
            "rank_imbalance": sum(imbalance) / len(imbalance) if imbalance else None}


def trl_run(args, shape, n):
    model = os.path.join(args.work, shape)
    cmd = launcher(n, python=True) + [os.path.join(HERE, "trl_dpo_train.py"), "--model", model,
                                      "--data", os.path.join(args.work, "dpo_pairs_trl.jsonl"),
                                      "--steps", str(args.ref_steps), "--warmup_steps", str(args.ref_warmup),
                                      "--out", os.path.join(args.work, f"dpo-trl-{shape}-{n}")]

    def read(stdout):
        return json.loads(stdout.strip().splitlines()[-1])

    return Run("trl", shape, n, cmd, os.path.join(args.work, f"dpo-trl-{shape}-{n}.log"), read,
               ESTIMATE_S.get(("trl", shape), 30) * (1.0 if n == 1 else 1.2))


def plan(args):
    """Every run, most wanted first (see the module docstring)."""
    shape_list = args.shapes.split(",")
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    widest = max(gpu_counts)
    tools = set(args.tools.split(","))
    unknown = tools - {"ours", "ours-eager", "trl"}
    if unknown:
        raise SystemExit(f"--tools: unknown {sorted(unknown)} (ours, ours-eager, trl)")
    eager_shapes = [s for s in args.eager_shapes.split(",") if s]
    ours = [ours_run(args, shape, n, widest // n, True) for shape in shape_list for n in gpu_counts]
    eager = [ours_run(args, shape, 1, widest, False) for shape in eager_shapes if shape in shape_list]
    trl = [] if args.skip_reference else [trl_run(args, shape, n) for n in gpu_counts for shape in shape_list]
    trl_one, trl_more = [r for r in trl if r.gpus == 1], [r for r in trl if r.gpus > 1]
    ordered = ours + trl_one + eager[:1] + trl_more + eager[1:]
    return [r for r in ordered if (r.tool if r.graphs else "ours-eager") in tools]


def execute(run, timeout, env_base):
    """Runs `run` in its own process group; on timeout the group is killed (torchrun's workers too)."""
    # One process with several visible GPUs is what TRL's Trainer refuses (nn.DataParallel): a
    # one-GPU run sees GPU 0 only, for ours and TRL alike.
    env = dict(env_base, CUDA_VISIBLE_DEVICES="0") if run.gpus == 1 else dict(env_base)
    with open(run.log, "w") as log:
        proc = subprocess.Popen(run.cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.communicate(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            raise RuntimeError(f"timed out after {timeout:.0f} s")
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {tail(run.log, 600)}")
    return run.read(stdout)


def log_lines(path, needles, most=4):
    with open(path, errors="replace") as f:
        return [line.strip() for line in f if any(n in line for n in needles)][:most]


def tail(path, chars):
    with open(path, errors="replace") as f:
        return f.read()[-chars:].replace("\n", " | ")


def summarise(results):
    """Lines for dpo_summary.txt: each run, then per shape the scaling, ours/TRL and graphed/eager."""
    lines, by_key = [], {}
    for r in results:
        key = (r["tool"], r["shape"], r["gpus"])
        if "tokens_per_s_per_gpu" in r:
            by_key[key] = r
            peak = r.get("peak_memory_gib")
            lines.append(f"{r['tool']} {r['shape']} {r['gpus']} GPU: {r['tokens_per_s_per_gpu']:.0f} tok/s/GPU, "
                         f"{r['steps_per_s']:.3f} steps/s, peak {peak if peak is None else round(peak, 2)} GiB"
                         + (" (an earlier call)" if r.get("previous") else ""))
        else:
            lines.append(f"{r['tool']} {r['shape']} {r['gpus']} GPU: {r.get('status')}")
    speed = lambda tool, shape, n: by_key[(tool, shape, n)]["tokens_per_s_per_gpu"] if (tool, shape, n) in by_key else None
    for shape in sorted({r["shape"] for r in results}):
        one, two = speed("ours", shape, 1), speed("ours", shape, 2)
        if one and two:
            lines.append(f"scaling {shape}: {two / one:.3f} (2-GPU {two:.0f} / 1-GPU {one:.0f} tok/s/GPU)")
        for n in (1, 2):
            ours, trl = speed("ours", shape, n), speed("trl", shape, n)
            if ours and trl:
                lines.append(f"ours/TRL {shape} {n} GPU: {ours / trl:.2f}x ({ours:.0f} / {trl:.0f} tok/s/GPU)")
        eager = speed("ours-eager", shape, 1)
        if one and eager:
            lines.append(f"graphed/eager {shape} 1 GPU: {one / eager:.3f} ({one:.0f} / {eager:.0f} tok/s)")
    return lines


def write_outputs(out, results, started):
    record = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_s": round(time.time() - started, 1),
              "results": results}
    with open(os.path.join(out, "dpo_bench.json.part"), "w") as f:
        json.dump(record, f, indent=1)
    os.replace(os.path.join(out, "dpo_bench.json.part"), os.path.join(out, "dpo_bench.json"))
    with open(os.path.join(out, "dpo_summary.txt"), "w") as f:
        f.write("\n".join(summarise(results)) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="llama-3.2-1b,qwen3-8b")
    p.add_argument("--gpus", default="1,2")
    p.add_argument("--steps", type=int, help="timed steps of the widest run (default: DEFAULT_STEPS, else 60)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps of the widest run")
    p.add_argument("--eager_shapes", default="llama-3.2-1b,qwen3-8b",
                   help="shapes with an eager (--cuda_graphs false) 1-GPU run; empty: none")
    p.add_argument("--ref_steps", type=int, default=8)
    p.add_argument("--ref_warmup", type=int, default=2)
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--ref_pairs", type=int, default=400)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
    p.add_argument("--skip_reference", action="store_true", help="no TRL runs (as --tools without trl)")
    p.add_argument("--tools", default="ours,ours-eager,trl", help="which runs: ours (graphed), ours-eager, trl")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run at most")
    p.add_argument("--budget_s", type=float, default=480, help="seconds for all runs (inputs included)")
    p.add_argument("--previous", help="an earlier dpo_bench.json: its finished runs are kept, not run again")
    p.add_argument("--dry_run", action="store_true", help="print the plan (commands, estimates) and exit")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.time()
    deadline = started + args.budget_s
    runs = plan(args)
    if args.dry_run:
        for run in runs:
            print(f"{run.key()} (~{run.estimate_s:.0f} s): {' '.join(run.cmd)}")
        print(f"estimated total: {sum(r.estimate_s for r in runs):.0f} s of a {args.budget_s:.0f} s budget")
        return
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    for shape in args.shapes.split(","):
        model = os.path.join(args.work, shape)
        make_model(shape, model)
        make_tokenizer(model)
    pairs = os.path.join(args.work, "dpo_pairs.jsonl")
    make_pairs(pairs, args.pairs)
    first_lines(pairs, args.ref_pairs, os.path.join(args.work, "dpo_pairs_trl.jsonl"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = {}
    if args.previous and os.path.exists(args.previous):
        for row in json.load(open(args.previous))["results"]:
            if row.get("status") == "ok":
                done[(row["tool"], row["shape"], row["gpus"])] = dict(row, previous=True)
    results = []
    for run in runs:
        row = {"tool": run.tool if run.graphs else "ours-eager", "shape": run.shape, "gpus": run.gpus}
        left = deadline - time.time()
        if (row["tool"], row["shape"], row["gpus"]) in done:
            row = done[(row["tool"], row["shape"], row["gpus"])]
        elif left < run.estimate_s:
            row["status"] = f"skipped: {left:.0f} s of the budget left, ~{run.estimate_s:.0f} s needed"
        else:
            start = time.time()
            try:
                result = execute(run, min(args.timeout, left), env)
                row.update({k: v for k, v in result.items() if k != "tool"})
                row["status"] = "ok"
            except Exception as e:  # a failed or stuck run is recorded; the others still run
                row["status"] = f"FAILED ({e})"
            row["wall_s"] = round(time.time() - start, 1)
            if run.tool == "ours":  # what the graphs did (captured ahead, or why they are off)
                row["log"] = log_lines(run.log, ("CUDA graphs", "step planning"))
        print(json.dumps(row), flush=True)
        results.append(row)
        for folder in {args.out, args.work}:  # the work copy: --previous of a later call
            write_outputs(folder, results, started)
    print("\n".join(summarise(results)), flush=True)


if __name__ == "__main__":
    main()
