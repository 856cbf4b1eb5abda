"""Assets for scripts/demo.sh: a tiny random Llama, a Llama-3-style tokenizer and a learnable task.

    python scripts/make_demo_assets.py OUTDIR

writes, deterministically and in a few seconds:
    OUTDIR/model/        tokenizer (byte-level BPE configured like Llama-3, trained on the task's
                         text) and a random LlamaForCausalLM, both with transformers' save_pretrained
    OUTDIR/train.jsonl   alpaca rows (instruction, input, output)
    OUTDIR/eval.jsonl    alpaca rows whose (instruction, input) never occur in train.jsonl

The task is word manipulation over a small word list: uppercase the words, reverse their order,
repeat them twice, count them. The base model is random, so whatever it learns, LoRA learns;
the inputs are combinations of 2-4 words, so the held-out rows test the rule, not memory.
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
VOCAB_SIZE = 640
INIT_STD = 0.02
LM_HEAD_STD = 0.1
WORD_COUNTS = (2, 4)
TASK_NAMES = None
TIE_EMBEDDINGS = False

# Llama-3's pre-tokenization regex (tokenizer.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Same prompt as finetune's --chat_template alpaca (src/data/chat_template.cpp); used only to give
# the tokenizer the text it will see.
ALPACA_PROMPT = ("Below is an instruction that describes a task, paired with an input that provides further "
                 "context. Write a response that appropriately completes the request.\n\n### Instruction:\n{}"
                 "\n\n### Input:\n{}\n\n### Response:\n{}")

WORDS = ["red", "blue", "green", "gold", "pink", "gray", "cat", "dog", "fox", "owl", "bee", "cow", "sun", "moon",
         "star", "rain", "tree", "leaf", "rock", "sand", "lake", "hill", "fish", "bird", "frog", "bear", "wolf",
         "duck", "seed", "rose", "snow", "wind"]
NUMBER_NAMES = {2: "two", 3: "three", 4: "four"}

TASKS = {
    "Uppercase the words.": lambda words: " ".join(w.upper() for w in words),
    "Reverse the order of the words.": lambda words: " ".join(reversed(words)),
    "Repeat the words twice.": lambda words: " ".join(words + words),
    "Count the words.": lambda words: NUMBER_NAMES[len(words)],
    "Name the middle word.": lambda words: words[len(words) // 2],
    "Name the first word.": lambda words: words[0],
}


def make_rows(rng):
    """TRAIN_ROWS + EVAL_ROWS rows with distinct (instruction, input), split into train and eval."""
    seen, rows = set(), []
    instructions = list(TASK_NAMES or TASKS)
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
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=TIE_EMBEDDINGS,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, initializer_range=INIT_STD)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    # With the default init (std 0.02) a frozen random lm_head cannot give any token more than a
    # few percent probability (logit <= 0.02 * sqrt(hidden) * sqrt(hidden) ~ 2.6), so no adapter
    # could push the loss far down. Trained models have output rows of norm ~1; give it those.
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
    texts = [ALPACA_PROMPT.format(r["instruction"], r["input"], r["output"]) for r in train]
    tokenizer = train_tokenizer(texts)
    model = make_model(tokenizer)

    model_dir = os.path.join(out_dir, "model")
    os.makedirs(model_dir, exist_ok=True)
    tokenizer.save_pretrained(model_dir)
    model.save_pretrained(model_dir, safe_serialization=True)
    write_jsonl(os.path.join(out_dir, "train.jsonl"), train)
    write_jsonl(os.path.join(out_dir, "eval.jsonl"), evaluation)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"demo assets in {out_dir}: model {parameters / 1e6:.2f}M parameters, vocab {len(tokenizer)}, "
          f"{len(train)} train rows, {len(evaluation)} eval rows")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_demo_assets.py OUTDIR")
    main(sys.argv[1])
