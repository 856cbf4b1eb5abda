"""Tiny random models whose rows are multiples of 256, so that llama.cpp's quantizer uses its K
types (Q4_K, Q5_K, Q6_K) on them rather than the fallbacks it takes for the 64-wide tiny models:
hidden 256, intermediate 512, 3 layers (use_more_bits picks layer 2 for Q6_K in the _K_M mixes),
with gguf_models.py's tokenizers. For tests/e2e/test_gguf.py.
"""
import os

import torch
from tokenizers import Tokenizer

import gguf_models
import tiny_models

WIDE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2)
# case -> (tiny_models case, tokenizer fixture)
WIDE_CASES = {"wide_llama": ("llama", "llama3"), "wide_qwen2": ("qwen2", "qwen2")}


def make_wide_model(case, out_dir, tokenizer_root, seed=0):
    """Writes the model and tokenizer into out_dir; returns the transformers model (eval mode)."""
    import shutil
    base_case, tokenizer_name = WIDE_CASES[case]
    tokenizer_dir = os.path.join(tokenizer_root, tokenizer_name)
    vocab = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json")).get_vocab_size()
    config_class, kwargs, _ = tiny_models.model_cases()[base_case]
    config = {**kwargs, **WIDE, "vocab_size": vocab, **gguf_models.tokenizer_config_ids(tokenizer_dir)}
    torch.manual_seed(seed)
    model = tiny_models.MODEL_CLASSES[config_class](config_class(**config))
    tiny_models.perturb_norms_and_biases(model, bias_std=0.1)
    model.save_pretrained(out_dir)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, file), os.path.join(out_dir, file))
    return model.eval()
