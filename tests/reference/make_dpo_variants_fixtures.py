"""Fixtures for tests/e2e/test_dpo_variants.py: 10-step runs of TRL 1.16's DPOTrainer, fp32 on the
CPU, on the two adapter kinds test_dpo.py (make_dpo_run_fixtures.py) does not cover, with that
file's model, rows, settings and sequential data order:

  OUTDIR/base/             make_dpo_run_fixtures' tiny Llama and tokenizer
  OUTDIR/explicit.jsonl    its {"prompt", "chosen", "rejected"} rows
  OUTDIR/dora_adapter/     a PEFT DoRA adapter (use_dora, non-zero lora_B, magnitude moved off ||W||)
  OUTDIR/lora_adapter/     a PEFT LoRA adapter (non-zero lora_B), the QLoRA run's start
  OUTDIR/expected.json     {"flags", "cases": [{"name", "command", "data", "adapter", "options",
                           "steps": [{"loss", "rewards/chosen", ...} per step]}]}, as dpo_run's

Cases: "dora_sigmoid" (DPOTrainer on PeftModel(base, dora_adapter); TRL's reference is a frozen copy
of the DoRA adapter) and "qlora_sigmoid" (the base loaded as transformers + bitsandbytes load it for
BitsAndBytesConfig(load_in_4bit, nf4, double quantization, fp32 compute), then PeftModel(lora_adapter)
with the adapter kept in fp32 (keep_adapter_in_fp32) — what `finetune dpo --load_in_4bit` trains;
bitsandbytes' portable CPU kernels, bnb_cpu.py).
"""
import json
import os
import sys
import tempfile

import datasets
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import bnb_cpu  # noqa: E402
import generation_assets  # noqa: E402
import make_dpo_run_fixtures as dpo_run  # noqa: E402
import reference_loop  # noqa: E402
from peft import PeftModel  # noqa: E402
from trl import DPOConfig  # noqa: E402

CASES = [  # name, adapter directory, finetune options, 4-bit base
    ("dora_sigmoid", "dora_adapter", [], False),
    ("qlora_sigmoid", "lora_adapter", ["--load_in_4bit"], True),
]


def bnb_config():
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32)


def keep_adapter_in_fp32(model):
    """Undoes DPOTrainer's cast of a quantized model's trainable LoRA weights to bf16 (TRL 1.16,
    dpo_trainer.py: "the PEFT adapter weights are converted to bf16", the QLoRA paper's recipe; its
    "ref" copy, made before the cast, stays fp32, so TRL's own step 1 has policy != reference). The
    weights get their fp32 values back from that copy: the run then trains what `finetune dpo
    --load_in_4bit` and PEFT + bitsandbytes train (test_qlora.py), fp32 adapters over the NF4 base.
    The optimizer is made in train(), after this."""
    parameters = dict(model.named_parameters())
    restored = 0
    for name, parameter in parameters.items():
        if ".default." in name and parameter.requires_grad:
            parameter.data = parameters[name.replace(".default.", ".ref.")].data.clone()
            restored += 1
    assert restored == 2 * 7 * 2, restored  # lora_A and lora_B of 7 projections in 2 layers


def run_case(out, adapter, in_4bit, rows, work):
    torch.manual_seed(0)
    quantization = dict(quantization_config=bnb_config(), device_map="cpu") if in_4bit else {}
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(out, "base"), dtype=torch.float32,
                                                             **quantization)
    model = PeftModel.from_pretrained(base, os.path.join(out, adapter), is_trainable=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(out, "base"))
    config = DPOConfig(output_dir=work, max_steps=dpo_run.STEPS, logging_steps=1, report_to=[], save_strategy="no",
                       optim="adamw_torch", use_cpu=True, seed=0, bf16=False, fp16=False, dataloader_num_workers=0,
                       gradient_checkpointing=False, **dpo_run.SETTINGS)
    trainer = dpo_run.SequentialDPOTrainer(model=model, args=config, train_dataset=datasets.Dataset.from_list(rows),
                                           processing_class=tokenizer)
    if in_4bit:
        keep_adapter_in_fp32(trainer.model)
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]
    assert len(steps) == dpo_run.STEPS, steps
    return [{key: float(entry[key]) for key in ["loss"] + dpo_run.METRICS["dpo"]} for entry in steps]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    bnb_cpu.use_portable_cpu_kernels()
    tokenizer = generation_assets.make_tokenizer()
    generation_assets.make_model("llama", os.path.join(out, "base"), tokenizer)
    base = os.path.join(out, "base")
    reference_loop.make_init_adapter(base, os.path.join(out, "dora_adapter"), r=4, alpha=8, use_dora=True)
    reference_loop.make_init_adapter(base, os.path.join(out, "lora_adapter"), r=4, alpha=8)
    rows = dpo_run.explicit_rows()
    with open(os.path.join(out, "explicit.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    cases = []
    for name, adapter, options, in_4bit in CASES:
        with tempfile.TemporaryDirectory() as work:  # the trainer's output_dir: nothing kept
            steps = run_case(out, adapter, in_4bit, rows, work)
        cases.append({"name": name, "command": "dpo", "data": "explicit.jsonl", "adapter": adapter,
                      "options": options, "steps": steps})
        print(name, [round(step["loss"], 6) for step in steps], flush=True)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"flags": dpo_run.FLAGS, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
