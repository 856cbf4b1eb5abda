"""Random-init models of real shapes and the benchmark workload, made with transformers.

  llama-3.2-1b  Llama-3.2-1B's config (tied embeddings, llama3 rope scaling)
  llama-3.1-8b  Llama-3.1-8B's config (untied head, llama3 rope scaling x8 from 8192 positions)
  qwen3-8b      Qwen3-8B's config (q/k norm, untied head)
  gemma-3-4b    Gemma-3-4B's text tower (5 sliding-window layers of 1024 per global one, linear rope x8
                on the global layers, q/k norm, tied head)
  gemma-2-9b    Gemma-2-9B's config (alternating sliding/global layers, attention and final logit
                soft-caps, tied head)
  qwen3-30b-a3b-8l  Qwen3-30B-A3B's per-layer shapes (128 experts of 768, top-8, normalised, q/k norm),
                8 of its 48 layers (fits an H100 in bf16 LoRA)
  mixtral-8x7b-4l   Mixtral-8x7B's per-layer shapes (8 experts of 14336, top-2), 4 of its 32 layers
  phi-4-mini    Phi-4-mini's config (fused qkv/gate_up, partial rotary 0.75, longrope; the long
                factors are a ramp of the real one's range, 1 to 64, not its values)
  gemma-3-4b-6l, gemma-2-9b-4l, phi-4-mini-4l
                the same per-layer shapes and configs with 6, 4 and 4 layers (one period of
                Gemma-3's 5-local:1-global pattern, two of Gemma-2's alternation): the families' GPU
                parity runs (bench/gpu_families.sh), where an fp32 copy of the model is made as well
Weights are random (no hub access): speed and memory depend only on the shapes.
"""
import argparse
import json
import math
import os

import torch
import transformers

SHAPES = {
    "llama-3.2-1b": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "llama-3.1-8b": (transformers.LlamaConfig, transformers.LlamaForCausalLM, dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "qwen3-8b": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "gemma-3-4b": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM, dict(
        vocab_size=262208, hidden_size=2560, intermediate_size=10240, num_hidden_layers=34,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
        sliding_window=1024, max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(34)],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})),
    "gemma-2-9b": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM, dict(
        vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
        max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", bos_token_id=2, eos_token_id=1, pad_token_id=0,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(42)],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "phi-4-mini": (transformers.Phi3Config, transformers.Phi3ForCausalLM, dict(
        vocab_size=200064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=24, num_key_value_heads=8, max_position_embeddings=131072,
        original_max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=True,
        hidden_act="silu", bos_token_id=199999, eos_token_id=199999, pad_token_id=199999,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0] * 48, "long_factor": [64.0 ** (i / 47) for i in range(48)]})),
    "qwen3-30b-a3b-8l": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=8, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643,
        eos_token_id=151645, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mixtral-8x7b-4l": (transformers.MixtralConfig, transformers.MixtralForCausalLM, dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
        max_position_embeddings=32768, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2, sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def fewer_layers(shape, layers):
    """`shape`'s config with its first `layers` decoder layers (and their layer types)."""
    config_class, model_class, kwargs = SHAPES[shape]
    kwargs = dict(kwargs, num_hidden_layers=layers)
    if "layer_types" in kwargs:
        kwargs["layer_types"] = kwargs["layer_types"][:layers]
    return config_class, model_class, kwargs


for _shape, _layers in (("gemma-3-4b", 6), ("gemma-2-9b", 4), ("phi-4-mini", 4)):
    SHAPES[f"{_shape}-{_layers}l"] = fewer_layers(_shape, _layers)


def make_model(shape, out_dir, seed=0, layers=None):
    """`shape`'s model, random weights, saved to `out_dir` (kept when it exists); `layers`: its first
    `layers` decoder layers only (fewer_layers)."""
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return
    config_class, model_class, kwargs = SHAPES[shape] if layers is None else fewer_layers(shape, layers)
    torch.manual_seed(seed)
    config = config_class(**kwargs)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = model_class(config)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)


LABELS = ("completions", "all")


def make_rows(count, vocab, seed=0, median=200, sigma=0.6, low=32, high=2048, labels="completions"):
    """Log-normal lengths around `median` (like alpaca-cleaned with a Llama-3 tokenizer);
    labels = "completions": completions-only labels on the second half of each row; "all": every
    token labelled (the same ids: what the LM head would cost if masked positions went through it)."""
    if labels not in LABELS:
        raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(math.log(median) + sigma * torch.randn(count, generator=g)).round().clamp(low, high).long()
    rows = []
    for n in lengths.tolist():
        ids = torch.randint(100, vocab - 100, (n,), generator=g).tolist()
        masked = n // 2 if labels == "completions" else 0
        rows.append({"input_ids": ids, "labels": [-100] * masked + ids[masked:]})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["model", "data"])
    parser.add_argument("--shape", choices=list(SHAPES), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--layers", type=int, default=None, help="model: the shape's first LAYERS decoder layers")
    parser.add_argument("--labels", choices=LABELS, default="completions", help="data: which tokens are labelled")
    args = parser.parse_args()
    if args.what == "model":
        make_model(args.shape, args.out, layers=args.layers)
    else:
        vocab = SHAPES[args.shape][2]["vocab_size"]
        with open(args.out, "w") as f:
            for row in make_rows(args.rows, vocab, labels=args.labels):
                f.write(json.dumps(row) + "\n")
