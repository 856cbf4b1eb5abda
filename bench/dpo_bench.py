"""Preference training on the GPU machine (issue 32): `finetune dpo` against TRL's DPOTrainer with
PEFT (bench/trl_dpo_train.py) on the bench shapes (bench/shapes.py), batch 1 x accumulation 4,
1 and 2 GPUs: tokens/s per GPU (chosen + rejected tokens, no padding) and peak memory, and the
2-GPU scaling (2-GPU tokens/s per GPU over 1-GPU tokens/s). Ours on fewer GPUs runs proportionally
more steps, so every GPU count is timed over the same pairs as the widest run.

  python3 bench/dpo_bench.py --finetune build/finetune [--shapes llama-3.2-1b,qwen3-8b] [--gpus 1,2] --out OUT

The models are bench/shapes.py's random-init ones with a small byte-level BPE tokenizer saved beside
them (the shapes ship none; its ids index the models' embeddings); the rows are `pairs` explicit
prompt/chosen/rejected strings of random words, log-normal lengths (prompt ~120, completions ~100
tokens). TRL's wheel: bench/peer_wheels.sh (carry .whl, install into /tmp/site, PYTHONPATH).
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shapes  # noqa: E402

WORDS = ("the a sun moon tree rock fox owl cat dog red blue green over under near behind shines hides stands looks "
         "answer question because therefore however quickly slowly bright dark river mountain city road").split()


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
    with open(path, "w") as f:
        for _ in range(count):
            f.write(json.dumps({"prompt": words(100), "chosen": " " + words(80), "rejected": " " + words(80)}) + "\n")


def run(cmd, log_path, timeout, gpus):
    # One process with several visible GPUs is what TRL's Trainer refuses (nn.DataParallel): a
    # one-GPU run sees GPU 0 only, for ours and TRL alike.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0") if gpus == 1 else None
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        print(open(log_path).read()[-3000:])
        raise RuntimeError(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def launcher(n, python=False):
    if n == 1:
        return ["python3"] if python else []
    return ["torchrun", "--standalone", f"--nproc_per_node={n}"] + ([] if python else ["--no-python"])


def ours(args, model, data, n, factor):
    """`factor` = the widest run's GPUs / n: this run takes factor times the steps (and warm-up steps)
    so that its timed steps cover the same pairs as the widest run's."""
    out = os.path.join(args.work, f"dpo-ours-{os.path.basename(model)}-{n}")
    warmup, steps = args.warmup * factor, args.steps * factor
    cmd = launcher(n) + [args.finetune, "dpo", "--model_name", model, "--dataset", data,
                         "--max_steps", str(warmup + steps), "--per_device_train_batch_size", "1",
                         "--gradient_accumulation_steps", "4", "--learning_rate", "2e-4", "--warmup_steps", "5",
                         "--max_length", "2048", "--logging_steps", str(warmup), "--output_dir", out,
                         "--overwrite_output_dir", "--dtype", "bfloat16", "--use_gradient_checkpointing", "true"]
    summary = json.loads(run(cmd, out + ".log", args.timeout, n).strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    first, last = lines[0], lines[-1]  # the first window is the warm-up
    seconds = last["elapsed_s"] - first["elapsed_s"]
    return {"tool": "finetune-dpo", "tokens_per_s_per_gpu": (last["tokens"] - first["tokens"]) / seconds / n,
            "steps_per_s": (last["step"] - first["step"]) / seconds, "peak_memory_gib": summary.get("peak_memory_gib")}


def trl(args, model, data, n):
    cmd = launcher(n, python=True) + [os.path.join(HERE, "trl_dpo_train.py"), "--model", model, "--data", data,
                                      "--steps", str(args.ref_steps), "--warmup_steps", "3",
                                      "--out", os.path.join(args.work, f"dpo-trl-{n}")]
    return json.loads(run(cmd, os.path.join(args.work, f"dpo-trl-{os.path.basename(model)}-{n}.log"),
                          args.timeout, n).strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="llama-3.2-1b,qwen3-8b")
    p.add_argument("--gpus", default="1,2")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--ref_steps", type=int, default=10)
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--work", default="/tmp/bench")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench"))
    p.add_argument("--skip_reference", action="store_true")
    p.add_argument("--timeout", type=int, default=900)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for shape in args.shapes.split(","):
        model = os.path.join(args.work, shape)
        shapes.make_model(shape, model)
        make_tokenizer(model)
        data = os.path.join(args.work, "dpo_pairs.jsonl")
        make_pairs(data, args.pairs)
        per_gpu = {}
        gpu_counts = [int(g) for g in args.gpus.split(",")]
        for n in gpu_counts:
            row = {"shape": shape, "gpus": n, "ours": ours(args, model, data, n, max(gpu_counts) // n)}
            per_gpu[n] = row["ours"]["tokens_per_s_per_gpu"]
            if not args.skip_reference:
                row["trl"] = trl(args, model, data, n)
                row["speedup"] = row["ours"]["tokens_per_s_per_gpu"] / row["trl"]["tokens_per_s_per_gpu"]
            if 1 in per_gpu and n > 1:
                row["scaling"] = per_gpu[n] / per_gpu[1]
            print(json.dumps(row), flush=True)
            results.append(row)
    with open(os.path.join(args.out, "dpo_bench.json"), "w") as f:
        json.dump({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
