#!/usr/bin/env python3
"""Reference fixtures for RoPE scaling on rows longer than the original context (issue 31).

Usage: make_long_rope_fixtures.py OUTDIR

  OUTDIR/cases.json                       case -> rope type
  OUTDIR/<case>/                          a tiny Llama (config.json + safetensors, save_pretrained)
  OUTDIR/<case>.logits.safetensors        input_ids (2, T) and LlamaForCausalLM's fp32 logits (2, T, V)

Every case's scaling starts at 32 positions (original_max_position_embeddings 32, or for dynamic
max_position_embeddings 32) and the rows are T = 96 tokens long, so every row runs past it: yarn's
ramp and attention factor, llama3's three bands, dynamic's frequencies recomputed for T, linear's
divided positions. Each case is a fresh model run once, which is where transformers' dynamic
frequencies depend on nothing but this forward's length (rope.h, RopeFrequencies).
"""
import json
import os
import sys

import torch
import transformers

import tiny_models

ORIGINAL_CONTEXT = 32
SEQUENCE = 96


def rope_cases():
    """name -> LlamaConfig kwargs (tiny_models' shape: head_dim 16, so 8 frequencies per head)."""
    llama = lambda **rope: tiny_models._common(tie_word_embeddings=False, rope_parameters=rope)  # noqa: E731
    return {
        "default": llama(rope_type="default", rope_theta=10000.0),
        "linear": llama(rope_type="linear", rope_theta=10000.0, factor=4.0),
        "llama3": llama(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                        original_max_position_embeddings=ORIGINAL_CONTEXT),
        "yarn": llama(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                      original_max_position_embeddings=ORIGINAL_CONTEXT),
        # DeepSeek-style mscale terms, beta bounds that leave both ends of the ramp inside the
        # dimensions, and an untruncated ramp.
        "yarn_mscale": llama(rope_type="yarn", rope_theta=10000.0, factor=8.0, mscale=0.707, mscale_all_dim=1.0,
                             beta_fast=8, beta_slow=2, truncate=False,
                             original_max_position_embeddings=ORIGINAL_CONTEXT),
        "yarn_attention_factor": llama(rope_type="yarn", rope_theta=10000.0, factor=2.0, attention_factor=1.25,
                                       original_max_position_embeddings=ORIGINAL_CONTEXT),
        "dynamic": dict(llama(rope_type="dynamic", rope_theta=10000.0, factor=4.0),
                        max_position_embeddings=ORIGINAL_CONTEXT),
    }


def make_case(name, out_dir, seed=0):
    """The case's tiny Llama, saved to out_dir, in eval mode."""
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**rope_cases()[name]))
    tiny_models.perturb_norms_and_biases(model)
    model.save_pretrained(out_dir, safe_serialization=True)
    return model.eval()


def long_rows(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, tiny_models.VOCAB, (2, SEQUENCE), generator=g)


def main():
    from safetensors.torch import save_file
    transformers.logging.set_verbosity_error()
    if len(sys.argv) != 2:
        sys.exit("usage: make_long_rope_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    types = {}
    for name in rope_cases():
        model = make_case(name, os.path.join(out, name), seed=len(name))
        input_ids = long_rows(len(name))
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits.float()
        save_file({"input_ids": input_ids, "logits": logits.contiguous()}, os.path.join(out, name + ".logits.safetensors"))
        types[name] = model.config.rope_parameters["rope_type"]
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(types, f, indent=1)


if __name__ == "__main__":
    main()
