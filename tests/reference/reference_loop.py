"""The hand-written transformers + PEFT training loop that finetune must reproduce step for step.

Same data order (no shuffling), same micro-batching (right padding), loss normalised by the
trainable-token count of the whole accumulated batch, torch.optim.AdamW, transformers' schedules,
torch's clip_grad_norm_. An optimizer step never spans two epochs (as HF's Trainer).
"""
import json
import math
import os

import peft
import torch
import transformers

import bnb_cpu
import tiny_models


def micro_batches(rows, batch_size):
    return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]


def collate(rows, pad_id=0):
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        mask[i, :n] = 1
        labels[i, :n] = torch.tensor(r.get("labels", r["input_ids"]))
    return ids, mask, labels


def token_loss_sum(model, ids, mask, labels):
    device = next(model.parameters()).device
    ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    return loss, int((shifted != -100).sum())


def schedule(name, optimizer, warmup, total):
    if name == "cosine":
        return transformers.get_cosine_schedule_with_warmup(optimizer, warmup, total)
    if name == "linear":
        return transformers.get_linear_schedule_with_warmup(optimizer, warmup, total)
    if name == "constant":
        return transformers.get_constant_schedule(optimizer)
    return transformers.get_constant_schedule_with_warmup(optimizer, warmup)


def train_reference(base_dir, adapter_dir, rows, *, steps, batch_size, accumulation, lr, warmup, scheduler,
                    max_grad_norm, weight_decay=0.01, gradient_checkpointing=False, dtype=torch.float32,
                    device="cpu", quantization_config=None, optim="adamw_torch"):
    """Returns (per-step losses, PeftModel after training). `dtype` is the base model's; PEFT keeps
    the adapters in fp32 either way (autocast_adapter_dtype). With a BitsAndBytesConfig the base
    loads quantized by transformers + bitsandbytes (QLoRA; PEFT wraps the Linear4bit layers).
    `optim`: adamw_torch, or adamw_8bit (bitsandbytes' AdamW with 8-bit state, as HF's Trainer
    builds it for that name)."""
    torch.manual_seed(0)
    if quantization_config is not None:
        if str(device) == "cpu":
            bnb_cpu.use_portable_cpu_kernels()
        model = tiny_models.load_reference_model(
            base_dir, dtype=dtype, quantization_config=quantization_config, device_map=device)
    else:
        model = tiny_models.load_reference_model(base_dir, dtype=dtype).to(device)
    model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    if optim == "adamw_8bit":
        import bitsandbytes as bnb
        optimizer = bnb.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                    optim_bits=8, is_paged=False)
    else:
        optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                      foreach=False)
    sched = schedule(scheduler, optimizer, warmup, steps)

    epoch_batches = micro_batches(rows, batch_size)
    steps_in_epoch = [epoch_batches[i:i + accumulation] for i in range(0, len(epoch_batches), accumulation)]
    losses = []
    step_iter = iter(())
    for _ in range(steps):
        step = next(step_iter, None)
        if step is None:
            step_iter = iter(steps_in_epoch)
            step = next(step_iter)
        collated = [collate(b) for b in step]
        shifted_counts = [int((torch.nn.functional.pad(l, (0, 1), value=-100)[:, 1:] != -100).sum())
                          for _, _, l in collated]
        num_items = sum(shifted_counts)
        step_loss = 0.0
        for ids, mask, labels in collated:
            loss_sum, _ = token_loss_sum(model, ids, mask, labels)
            loss = loss_sum / num_items
            loss.backward()
            step_loss += loss.item()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        sched.step()
        optimizer.zero_grad()
        losses.append(step_loss)
    return losses, model


def lora_state(model):
    """Adapter tensors under the names PEFT saves them with."""
    return {k: v.detach().clone() for k, v in peft.get_peft_model_state_dict(model).items()}


def parity_inputs(work, model_dir, data_path, rows, r=16, alpha=16):
    """The inputs of a parity run under `work`: the first `rows` rows of `data_path` as
    work/rows.jsonl, and a random non-zero initial adapter (make_init_adapter, made once) as
    work/init_adapter. Returns (rows, data file, adapter dir, the adapter's initial tensors)."""
    from safetensors.torch import load_file
    os.makedirs(work, exist_ok=True)
    with open(data_path) as f:
        selected = [json.loads(line) for line in f][:rows]
    data = os.path.join(work, "rows.jsonl")
    with open(data, "w") as f:
        for row in selected:
            f.write(json.dumps(row) + "\n")
    adapter = os.path.join(work, "init_adapter")
    if not os.path.exists(os.path.join(adapter, "adapter_config.json")):
        make_init_adapter(model_dir, adapter, r=r, alpha=alpha)
    return selected, data, adapter, load_file(os.path.join(adapter, "adapter_model.safetensors"))


LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PHI3_TARGETS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]  # Phi-3's fused projections


def make_init_adapter(base_dir, out_dir, r=4, alpha=8, seed=0, use_rslora=False, use_dora=False,
                      dtype=torch.float32, target_modules=None, bias="none", modules_to_save=None):
    """A PEFT adapter with random (non-zero) A and B so every gradient path is exercised; with DoRA
    the magnitude is moved off ||W|| too, and the copies of `modules_to_save` off the base's, so
    every term counts. `dtype`: the base model's; `target_modules`: Llama's projections unless
    given; `bias`: PEFT's (the trained biases saved with the adapter)."""
    torch.manual_seed(seed)
    model = tiny_models.load_reference_model(base_dir, dtype=dtype)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, bias=bias, task_type="CAUSAL_LM",
                             use_rslora=use_rslora, use_dora=use_dora,
                             target_modules=target_modules or LLAMA_TARGETS, modules_to_save=modules_to_save)
    model = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn_like(p))
            elif "lora_magnitude_vector" in name:
                p.mul_(1 + 0.05 * torch.randn_like(p))
            elif "modules_to_save" in name:
                p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(out_dir)
    return out_dir
