"""Tiny random Phi-3 and Gemma models with their families' vocabularies, for tests/e2e/test_gguf_families.py.

Shapes are tiny_models.py's (hidden 64, 4 heads), configured where llama.cpp's runtime can
represent them, since llama.cpp hard-codes what the converter does not write: Gemma's attention
scale is head_dim^-0.5 (query_pre_attn_scalar = head_dim), Gemma-2's sliding layers are the even
ones (transformers' default) and Gemma-3's all but every 6th (its default pattern, hence 6 layers).
Windows (5, 6) are shorter than the 10 compared positions, so the sliding layers matter. Phi-3's
longrope has distinct short and long factors and original_max_position_embeddings 512 of 4096
(attention factor sqrt(1 + ln 8 / ln 512)): llama.cpp picks the long factors when its context
(padded to 256) exceeds the original length, transformers when the sequence does, so 512 keeps
both on the short ones.

- "phi3_longrope": Phi3ForCausalLM, untied, with the Phi-3.5-style sentencepiece vocabulary of the
  chat template fixtures (tokenizer.model + added_tokens_decoder <|endoftext|>, <|assistant|>...,
  chat template), vocab_size padded past the added tokens as Phi-3's 32064;
- "phi4_mini": partial_rotary_factor 0.75, tied, a byte-level BPE tokenizer.json whose
  tokenizer_config names GPT2Tokenizer (Phi-4-mini's layout: the converter's GPT-2 path);
- "gemma2": GeGLU, four norms, soft-caps 2.0 / 3.0 small enough to bend the scores and logits,
  the Gemma-layout sentencepiece vocabulary of the tokenizer fixtures (no dummy prefix);
- "gemma3": q/k norms, 6 layers (5 sliding, 1 full), linear rope scaling on the full layer and
  rope base 10000 on the sliding ones, tied;
- "gemma3_untied_softcap": untied lm_head (written as output.weight) and a final soft-cap.
"""
import json
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer

import gguf_models
import tiny_models


def _phi3(base):
    config_class, kwargs, _ = tiny_models.model_cases()[base]
    return config_class, {**kwargs, "original_max_position_embeddings": 512, "max_position_embeddings": 4096}


def _gemma2():
    return transformers.Gemma2Config, tiny_models._gemma(
        head_dim=16, query_pre_attn_scalar=16, sliding_window=6, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, num_hidden_layers=3)


def _gemma3(**overrides):
    return transformers.Gemma3TextConfig, tiny_models._gemma(**{**dict(
        head_dim=16, query_pre_attn_scalar=16, sliding_window=5, num_hidden_layers=6,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}), **overrides})


# case -> (config maker, tokenizer kind)
CASES = {
    "phi3_longrope": (lambda: _phi3(base="phi3_longrope"), "phi3_spm"),
    "phi4_mini": (lambda: _phi3(base="phi4_mini_partial_rotary"), "gpt2_tokenizer_class"),
    "gemma2": (_gemma2, "gemma_spm"),
    "gemma3": (_gemma3, "gemma_spm"),
    "gemma3_untied_softcap": (lambda: _gemma3(tie_word_embeddings=False, final_logit_softcapping=5.0), "gemma_spm"),
}

# The pre-tokenizer the converter must be told for a GPT-2-path vocabulary (gguf_reference.run_converter).
PRE_TOKENIZER = {"phi4_mini": "qwen2"}


def fixtures_root():
    return os.environ.get("FINETUNE_FIXTURES", "")


def copy_tokenizer(kind, out_dir):
    """Writes the tokenizer files; returns {vocab_size, bos/eos/pad ids} for config.json."""
    root = fixtures_root()
    if kind == "phi3_spm":
        source = os.path.join(root, "chat_templates", "phi3_5")
        for name in ("tokenizer.model", "tokenizer_config.json"):
            shutil.copy(os.path.join(source, name), os.path.join(out_dir, name))
        # Beside it the tokenizer.json Phi-3 ships (transformers' LlamaTokenizer conversion: Metaspace
        # "first", byte fallback, the added tokens), which AutoTokenizer then runs as written.
        transformers.LlamaTokenizer.from_pretrained(out_dir).backend_tokenizer.save(
            os.path.join(out_dir, "tokenizer.json"))
        with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
            added = {int(k): v["content"] for k, v in json.load(f)["added_tokens_decoder"].items()}
        # Phi-3 pads its 32011 tokens to 32064; the same 53 padding slots here.
        return dict(vocab_size=max(added) + 1 + 53, bos_token_id=1, eos_token_id=2000, pad_token_id=2000)
    if kind == "gpt2_tokenizer_class":
        source = os.path.join(root, "tokenizer", "qwen2")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(source, name), os.path.join(out_dir, name))
        path = os.path.join(out_dir, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config["tokenizer_class"] = "GPT2Tokenizer"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False)
        vocab = Tokenizer.from_file(os.path.join(source, "tokenizer.json")).get_vocab_size()
        return dict(vocab_size=vocab, **gguf_models.tokenizer_config_ids(source))
    source = os.path.join(root, "tokenizer", "gemma")
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(source, name), os.path.join(out_dir, name))
    vocab = Tokenizer.from_file(os.path.join(source, "tokenizer.json")).get_vocab_size()
    return dict(vocab_size=vocab, bos_token_id=2, eos_token_id=1, pad_token_id=0)


def make_family_model(case, out_dir, seed=0):
    """Writes the model and its tokenizer into out_dir; returns the transformers model (eval mode)."""
    make_config, kind = CASES[case]
    config_class, kwargs = make_config()
    return make_model(config_class, kwargs, kind, out_dir, seed)


def make_tiny_models_case(case, out_dir, seed=0):
    """tiny_models.py's `case` (a Gemma config llama.cpp cannot represent) with the Gemma vocabulary."""
    config_class, kwargs, _ = tiny_models.model_cases()[case]
    return make_model(config_class, kwargs, "gemma_spm", out_dir, seed)


def make_model(config_class, kwargs, kind, out_dir, seed):
    os.makedirs(out_dir, exist_ok=True)
    ids = copy_tokenizer(kind, out_dir)
    torch.manual_seed(seed)
    config = config_class(**{**kwargs, **ids})
    attention = tiny_models.reference_attention(config)
    if attention:
        config._attn_implementation = attention
    model = tiny_models.MODEL_CLASSES[config_class](config)
    tiny_models.perturb_norms_and_biases(model, bias_std=0.1)
    if config.model_type.startswith("gemma"):
        # Gemma's norms scale by 1 + w: a checkpoint stores w near 0 (perturb_norms' 1 + noise would
        # double every norm, 4 per layer, and amplify the weights' rounding far past a real model's).
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("norm.weight"):
                    parameter.sub_(1.0)
    model.save_pretrained(out_dir)
    return model.eval()
