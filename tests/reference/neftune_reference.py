"""NEFTune as transformers applies it, on the reference training loop (reference_loop.train_reference),
with the noise finetune draws: transformers' own neftune_post_forward_hook is attached to the
PEFT model's input embeddings by its own activate_neftune (what Trainer.train does for
neftune_noise_alpha), and before every micro-batch's forward the global generator, which the hook's
uniform_ draws from, is seeded with finetune's seed of that micro-batch (model/embedding_noise.h,
Note [NEFTune length and seeds]). Nothing else in the loop draws random numbers (no dropout), so
the hook's noise is exactly what finetune adds on the CPU.
"""
import torch
from transformers.integrations.neftune import activate_neftune, deactivate_neftune

from make_data_fixtures import splitmix64  # the sampler's, as src/data/sampler.cpp
import reference_loop

MASK = (1 << 64) - 1


def noise_seed(run_seed, step, rank, micro_batch):
    """embedding_noise_seed: h = run_seed, then h = splitmix64(h ^ v) for v in (step, rank, micro_batch)."""
    h = run_seed & MASK
    for value in (step, rank, micro_batch):
        h = splitmix64(h ^ value)
    return h


def micro_batch_keys(rows, steps, batch_size, accumulation):
    """(step, micro-batch index) of every forward train_reference runs, in its order (epochs wrap,
    an optimizer step never spans two)."""
    epoch = reference_loop.micro_batches(rows, batch_size)
    steps_in_epoch = [epoch[i:i + accumulation] for i in range(0, len(epoch), accumulation)]
    return [(step, i) for step in range(1, steps + 1)
            for i in range(len(steps_in_epoch[(step - 1) % len(steps_in_epoch)]))]


def eval_loss(model, rows, batch_size):
    """The token-mean loss over `rows` in micro-batches of `batch_size`, right-padded, as finetune's evaluation."""
    model.eval()
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for chunk in reference_loop.micro_batches(rows, batch_size):
            loss, count = reference_loop.token_loss_sum(model, *reference_loop.collate(chunk))
            loss_sum += loss.item()
            tokens += count
    return loss_sum / tokens


def train_with_neftune(base_dir, adapter_dir, rows, *, alpha, run_seed, steps, batch_size, accumulation,
                       eval_rows=None, eval_batch_size=1, **settings):
    """train_reference with transformers' NEFTune hook at `alpha`, seeded per micro-batch from
    `run_seed` (one rank). Returns (losses, model, eval loss after training or None); the eval runs
    in eval mode with the hook still attached, as HF's evaluation does."""
    keys = iter(micro_batch_keys(rows, steps, batch_size, accumulation))
    plain_loss_sum = reference_loop.token_loss_sum
    hooks = []

    def seeded_loss_sum(model, ids, mask, labels):
        if not hooks:
            hooks.append(activate_neftune(model, alpha))
        step, micro_batch = next(keys)
        torch.manual_seed(noise_seed(run_seed, step, 0, micro_batch))
        return plain_loss_sum(model, ids, mask, labels)

    reference_loop.token_loss_sum = seeded_loss_sum
    try:
        losses, model = reference_loop.train_reference(base_dir, adapter_dir, rows, steps=steps, batch_size=batch_size,
                                                       accumulation=accumulation, **settings)
    finally:
        reference_loop.token_loss_sum = plain_loss_sum
    assert next(keys, None) is None, "the reference ran fewer micro-batches than planned"
    evaluated = eval_loss(model, eval_rows, eval_batch_size) if eval_rows is not None else None
    deactivate_neftune(model, hooks[0])
    return losses, model, evaluated
