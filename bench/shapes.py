"""Random-init models of real shapes and the benchmark workload, made with transformers.

  llama-3.2-1b  Llama-3.2-1B's config (tied embeddings, llama3 rope scaling)
  qwen3-8b      Qwen3-8B's config (q/k norm, untied head)
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
    "qwen3-8b": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def make_model(shape, out_dir, seed=0):
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return
    config_class, model_class, kwargs = SHAPES[shape]
    torch.manual_seed(seed)
    config = config_class(**kwargs)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = model_class(config)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)


def make_rows(count, vocab, seed=0, median=200, sigma=0.6, low=32, high=2048):
    """Log-normal lengths around `median` (like alpaca-cleaned with a Llama-3 tokenizer);
    completions-only labels on the second half of each row."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(math.log(median) + sigma * torch.randn(count, generator=g)).round().clamp(low, high).long()
    rows = []
    for n in lengths.tolist():
        ids = torch.randint(100, vocab - 100, (n,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (n // 2) + ids[n // 2:]})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["model", "data"])
    parser.add_argument("--shape", choices=list(SHAPES), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=4000)
    args = parser.parse_args()
    if args.what == "model":
        make_model(args.shape, args.out)
    else:
        vocab = SHAPES[args.shape][2]["vocab_size"]
        with open(args.out, "w") as f:
            for row in make_rows(args.rows, vocab):
                f.write(json.dumps(row) + "\n")
