"""Peer: Unsloth, the way its notebooks and multi-GPU guide train a LoRA adapter.
FastLanguageModel.from_pretrained (bf16, or 4-bit with --load_in_4bit), FastLanguageModel.get_peft_model
(r=16, alpha=16, every linear projection (peer_common.projections: Phi-3's are fused), Unsloth gradient
checkpointing) and TRL's SFTTrainer as Unsloth patches it (its padding-free batching is on by default; --packing
turns on its sample packing). Launch with torchrun for several GPUs (Unsloth's DDP recipe), plain python for
one. Unsloth runs Llama, Qwen3 and Gemma-2 on its own model code (FastLlamaModel, FastQwen3Model,
FastGemma2Model), Gemma-3 text and Phi-3 on transformers' classes as it compiles them (FastModel).

Measured as bench/reference_train.py measures: non-padding tokens of the micro-batches of the steps after
`--warmup_steps`, over the wall time between two synchronised points (ends of optimizer steps), and the
peak GPU memory over those steps. Prints one JSON line (rank 0), the last line of its output.

The benchmark's models are random-init weights with no tokenizer (bench/shapes.py); Unsloth loads a
tokenizer with every model, so a word-level one with the config's vocabulary size and special-token ids is
written beside a view of the model directory (symbolic links, the model directory is left alone). The rows
are already token ids with labels, which SFTTrainer takes as they are.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

# Unsloth patches transformers, TRL and PEFT when it is imported, so it comes first (as its notebooks do).
import unsloth  # noqa: F401  (isort: skip)
from unsloth import FastLanguageModel  # isort: skip
import datasets  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from peer_common import projections  # noqa: E402

# Special tokens of the real tokenizers, at their real ids (padding must not be a new token: Unsloth would
# grow the embedding for it). Phi-4-mini's own tokenizer pads with its end-of-text token, which Unsloth
# replaces (a pad equal to eos), adding a token where its vocabulary has no reserved pad-like one: the view
# names a distinct pad at the vocabulary's last id instead (the rows never use it: bench/shapes.py draws
# ids below vocab - 100).
GEMMA_TOKENS = dict(bos=(2, "<bos>"), eos=(1, "<eos>"), pad=(0, "<pad>"))
SPECIAL_TOKENS = {"llama": dict(bos=(128000, "<|begin_of_text|>"), eos=(128001, "<|end_of_text|>"),
                                pad=(128004, "<|finetune_right_pad_id|>")),
                  "qwen3": dict(bos=None, eos=(151645, "<|im_end|>"), pad=(151643, "<|endoftext|>")),
                  "gemma2": GEMMA_TOKENS, "gemma3_text": GEMMA_TOKENS,
                  "phi3": dict(bos=(199999, "<|endoftext|>"), eos=(199999, "<|endoftext|>"), pad=(200063, "<|pad|>"))}


def write_tokenizer(config, out_dir):
    """A word-level fast tokenizer over config.vocab_size ids: `<t{i}>` for each id, the special tokens at
    their ids. Only padding and the special-token ids matter here (the rows are token ids already)."""
    import tokenizers
    if config.model_type not in SPECIAL_TOKENS:
        raise ValueError(f"no special tokens for model_type {config.model_type!r}: add them to SPECIAL_TOKENS")
    special = {k: v for k, v in SPECIAL_TOKENS[config.model_type].items() if v is not None}
    tokens = dict(special.values())  # id -> token (one role may share another's token: Phi-3's bos and eos)
    vocab = {f"<t{i}>": i for i in range(config.vocab_size) if i not in tokens}
    vocab.update({token: i for i, token in tokens.items()})
    model = tokenizers.models.WordLevel(vocab, unk_token=special["pad"][1])
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True) for t in tokens.values()])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=config.max_position_embeddings,
                                                **{f"{k}_token": t for k, (_, t) in special.items()})
    fast.save_pretrained(out_dir)


def model_view(model_dir):
    """`<model_dir>.unsloth`: links to the model's files plus a tokenizer. Made once, atomically (every rank
    of a torchrun launch may get here first)."""
    view = model_dir.rstrip("/") + ".unsloth"
    if os.path.exists(os.path.join(view, "tokenizer.json")):
        return view
    tmp = tempfile.mkdtemp(prefix=os.path.basename(view) + ".", dir=os.path.dirname(view) or ".")
    for name in os.listdir(model_dir):
        os.symlink(os.path.abspath(os.path.join(model_dir, name)), os.path.join(tmp, name))
    write_tokenizer(transformers.AutoConfig.from_pretrained(model_dir), tmp)
    try:
        os.rename(tmp, view)
    except OSError:  # another rank finished first
        shutil.rmtree(tmp)
    return view


class ThroughputWindow(transformers.TrainerCallback):
    """Opens at the end of optimizer step `start`, closes at the end of step `stop` (both after a device
    synchronisation); the peak-memory counters are reset when it opens, as the reference does."""

    def __init__(self, start, stop, tokens):
        self.start, self.stop, self.tokens = start, stop, tokens
        self.t0 = self.t1 = self.tokens0 = self.tokens1 = None

    def _sync(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.start:
            self._sync()
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            self.tokens0, self.t0 = self.tokens.item(), time.time()
        elif state.global_step == self.stop:
            self._sync()
            self.tokens1, self.t1 = self.tokens.item(), time.time()


def count_tokens(trainer, tokens):
    """Adds each micro-batch's non-padding token count to `tokens` (a device tensor: no host sync per
    micro-step). Padded batches carry an attention mask; Unsloth's padding-free and packed ones are one
    flattened row with the lengths of the rows in it (TRL may pad that row to a multiple)."""
    step = trainer.training_step

    def training_step(model, inputs, *args, **kwargs):
        if inputs.get("attention_mask") is not None:
            tokens.add_(inputs["attention_mask"].sum())
        elif inputs.get("packed_seq_lengths") is not None:
            tokens.add_(inputs["packed_seq_lengths"].sum())
        else:
            tokens.add_(inputs["input_ids"].numel())
        return step(model, inputs, *args, **kwargs)

    trainer.training_step = training_step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="the trainer's output directory")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup_steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--max_seq_length", type=int, default=2048)
    p.add_argument("--packing", action="store_true", help="Unsloth's sample packing (TRL's best-fit packing)")
    p.add_argument("--load_in_4bit", action="store_true")
    p.add_argument("--optim", default="adamw_torch_fused", choices=["adamw_torch_fused", "adamw_8bit"])
    p.add_argument("--rows", type=int, default=0, help="use only the first ROWS rows (0: all)")
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    model_type = transformers.AutoConfig.from_pretrained(args.model).model_type
    model, tokenizer = FastLanguageModel.from_pretrained(model_view(args.model), max_seq_length=args.max_seq_length,
                                                         dtype=torch.bfloat16, load_in_4bit=args.load_in_4bit)
    model = FastLanguageModel.get_peft_model(model, r=16, lora_alpha=16, lora_dropout=0, bias="none",
                                             target_modules=projections(model_type),
                                             use_gradient_checkpointing="unsloth",
                                             random_state=3407)
    rows = [json.loads(line) for line in open(args.data)]
    rows = rows[:args.rows] if args.rows else rows
    dataset = datasets.Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])
    config = SFTConfig(output_dir=args.out, per_device_train_batch_size=args.batch,
                       gradient_accumulation_steps=args.accum, max_steps=args.warmup_steps + args.steps,
                       learning_rate=args.lr, warmup_steps=5, lr_scheduler_type="linear", weight_decay=0.01,
                       optim=args.optim, max_grad_norm=1.0, bf16=torch.cuda.is_available(),
                       max_length=args.max_seq_length, packing=args.packing,
                       logging_steps=args.warmup_steps + args.steps, save_strategy="no", report_to="none", seed=3407)
    trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=dataset, args=config)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else "cpu"
    tokens = torch.zeros((), dtype=torch.float64, device=device)
    count_tokens(trainer, tokens)
    window = ThroughputWindow(args.warmup_steps, args.warmup_steps + args.steps, tokens)
    trainer.add_callback(window)
    trainer.train()
    if window.t1 is None:
        raise RuntimeError(f"the trainer stopped before step {window.stop} (at {trainer.state.global_step})")
    if window.tokens1 == window.tokens0:
        raise RuntimeError("no tokens were counted: the trainer no longer calls trainer.training_step")
    elapsed = window.t1 - window.t0
    totals = torch.tensor([window.tokens1 - window.tokens0], dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(totals)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    reserved = torch.cuda.max_memory_reserved() / 2**30 if torch.cuda.is_available() else None
    if rank == 0:
        print(json.dumps({"tool": "unsloth", "version": unsloth.__version__, "load_in_4bit": args.load_in_4bit,
                          "optim": args.optim, "world": world, "batch": args.batch, "accum": args.accum,
                          "steps_run": args.warmup_steps + args.steps,
                          "packing": bool(trainer.args.packing), "padding_free": bool(trainer.args.padding_free),
                          "tokens_per_s_per_gpu": totals.item() / elapsed / world,
                          "steps_per_s": args.steps / elapsed, "peak_memory_gib": peak,
                          "peak_reserved_gib": reserved, "final_loss": losses[-1] if losses else None}), flush=True)


if __name__ == "__main__":
    main()
