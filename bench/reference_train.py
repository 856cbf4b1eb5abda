"""The reference: a hand-written PyTorch DDP + transformers + PEFT LoRA loop, bf16 base, fp32
adapters, gradient checkpointing, fused AdamW, token-normalised loss; the LoRA on every linear projection
of the family (Phi-3's fused qkv_proj and gate_up_proj), Gemma-2 on transformers' eager attention (the
one that soft-caps). With --load_in_4bit the base is quantized by transformers + bitsandbytes (NF4,
double quantization, bf16 compute: QLoRA) and PEFT wraps its Linear4bit layers; --optim adamw_8bit uses
bitsandbytes' AdamW8bit. With --liger the same loop runs on Liger kernels (a benchmark peer): liger_kernel
patches transformers' Llama/Qwen3 classes before the model is made (RMSNorm, SwiGLU MLP, RoPE, and the LM
head fused with the cross-entropy, so no logits are kept), and the loss comes from the model's forward
(sum over tokens / num_items_in_batch, the same normalisation). Launch with torchrun (or plain python for
one GPU). Prints one JSON line (rank 0) with tokens/s per GPU (non-padding tokens), optimizer steps/s and
peak GPU memory, measured after `--warmup_steps` steps.
"""
import json
import os
import time

import peft
import torch
import torch.distributed as dist
import transformers

from peer_common import lora_config, run_arguments


def apply_liger(model_dir):
    """Liger's patch for the model's family, applied to transformers' classes before the model is made."""
    import liger_kernel.transformers as liger
    model_type = transformers.AutoConfig.from_pretrained(model_dir).model_type
    patch = getattr(liger, f"apply_liger_kernel_to_{model_type}")
    patch(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True)


def main():
    p = run_arguments(steps=30, warmup_steps=5)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--max_seq_length", type=int, default=2048)
    p.add_argument("--load_in_4bit", action="store_true")
    p.add_argument("--optim", default="adamw_torch_fused", choices=["adamw_torch_fused", "adamw_8bit"])
    p.add_argument("--liger", action="store_true", help="Liger kernels: RMSNorm, SwiGLU, RoPE, fused linear CE")
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    if world > 1:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    device = torch.device("cuda", local_rank)
    if args.liger:
        apply_liger(args.model)

    model_type = transformers.AutoConfig.from_pretrained(args.model).model_type
    # transformers' default SDPA attention drops Gemma-2's attn_logit_softcapping without a word; its
    # eager attention computes the model (as bench/gpu_parity.py's reference does).
    load = dict(dtype=torch.bfloat16, attn_implementation="eager" if model_type == "gemma2" else None)
    if args.load_in_4bit:
        quantization = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                       bnb_4bit_use_double_quant=True,
                                                       bnb_4bit_compute_dtype=torch.bfloat16)
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, quantization_config=quantization,
                                                                  device_map={"": local_rank}, **load)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, **load).to(device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = peft.get_peft_model(model, lora_config(model_type))
    # from_pretrained returns eval mode, where transformers skips checkpointing: train() makes the
    # checkpointed layers recompute (dropout is 0, so nothing else changes).
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank]) if world > 1 else model
    if args.optim == "adamw_8bit":
        import bitsandbytes
        optimizer = bitsandbytes.optim.AdamW8bit(params, lr=args.lr, weight_decay=0.01)
    else:
        optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, fused=True)

    rows = [json.loads(l) for l in open(args.data)]
    rows = [r for r in rows][rank::world]
    cursor = 0

    def next_batch():
        nonlocal cursor
        chunk = [rows[(cursor + i) % len(rows)] for i in range(args.batch)]
        cursor += args.batch
        w = min(args.max_seq_length, max(len(r["input_ids"]) for r in chunk))
        ids = torch.zeros(len(chunk), w, dtype=torch.long)
        mask = torch.zeros(len(chunk), w, dtype=torch.long)
        labels = torch.full((len(chunk), w), -100, dtype=torch.long)
        for i, r in enumerate(chunk):
            n = min(w, len(r["input_ids"]))
            ids[i, :n] = torch.tensor(r["input_ids"][:n])
            mask[i, :n] = 1
            labels[i, :n] = torch.tensor(r["labels"][:n])
        return ids.to(device, non_blocking=True), mask.to(device), labels.to(device), int(mask.sum())

    def step():
        batches = [next_batch() for _ in range(args.accum)]
        count = torch.tensor([float(sum(int((l[:, 1:] != -100).sum()) for _, _, l, _ in batches))], device=device)
        if world > 1:
            dist.all_reduce(count)
        real = sum(b[3] for b in batches)
        for i, (ids, mask, labels, _) in enumerate(batches):
            sync = i == len(batches) - 1
            ctx = ddp.no_sync() if (world > 1 and not sync) else torch.enable_grad()
            with ctx:
                if args.liger:  # Liger shifts the labels itself and divides its token sum by the count
                    loss = ddp(input_ids=ids, attention_mask=mask, labels=labels,
                               num_items_in_batch=count[0]).loss * world
                else:
                    logits = ddp(input_ids=ids, attention_mask=mask).logits.float()
                    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
                    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), shifted.reshape(-1),
                                                             ignore_index=-100, reduction="sum") / count * world
                loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return real

    for _ in range(args.warmup_steps):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    start = time.time()
    tokens = 0
    for _ in range(args.steps):
        tokens += step()
    torch.cuda.synchronize()
    elapsed = time.time() - start
    totals = torch.tensor([float(tokens)], device=device)
    if world > 1:
        dist.all_reduce(totals)
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    extra = {"peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30} if args.liger else {}
    if rank == 0:
        print(json.dumps({"tool": "liger" if args.liger else "reference", "load_in_4bit": args.load_in_4bit, "optim": args.optim, "world": world, "batch": args.batch, "accum": args.accum,
                          "tokens_per_s_per_gpu": totals.item() / elapsed / world, "steps_per_s": args.steps / elapsed,
                          "peak_memory_gib": peak} | extra))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
