"""Peak host memory of `finetune export --save_method gguf` (or merged_16bit) on a random-init 8B-shaped model.

Writes a model with Llama-3-8B's shapes (--shape llama3_8b: hidden 4096, 32 heads / 8 kv heads,
intermediate 14336, vocab 128256, untied lm_head) or Qwen3-8B's (--shape qwen3_8b: intermediate
12288, vocab 151936, q/k norms, 36 layers in the real model) and --layers decoder layers (bf16
safetensors, one shard per layer so that writing it holds one layer at a time, random N(0, 0.02)
weights, the test tokenizer padded to the vocabulary), then runs the export once per
--quantization entry under /usr/bin/time -v on the CPU in bfloat16 (each type alone, its file
deleted before the next) and prints one JSON line per type: the model's bytes, the process's peak
RSS (time -v: loading included), the wall time, and, sampled from /proc every 50 ms, the RSS when
the first output file appears (the model loaded, the export starting) and the highest RSS from then
on: their difference is what the export itself holds on top of the loaded model. With
--adapter_rank R a random PEFT LoRA adapter of rank R on every projection (lora_B non-zero, so
every projection is merged) is exported with the model; --save_method merged_16bit measures the
merged safetensors export instead (one run; --quantization is not used). WORK_DIR is removed at
the end.

usage: gguf_export_memory.py FINETUNE_BIN WORK_DIR TOKENIZER_DIR [--shape qwen3_8b] --layers N
                             [--quantization f16,q8_0] [--save_method merged_16bit] [--adapter_rank 16]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import time

import torch
from safetensors.torch import save_file

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 4096, 32, 8, 128
SHAPES = {  # shape -> (intermediate_size, vocab_size, config.json keys of its own)
    "llama3_8b": (14336, 128256, {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                  "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                                  "bos_token_id": 128000, "eos_token_id": 128001}),
    "qwen3_8b": (12288, 151936, {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": HEAD_DIM,
                                 "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                                 "bos_token_id": 151643, "eos_token_id": 151645}),
}


def projection_shapes(shape):
    """Each layer's projections (HF module name relative to the layer) -> weight shape (out, in)."""
    intermediate = SHAPES[shape][0]
    return {
        "self_attn.q_proj": (HIDDEN, HIDDEN),
        "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
        "self_attn.o_proj": (HIDDEN, HIDDEN),
        "mlp.gate_proj": (intermediate, HIDDEN),
        "mlp.up_proj": (intermediate, HIDDEN),
        "mlp.down_proj": (HIDDEN, intermediate),
    }


def layer_tensors(i, shape):
    shapes = {f"{name}.weight": size for name, size in projection_shapes(shape).items()}
    out = {f"model.layers.{i}.{name}": torch.randn(shape, dtype=torch.bfloat16) * 0.02 for name, shape in shapes.items()}
    out[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    out[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    if shape == "qwen3_8b":
        out[f"model.layers.{i}.self_attn.q_norm.weight"] = torch.ones(HEAD_DIM, dtype=torch.bfloat16)
        out[f"model.layers.{i}.self_attn.k_norm.weight"] = torch.ones(HEAD_DIM, dtype=torch.bfloat16)
    return out


def write_model(model_dir, layers, tokenizer_dir, shape):
    intermediate, vocab, own_keys = SHAPES[shape]
    os.makedirs(model_dir, exist_ok=True)
    shards = [{"model.embed_tokens.weight": torch.randn(vocab, HIDDEN, dtype=torch.bfloat16) * 0.02,
               "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
               "lm_head.weight": torch.randn(vocab, HIDDEN, dtype=torch.bfloat16) * 0.02}]
    weight_map, total = {}, 0
    for index in range(layers + 1):
        tensors = shards[0] if index == 0 else layer_tensors(index - 1, shape)
        name = f"model-{index + 1:05d}-of-{layers + 1:05d}.safetensors"
        save_file(tensors, os.path.join(model_dir, name), metadata={"format": "pt"})
        for key, tensor in tensors.items():
            weight_map[key] = name
            total += tensor.numel() * tensor.element_size()
        del tensors
        shards = [None]
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config = {"hidden_size": HIDDEN, "intermediate_size": intermediate, "num_hidden_layers": layers,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "vocab_size": vocab,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", **own_keys}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, file), os.path.join(model_dir, file))
    return total


def write_adapter(adapter_dir, model_dir, layers, shape, rank):
    """A PEFT LoRA adapter (fp32, lora_alpha 2r) on every projection of every layer, random A and B."""
    os.makedirs(adapter_dir, exist_ok=True)
    tensors = {}
    for i in range(layers):
        for projection, (out_features, in_features) in projection_shapes(shape).items():
            prefix = f"base_model.model.model.layers.{i}.{projection}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, in_features) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_features, rank) * 0.01
    save_file(tensors, os.path.join(adapter_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
              "bias": "none", "use_rslora": False, "use_dora": False, "fan_in_fan_out": False,
              "base_model_name_or_path": model_dir,
              "target_modules": sorted(name.split(".")[1] for name in projection_shapes(shape))}
    with open(os.path.join(adapter_dir, "adapter_config.json"), "w") as f:
        json.dump(config, f)


def child_rss_bytes(time_pid):
    """VmRSS of finetune, the child of /usr/bin/time `time_pid` (0 until it has started)."""
    try:
        with open(f"/proc/{time_pid}/task/{time_pid}/children") as f:
            children = f.read().split()
        with open(f"/proc/{children[0]}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024
    except (OSError, IndexError, AttributeError):
        return 0


def measure_export(finetune_bin, model_dir, out_dir, save_method, quantization, adapter_dir):
    """One `finetune export` (of `quantization` for gguf) under /usr/bin/time -v: its figures, then its files removed."""
    command = [finetune_bin, "export", "--model_name", model_dir, "--save_method", save_method, "--save_path", out_dir,
               "--device", "cpu", "--dtype", "bfloat16"]
    if save_method == "gguf":
        command += ["--quantization", quantization]
    if adapter_dir:
        command += ["--adapter", adapter_dir]
    proc = subprocess.Popen(["/usr/bin/time", "-v", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    rss_at_export_start, export_peak = None, 0
    while proc.poll() is None:
        rss = child_rss_bytes(proc.pid)
        if rss_at_export_start is None and os.path.isdir(out_dir) and os.listdir(out_dir):
            rss_at_export_start = rss
        if rss_at_export_start is not None:
            export_peak = max(export_peak, rss)
        time.sleep(0.05)
    _, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(stderr[-3000:])
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", stderr).group(1)
    files = {name: os.path.getsize(os.path.join(out_dir, name)) for name in sorted(os.listdir(out_dir))}
    shutil.rmtree(out_dir)
    return {"save_method": save_method, "quantization": quantization if save_method == "gguf" else None,
            "adapter": bool(adapter_dir), "file_bytes": files, "peak_rss_bytes": peak_kib * 1024,
            "rss_at_export_start_bytes": rss_at_export_start, "rss_peak_during_export_bytes": export_peak,
            "export_increase_bytes": export_peak - (rss_at_export_start or 0), "wall": wall}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("finetune_bin")
    parser.add_argument("work_dir")
    parser.add_argument("tokenizer_dir")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3_8b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--quantization", default="f16", help="comma-separated; one export per entry")
    parser.add_argument("--save_method", choices=("gguf", "merged_16bit"), default="gguf")
    parser.add_argument("--adapter_rank", type=int, default=0, help="0: no adapter")
    args = parser.parse_args()
    try:
        model_dir = os.path.join(args.work_dir, f"{args.shape}_shape_{args.layers}layers")
        started = time.time()
        model_bytes = write_model(model_dir, args.layers, args.tokenizer_dir, args.shape)
        adapter_dir = None
        if args.adapter_rank > 0:
            adapter_dir = os.path.join(args.work_dir, f"adapter_r{args.adapter_rank}")
            write_adapter(adapter_dir, model_dir, args.layers, args.shape, args.adapter_rank)
        print(json.dumps({"shape": args.shape, "layers": args.layers, "model_bytes": model_bytes,
                          "write_model_s": round(time.time() - started, 1)}), flush=True)
        quantizations = args.quantization.split(",") if args.save_method == "gguf" else [None]
        for quantization in quantizations:
            result = measure_export(args.finetune_bin, model_dir, os.path.join(args.work_dir, "out"), args.save_method,
                                    quantization, adapter_dir)
            print(json.dumps({"shape": args.shape, "layers": args.layers, "model_bytes": model_bytes, **result}),
                  flush=True)
    finally:
        shutil.rmtree(args.work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
