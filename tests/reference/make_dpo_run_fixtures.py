"""Fixtures for tests/e2e/test_dpo.py: 10-step runs of TRL 1.16's DPOTrainer and ORPOTrainer, fp32
on the CPU, that `finetune dpo` / `finetune orpo` must reproduce step for step.

  OUTDIR/base/            a tiny Llama (tiny_models' "llama" shape) on a small byte-level BPE
                          tokenizer with a ChatML-style chat template (tests/e2e/generation_assets.py)
  OUTDIR/init_adapter/    a PEFT LoRA adapter with non-zero lora_B (reference_loop.make_init_adapter):
                          every run starts from it, so TRL's reference is a frozen copy of it (the
                          "ref" adapter DPOTrainer adds to a PeftModel) and finetune's --init_adapter
  OUTDIR/explicit.jsonl   {"prompt", "chosen", "rejected"} strings
  OUTDIR/implicit.jsonl   {"chosen", "rejected"} conversations sharing their first turns (TRL's
                          implicit prompt: extract_prompt)
  OUTDIR/expected.json    {"settings": the shared trainer settings, "cases": [{"name", "command",
                          "data", "options" (finetune's flags for the case), "steps": [{"loss",
                          "rewards/chosen", ...} per step, from trainer.state.log_history]}]}

Same rows in file order (the trainers' samplers are made sequential), optimizer (torch AdamW), schedule,
clipping and accumulation as finetune runs with --shuffle false.
"""
import json
import os
import sys
import tempfile

import datasets
import torch
import transformers
from torch.utils.data import SequentialSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # ORPO lives in trl.experimental
import generation_assets  # noqa: E402
import reference_loop  # noqa: E402
from peft import PeftModel  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402

STEPS = 10
SETTINGS = dict(per_device_train_batch_size=1, gradient_accumulation_steps=4, learning_rate=2e-3, warmup_steps=2,
                lr_scheduler_type="cosine", max_grad_norm=0.5, weight_decay=0.01, max_length=64)
# finetune's flags for SETTINGS
FLAGS = ["--per_device_train_batch_size", 1, "--gradient_accumulation_steps", 4, "--learning_rate", 2e-3,
         "--warmup_steps", 2, "--lr_scheduler_type", "cosine", "--max_grad_norm", 0.5, "--weight_decay", 0.01,
         "--max_length", 64, "--max_steps", STEPS]
METRICS = {"dpo": ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                   "logps/rejected"],
           "orpo": ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/rejected",
                    "logps/chosen", "nll_loss", "log_odds_ratio", "log_odds_chosen"]}

SUBJECTS = ["the sun", "the moon", "the tree", "the rock", "a red fox", "a blue owl", "the green cat", "a dog"]
VERBS = ["shines over", "hides behind", "stands near", "looks at"]


def explicit_rows():
    rows = []
    for i, subject in enumerate(SUBJECTS):
        other = SUBJECTS[(i + 3) % len(SUBJECTS)]
        rows.append({"prompt": f"Describe {subject}.", "chosen": f" {subject} {VERBS[i % 4]} {other}.",
                     "rejected": f" {other} and {subject}, {VERBS[(i + 1) % 4]} the words: red blue green." * (1 + i % 2)})
    return rows


def implicit_rows():
    rows = []
    for i, subject in enumerate(SUBJECTS):
        user = {"role": "user", "content": f"Count the words. {subject} {VERBS[i % 4]}"}
        rows.append({"chosen": [user, {"role": "assistant", "content": f"{2 + i % 3} words, {subject}."}],
                     "rejected": [user, {"role": "assistant", "content": "hello there, how are you? " * (1 + i % 3)}]})
    return rows


CASES = [  # name, command, data, finetune options, trainer config overrides
    ("sigmoid_explicit", "dpo", "explicit", [], {}),
    ("sigmoid_implicit", "dpo", "implicit", [], {}),
    ("hinge_explicit", "dpo", "explicit", ["--loss_type", "hinge", "--beta", 0.05], dict(loss_type=["hinge"], beta=0.05)),
    ("ipo_implicit", "dpo", "implicit", ["--loss_type", "ipo"], dict(loss_type=["ipo"])),
    ("robust_explicit", "dpo", "explicit", ["--loss_type", "robust", "--label_smoothing", 0.2],
     dict(loss_type=["robust"], label_smoothing=0.2)),
    ("orpo_explicit", "orpo", "explicit", ["--beta", 0.25], dict(beta=0.25)),
    ("orpo_implicit", "orpo", "implicit", [], {}),
]


class _Sequential:
    """The trainers' data order: the rows in file order, every epoch (finetune --shuffle false)."""

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)


class SequentialDPOTrainer(_Sequential, DPOTrainer):
    pass


class SequentialORPOTrainer(_Sequential, ORPOTrainer):
    pass


def run_case(out, command, rows, overrides, work):
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(out, "base"), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, os.path.join(out, "init_adapter"), is_trainable=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(out, "base"))
    common = dict(output_dir=work, max_steps=STEPS, logging_steps=1, report_to=[], save_strategy="no",
                  optim="adamw_torch", use_cpu=True, seed=0, bf16=False, fp16=False, dataloader_num_workers=0,
                  gradient_checkpointing=False, **SETTINGS)
    data = datasets.Dataset.from_list(rows)
    if command == "dpo":
        config = DPOConfig(**common, **overrides)
        trainer = SequentialDPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
    else:
        config = ORPOConfig(**common, **overrides)
        trainer = SequentialORPOTrainer(model=model, args=config, train_dataset=data, processing_class=tokenizer)
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]
    assert len(steps) == STEPS, steps
    return [{key: float(entry[key]) for key in ["loss"] + METRICS[command]} for entry in steps]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    tokenizer = generation_assets.make_tokenizer()
    generation_assets.make_model("llama", os.path.join(out, "base"), tokenizer)
    reference_loop.make_init_adapter(os.path.join(out, "base"), os.path.join(out, "init_adapter"), r=4, alpha=8)
    forms = {"explicit": explicit_rows(), "implicit": implicit_rows()}
    for form, rows in forms.items():
        with open(os.path.join(out, form + ".jsonl"), "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    cases = []
    only = set(sys.argv[2:])  # regenerate these cases only, keeping the others of expected.json
    if only:
        with open(os.path.join(out, "expected.json")) as f:
            cases = [case for case in json.load(f)["cases"] if case["name"] not in only]
    for name, command, form, options, overrides in CASES:
        if only and name not in only:
            continue
        with tempfile.TemporaryDirectory() as work:  # the trainers' output_dir: nothing kept
            steps = run_case(out, command, forms[form], overrides, work)
        cases.append({"name": name, "command": command, "data": form + ".jsonl", "options": options, "steps": steps})
        print(name, [round(step["loss"], 6) for step in steps], flush=True)
    cases.sort(key=lambda case: [c[0] for c in CASES].index(case["name"]))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"flags": FLAGS, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
