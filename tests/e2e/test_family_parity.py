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

import generation_assets as assets
import lora_parity
import reference_loop
import tiny_models

CASES = ["mistral_window", "gemma2", "gemma2_mha_untied", "gemma3", "gemma3_mqa_untied", "gemma3_multimodal"]
TEXT_ONLY = [case for case in CASES if case != "gemma3_multimodal"]  # generation_assets builds text models


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
    lora_parity.train_ours(base, adapter, data, out, merged=root / "merged")
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
    ours, _, _ = lora_parity.steps_match_peft(case, base, adapter, rows, out, keep=lambda k: not is_vision_tower(k))
    assert ours[-1] < ours[0]


def test_peft_loads_our_adapter_and_logits_match(trained, tmp_path):
    case, root, base, adapter, rows, data, out = trained
    ours = lora_parity.eval_logits(base, data, tmp_path / "logits.safetensors", init_adapter=out)
    worst = lora_parity.dumped_logits_error(ours, peft_model(base, out), rows[:6])
    print(f"{case}: PEFT-loaded adapter logits {worst:.3g} (relative)")
    assert worst <= 1e-5


def test_merged_export_equals_merge_and_unload(trained):
    case, root, base, adapter, rows, data, out = trained
    merged = tiny_models.load_reference_model(root / "merged", dtype=torch.float32).eval()
    worst = lora_parity.logits_error(merged, peft_model(base, out).merge_and_unload().eval(), rows[:4])
    print(f"{case}: merged export vs merge_and_unload logits {worst:.3g} (relative)")
    assert worst <= 1e-5


@pytest.mark.parametrize("case", TEXT_ONLY)
def test_greedy_generate_equals_transformers(case, tmp_path):
    tokenizer = assets.make_tokenizer()
    model = assets.make_model(case, tmp_path / "model", tokenizer)
    ids = lora_parity.greedy_generate_matches(model, tokenizer, tmp_path / "model", tmp_path)
    # decoding crosses the window
    assert max(len(i) for i in ids) + lora_parity.NEW_TOKENS > model.config.sliding_window
