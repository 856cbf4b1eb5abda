"""Tiny random Hugging Face models, written with transformers' own save_pretrained (safetensors).

Every case the model loader must get right has one model here: the architectures, Llama-3
rope scaling, linear rope scaling, tied and untied embeddings, Qwen2's q/k/v bias, Qwen3's q/k
norm, GQA and MHA, a sharded checkpoint, Mistral with a window shorter than the rows, Phi-3's
fused qkv_proj / gate_up_proj with longrope at full rotary (Phi-3 / Phi-3.5) and partial rotary
(Phi-4-mini), and Gemma-2 / Gemma-3 (text, and the text tower of a Gemma3ForConditionalGeneration
checkpoint) with odd head dims, GQA/MQA/MHA, tied and untied heads, windows shorter than the rows,
local and global layers. Gemma-2's soft-caps are small enough here to bend the scores and logits
they cap. Used by the end-to-end tests and the benchmarks.

Gemma-2 references run transformers' eager attention (reference_attention): its default SDPA
path drops attn_logit_softcapping without a word.
"""
import json
import os
import sys

import torch
import transformers

VOCAB = 256


def _common(**overrides):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    base.update(overrides)
    return base


def _longrope(rotary_dim, seed):
    """Phi-3's longrope with distinct short and long factors. original_max_position_embeddings is
    small (32, with max_position_embeddings 512): rows longer than it switch to the long factors, and
    the attention factor sqrt(1 + ln(16) / ln(32)) scales cos and sin."""
    g = torch.Generator().manual_seed(seed)
    short = (1.0 + 0.5 * torch.rand(rotary_dim // 2, generator=g)).tolist()
    long = (1.0 + 4.0 * torch.rand(rotary_dim // 2, generator=g)).tolist()
    return dict(original_max_position_embeddings=32,
                rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long})


def _gemma(**overrides):
    """Gemma's tiny shape: GeGLU, (1 + w) norms, embedding scale; bos 2, eos 1, pad 0 as Gemma's."""
    return _common(**dict(dict(bos_token_id=2, eos_token_id=1, pad_token_id=0), **overrides))


def model_cases():
    """name -> (config class, config kwargs, save kwargs)."""
    return {
        "llama": (transformers.LlamaConfig, _common(tie_word_embeddings=False), {}),
        "llama_mha_tied": (transformers.LlamaConfig, _common(num_key_value_heads=4, tie_word_embeddings=True), {}),
        "llama3_rope": (transformers.LlamaConfig, _common(
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}), {}),
        "llama_linear_rope": (transformers.LlamaConfig, _common(
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}), {}),
        "qwen2": (transformers.Qwen2Config, _common(tie_word_embeddings=False), {}),
        "qwen3": (transformers.Qwen3Config, _common(head_dim=32, tie_word_embeddings=True), {}),
        "mistral": (transformers.MistralConfig, _common(sliding_window=None), {}),
        "llama_sharded": (transformers.LlamaConfig, _common(), {"max_shard_size": "100KB"}),
        "phi3_longrope": (transformers.Phi3Config, _common(tie_word_embeddings=False, **_longrope(16, 1)), {}),
        "phi4_mini_partial_rotary": (transformers.Phi3Config, _common(
            tie_word_embeddings=True, partial_rotary_factor=0.75, **_longrope(12, 2)), {}),
        "mistral_window": (transformers.MistralConfig, _common(sliding_window=5), {}),
        "gemma2": (transformers.Gemma2Config, _gemma(
            head_dim=20, sliding_window=6, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
            query_pre_attn_scalar=24, num_hidden_layers=3), {}),
        "gemma2_mha_untied": (transformers.Gemma2Config, _gemma(
            num_key_value_heads=4, head_dim=16, sliding_window=4, tie_word_embeddings=False), {}),
        "gemma3": (transformers.Gemma3TextConfig, _gemma(
            head_dim=24, sliding_window=5, query_pre_attn_scalar=24, num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}), {}),
        "gemma3_mqa_untied": (transformers.Gemma3TextConfig, _gemma(
            num_key_value_heads=1, head_dim=12, sliding_window=4, tie_word_embeddings=False,
            sliding_window_pattern=2), {}),
        "gemma3_multimodal": (transformers.Gemma3Config, dict(
            text_config=_gemma(head_dim=16, sliding_window=5, sliding_window_pattern=2),
            vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                               image_size=28, patch_size=14),
            mm_tokens_per_image=4, boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2,
            image_token_index=VOCAB - 1), {}),
    }


MODEL_CLASSES = {
    transformers.LlamaConfig: transformers.LlamaForCausalLM,
    transformers.Qwen2Config: transformers.Qwen2ForCausalLM,
    transformers.Qwen3Config: transformers.Qwen3ForCausalLM,
    transformers.MistralConfig: transformers.MistralForCausalLM,
    transformers.Phi3Config: transformers.Phi3ForCausalLM,
    transformers.Gemma2Config: transformers.Gemma2ForCausalLM,
    transformers.Gemma3TextConfig: transformers.Gemma3ForCausalLM,
    transformers.Gemma3Config: transformers.Gemma3ForConditionalGeneration,
}


def reference_attention(config):
    """The attention implementation transformers must run for `config` to compute the model as
    its modeling file defines it: eager for Gemma-2 (the only one that computes its soft-cap),
    transformers' default otherwise."""
    return "eager" if getattr(config, "model_type", "") == "gemma2" else None


def load_reference_model(model_dir, **kwargs):
    """AutoModelForCausalLM.from_pretrained with reference_attention's implementation; a
    Gemma3ForConditionalGeneration checkpoint loads as the class it names."""
    config = transformers.AutoConfig.from_pretrained(model_dir)
    attention = reference_attention(config)
    if attention:
        kwargs["attn_implementation"] = attention
    if getattr(config, "architectures", None) == ["Gemma3ForConditionalGeneration"]:
        return transformers.Gemma3ForConditionalGeneration.from_pretrained(model_dir, **kwargs)
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)


def perturb_norms_and_biases(model, bias_std=0.05):
    """Random init leaves norms at 1 and biases at 0; make them non-trivial so every weight matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(bias_std * torch.randn_like(p))


def make_model(name, out_dir, seed=0, dtype=torch.float32):
    config_class, kwargs, save_kwargs = model_cases()[name]
    torch.manual_seed(seed)
    config = config_class(**kwargs)
    attention = reference_attention(config)
    if attention:
        config._attn_implementation = attention
    model = MODEL_CLASSES[config_class](config).to(dtype)
    perturb_norms_and_biases(model)
    model.save_pretrained(out_dir, safe_serialization=True, **save_kwargs)
    return model


def make_tokenized_rows(count, seed=0, min_len=3, max_len=40, vocab=VOCAB, completion_only=False):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        ids = torch.randint(3, vocab, (length,), generator=g).tolist()
        row = {"input_ids": ids}
        if completion_only:
            cut = length // 2
            row["labels"] = [-100] * cut + ids[cut:]
        rows.append(row)
    return rows


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    out = sys.argv[1]
    for case in model_cases():
        make_model(case, os.path.join(out, case))
    print("wrote", ", ".join(model_cases()))
