"""DoRA (--use_dora, PEFT's use_dora) matches transformers + PEFT on the CPU, fp32 and bf16 bases:
20 training steps from a PEFT DoRA adapter (losses, lora_A/lora_B/lora_magnitude_vector), PEFT
loading the adapter we save (same logits), the merged export, gradient checkpointing, and a fresh
--use_dora run whose adapter PEFT loads."""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import peft
import reference_loop
import tiny_models
import transformers

STEPS = 20
SETTINGS = dict(batch_size=2, accumulation=2, lr=5e-3, warmup=3, scheduler="cosine", max_grad_norm=0.5)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Relative bounds on 20 training steps, ours vs PEFT: fp32 as the LoRA parity test. In bf16 the
# first step's loss already differs in the last bits and the difference grows over the steps;
# plain LoRA on the same bf16 base drifts as much (measured: 2e-5..5e-5 relative loss by step 6
# for both), so the bound is the base model's, not DoRA's.
BOUNDS = {"float32": dict(loss=1e-4, adapter=1e-4), "bfloat16": dict(loss=5e-4, adapter=1e-2)}


@pytest.fixture(scope="module", params=list(DTYPES))
def setup(request, tmp_path_factory):
    dtype = request.param
    root = tmp_path_factory.mktemp(f"dora_{dtype}")
    base = root / "base"
    tiny_models.make_model("llama", base, dtype=DTYPES[dtype])
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter", use_dora=True, dtype=DTYPES[dtype])
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return dict(root=root, base=base, adapter=adapter, rows=rows, data=data, dtype=dtype)


def finetune_args(s, out, gradient_checkpointing="true", steps=STEPS):
    return ["--model_name", s["base"], "--dataset", s["data"], "--init_adapter", s["adapter"], "--output_dir", out,
            "--max_steps", steps, "--per_device_train_batch_size", SETTINGS["batch_size"],
            "--gradient_accumulation_steps", SETTINGS["accumulation"], "--learning_rate", SETTINGS["lr"],
            "--warmup_steps", SETTINGS["warmup"], "--lr_scheduler_type", SETTINGS["scheduler"],
            "--max_grad_norm", SETTINGS["max_grad_norm"], "--weight_decay", 0.01, "--lora_dropout", 0.0,
            "--dtype", s["dtype"], "--device", "cpu", "--shuffle", "false", "--logging_steps", 1,
            "--use_gradient_checkpointing", gradient_checkpointing]


def step_losses(out):
    return [json.loads(line)["loss"] for line in open(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def trained(setup):
    out = setup["root"] / "ours"
    run_finetune(finetune_args(setup, out) +
                 ["--save_model", "--save_method", "merged_16bit", "--save_path", setup["root"] / "merged"])
    return out


def peft_model_of(s, adapter_dir):
    base = transformers.AutoModelForCausalLM.from_pretrained(s["base"], dtype=DTYPES[s["dtype"]])
    return peft.PeftModel.from_pretrained(base, adapter_dir).eval()


def test_losses_and_adapter_match_peft(setup, trained):
    bound = BOUNDS[setup["dtype"]]
    ref_losses, ref_model = reference_loop.train_reference(setup["base"], setup["adapter"], setup["rows"], steps=STEPS,
                                                           dtype=DTYPES[setup["dtype"]], **SETTINGS)
    ours = step_losses(trained)
    assert len(ours) == STEPS
    worst_loss = max(abs(got - want) / abs(want) for got, want in zip(ours, ref_losses))
    ours_adapter = load_file(str(trained / "adapter_model.safetensors"))
    ref_adapter = reference_loop.lora_state(ref_model)
    assert set(ours_adapter) == set(ref_adapter)
    assert sum(name.endswith(".lora_magnitude_vector") for name in ours_adapter) == 2 * 7
    worst_adapter = max(relative_error(ours_adapter[name], ref) for name, ref in ref_adapter.items())
    print(f"\n[dora {setup['dtype']}] max relative loss error {worst_loss:.3e}, "
          f"max relative adapter tensor error {worst_adapter:.3e}")
    assert worst_loss <= bound["loss"]
    assert worst_adapter <= bound["adapter"]
    assert ours[-1] < ours[0]  # it learns
    # The magnitude is trained: it moved off the initial adapter's.
    init = load_file(str(setup["adapter"] / "adapter_model.safetensors"))
    magnitude = "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"
    assert not torch.equal(ours_adapter[magnitude], init[magnitude])


def test_peft_loads_our_adapter_and_logits_match(setup, trained, tmp_path):
    config = json.loads((trained / "adapter_config.json").read_text())
    assert config["use_dora"] is True and config["peft_type"] == "LORA"
    dump = tmp_path / "logits.safetensors"
    run_finetune(["eval", "--model_name", setup["base"], "--dataset", setup["data"], "--init_adapter", trained,
                  "--dtype", setup["dtype"], "--device", "cpu", "--per_device_eval_batch_size", 1,
                  "--dump_logits", dump])
    model = peft_model_of(setup, trained)
    ours = load_file(str(dump))
    # One row per batch, as PEFT runs them here: the same products, so the same bits.
    for i, row in enumerate(setup["rows"][:6]):
        with torch.no_grad():
            ref = model(input_ids=torch.tensor([row["input_ids"]])).logits[0].float()
        assert torch.equal(ours[f"logits.{i}"], ref), f"row {i}: max abs error {(ours[f'logits.{i}'] - ref).abs().max()}"


def test_merged_export_equals_peft_merge_and_unload(setup, trained):
    ours = load_file(str(setup["root"] / "merged" / "model.safetensors"))
    merged = peft_model_of(setup, trained).merge_and_unload()
    reference = {name: tensor for name, tensor in merged.state_dict().items()}
    assert set(ours) == set(reference)
    for name, tensor in ours.items():
        assert torch.equal(tensor, reference[name]), name


def test_gradient_checkpointing_gives_identical_training(setup, trained, tmp_path):
    out = tmp_path / "no_gc"
    run_finetune(finetune_args(setup, out, gradient_checkpointing="false"))
    with_gc = load_file(str(trained / "adapter_model.safetensors"))
    without = load_file(str(out / "adapter_model.safetensors"))
    for name in with_gc:
        assert torch.equal(with_gc[name], without[name]), name
    assert step_losses(out) == step_losses(trained)


def test_fresh_dora_run_saves_an_adapter_peft_loads(setup, tmp_path):
    out = tmp_path / "fresh"
    run_finetune(["--model_name", setup["base"], "--dataset", setup["data"], "--output_dir", out, "--max_steps", 2,
                  "--r", 4, "--lora_alpha", 8, "--use_dora", "--lora_dropout", 0.1, "--dtype", setup["dtype"],
                  "--device", "cpu", "--per_device_train_batch_size", 2, "--learning_rate", 5e-3])
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["use_dora"] is True
    saved = load_file(str(out / "adapter_model.safetensors"))
    model = peft_model_of(setup, out)
    state = reference_loop.lora_state(model)
    assert set(saved) == set(state)
    for name, tensor in saved.items():
        assert torch.equal(tensor, state[name]), name
