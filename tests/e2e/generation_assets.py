"""Shared by test_generate.py and test_chat.py: tiny random models with a real tokenizer, and
transformers' generate() run the way `finetune generate` batches (left padding, greedy or seeded
sampling), returning the new ids of each row through its first EOS."""
import json
import os
import sys

import torch
import transformers

import tiny_models
from tiny_models import write_jsonl  # noqa: F401 (the tests write prompt files through this module)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_demo_assets  # noqa: E402  (its Llama-3-style byte-level BPE trainer)

# A ChatML-style template (its markers are plain text to this tokenizer: both sides split them alike).
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CORPUS = ["Below is an instruction that describes a task.", "Reverse the order of the words: red blue green.",
          "Count the words. cat dog fox owl", "The sun and the moon over the tree and the rock.",
          "user assistant system: hello there, how are you? Fine, thanks!", "caf\u00e9 na\u00efve \u65e5\u672c"] * 20


def make_tokenizer():
    tokenizer = make_demo_assets.train_tokenizer(CORPUS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_model(case, out_dir, tokenizer, seed=0):
    """tiny_models' `case` on the tokenizer's vocabulary, saved with the tokenizer. The output layer
    is drawn with std 0.1 (as the demo's): random logits are then far enough apart that greedy
    choices never hinge on the last bits, where fp32 implementations may round differently."""
    config_class, kwargs, _ = tiny_models.model_cases()[case]
    kwargs = dict(kwargs, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    config = config_class(**kwargs)
    if tiny_models.reference_attention(config):
        config._attn_implementation = tiny_models.reference_attention(config)
    model = tiny_models.MODEL_CLASSES[config_class](config).to(torch.float32)
    tiny_models.perturb_norms_and_biases(model)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.1)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    model.eval()
    return model


def ids_of(encoded):
    return list(encoded["input_ids"]) if hasattr(encoded, "keys") else list(encoded)


def chat_ids(tokenizer, messages):
    return ids_of(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))


def prompt_ids(tokenizer, line):
    """A --prompts line's ids as finetune makes them: raw text with BOS, or the rendered chat."""
    if "messages" in line:
        return chat_ids(tokenizer, line["messages"])
    return tokenizer(line["prompt"])["input_ids"]


def reference_generate(model, batches, eos_ids, pad_id, **kwargs):
    """transformers' generate on each batch of id lists (left-padded): per row, the new ids through
    the first EOS."""
    out = []
    for batch in batches:
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in batch])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
        with torch.no_grad():
            sequences = model.generate(input_ids=input_ids, attention_mask=mask, pad_token_id=pad_id, **kwargs)
        for row in sequences[:, width:].tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
            out.append(row[:cut])
    return out


def read_jsonl_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]
