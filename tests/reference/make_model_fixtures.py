#!/usr/bin/env python3
"""Reference fixtures for the model module: rotary embeddings and weight loading.

Usage: make_model_fixtures.py OUTDIR

  OUTDIR/rope/cases.json (case -> rope type), OUTDIR/rope/<case>/config.json, <case>.safetensors
      LlamaRotaryEmbedding(config) and apply_rotary_pos_emb for default, "linear" and "llama3"
      rope scaling, fp32: inv_freq, position_ids (B, T), cos/sin (B, T, D) and q, k with their
      rotated q_embed, k_embed in HF's layout (B, H, T, D).
  OUTDIR/weights/<case>/  (config.json + safetensors, written by save_pretrained)
  OUTDIR/weights/<case>.expected.safetensors
      every tiny model of tiny_models.py (tied and untied embeddings, biases, q/k norm, sharded,
      sliding windows, Gemma-2/3), a bf16 one and a tied one whose checkpoint also holds
      lm_head.weight, with the model's own state_dict() (tied: lm_head.weight included; a
      multimodal checkpoint: its text tower and lm_head) to compare the loaded parameters with.
  OUTDIR/weights/<case>.logits.safetensors (fp32 cases; cases.json "logits": true)
      input_ids (2, T) and the model's fp32 logits (2, T, V) for them; T = 11 is longer than
      every tiny model's sliding window.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import tiny_models

# The tiny models' rope settings (llama3 with original_max_position_embeddings 64 puts head_dim 16's
# frequencies in all three bands), plus Llama-3.1's real ones at its real head_dim 128.
ROPE_CASES = {
    "default": tiny_models.model_cases()["llama"][1],
    "linear": tiny_models.model_cases()["llama_linear_rope"][1],
    "llama3": tiny_models.model_cases()["llama3_rope"][1],
    "llama31_head_dim_128": dict(
        tiny_models.model_cases()["llama"][1], hidden_size=512, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
}
SEQUENCE = 24
LOGITS_SEQUENCE = 11
VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.")  # not finetune's: it trains the text tower


def rope_fixture(name, kwargs, out):
    config = transformers.LlamaConfig(**kwargs)
    config.save_pretrained(os.path.join(out, name))
    rotary = LlamaRotaryEmbedding(config)
    assert rotary.attention_scaling == 1.0
    # Rows: plain positions, two packed sequences restarting at 0, and large positions.
    position_ids = torch.stack([torch.arange(SEQUENCE),
                                torch.cat([torch.arange(10), torch.arange(SEQUENCE - 10)]),
                                8000 + 37 * torch.arange(SEQUENCE)])
    batch = position_ids.shape[0]
    head_dim = config.head_dim
    g = torch.Generator().manual_seed(len(name))
    q = torch.randn(batch, config.num_attention_heads, SEQUENCE, head_dim, generator=g)
    k = torch.randn(batch, config.num_key_value_heads, SEQUENCE, head_dim, generator=g)
    cos, sin = rotary(q, position_ids)
    q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin)
    save_file({"inv_freq": rotary.inv_freq.contiguous(), "position_ids": position_ids, "cos": cos, "sin": sin,
               "q": q, "k": k, "q_embed": q_embed, "k_embed": k_embed},
              os.path.join(out, name + ".safetensors"))
    return config.rope_parameters["rope_type"]


WEIGHT_CASES = {name: (name, torch.float32) for name in tiny_models.model_cases()}
WEIGHT_CASES["llama_bf16"] = ("llama", torch.bfloat16)
# Tied, with the checkpoint carrying lm_head.weight anyway (some hub checkpoints do).
WEIGHT_CASES["llama_tied_with_lm_head_copy"] = ("llama_mha_tied", torch.float32)


def weights_fixture(name, out):
    case, dtype = WEIGHT_CASES[name]
    model = tiny_models.make_model(case, os.path.join(out, name), seed=len(name), dtype=dtype)
    # Clones: a tied lm_head.weight shares embed_tokens' storage, which save_file refuses.
    state = {key: value.detach().clone().contiguous() for key, value in model.state_dict().items()
             if not key.startswith(VISION_PREFIXES)}
    save_file(state, os.path.join(out, name + ".expected.safetensors"))
    if name == "llama_tied_with_lm_head_copy":
        assert "lm_head.weight" in state
        save_file(state, os.path.join(out, name, "model.safetensors"), metadata={"format": "pt"})
    logits = dtype == torch.float32
    if logits:
        logits_fixture(model, name, out)
    return {"tied": bool(model.config.tie_word_embeddings), "dtype": str(dtype).replace("torch.", ""), "logits": logits}


def logits_fixture(model, name, out):
    """The model's fp32 logits for two unpadded rows (positions 0..T-1)."""
    g = torch.Generator().manual_seed(len(name) + 1)
    vocab_size = model.config.get_text_config().vocab_size
    input_ids = torch.randint(0, vocab_size, (2, LOGITS_SEQUENCE), generator=g)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits.float()
    save_file({"input_ids": input_ids, "logits": logits.contiguous()}, os.path.join(out, name + ".logits.safetensors"))


def main():
    transformers.logging.set_verbosity_error()
    if len(sys.argv) != 2:
        sys.exit("usage: make_model_fixtures.py OUTDIR")
    out = sys.argv[1]
    rope_out, weights_out = os.path.join(out, "rope"), os.path.join(out, "weights")
    os.makedirs(rope_out, exist_ok=True)
    os.makedirs(weights_out, exist_ok=True)
    rope_types = {name: rope_fixture(name, kwargs, rope_out) for name, kwargs in ROPE_CASES.items()}
    with open(os.path.join(rope_out, "cases.json"), "w") as f:
        json.dump(rope_types, f, indent=1)
    cases = {name: weights_fixture(name, weights_out) for name in WEIGHT_CASES}
    with open(os.path.join(weights_out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    main()
