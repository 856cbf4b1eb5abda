"""How close a mixture-of-experts LoRA step comes to the time its FLOPs need (issue 28's criterion:
"within 1.5x of the time the active-parameter FLOPs need at the hardware's measured GEMM rate at the
best setting"). For the integrator's device run; not run on the CPU machine.

  1. The GPU's dense bf16 GEMM rate, measured here: torch.matmul over the model's own GEMM shapes at
     the run's micro-batch of tokens (the attention projections, the experts' gate/up and down
     projections over the tokens x top-k rows they receive, the LM head); the fastest is the rate.
  2. The FLOPs one trained token needs, counted from the config (2 FLOPs per multiply-add):
       P_active = attention projections + router + top-k experts' gate, up and down (+ the dense
                  MLP of mlp_only layers) + LM head + the LoRA factors: the weights one token meets.
       forward 2 P_active; backward 2 P_active (input gradients only: the base is frozen, and the
       LoRA factors' weight gradients are counted in the small LoRA term); layer recompute (gradient
       checkpointing) another forward, 2 P_active over the layers. So 4 P_active per token without
       recompute, 6 P_active with it, where full training would need 6 and 8 (the usual 6N of MFU
       estimates counts weight gradients a frozen base does not have).
       Attention's score and value products (no weights): 4 d_attn s per token and layer forward,
       s the causal context a token attends to (from the packed samples' lengths: sum L(L+1)/2 /
       sum L), twice that backward (flash attention's dQ, dK, dV), once more when recomputed.
  3. Our step time at the best setting (packed rows, no recompute by default: `finetune train`
     --packing true), tokens/s from metrics.jsonl without the first logging window.
  ratio = (1 / tokens_per_s) / (FLOPs per token / GEMM rate); the criterion is ratio <= 1.5.

    python bench/moe_flop_efficiency.py --finetune build/finetune --shape qwen3-30b-a3b-8l --layers 2
    python bench/moe_flop_efficiency.py --finetune build/finetune --shape mixtral-8x7b-4l --layers 2

--layers N keeps the per-layer shapes with fewer layers (the ratio is per token and layer-bound; a
smaller model is made and loaded faster). Prints one JSON object on stdout.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shapes  # noqa: E402


def moe_sizes(config):
    """(experts, top_k, expert width, sparse layers, dense layers) of a Qwen3-MoE or Mixtral config."""
    experts = config.get("num_experts", config.get("num_local_experts"))
    top_k = config["num_experts_per_tok"]
    width = config.get("moe_intermediate_size", config["intermediate_size"])
    layers = config["num_hidden_layers"]
    dense = set(config.get("mlp_only_layers") or [])
    step = config.get("decoder_sparse_step", 1) or 1
    sparse = [i for i in range(layers) if i not in dense and (i + 1) % step == 0]
    return experts, top_k, width, len(sparse), layers - len(sparse)


def active_parameters(config, lora_rank, expert_lora):
    """Weights one token meets (multiply-adds per token), by part."""
    hidden, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    experts, top_k, width, sparse, dense = moe_sizes(config)
    layers = sparse + dense
    attention = hidden * head_dim * (2 * heads + 2 * kv)  # q, o; k, v
    lora_attention = lora_rank * ((hidden + heads * head_dim) * 2 + (hidden + kv * head_dim) * 2)
    expert_mlp = top_k * 3 * hidden * width
    lora_experts = top_k * lora_rank * ((hidden + 2 * width) + (width + hidden)) if expert_lora else 0
    parts = {
        "attention": layers * attention,
        "router": sparse * hidden * experts,
        "experts": sparse * expert_mlp,
        "dense_mlp": dense * 3 * hidden * config["intermediate_size"],
        "lm_head": hidden * config["vocab_size"],
        "lora": layers * lora_attention + sparse * lora_experts,
    }
    return parts, layers, heads * head_dim


def flops_per_token(config, context, checkpointing, lora_rank, expert_lora):
    parts, layers, attention_width = active_parameters(config, lora_rank, expert_lora)
    total = sum(parts.values())
    in_layers = total - parts["lm_head"]
    matmul = 2 * total + 2 * total + (2 * in_layers if checkpointing else 0)  # forward, input grads, recompute
    attention_forward = 4 * attention_width * context * layers
    attention = attention_forward * (3 + (1 if checkpointing else 0))
    return {"active_parameters": total, "parts": parts, "matmul_flops": matmul, "attention_flops": attention,
            "flops": matmul + attention,
            "count": ("6" if checkpointing else "4") + " x active parameters (frozen base: no weight gradients)"
                     " + attention products x" + ("4" if checkpointing else "3")}


def gemm_shapes(config, tokens):
    hidden, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    _, top_k, width, _, _ = moe_sizes(config)
    rows = tokens * top_k
    return {"qkv_proj": (tokens, hidden, (heads + 2 * kv) * head_dim), "o_proj": (tokens, heads * head_dim, hidden),
            "experts_gate_up": (rows, hidden, 2 * width), "experts_down": (rows, width, hidden),
            "lm_head": (tokens, hidden, config["vocab_size"])}


def measure_gemm_tflops(m, k, n, repeats=20):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start = time.time()
    for _ in range(repeats):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    return 2 * m * k * n * repeats / (time.time() - start) / 1e12


def causal_context(rows, max_len):
    """Mean number of positions a token attends to over the packed samples (each truncated to max_len)."""
    lengths = [min(len(r["input_ids"]), max_len) for r in rows]
    return sum(length * (length + 1) / 2 for length in lengths) / sum(lengths)


def run_ours(args, model, data, work):
    out = os.path.join(work, "ours-best")
    cmd = [args.finetune, "train", "--model_name", model, "--dataset", data, "--output_dir", out,
           "--max_steps", args.steps, "--per_device_train_batch_size", args.rows, "--gradient_accumulation_steps", 1,
           "--max_seq_length", args.max_seq_length, "--packing", "true", "--dtype", "bfloat16", "--device", "cuda",
           "--logging_steps", args.logging_steps, "--save_strategy", "no", "--overwrite_output_dir",
           "--use_gradient_checkpointing", "true" if args.gradient_checkpointing else "false", "--r", args.r]
    if args.moe_experts:
        cmd += ["--target_parameters", "mlp.experts.gate_up_proj,mlp.experts.down_proj"]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        print(proc.stdout[-4000:], proc.stderr[-4000:], file=sys.stderr)
        return None
    lines = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip().startswith("{")]
    lines = [line for line in lines if "tokens" in line and "elapsed_s" in line]
    first, last = lines[0], lines[-1]  # without the first (warm-up) window
    tokens = last["tokens"] - first["tokens"]
    seconds = last["elapsed_s"] - first["elapsed_s"]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"tokens_per_s": tokens / seconds, "peak_memory_gib": summary.get("peak_memory_gib"), "command": cmd}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--finetune", required=True)
    p.add_argument("--shape", default="qwen3-30b-a3b-8l")
    p.add_argument("--layers", type=int, default=None, help="override the shape's num_hidden_layers")
    p.add_argument("--work", default="/tmp/moe_flops")
    p.add_argument("--rows", type=int, default=4, help="packed rows of max_seq_length per micro-batch")
    p.add_argument("--max_seq_length", type=int, default=2048)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--logging_steps", type=int, default=3)
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--gradient_checkpointing", action="store_true")
    p.add_argument("--moe_experts", action="store_true", help="also LoRA on the expert stacks")
    p.add_argument("--timeout", type=int, default=400)
    args = p.parse_args()

    config = dict(shapes.SHAPES[args.shape][2])
    work = os.path.join(args.work, args.shape)
    if args.layers is not None:
        shapes.SHAPES[args.shape][2]["num_hidden_layers"] = args.layers
        config["num_hidden_layers"] = args.layers
        work = os.path.join(args.work, f"{args.shape}-{args.layers}layers")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model")
    shapes.make_model(args.shape, model)
    data = os.path.join(work, "rows.jsonl")
    rows = shapes.make_rows(1000, config["vocab_size"])
    with open(data, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")

    tokens = args.rows * args.max_seq_length
    rates = {name: measure_gemm_tflops(*shape) for name, shape in gemm_shapes(config, tokens).items()}
    rate = max(rates.values())
    torch.cuda.empty_cache()
    context = causal_context(rows, args.max_seq_length)
    count = flops_per_token(config, context, args.gradient_checkpointing, args.r, args.moe_experts)
    ours = run_ours(args, model, data, work)
    result = {"shape": args.shape, "layers": config["num_hidden_layers"], "device": torch.cuda.get_device_name(),
              "tokens_per_micro_batch": tokens, "gemm_tflops": rates, "gemm_rate_tflops": rate,
              "causal_context": context, **count, "ours": ours}
    if ours:
        seconds_per_token = 1.0 / ours["tokens_per_s"]
        flop_seconds_per_token = count["flops"] / (rate * 1e12)
        result["model_tflops_achieved"] = count["flops"] * ours["tokens_per_s"] / 1e12
        result["ratio_to_flop_time"] = seconds_per_token / flop_seconds_per_token
        result["within_1_5x"] = result["ratio_to_flop_time"] <= 1.5
    print(json.dumps(result))


if __name__ == "__main__":
    main()
