"""Tiny random models with the other vocabularies the GGUF export names, for tests/e2e/test_gguf.py.

- "spm_llama": a Llama model with the Llama-2 layout: sentencepiece tokenizer.model (byte
  fallback; make_tokenizer_fixtures.py's spm_llama2) + tokenizer_config.json, and beside them the
  byte_fallback tokenizer.json transformers converts it to (LlamaModel.set_vocab reads the
  tokenizer.model first);
- "gpt2_bpe", "smollm_bpe", "tekken_bpe": the qwen2 case's byte-level BPE vocabulary with the
  pre-tokenizer of GPT-2 (a lone ByteLevel with its regex), SmolLM (Digits one by one, then that
  ByteLevel) and Mistral-Nemo's tekken (Split with its regex, then ByteLevel without one).
"""
import json
import os
import shutil

import torch

import gguf_models
import tiny_models

TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    "gpt2_bpe": ("gpt-2", BYTE_LEVEL),
    "smollm_bpe": ("smollm", {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BYTE_LEVEL]}),
    "tekken_bpe": ("tekken", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": TEKKEN_REGEX}, "behavior": "Isolated", "invert": False},
        {**BYTE_LEVEL, "use_regex": False}]}),
}


def make_vocab_model(case, out_dir, tokenizer_root, seed=0):
    """Writes the model and tokenizer into out_dir; returns (transformers model, expected pre name)."""
    if case == "spm_llama":
        return make_spm_llama(out_dir, os.path.join(tokenizer_root, "spm_llama2"), seed), "default"
    pre_name, pre_tokenizer = PRE_TOKENIZERS[case]
    model = gguf_models.make_gguf_model("qwen2", out_dir, tokenizer_root, seed)
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tokenizer = json.load(f)
    tokenizer["pre_tokenizer"] = pre_tokenizer
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    return model, pre_name


def make_spm_llama(out_dir, spm_dir, seed):
    import sentencepiece
    import transformers
    vocab = sentencepiece.SentencePieceProcessor(model_file=os.path.join(spm_dir, "tokenizer.model")).vocab_size()
    config_class, kwargs, _ = tiny_models.model_cases()["llama"]
    torch.manual_seed(seed)
    config = config_class(**{**kwargs, "vocab_size": vocab, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None})
    model = tiny_models.MODEL_CLASSES[config_class](config)
    tiny_models.perturb_norms_and_biases(model, bias_std=0.1)
    model.save_pretrained(out_dir)
    for file in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(spm_dir, file), os.path.join(out_dir, file))
    transformers.AutoTokenizer.from_pretrained(spm_dir).backend_tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    return model.eval()
