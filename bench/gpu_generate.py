"""Decode speed of `finetune generate` against transformers' generate() in the same run.

    python3 bench/gpu_generate.py --out $OUT [--finetune build/finetune] [--shapes llama-3.2-1b,qwen3-8b]

For each shape (random init, bench/shapes.py) and batch size (1 and 16): the same prompts
(PROMPT_TOKENS tokens each), greedy, bf16, NEW_TOKENS new tokens per row. EOS cannot end a row
early on either side: our model directory's generation_config.json lists no EOS id and the bench
tokenizer has none; transformers gets min_new_tokens = max_new_tokens. Ours: tokens/s from the
stderr summary of `finetune generate --prompts` (decode tokens / decode seconds, the prompt's
forward excluded). Transformers: decode tokens/s = B x (NEW_TOKENS - 1) / (time of a NEW_TOKENS
generate - time of a 1-token generate), each the best of REPEATS after a warm-up. Prints a table
and writes $OUT/generate_bench.json. The tokenizer is synthetic: one token per id ("t<id>"), so
every id the random model emits decodes.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shapes  # noqa: E402

PROMPT_TOKENS = 128
NEW_TOKENS = 128
REPEATS = 3
SUMMARY = re.compile(r"decode (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tokens/s\)")
PREFILL = re.compile(r"prefill (\d+) tokens in ([0-9.]+) s")


def write_tokenizer(model_dir, vocab_size, bos_id):
    """A byte-level BPE without merges whose token i is 't<i>' (ids 0-255: the byte alphabet), BOS at bos_id."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for i in range(len(vocab), vocab_size):
        vocab[f"t{i}"] = i
    bos = "<|begin_of_text|>"
    del vocab[f"t{bos_id}"]
    vocab[bos] = bos_id
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "add_bos_token": False}, f)
    with open(os.path.join(model_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [], "bos_token_id": bos_id}, f)
    return tok


RAGGED = False  # --ragged: prompt i has PROMPT_TOKENS - 4 i tokens (left padding, an attention mask)


def prompts(batch):
    """Raw-text prompts of single-character tokens (no merges, no BOS added): PROMPT_TOKENS each, or
    ragged lengths."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    length = (lambda i: max(8, PROMPT_TOKENS - 4 * i)) if RAGGED else (lambda i: PROMPT_TOKENS)
    return ["".join(letters[(i * 7 + j) % 26] for j in range(length(i))) for i in range(batch)]


def ours(finetune, model_dir, work, batch, profile_dir=None):
    path = os.path.join(work, f"prompts-{batch}.jsonl")
    with open(path, "w") as f:
        for text in prompts(batch):
            f.write(json.dumps({"prompt": text}) + "\n")
    best = None
    for repeat in range(REPEATS):
        # The first run, when asked, profiles decode steps 20-24 (kernel summary + Chrome trace).
        profile = (["--profile_start_step", "20", "--profile_steps", "5", "--output_dir", profile_dir]
                   if profile_dir and repeat == 0 else [])
        proc = subprocess.run([finetune, "generate", "--model_name", model_dir, "--prompts", path, "--device", "cuda",
                               "--dtype", "bfloat16", "--max_new_tokens", str(NEW_TOKENS), "--generation_batch_size",
                               str(batch), *profile], capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        assert all(len(r["token_ids"]) == NEW_TOKENS for r in rows), "a row ended early"
        decode = SUMMARY.search(proc.stderr)
        prefill = PREFILL.search(proc.stderr)
        result = {"decode_tokens": int(decode.group(1)), "decode_s": float(decode.group(2)),
                  "decode_tokens_per_s": float(decode.group(3)), "prefill_tokens": int(prefill.group(1)),
                  "prefill_s": float(prefill.group(2)), "ids": [r["token_ids"] for r in rows]}
        if profile:
            continue  # the profiled run is slower: not a timing
        if best is None or result["decode_tokens_per_s"] > best["decode_tokens_per_s"]:
            best = result
    return best


def reference(model, tok, batch):
    ids = torch.tensor([tok.encode(text).ids for text in prompts(batch)], device="cuda")
    assert ids.shape[1] == PROMPT_TOKENS
    mask = torch.ones_like(ids)

    def timed(new_tokens):
        best = None
        for _ in range(REPEATS + 1):  # the first is a warm-up
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            best = elapsed if best is None or elapsed < best else best
        return best, out

    one, _ = timed(1)
    full, out = timed(NEW_TOKENS)
    decode_s = full - one
    return {"decode_tokens": batch * (NEW_TOKENS - 1), "decode_s": decode_s,
            "decode_tokens_per_s": batch * (NEW_TOKENS - 1) / decode_s, "prefill_s": one,
            "ids": out[:, PROMPT_TOKENS:].tolist()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--finetune", default=os.path.join(os.path.dirname(HERE), "build", "finetune"))
    parser.add_argument("--shapes", default="llama-3.2-1b,qwen3-8b")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--work", default="/tmp/bench_generate")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench_generate"))
    parser.add_argument("--profile", action="store_true", help="profile decode steps of ours into OUT/profile-*")
    parser.add_argument("--skip_reference", action="store_true")
    parser.add_argument("--ragged", action="store_true", help="prompts of different lengths (ours only)")
    args = parser.parse_args()
    global RAGGED
    RAGGED = args.ragged
    if RAGGED:
        args.skip_reference = True
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    results = []
    for shape in args.shapes.split(","):
        model_dir = os.path.join(args.work, shape)
        shapes.make_model(shape, model_dir)
        kwargs = shapes.SHAPES[shape][2]
        tok = write_tokenizer(model_dir, kwargs["vocab_size"], kwargs["bos_token_id"])
        model = (None if args.skip_reference else
                 transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval())
        for batch in map(int, args.batches.split(",")):
            row = {"shape": shape, "batch": batch, "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS,
                   "ours": ours(args.finetune, model_dir, args.work, batch,
                                os.path.join(args.out, f"profile-{shape}-{batch}") if args.profile else None)}
            if args.skip_reference:
                row["ours"].pop("ids")
                print(json.dumps(row), flush=True)
                continue
            row["reference"] = reference(model, tok, batch)
            # bf16 greedy paths may part ways after a near-tie; report how many leading tokens agree.
            row["same_leading_tokens"] = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x))
                                          for x, y in zip(row["ours"].pop("ids"), row["reference"].pop("ids"))]
            row["speedup"] = row["ours"]["decode_tokens_per_s"] / row["reference"]["decode_tokens_per_s"]
            results.append(row)
            print(json.dumps(row), flush=True)
            with open(os.path.join(args.out, "generate_bench.json"), "w") as f:
                json.dump(results, f, indent=1)
        del model
        torch.cuda.empty_cache()
    print(f"\n{'shape':14} {'batch':>5} {'ours decode tok/s':>18} {'transformers tok/s':>19} {'ratio':>6}")
    for r in results:
        print(f"{r['shape']:14} {r['batch']:>5} {r['ours']['decode_tokens_per_s']:>18.1f} "
              f"{r['reference']['decode_tokens_per_s']:>19.1f} {r['speedup']:>6.2f}")


if __name__ == "__main__":
    main()
