#!/usr/bin/env python3
"""Reference fixtures for the config module (ModelConfig from config.json).

Usage: make_config_fixtures.py OUTDIR

Writes OUTDIR/<case>/config.json for each supported architecture and spelling, and
OUTDIR/expected.json = {"<case>": {field: value, ...}} with the values transformers derives:

  * v5 configs are written by transformers' own save_pretrained (rope_parameters, dtype);
  * v4 configs (rope_theta, rope_scaling with "type" or "rope_type", torch_dtype, keys left out
    so per-architecture defaults apply) are written by hand, as found on the hub.

Every expected value comes from transformers: AutoConfig.from_pretrained(dir) for the config
fields, and the model built from it on the meta device for what the layers actually contain
(q/k/v and o_proj biases, MLP bias, Qwen3's q_norm/k_norm, head_dim of q_proj).
"""
import json
import os
import sys

import torch
import transformers
from transformers import (AutoConfig, AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config,
                          Qwen3Config)

# Small sizes shared by every case: cheap to build even off the meta device.
TINY = dict(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)


def v5_cases():
    """(name, config object) saved with save_pretrained."""
    return [
        ("llama_gqa", LlamaConfig(**TINY, architectures=["LlamaForCausalLM"], rms_norm_eps=1e-5)),
        ("llama_mha_tied_bias", LlamaConfig(**{**TINY, "num_key_value_heads": 4}, architectures=["LlamaForCausalLM"],
                                            tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                            pad_token_id=0)),
        ("llama3_rope", LlamaConfig(**{**TINY, "max_position_embeddings": 131072}, architectures=["LlamaForCausalLM"],
                                    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                     "original_max_position_embeddings": 8192},
                                    bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
                                    tie_word_embeddings=True, dtype="bfloat16")),
        ("llama_linear_rope", LlamaConfig(**TINY, architectures=["LlamaForCausalLM"],
                                          rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                           "factor": 2.0})),
        ("qwen2_tied", Qwen2Config(**TINY, architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                   bos_token_id=151643, eos_token_id=151645, dtype="bfloat16")),
        ("qwen3_head_dim", Qwen3Config(**TINY, head_dim=32, architectures=["Qwen3ForCausalLM"],
                                       tie_word_embeddings=True, eos_token_id=151645)),
        ("qwen3_attention_bias", Qwen3Config(**TINY, head_dim=16, attention_bias=True,
                                             architectures=["Qwen3ForCausalLM"])),
        ("mistral_sliding", MistralConfig(**TINY, architectures=["MistralForCausalLM"], sliding_window=4096)),
        ("mistral_no_sliding", MistralConfig(**TINY, architectures=["MistralForCausalLM"], sliding_window=None,
                                             dtype="float16")),
    ]


def v4_cases():
    """(name, config.json dict) in the transformers 4.x spelling, with keys omitted on purpose."""
    base = {k: v for k, v in TINY.items()}
    return [
        # Llama-3.1-style: rope_scaling with rope_type, torch_dtype, no head_dim (derived).
        ("v4_llama31", {**base, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "hidden_act": "silu", "rope_theta": 500000.0, "torch_dtype": "bfloat16",
                        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                        "bos_token_id": 128000, "eos_token_id": [128001, 128009], "tie_word_embeddings": False}),
        # Old "type" key, no num_key_value_heads (llama default: = num_attention_heads), no tie key.
        ("v4_llama_linear_type", {**{k: v for k, v in base.items() if k != "num_key_value_heads"},
                                  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "rope_scaling": {"type": "linear", "factor": 4.0}, "torch_dtype": "float16"}),
        # rope_scaling null, Qwen2.5-style, no tie key (default false), sliding window off.
        ("v4_qwen2", {**base, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                      "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-6,
                      "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2,
                      "torch_dtype": "bfloat16", "eos_token_id": 151643, "bos_token_id": 151643}),
        # Qwen3 without head_dim: transformers' default is 128, not hidden/heads.
        ("v4_qwen3_default_head_dim", {**base, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                       "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
                                       "tie_word_embeddings": True}),
        # Mistral without sliding_window / num_key_value_heads: defaults 4096 and 8.
        ("v4_mistral_defaults", {**{k: v for k, v in base.items() if k not in ("num_key_value_heads",)},
                                 "num_attention_heads": 8,
                                 "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                 "rope_theta": 1000000.0, "torch_dtype": "bfloat16"}),
        # No "architectures" at all: the model type decides (AutoModelForCausalLM does the same).
        ("v4_no_architectures", {**base, "model_type": "llama"}),
    ]


def expected_values(case_dir):
    config = AutoConfig.from_pretrained(case_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    attention = model.model.layers[0].self_attn
    mlp = model.model.layers[0].mlp
    rope = config.rope_parameters
    num_heads = config.num_attention_heads
    eos = config.eos_token_id
    expected = {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": attention.q_proj.out_features // num_heads,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": rope["rope_theta"],
        "rope_type": rope.get("rope_type", "default"),
        "tie_word_embeddings": bool(config.tie_word_embeddings),
        "attention_bias": attention.q_proj.bias is not None,
        "attention_output_bias": attention.o_proj.bias is not None,
        "mlp_bias": mlp.gate_proj.bias is not None,
        "qk_norm": hasattr(attention, "q_norm"),
        "max_position_embeddings": config.max_position_embeddings,
        "torch_dtype": str(config.dtype).replace("torch.", "") if config.dtype is not None else "float32",
        "bos_token_id": config.bos_token_id,
        "eos_token_ids": [] if eos is None else (list(eos) if isinstance(eos, (list, tuple)) else [eos]),
        "pad_token_id": config.pad_token_id,
        "sliding_window": getattr(config, "sliding_window", None),
    }
    assert attention.k_proj.bias is not None if expected["attention_bias"] else attention.k_proj.bias is None
    if expected["rope_type"] in ("linear", "llama3"):
        expected["rope_factor"] = rope["factor"]
    if expected["rope_type"] == "llama3":
        expected["low_freq_factor"] = rope["low_freq_factor"]
        expected["high_freq_factor"] = rope["high_freq_factor"]
        expected["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
    # The model itself must use only full attention for the cases we accept.
    assert all(t == "full_attention" for t in getattr(config, "layer_types", None) or ["full_attention"])
    return expected


def main():
    transformers.logging.set_verbosity_error()  # tiny vocabularies trip harmless id-range warnings
    if len(sys.argv) != 2:
        sys.exit("usage: make_config_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, config in v5_cases():
        case_dir = os.path.join(out, name)
        config.save_pretrained(case_dir)
        expected[name] = expected_values(case_dir)
    for name, raw in v4_cases():
        case_dir = os.path.join(out, name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "config.json"), "w") as f:
            json.dump(raw, f, indent=2)
        expected[name] = expected_values(case_dir)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
