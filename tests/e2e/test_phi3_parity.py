"""Phi-3 / Phi-4-mini (Phi3ForCausalLM) against transformers + PEFT on tiny random models (fp32, CPU):
fused qkv_proj / gate_up_proj adapters, longrope (short factors up to original_max_position_embeddings
32, long ones past it) at full rotary and at partial rotary 0.75. 20 LoRA steps match the reference
loop within test_train_parity.py's bounds, PEFT loads our adapter (logits 1e-5), the merged export
equals merge_and_unload (1e-6 per tensor), and greedy generate() ids equal transformers' through
the switch to the long factors. Eval logits are covered by test_eval_parity.py (every tiny model)."""
import json

import peft
import pytest
import torch
import transformers
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import generation_assets as assets
import reference_loop
import tiny_models

CASES = ["phi3_longrope", "phi4_mini_partial_rotary"]
STEPS = 20
SETTINGS = dict(batch_size=2, accumulation=2, lr=5e-3, warmup=3, scheduler="cosine", max_grad_norm=0.5)
CPU = ["--device", "cpu", "--dtype", "float32"]
EVAL_BATCH = 4


@pytest.fixture(scope="module", params=CASES)
def setup(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    base = root / "base"
    tiny_models.make_model(request.param, base)
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter", target_modules=reference_loop.PHI3_TARGETS)
    # Rows of 3..40 tokens: batches shorter and longer than original_max_position_embeddings (32).
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return root, base, adapter, rows, data


@pytest.fixture(scope="module")
def trained(setup):
    root, base, adapter, rows, data = setup
    out = root / "ours"
    s = SETTINGS
    run_finetune(["--model_name", base, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
                  "--max_steps", STEPS, "--per_device_train_batch_size", s["batch_size"],
                  "--gradient_accumulation_steps", s["accumulation"], "--learning_rate", s["lr"],
                  "--warmup_steps", s["warmup"], "--lr_scheduler_type", s["scheduler"],
                  "--max_grad_norm", s["max_grad_norm"], "--weight_decay", 0.01, "--lora_dropout", 0.0,
                  "--shuffle", "false", "--logging_steps", 1, "--use_gradient_checkpointing", "true",
                  # The reference loop's micro-batches: longrope picks the long or short factors from
                  # the longest row of a forward (Phi3Config's rule), so which rows share a
                  # micro-batch changes the numbers; balanced planning would group them otherwise.
                  "--step_planning", "literal",
                  "--save_model", "--save_method", "merged_16bit", "--save_path", root / "merged"] + CPU)
    return out


def test_config_has_longrope_and_fused_modules(setup):
    root, base, adapter, rows, data = setup
    config = json.load(open(base / "config.json"))
    assert config["rope_parameters"]["rope_type"] == "longrope"
    assert max(len(r["input_ids"]) for r in rows) > config["original_max_position_embeddings"]
    names = load_file(str(adapter / "adapter_model.safetensors"))
    assert any(".self_attn.qkv_proj.lora_A." in n for n in names)
    assert any(".mlp.gate_up_proj.lora_B." in n for n in names)


def test_lora_steps_match_peft_loop(setup, trained):
    root, base, adapter, rows, data = setup
    ref_losses, ref_model = reference_loop.train_reference(base, adapter, rows, steps=STEPS, **SETTINGS)
    ours = [json.loads(line)["loss"] for line in open(trained / "metrics.jsonl")]
    assert len(ours) == STEPS
    worst_loss = max(abs(got - want) / abs(want) for got, want in zip(ours, ref_losses))
    ours_adapter = load_file(str(trained / "adapter_model.safetensors"))
    ref_adapter = reference_loop.lora_state(ref_model)
    assert set(ours_adapter) == set(ref_adapter)
    worst_adapter = max(relative_error(ours_adapter[name], ref) for name, ref in ref_adapter.items())
    print(f"{base.parent.name}: 20 LoRA steps vs PEFT: loss {worst_loss:.3g}, adapter {worst_adapter:.3g} (relative)")
    assert worst_loss <= 1e-4, (ours, ref_losses)
    assert worst_adapter <= 1e-4
    assert ours[-1] < ours[0]


def test_peft_loads_our_adapter_and_logits_match(setup, trained, tmp_path):
    root, base, adapter, rows, data = setup
    config = json.load(open(trained / "adapter_config.json"))
    assert sorted(config["target_modules"]) == sorted(reference_loop.PHI3_TARGETS)
    dump = tmp_path / "logits.safetensors"
    run_finetune(["eval", "--model_name", base, "--dataset", data, "--init_adapter", trained,
                  "--per_device_eval_batch_size", EVAL_BATCH, "--dump_logits", dump] + CPU)
    model = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                           trained).eval()
    ours = load_file(str(dump))
    worst = 0.0
    # Batched as eval batches them (4 rows, right-padded): longrope picks its factors per batch.
    for start in range(0, 8, EVAL_BATCH):
        ids, mask, _ = reference_loop.collate(rows[start:start + EVAL_BATCH])
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
        for i, row in enumerate(rows[start:start + EVAL_BATCH]):
            ref = logits[i, :len(row["input_ids"])]
            worst = max(worst, relative_error(ours[f"logits.{start + i}"], ref))
    print(f"{base.parent.name}: logits with our adapter in PEFT: worst relative error {worst:.3g}")
    assert worst <= 1e-5


def test_merged_export_equals_merge_and_unload(setup, trained):
    root, base, adapter, rows, data = setup
    reference = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                               trained).merge_and_unload().eval()
    expected = reference.state_dict()
    ours = load_file(str(root / "merged" / "model.safetensors"))
    tied = reference.config.tie_word_embeddings
    assert set(ours) == set(expected) - ({"lm_head.weight"} if tied else set())
    worst = max(relative_error(tensor, expected[name]) for name, tensor in ours.items())
    print(f"{base.parent.name}: merged export vs merge_and_unload: worst relative error {worst:.3g}")
    assert worst <= 1e-6
    loaded = transformers.AutoModelForCausalLM.from_pretrained(root / "merged", dtype=torch.float32).eval()
    ids = torch.tensor([rows[0]["input_ids"]])
    with torch.no_grad():
        assert relative_error(loaded(ids).logits, reference(ids).logits) <= 1e-6


PROMPTS = [{"prompt": "Reverse the order of the words: red"}, {"prompt": "The"},
           {"prompt": "Below is an instruction that describes a task. caf\u00e9"}]
ORIGINAL = 32  # the tiny models' original_max_position_embeddings


def greedy_without_cache(model, batch, pad_id, eos_id, new_tokens):
    """Greedy decoding by a full forward over the whole left-padded sequence at every step (positions
    from the mask, as generate() computes them): what the model defines, with longrope's long factors
    for every key once the sequence passes original_max_position_embeddings."""
    width = max(len(ids) for ids in batch)
    ids = torch.tensor([[pad_id] * (width - len(row)) + row for row in batch])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in batch])
    for _ in range(new_tokens):
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        mask = torch.cat([mask, torch.ones(len(batch), 1, dtype=mask.dtype)], 1)
    out = []
    for row in ids[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t == eos_id), len(row))
        out.append(row[:cut])
    return out


def generate_ours(model_dir, tmp_path, new_tokens):
    path = tmp_path / "prompts.jsonl"
    assets.write_jsonl(path, PROMPTS)
    proc = run_finetune(["generate", "--model_name", model_dir, "--prompts", path, "--generation_batch_size",
                         len(PROMPTS), "--max_new_tokens", new_tokens] + CPU)
    return [r["token_ids"] for r in assets.read_jsonl_lines(proc.stdout)]


@pytest.mark.parametrize("case", CASES)
def test_greedy_generate_matches_transformers(case, tmp_path):
    """Up to original_max_position_embeddings, transformers' generate() itself is the reference."""
    tokenizer = assets.make_tokenizer()
    model = assets.make_model(case, tmp_path / "model", tokenizer)
    batch = [assets.prompt_ids(tokenizer, line) for line in PROMPTS]
    new_tokens = ORIGINAL - max(len(ids) for ids in batch)  # the longest row ends at 32 tokens: short factors
    expected = assets.reference_generate(model, [batch], {tokenizer.eos_token_id}, tokenizer.pad_token_id,
                                         do_sample=False, max_new_tokens=new_tokens)
    assert generate_ours(tmp_path / "model", tmp_path, new_tokens) == expected


@pytest.mark.parametrize("case", CASES)
def test_greedy_generate_past_the_original_length_matches_full_forwards(case, tmp_path):
    """Past original_max_position_embeddings, Phi3ForCausalLM.prepare_inputs_for_generation drops
    the cache to recompute it with the long factors, but in transformers 5.17 generate() then feeds
    only the newest token, without any cache, at every later step (each token sees itself alone);
    finetune recomputes the cache once, as the drop intends (Note [Phi-3 cache recompute]), which
    equals a full forward over the sequence at every step."""
    tokenizer = assets.make_tokenizer()
    model = assets.make_model(case, tmp_path / "model", tokenizer)
    batch = [assets.prompt_ids(tokenizer, line) for line in PROMPTS]
    new_tokens = 40  # every row ends past 32 tokens
    expected = greedy_without_cache(model, batch, tokenizer.pad_token_id, tokenizer.eos_token_id, new_tokens)
    ours = generate_ours(tmp_path / "model", tmp_path, new_tokens)
    assert ours == expected
    assert all(len(ids) + len(row) > ORIGINAL for ids, row in zip(batch, expected) if len(row) == new_tokens)
