"""What the training loops finetune is measured against share (reference_train.py,
trl_dpo_train.py): the command line of one measured run and the LoRA they train."""
import argparse

import peft

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Phi-3's checkpoints fuse q/k/v and gate/up: PEFT's names for its projections (finetune's default targets
# resolve to these on a Phi-3 model).
FUSED_PROJECTIONS = {"phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]}


def projections(model_type=None):
    """Every linear projection of a decoder layer of `model_type` (config.json's), by PEFT's names."""
    return FUSED_PROJECTIONS.get(model_type, PROJECTIONS)


def run_arguments(steps, warmup_steps):
    """A parser with a measured run's shape: --model, --data, --batch (1), --accum (4), --steps and
    --warmup_steps (timing starts after these)."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--warmup_steps", type=int, default=warmup_steps)
    return p


def lora_config(model_type=None):
    """The adapter every peer trains: r 16, alpha 16, no dropout, no bias, every linear projection."""
    return peft.LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                           target_modules=projections(model_type))
