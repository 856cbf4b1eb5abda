"""Assets for scripts/demo.sh: a tiny random Llama, a Llama-3-style tokenizer and a learnable task.

    python scripts/make_demo_assets.py OUTDIR

writes, deterministically and in a few seconds:
    OUTDIR/model/        tokenizer (byte-level BPE configured like Llama-3's, trained on the task's
                         text) and a random LlamaForCausalLM, both with transformers' save_pretrained
    OUTDIR/train.jsonl   alpaca rows (instruction, input, output)
    OUTDIR/eval.jsonl    alpaca rows whose (instruction, input) never occur in train.jsonl
    OUTDIR/eval_prompts.jsonl  the same rows as `finetune generate --prompts` input: the alpaca
                         prompt up to "### Response:\n" ({"prompt": ...}), in eval.jsonl's order

The task is word manipulation over a small word list: uppercase the words, reverse their order,
repeat them twice, count them. The base model is random, so whatever it learns, LoRA learns.
Inputs are combinations of 2-4 words, so the held-out rows test the rule, not memory.

Why these sizes (measured with LoRA r=16, alpha=32, lr 1e-3, batch 16): with 12 words the eval
loss falls from ~7 to ~1 in 600 steps and to ~0.2 in 1000; with 32 words it stalls near the
word entropy (~3.4) for the first 1000 steps, because copying words through attention has to be
learnt from nothing.
"""
import json
import os
import random
import sys

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 1234
TRAIN_ROWS = 1536
EVAL_ROWS = 128

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
VOCAB_SIZE = 640  # an upper bound: the merges run out a little earlier on this small corpus

# Llama-3's pre-tokenization regex (tokenizer.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Same prompt as finetune's --chat_template alpaca (src/data/chat_template.cpp), so that the
# tokenizer learns merges for the text it will actually see.
ALPACA_PROMPT = ("Below is an instruction that describes a task, paired with an input that provides further "
                 "context. Write a response that appropriately completes the request.\n\n### Instruction:\n{}"
                 "\n\n### Input:\n{}\n\n### Response:\n{}")

WORDS = ("red", "blue", "green", "gold", "cat", "dog", "fox", "owl", "sun", "moon", "tree", "rock")
WORD_COUNTS = (2, 4)
NUMBER_NAMES = {2: "two", 3: "three", 4: "four"}

TASKS = {
    "Uppercase the words.": lambda words: " ".join(w.upper() for w in words),
    "Reverse the order of the words.": lambda words: " ".join(reversed(words)),
    "Repeat the words twice.": lambda words: " ".join(words + words),
    "Count the words.": lambda words: NUMBER_NAMES[len(words)],
}

# transformers' default init (std 0.02) for everything but the output layer: a frozen random
# lm_head of std 0.02 caps any logit at about 0.02 * hidden = 2.6, so no adapter could make a
# token likely. Trained models have output rows of norm ~1; std 0.1 gives them that.
INIT_STD = 0.02
LM_HEAD_STD = 0.1


def make_rows(rng):
    """TRAIN_ROWS + EVAL_ROWS rows with distinct (instruction, input), split into train and eval."""
    seen, rows = set(), []
    instructions = list(TASKS)
    while len(rows) < TRAIN_ROWS + EVAL_ROWS:
        instruction = instructions[len(rows) % len(instructions)]
        words = rng.sample(WORDS, rng.randint(*WORD_COUNTS))
        key = (instruction, " ".join(words))
        if key in seen:
            continue
        seen.add(key)
        rows.append({"instruction": instruction, "input": key[1], "output": TASKS[instruction](words)})
    rng.shuffle(rows)
    return rows[:TRAIN_ROWS], rows[TRAIN_ROWS:]


def train_tokenizer(texts):
    """Byte-level BPE set up like Llama-3's tokenizer.json, trained on `texts`."""
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS,
                                                pad_token=EOS, model_max_length=512)


def make_model(tokenizer):
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False,
        initializer_range=INIT_STD, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, LM_HEAD_STD)
    return model


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main(out_dir):
    rng = random.Random(SEED)
    train, evaluation = make_rows(rng)
    tokenizer = train_tokenizer(ALPACA_PROMPT.format(r["instruction"], r["input"], r["output"]) for r in train)
    model = make_model(tokenizer)

    model_dir = os.path.join(out_dir, "model")
    os.makedirs(model_dir, exist_ok=True)
    tokenizer.save_pretrained(model_dir)
    model.save_pretrained(model_dir, safe_serialization=True)
    write_jsonl(os.path.join(out_dir, "train.jsonl"), train)
    write_jsonl(os.path.join(out_dir, "eval.jsonl"), evaluation)
    write_jsonl(os.path.join(out_dir, "eval_prompts.jsonl"),
                [{"prompt": ALPACA_PROMPT.format(r["instruction"], r["input"], "")} for r in evaluation])
    parameters = sum(p.numel() for p in model.parameters())
    print(f"demo assets in {out_dir}: random Llama with {parameters / 1e6:.2f}M parameters, vocab {len(tokenizer)}, "
          f"{len(train)} train rows, {len(evaluation)} held-out eval rows")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_demo_assets.py OUTDIR")
    main(sys.argv[1])
