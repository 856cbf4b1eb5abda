"""Tiny random Qwen3-MoE and Mixtral models with a real byte-level BPE tokenizer, for
tests/e2e/test_gguf_moe.py.

Shapes and weights as make_moe_fixtures.py makes them (hidden 64, 4 heads, 2 kv heads, router
weights x25 so routing is decisive), experts x3 rather than its x5: zeroing the experts then moves
the logits by 107% (Qwen3-MoE) and 118% (Mixtral) of their norm, so the experts decide the output,
while at x5 (136%) their outputs dominate the residual stream and llama.cpp's F32 CPU kernels land
at 1.0e-3 relative to transformers, the edge of test_gguf.py's F32 bound (x3: 6.3e-4 / 4.9e-4;
measured on the converter's own F32 files). Configured where llama.cpp's qwen3moe and llama (Mixtral) builders can represent them: every
layer sparse, norm_topk_prob on, no sliding window. The tokenizer fixtures of gguf_models.py
(Qwen2's for Qwen3-MoE, Llama-3's for Mixtral) set vocab_size.

- "qwen3moe": 4 experts, top-2, moe_intermediate_size 32, head_dim 16 (key_length written);
- "mixtral8": 8 experts (llama.cpp's quantizer has rules for exactly 8: attn_v / attn_k Q8_0,
  attn_output Q5_K in Q4_K_M), top-2, experts 64 wide, tied embeddings;
- "wide_qwen3moe", "wide_mixtral8": hidden 256 and experts 256 wide, so the quantizer uses its K
  types on them (Q4_K, Q5_K, Q6_K) instead of the fallbacks it takes for 64-value rows.
"""
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer

import gguf_models
import make_moe_fixtures
import tiny_models

WIDE = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2)

# case -> (config class, config kwargs over make_moe_fixtures._common, tokenizer fixture)
CASES = {
    "qwen3moe": (transformers.Qwen3MoeConfig, dict(
        head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True), "qwen2"),
    "mixtral8": (transformers.MixtralConfig, dict(
        intermediate_size=64, num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
        tie_word_embeddings=True), "llama3"),
    "wide_qwen3moe": (transformers.Qwen3MoeConfig, dict(
        WIDE, head_dim=64, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256, norm_topk_prob=True),
        "qwen2"),
    "wide_mixtral8": (transformers.MixtralConfig, dict(
        WIDE, intermediate_size=256, num_local_experts=8, num_experts_per_tok=2, sliding_window=None), "llama3"),
}

# The pre-tokenizer the converter must be told (gguf_reference.run_converter).
PRE_TOKENIZER = {"qwen2": "qwen2", "llama3": "llama-bpe"}


def make_moe_gguf_model(case, out_dir, tokenizer_root, seed=0, **overrides):
    """Writes the model and tokenizer into out_dir; returns (transformers model in eval mode,
    the converter's pre-tokenizer name). `overrides`: config keys over the case's."""
    config_class, kwargs, tokenizer_name = CASES[case]
    tokenizer_dir = os.path.join(tokenizer_root, tokenizer_name)
    vocab = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json")).get_vocab_size()
    config = config_class(**make_moe_fixtures._common(**{**kwargs, "vocab_size": vocab,
                                                         **gguf_models.tokenizer_config_ids(tokenizer_dir),
                                                         **overrides}))
    torch.manual_seed(seed)
    model = make_moe_fixtures.MODEL_CLASSES[config_class](config)
    tiny_models.perturb_norms_and_biases(model)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                parameter.mul_(25.0)  # decisive routing, as make_moe_fixtures.make_model
            elif ".experts." in name:
                parameter.mul_(3.0)
    model.save_pretrained(out_dir, safe_serialization=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, file), os.path.join(out_dir, file))
    return model.eval(), PRE_TOKENIZER[tokenizer_name]
