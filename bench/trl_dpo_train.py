"""The preference-training peer: TRL's DPOTrainer with a PEFT LoRA (r 16, alpha 16, every linear
projection), bf16 base, gradient checkpointing, as a user runs it. Launch with torchrun (or plain
python for one GPU). Prints one JSON line (rank 0): tokens/s per GPU (chosen + rejected tokens
without padding, as finetune counts them), optimizer steps/s and peak GPU memory, measured over
the steps after --warmup_steps. Data: bench/dpo_bench.py's rows and tokenizer. Without a GPU it
runs in fp32 on the CPU (bench/dpo_bench.py's smoke test; no peak memory then)."""
import json
import os
import time

import datasets
import torch
import transformers
from trl import DPOConfig, DPOTrainer

from peer_common import lora_config, run_arguments


class Clock(transformers.TrainerCallback):
    """Starts timing (and the peak-memory count) at the end of the warm-up steps."""

    def __init__(self, warmup_steps):
        self.warmup_steps = warmup_steps
        self.start = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup_steps:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            self.start = time.time()


def sequence_tokens(inputs):
    """Chosen + rejected tokens without padding: TRL 1.16 batches [chosen, rejected] rows with one
    attention_mask; older TRL keeps the prompt apart (each sequence is prompt + completion)."""
    if "attention_mask" in inputs:
        return int(inputs["attention_mask"].sum())
    return int(2 * inputs["prompt_attention_mask"].sum() + inputs["chosen_attention_mask"].sum() +
               inputs["rejected_attention_mask"].sum())


class CountingDPOTrainer(DPOTrainer):
    """Counts the non-padding tokens of every micro-batch after the warm-up (chosen + rejected)."""
    counted_tokens = 0
    clock = None

    def compute_loss(self, model, inputs, *args, **kwargs):
        if self.clock is not None and self.clock.start is not None:
            self.counted_tokens += sequence_tokens(inputs)
        return super().compute_loss(model, inputs, *args, **kwargs)


def main():
    p = run_arguments(steps=10, warmup_steps=3)
    p.add_argument("--max_length", type=int, default=2048)
    p.add_argument("--out", default="/tmp/trl_dpo")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", 1))
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    cuda = torch.cuda.is_available()
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16 if cuda else torch.float32)
    config = DPOConfig(output_dir=args.out, per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.accum,
                       max_steps=args.warmup_steps + args.steps, learning_rate=2e-4, warmup_steps=5, logging_steps=1,
                       bf16=cuda, gradient_checkpointing=True, max_length=args.max_length, report_to=[],
                       save_strategy="no", dataloader_num_workers=0, optim="adamw_torch_fused" if cuda else "adamw_torch")
    clock = Clock(args.warmup_steps)
    trainer = CountingDPOTrainer(model=model, args=config, train_dataset=datasets.load_dataset("json", data_files=args.data)["train"],
                                 processing_class=tokenizer, peft_config=lora_config(), callbacks=[clock])
    trainer.clock = clock
    trainer.train()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.time() - clock.start
    tokens = torch.tensor([float(trainer.counted_tokens)], device="cuda" if cuda else "cpu")
    if world > 1:
        torch.distributed.all_reduce(tokens)
    if int(os.environ.get("RANK", 0)) == 0:
        print(json.dumps({"tool": "trl-dpo", "tokens_per_s_per_gpu": tokens.item() / elapsed / world,
                          "steps_per_s": args.steps / elapsed,
                          "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}), flush=True)


if __name__ == "__main__":
    main()
