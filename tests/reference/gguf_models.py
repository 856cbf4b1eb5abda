"""Tiny random models with a real byte-level BPE tokenizer, for the GGUF export tests.

The tokenizer fixtures (make_tokenizer_fixtures.py: Llama-3 and Qwen2 regexes) are copied into a
tiny_models case whose vocab_size is the tokenizer's, so llama.cpp (which sizes token_embd by the
token list) and llama.cpp's converter accept the directory.
"""
import json
import os
import shutil

import torch
from tokenizers import Tokenizer

import tiny_models

# GGUF case -> (tiny_models case, tokenizer fixture)
GGUF_CASES = {
    "llama3_rope": ("llama3_rope", "llama3"),
    "llama": ("llama", "llama3"),
    "qwen2": ("qwen2", "qwen2"),
    "qwen3": ("qwen3", "qwen2"),
}


def make_gguf_model(case, out_dir, tokenizer_root, seed=0):
    """Writes the model and tokenizer into out_dir; returns the transformers model (eval mode)."""
    base_case, tokenizer_name = GGUF_CASES[case]
    tokenizer_dir = os.path.join(tokenizer_root, tokenizer_name)
    vocab = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json")).get_vocab_size()
    config_class, kwargs, _ = tiny_models.model_cases()[base_case]
    config = tokenizer_config_ids(tokenizer_dir)
    torch.manual_seed(seed)
    model = tiny_models.MODEL_CLASSES[config_class](config_class(**{**kwargs, "vocab_size": vocab, **config}))
    tiny_models.perturb_norms_and_biases(model, bias_std=0.1)
    model.save_pretrained(out_dir)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, file), os.path.join(out_dir, file))
    return model.eval()


def tokenizer_config_ids(tokenizer_dir):
    """bos/eos/pad ids of config.json from the tokenizer's own special tokens."""
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))

    def token_id(value):
        if isinstance(value, dict):
            value = value.get("content")
        return None if value is None else tok.token_to_id(value)

    return {"bos_token_id": token_id(tc.get("bos_token")), "eos_token_id": token_id(tc.get("eos_token")),
            "pad_token_id": token_id(tc.get("pad_token"))}
