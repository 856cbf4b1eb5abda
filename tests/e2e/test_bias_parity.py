"""--bias none|all|lora_only (PEFT's LoraConfig.bias, issue 26): which biases train and how the
adapter saves them, against PEFT. On Qwen2's q/k/v biases with adapters on every projection but
k_proj, so that lora_only (q and v biases, saved as ...q_proj.base_layer.bias) and all (k_proj's
too, saved as ...k_proj.bias) differ:

(a) from a PEFT adapter saved with that bias (its bias tensors included), 20 steps equal the
    transformers + PEFT loop (reference_loop.train_reference: PEFT marks the biases trainable from
    adapter_config.json) within test_train_parity.py's bounds: loss 1e-4 relative per step,
    every saved tensor (adapter and biases) 1e-4 relative;
(b) a fresh --bias run saves PEFT's key set, PEFT loads it (PeftModel.from_pretrained) to the
    same tensors, and the merged export carries the trained biases as merge_and_unload does;
(c) training biases in bfloat16 is refused with the reason (one dtype in the reducer and the
    optimizer state), as is a GGUF LoRA export of an adapter with trained biases.
"""
import json

import peft
import pytest
import torch
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import lora_parity
import reference_loop
import tiny_models

TARGETS = ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # not k_proj


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias")
    base = root / "qwen2"
    tiny_models.make_model("qwen2", base)
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return root, base, rows, data


def bias_keys(tensors):
    return sorted(k for k in tensors if k.endswith(".bias"))


@pytest.mark.parametrize("bias", ["all", "lora_only"])
def test_training_biases_matches_peft(setup, bias):
    root, base, rows, data = setup
    adapter = reference_loop.make_init_adapter(base, root / f"init_{bias}", target_modules=TARGETS, bias=bias)
    out = root / f"ours_{bias}"
    lora_parity.train_ours(base, adapter, data, out)
    _, saved, _ = lora_parity.steps_match_peft(out.name, base, adapter, rows, out)
    layers = range(2)
    expected = [f"base_model.model.model.layers.{i}.self_attn.{p}.base_layer.bias" for i in layers
                for p in ("q_proj", "v_proj")]
    if bias == "all":
        expected += [f"base_model.model.model.layers.{i}.self_attn.k_proj.bias" for i in layers]
    assert bias_keys(saved) == sorted(expected)
    initial = load_file(str(adapter / "adapter_model.safetensors"))
    for name in expected:  # the biases did train
        assert relative_error(saved[name], initial[name]) > 1e-3, name
    assert json.load(open(out / "adapter_config.json"))["bias"] == bias


def test_a_fresh_bias_run_is_what_peft_loads_and_merges(setup, tmp_path):
    root, base, rows, data = setup
    out = tmp_path / "fresh"
    run_finetune(["--model_name", base, "--dataset", data, "--output_dir", out, "--max_steps", 3,
                  "--per_device_train_batch_size", 2, "--learning_rate", 1e-2, "--bias", "all",
                  "--target_modules", ",".join(TARGETS), "--dtype", "float32", "--device", "cpu",
                  "--save_model", "--save_method", "merged_16bit", "--save_path", tmp_path / "merged"])
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert len(bias_keys(saved)) == 6  # 2 layers x q, k, v
    model = peft.PeftModel.from_pretrained(tiny_models.load_reference_model(base), out)
    loaded = reference_loop.lora_state(model)
    assert set(loaded) == set(saved)
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
    merged = model.merge_and_unload().state_dict()
    ours = load_file(str(tmp_path / "merged" / "model.safetensors"))
    base_weights = load_file(str(base / "model.safetensors"))
    for name in (k for k in ours if k.endswith(".bias")):
        assert relative_error(ours[name], merged[name]) <= 1e-6, name
        assert not torch.equal(ours[name], base_weights[name]), name  # the trained bias, not the base's


def test_biases_that_cannot_train_here_are_refused(setup, tmp_path):
    root, base, rows, data = setup
    args = ["--model_name", base, "--dataset", data, "--max_steps", 1, "--device", "cpu", "--bias", "lora_only"]
    proc = run_finetune(args + ["--output_dir", tmp_path / "bf16", "--dtype", "bfloat16"], check=False)
    assert proc.returncode == 2 and "--bias lora_only: training biases needs --dtype float32" in proc.stderr, \
        proc.stderr
    proc = run_finetune(args + ["--output_dir", tmp_path / "gguf_lora", "--dtype", "float32", "--save_model",
                                "--save_method", "gguf_lora", "--save_path", tmp_path / "gguf"], check=False)
    assert proc.returncode == 2 and "--bias lora_only trains biases, which a GGUF LoRA adapter cannot carry" \
        in proc.stderr, proc.stderr
