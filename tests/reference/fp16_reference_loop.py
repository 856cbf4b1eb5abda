"""fp16 LoRA training as HF Trainer with fp16=True runs it (transformers 5.17, accelerate 1.15,
torch 2.11), written out as reference_loop.py writes the bf16/fp32 loop: same data order,
micro-batching, token normalisation, torch AdamW (optim="adamw_torch", single-tensor) and schedules.

What fp16=True adds (accelerate's native AMP):
  - the forward runs under torch.autocast(fp16) (accelerate wraps model.forward), the loss in fp32
    from the upcast logits; the base model is loaded in fp16, PEFT keeps the adapters in fp32
    (autocast_adapter_dtype), so under autocast the LoRA matmuls run in fp16;
  - torch.amp.GradScaler with its defaults: every micro-batch backward is of scaler.scale(loss);
    per optimizer step unscale_ (accelerator.clip_grad_norm_, also with max_grad_norm <= 0, which
    HF runs with an infinite max to measure the norm), clip, scaler.step (skips optimizer.step on
    inf/NaN), scaler.update;
  - a skipped step does not advance the schedule (Trainer: `if not
    accelerator.optimizer_step_was_skipped: lr_scheduler.step()`); global_step, the data and the
    logged loss go on as usual, the logged grad_norm is inf / NaN.
"""
import math

import peft
import torch
import transformers

import reference_loop


def train(base_dir, adapter_dir, rows, *, steps, batch_size, accumulation, lr, warmup, scheduler, max_grad_norm,
          weight_decay=0.01, gradient_checkpointing=False, device="cpu", fp16=True, autocast=True,
          scale_after_step=None, skip_steps=()):
    """Returns (per-step losses, PeftModel after training, per-step records).

    fp16=True: the fp16 recipe above. `scale_after_step` {step: (scale, growth_tracker)} (1-based
    steps) loads that state into the scaler after the step, as HF's resume loads scaler.pt.
    fp16=False: the fp32 baseline (fp32 model, no autocast, no scaler); at `skip_steps` (1-based)
    the optimizer step and the schedule are left out, so it takes the updates the fp16 run it is
    compared with took.
    Records: {"skipped", "scale" (the step's, None in fp32), "scale_after", "growth_tracker_after",
    "grad_norm", "lr"}."""
    torch.manual_seed(0)
    device = torch.device(device)
    dtype = torch.float16 if fp16 else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype).to(device)
    model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in params), "PEFT keeps the adapters in fp32"
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                  foreach=False)
    sched = reference_loop.schedule(scheduler, optimizer, warmup, steps)
    scaler = torch.amp.GradScaler(device.type) if fp16 else None  # HF passes no GradScalerKwargs

    epoch_batches = reference_loop.micro_batches(rows, batch_size)
    steps_in_epoch = [epoch_batches[i:i + accumulation] for i in range(0, len(epoch_batches), accumulation)]
    losses, records = [], []
    step_iter = iter(())
    for step_number in range(1, steps + 1):
        step = next(step_iter, None)
        if step is None:
            step_iter = iter(steps_in_epoch)
            step = next(step_iter)
        collated = [reference_loop.collate(b) for b in step]
        num_items = sum(int((torch.nn.functional.pad(l, (0, 1), value=-100)[:, 1:] != -100).sum())
                        for _, _, l in collated)
        step_loss = 0.0
        scale = None if scaler is None else scaler.scale(torch.ones((), device=device)).item()
        for ids, mask, labels in collated:
            with torch.autocast(device.type, dtype=torch.float16, enabled=fp16 and autocast):
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].to(device)
            loss_sum = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                         shifted.reshape(-1), ignore_index=-100, reduction="sum")
            loss = loss_sum / num_items
            (scaler.scale(loss) if scaler else loss).backward()
            step_loss += loss.item()
        if scaler:
            scaler.unscale_(optimizer)
            skipped = sum(v.item() for v in scaler._found_inf_per_device(optimizer).values()) > 0
        else:
            skipped = step_number in skip_steps
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else math.inf).item()
        used_lr = sched.get_last_lr()[0]  # HF logs the rate before scheduler.step
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        elif not skipped:
            optimizer.step()
        if not skipped:
            sched.step()
        optimizer.zero_grad()
        if scaler and scale_after_step and step_number in scale_after_step:
            forced_scale, forced_tracker = scale_after_step[step_number]
            state = scaler.state_dict()
            state.update(scale=float(forced_scale), _growth_tracker=int(forced_tracker))
            scaler.load_state_dict(state)
        losses.append(step_loss)
        records.append({"skipped": bool(skipped), "scale": scale, "grad_norm": grad_norm, "lr": used_lr,
                        "scale_after": scaler.get_scale() if scaler else None,
                        "growth_tracker_after": scaler._get_growth_tracker() if scaler else None})
    return losses, model, records
