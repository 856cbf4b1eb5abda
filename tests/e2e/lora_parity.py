"""What the LoRA parity tests against transformers + PEFT share (fp32, CPU): the settings and
command line of a 20-step LoRA run, that run beside reference_loop's loop (1e-4 relative), the logits of
`finetune eval --dump_logits` and of a merged export against a reference model, and greedy
`finetune generate` against transformers' generate()."""
import json

import torch
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import generation_assets as assets
import reference_loop
import tiny_models

STEPS = 20
SETTINGS = dict(batch_size=2, accumulation=2, lr=5e-3, warmup=3, scheduler="cosine", max_grad_norm=0.5)


def finetune_args(base, adapter, data, out, **overrides):
    s = dict(SETTINGS, **overrides)
    return ["--model_name", base, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
            "--max_steps", s.get("steps", STEPS), "--per_device_train_batch_size", s["batch_size"],
            "--gradient_accumulation_steps", s["accumulation"], "--learning_rate", s["lr"],
            "--warmup_steps", s["warmup"], "--lr_scheduler_type", s["scheduler"], "--max_grad_norm", s["max_grad_norm"],
            "--weight_decay", 0.01, "--lora_dropout", 0.0, "--dtype", "float32", "--device", "cpu",
            "--shuffle", "false", "--logging_steps", 1,
            "--use_gradient_checkpointing", s.get("gradient_checkpointing", "true")]


def make_llama_run(root):
    """The inputs of that run under `root`: a tiny Llama `base`, a PEFT `adapter` to start from and
    27 completion-only `rows` (14 micro-batches: epochs wrap) written to `data`."""
    base = root / "base"
    tiny_models.make_model("llama", base)
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter")
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return base, adapter, rows, data


def step_losses(out):
    return [json.loads(line)["loss"] for line in open(out / "metrics.jsonl")]


PROMPTS = ["Reverse the order of the words: red blue green and the sun", "The",
           "Below is an instruction that describes a task. caf\u00e9", "sun moon"]
NEW_TOKENS = 12
BATCH = 3


def train_ours(base, adapter, data, out, merged=None, **overrides):
    """Our STEPS steps with SETTINGS (`overrides` of them) from `adapter`, and
    the merged export at `merged` when given."""
    export = ["--save_model", "--save_method", "merged_16bit", "--save_path", merged] if merged else []
    run_finetune(finetune_args(base, adapter, data, out, **overrides) + export)


def steps_match_peft(label, base, adapter, rows, out, keep=lambda name: True, require_moved=False,
                     **reference_options):
    """Our run `out` against reference_loop's transformers + PEFT loop over the same rows from
    `adapter` (`reference_options` go to train_reference, e.g. quantization_config): every step's
    loss 1e-4 relative, the same saved keys as PEFT's (those `keep` selects) and every saved tensor
    1e-4 relative; with `require_moved`, every reference tensor also moved more than 1e-3 from
    `adapter`'s (else the comparison would be vacuous). Returns (our step losses, our saved tensors,
    PEFT's)."""
    ref_losses, ref_model = reference_loop.train_reference(base, adapter, rows, steps=STEPS,
                                                           **SETTINGS, **reference_options)
    ours = step_losses(out)
    assert len(ours) == STEPS
    for step, (got, want) in enumerate(zip(ours, ref_losses), 1):
        assert abs(got - want) <= 1e-4 * abs(want), f"step {step}: loss {got} vs reference {want}"
    saved = load_file(str(out / "adapter_model.safetensors"))
    reference = {name: tensor for name, tensor in reference_loop.lora_state(ref_model).items() if keep(name)}
    assert set(saved) == set(reference)
    initial = load_file(str(adapter / "adapter_model.safetensors")) if require_moved else {}
    for name, ref in reference.items():
        if require_moved:
            assert relative_error(ref, initial[name]) > 1e-3, f"{name} did not move: the comparison would be vacuous"
        assert relative_error(saved[name], ref) <= 1e-4, name
    worst_loss = max(abs(got - want) / abs(want) for got, want in zip(ours, ref_losses))
    worst_tensor = max(relative_error(saved[name], ref) for name, ref in reference.items())
    print(f"{label}: {STEPS} LoRA steps vs PEFT: loss {worst_loss:.3g}, saved tensors {worst_tensor:.3g} (relative)")
    return ours, saved, reference


def eval_logits(base, data, dump, init_adapter=None):
    """`finetune eval --dump_logits` over `data` in batches of 4 (fp32, CPU): logits.<row> of each row."""
    adapter = ["--init_adapter", init_adapter] if init_adapter else []
    run_finetune(["eval", "--model_name", base, "--dataset", data] + adapter +
                 ["--dtype", "float32", "--device", "cpu", "--per_device_eval_batch_size", 4, "--dump_logits", dump])
    return load_file(str(dump))


def dumped_logits_error(dumped, model, rows):
    """The largest relative error of the dumped logits of `rows` against `model`'s, row by row."""
    worst = 0.0
    for i, row in enumerate(rows):
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([row["input_ids"]])).logits[0].float()
        worst = max(worst, relative_error(dumped[f"logits.{i}"], ref))
    return worst


def logits_error(model, reference, rows):
    """The largest relative error of `model`'s logits against `reference`'s, row by row."""
    worst = 0.0
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            worst = max(worst, relative_error(model(input_ids=ids).logits, reference(input_ids=ids).logits))
    return worst


def greedy_generate_matches(model, tokenizer, model_dir, work):
    """Greedy `finetune generate` of PROMPTS in left-padded batches of BATCH from `model_dir` gives
    transformers' generate() ids of `model`. Returns the prompts' ids."""
    prompts = work / "prompts.jsonl"
    assets.write_jsonl(prompts, [{"prompt": p} for p in PROMPTS])
    proc = run_finetune(["generate", "--model_name", model_dir, "--prompts", prompts,
                         "--generation_batch_size", BATCH, "--max_new_tokens", NEW_TOKENS,
                         "--device", "cpu", "--dtype", "float32"])
    results = assets.read_jsonl_lines(proc.stdout)
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    expected = assets.reference_generate(model, [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)],
                                         {tokenizer.eos_token_id}, tokenizer.pad_token_id, do_sample=False,
                                         max_new_tokens=NEW_TOKENS)
    assert [r["token_ids"] for r in results] == expected
    return ids
