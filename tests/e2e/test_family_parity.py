"""Mistral with a sliding window, Gemma-2 and Gemma-3 (text, and a Gemma3ForConditionalGeneration
checkpoint's text tower) train, load, export and generate as transformers + PEFT do (fp32, CPU),
on tiny random models whose windows are shorter than the rows (tiny_models.py):

  * 20 LoRA steps against reference_loop's transformers + PEFT loop, within test_train_parity's
    bounds (loss 1e-4 relative per step, every adapter tensor 1e-4 relative);
  * PEFT loads our adapter into the class the checkpoint names, and its logits are ours (1e-5);
  * our merged export, loaded by transformers, gives PEFT's merge_and_unload() logits (1e-5);
  * greedy `finetune generate` on left-padded batches gives transformers' generate() ids.

Gemma-2's references run eager attention (tiny_models.reference_attention)."""
import os

import peft
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import run_finetune
from numerics import relative_error
import generation_assets as assets
import reference_loop
import tiny_models
from test_train_parity import SETTINGS, STEPS, finetune_args, step_losses

CASES = ["mistral_window", "gemma2", "gemma2_mha_untied", "gemma3", "gemma3_mqa_untied", "gemma3_multimodal"]
TEXT_ONLY = [case for case in CASES if case != "gemma3_multimodal"]  # generation_assets builds text models
PROMPTS = ["Reverse the order of the words: red blue green and the sun", "The",
           "Below is an instruction that describes a task. caf\u00e9", "sun moon"]
NEW_TOKENS = 12
BATCH = 3


@pytest.fixture(scope="module", params=CASES)
def trained(request, tmp_path_factory):
    """The case's base model, init adapter, rows, and our 20-step run with its merged export."""
    case = request.param
    root = tmp_path_factory.mktemp(case)
    base = root / "base"
    tiny_models.make_model(case, base)
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter")
    if case == "gemma3_multimodal":
        text_tower_only(adapter)
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)  # up to 40 tokens: past every window
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    out = root / "ours"
    run_finetune(finetune_args(base, adapter, data, out) +
                 ["--save_model", "--save_method", "merged_16bit", "--save_path", root / "merged"])
    return case, root, base, adapter, rows, data, out


def text_tower_only(adapter_dir):
    """The init adapter without the vision tower's LoRA tensors (PEFT's target names also match the
    vision tower's q/k/v_proj; finetune trains the text tower). PEFT loading it gives the vision
    tower's LoRA layers their initial B = 0: they change nothing, and never get a gradient."""
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    tensors = load_file(path)
    save_file({k: v for k, v in tensors.items() if not is_vision_tower(k)}, path, metadata={"format": "pt"})


def is_vision_tower(name):
    return ".vision_tower." in name


def peft_model(base, adapter_dir):
    return peft.PeftModel.from_pretrained(tiny_models.load_reference_model(base, dtype=torch.float32),
                                          adapter_dir).eval()


def test_lora_steps_match_peft(trained):
    case, root, base, adapter, rows, data, out = trained
    ref_losses, ref_model = reference_loop.train_reference(base, adapter, rows, steps=STEPS, **SETTINGS)
    ours = step_losses(out)
    assert len(ours) == STEPS
    worst_loss = max(abs(got - want) / abs(want) for got, want in zip(ours, ref_losses))
    ours_adapter = load_file(str(out / "adapter_model.safetensors"))
    ref_adapter = {k: v for k, v in reference_loop.lora_state(ref_model).items() if not is_vision_tower(k)}
    assert set(ours_adapter) == set(ref_adapter)
    worst_adapter = max(relative_error(ours_adapter[name], ref) for name, ref in ref_adapter.items())
    print(f"{case}: 20 LoRA steps vs PEFT: loss {worst_loss:.3g}, adapter {worst_adapter:.3g} (relative)")
    assert worst_loss <= 1e-4, (ours, ref_losses)
    assert worst_adapter <= 1e-4
    assert ours[-1] < ours[0]


def test_peft_loads_our_adapter_and_logits_match(trained, tmp_path):
    case, root, base, adapter, rows, data, out = trained
    dump = tmp_path / "logits.safetensors"
    run_finetune(["eval", "--model_name", base, "--dataset", data, "--init_adapter", out, "--dtype", "float32",
                  "--device", "cpu", "--per_device_eval_batch_size", 4, "--dump_logits", dump])
    model = peft_model(base, out)
    ours = load_file(str(dump))
    worst = 0.0
    for i, row in enumerate(rows[:6]):
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([row["input_ids"]])).logits[0].float()
        worst = max(worst, relative_error(ours[f"logits.{i}"], ref))
    print(f"{case}: PEFT-loaded adapter logits {worst:.3g} (relative)")
    assert worst <= 1e-5


def test_merged_export_equals_merge_and_unload(trained):
    case, root, base, adapter, rows, data, out = trained
    merged = tiny_models.load_reference_model(root / "merged", dtype=torch.float32).eval()
    reference = peft_model(base, out).merge_and_unload().eval()
    worst = 0.0
    for row in rows[:4]:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            worst = max(worst, relative_error(merged(input_ids=ids).logits, reference(input_ids=ids).logits))
    print(f"{case}: merged export vs merge_and_unload logits {worst:.3g} (relative)")
    assert worst <= 1e-5


@pytest.mark.parametrize("case", TEXT_ONLY)
def test_greedy_generate_equals_transformers(case, tmp_path):
    tokenizer = assets.make_tokenizer()
    model = assets.make_model(case, tmp_path / "model", tokenizer)
    prompts = tmp_path / "prompts.jsonl"
    assets.write_jsonl(prompts, [{"prompt": p} for p in PROMPTS])
    proc = run_finetune(["generate", "--model_name", tmp_path / "model", "--prompts", prompts,
                         "--generation_batch_size", BATCH, "--max_new_tokens", NEW_TOKENS,
                         "--device", "cpu", "--dtype", "float32"])
    results = assets.read_jsonl_lines(proc.stdout)
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    assert max(len(i) for i in ids) + NEW_TOKENS > model.config.sliding_window  # decoding crosses the window
    expected = assets.reference_generate(model, [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)],
                                         {tokenizer.eos_token_id}, tokenizer.pad_token_id, do_sample=False,
                                         max_new_tokens=NEW_TOKENS)
    assert [r["token_ids"] for r in results] == expected
