"""QLoRA with the real binary against transformers + bitsandbytes + PEFT on the CPU (fp32 compute).

--load_in_4bit quantizes the projections exactly as transformers + bitsandbytes do for
BitsAndBytesConfig(load_in_4bit, nf4, double quantization), so with the same compute dtype the only
differences left are the order of float sums inside the GEMMs: logits and training are held to the
same bounds as the 16-bit parity tests (test_eval_parity.py, test_train_parity.py). A checkpoint
transformers saved in 4-bit loads as it is stored; merged_16bit dequantizes and merges in fp32;
merged_4bit re-quantizes to bytes bitsandbytes reproduces and transformers loads.
"""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import bnb_cpu
import reference_loop
import tiny_models
from lora_parity import SETTINGS, STEPS, finetune_args as lora_finetune_args, make_llama_run, step_losses, steps_match_peft

bnb_cpu.use_portable_cpu_kernels()  # bitsandbytes' own arithmetic on every host (bnb_cpu.py)

LOGITS_BOUND = 1e-5   # as test_eval_parity.py: same weights, same dtype, GEMM summation order only
TRAINING_BOUND = 1e-4  # as test_train_parity.py: 20 steps of AdamW amplify those differences


def bnb_config():
    import transformers
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32)


def bnb_model(path):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, device_map="cpu",
                                                             quantization_config=bnb_config()).eval()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("qlora")
    base, adapter, rows, data = make_llama_run(root)
    bnb_model(base).save_pretrained(root / "base_4bit")  # the layout of the hub's *-bnb-4bit repos
    return root, base, adapter, rows, data


def finetune_args(base, adapter, data, out, gradient_checkpointing="true"):
    """test_train_parity's run (the settings the reference loop repeats) on a 4-bit base."""
    return lora_finetune_args(base, adapter, data, out, gradient_checkpointing=gradient_checkpointing) + \
        ["--load_in_4bit"]


def our_logits(model_dir, rows, tmp_path, extra=()):
    data = tmp_path / "eval_rows.jsonl"
    tiny_models.write_jsonl(data, rows)
    dump = tmp_path / "logits.safetensors"
    run_finetune(["eval", "--model_name", model_dir, "--dataset", data, "--dtype", "float32", "--device", "cpu",
                  "--per_device_eval_batch_size", 1, "--dump_logits", dump, *extra])
    dumped = load_file(str(dump))
    return [dumped[f"logits.{i}"] for i in range(len(rows))]


def expect_logits_match(model_dir, reference_model, rows, tmp_path, extra=()):
    ours = our_logits(model_dir, rows, tmp_path, extra)
    worst = 0.0
    for i, row in enumerate(rows):
        with torch.no_grad():
            ref = reference_model(input_ids=torch.tensor([row["input_ids"]])).logits[0].float()
        worst = max(worst, relative_error(ours[i], ref))
    assert worst <= LOGITS_BOUND, f"relative logits error {worst:.3e}"
    return worst


def test_load_in_4bit_matches_transformers_4bit_forward(setup, tmp_path, capsys):
    root, base, adapter, rows, data = setup
    worst = expect_logits_match(base, bnb_model(base), rows[:6], tmp_path, ["--load_in_4bit"])
    with capsys.disabled():
        print(f"\n[qlora] --load_in_4bit logits vs transformers+bitsandbytes 4-bit: worst relative {worst:.2e}")


def test_load_in_4bit_differs_from_the_16bit_model(setup, tmp_path):
    """The comparison above would be vacuous if the 4-bit path silently ran 16-bit weights."""
    import transformers
    root, base, adapter, rows, data = setup
    dense = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    ours = our_logits(base, rows[:2], tmp_path, ["--load_in_4bit"])
    with torch.no_grad():
        ref = dense(input_ids=torch.tensor([rows[0]["input_ids"]])).logits[0]
    assert relative_error(ours[0], ref) > 1e-3


def test_checkpoint_saved_in_4bit_loads_as_stored(setup, tmp_path, capsys):
    root, base, adapter, rows, data = setup
    worst = expect_logits_match(root / "base_4bit", bnb_model(root / "base_4bit"), rows[:6], tmp_path)
    with capsys.disabled():
        print(f"\n[qlora] pre-quantized checkpoint logits vs transformers: worst relative {worst:.2e}")


@pytest.fixture(scope="module")
def trained(setup):
    root, base, adapter, rows, data = setup
    out = root / "ours"
    run_finetune(finetune_args(base, adapter, data, out) +
                 ["--save_model", "--save_method", "merged_16bit", "--save_path", root / "merged16"])
    return out


def test_qlora_training_matches_peft_with_bitsandbytes(setup, trained, capsys):
    root, base, adapter, rows, data = setup
    with capsys.disabled():
        ours, _, _ = steps_match_peft("\n[qlora] PEFT+bitsandbytes (checkpointing)", base, adapter, rows, trained,
                                      require_moved=True, gradient_checkpointing=True,
                                      quantization_config=bnb_config())
    assert ours[-1] < ours[0]


def test_rslora_without_checkpointing_matches_peft(setup, tmp_path):
    root, base, adapter, rows, data = setup
    rs_adapter = reference_loop.make_init_adapter(base, tmp_path / "rs_adapter", use_rslora=True)
    out = tmp_path / "rs"
    run_finetune(finetune_args(base, rs_adapter, data, out, gradient_checkpointing="false"))
    ref_losses, ref_model = reference_loop.train_reference(base, rs_adapter, rows, steps=STEPS, **SETTINGS,
                                                           quantization_config=bnb_config())
    for step, (got, want) in enumerate(zip(step_losses(out), ref_losses), 1):
        assert abs(got - want) <= TRAINING_BOUND * abs(want), f"step {step}: loss {got} vs reference {want}"
    ours_adapter = load_file(str(out / "adapter_model.safetensors"))
    for name, ref in reference_loop.lora_state(ref_model).items():
        assert relative_error(ours_adapter[name], ref) <= TRAINING_BOUND, name


def test_dora_over_a_4bit_base_matches_peft(setup, tmp_path, capsys):
    root, base, adapter, rows, data = setup
    dora_adapter = reference_loop.make_init_adapter(base, tmp_path / "dora_adapter", use_dora=True)
    out = tmp_path / "dora"
    run_finetune(finetune_args(base, dora_adapter, data, out))
    ref_losses, ref_model = reference_loop.train_reference(base, dora_adapter, rows, steps=STEPS, **SETTINGS,
                                                           gradient_checkpointing=True,
                                                           quantization_config=bnb_config())
    ours = step_losses(out)
    for step, (got, want) in enumerate(zip(ours, ref_losses), 1):
        assert abs(got - want) <= TRAINING_BOUND * abs(want), f"step {step}: loss {got} vs reference {want}"
    ours_adapter = load_file(str(out / "adapter_model.safetensors"))
    ref_adapter = reference_loop.lora_state(ref_model)
    assert set(ours_adapter) == set(ref_adapter) and any("lora_magnitude_vector" in n for n in ref_adapter)
    worst = 0.0
    for name, ref in ref_adapter.items():
        worst = max(worst, relative_error(ours_adapter[name], ref))
        assert relative_error(ours_adapter[name], ref) <= TRAINING_BOUND, name
    with capsys.disabled():
        print(f"\n[qlora] DoRA over 4-bit, 20 steps vs PEFT+bitsandbytes: worst loss rel "
              f"{max(abs(g - w) / abs(w) for g, w in zip(ours, ref_losses)):.2e}, worst adapter tensor rel {worst:.2e}")


def merged_reference(setup, trained):
    """Each projection as Unsloth merges a 4-bit base: W = dequantize_4bit(W4) in fp32 + B A scaling."""
    import bitsandbytes.functional as F
    root, base, adapter, rows, data = setup
    quantized = bnb_model(base)
    ours_adapter = load_file(str(trained / "adapter_model.safetensors"))
    config = json.load(open(trained / "adapter_config.json"))
    scaling = config["lora_alpha"] / config["r"]
    expected = {}
    for name, module in quantized.named_modules():
        if type(module).__name__ != "Linear4bit":
            continue
        weight = F.dequantize_4bit(module.weight.data, module.weight.quant_state).float()
        a = ours_adapter[f"base_model.model.{name}.lora_A.weight"]
        b = ours_adapter[f"base_model.model.{name}.lora_B.weight"]
        expected[name + ".weight"] = weight + (b @ a) * scaling
    return expected


def test_merged_16bit_from_a_4bit_base(setup, trained):
    import transformers
    root, base, adapter, rows, data = setup
    merged = load_file(str(root / "merged16" / "model.safetensors"))
    expected = merged_reference(setup, trained)
    assert len(expected) == 14
    for name, want in expected.items():
        assert merged[name].dtype == torch.float32
        assert relative_error(merged[name], want) <= 1e-6, name
    config = json.load(open(root / "merged16" / "config.json"))
    assert "quantization_config" not in config
    transformers.AutoModelForCausalLM.from_pretrained(root / "merged16", dtype=torch.float32)  # loads as 16-bit


def test_merged_4bit_is_what_bitsandbytes_writes_and_transformers_loads(setup, trained, tmp_path):
    import bitsandbytes.functional as F
    root, base, adapter, rows, data = setup
    out = tmp_path / "merged4"
    run_finetune(finetune_args(base, trained, data, tmp_path / "run4") +
                 ["--max_steps", 1, "--learning_rate", 1e-30, "--warmup_steps", 0, "--save_model",
                  "--save_method", "merged_4bit_forced", "--save_path", out])
    # One step at lr 1e-30 leaves the trained adapter as it was (an update far below an fp32 ulp).
    expected = merged_reference(setup, trained)
    saved = load_file(str(out / "model.safetensors"))
    for name, want in expected.items():
        packed, state = F.quantize_4bit(want, blocksize=64, quant_type="nf4", compress_statistics=True)
        assert torch.equal(saved[name], packed), name
        assert torch.equal(saved[name + ".absmax"], state.absmax), name
        assert torch.equal(saved[name + ".nested_absmax"], state.state2.absmax), name
    config = json.load(open(out / "config.json"))
    assert config["quantization_config"]["load_in_4bit"] is True
    assert config["quantization_config"]["bnb_4bit_quant_type"] == "nf4"
    import transformers
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, device_map="cpu").eval()
    assert type(loaded.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    expect_logits_match(out, loaded, rows[:4], tmp_path)


def test_4bit_load_names_a_projection_of_the_wrong_shape(setup, tmp_path):
    """config.json and the weights disagree on a projection: the 4-bit loader says which tensor, in which file."""
    import shutil
    root, base, adapter, rows, data = setup
    model_dir = tmp_path / "mismatch"
    shutil.copytree(base, model_dir)
    config = json.load(open(model_dir / "config.json"))
    config["intermediate_size"] = 96
    json.dump(config, open(model_dir / "config.json", "w"))
    proc = run_finetune(["eval", "--model_name", model_dir, "--dataset", data, "--device", "cpu", "--load_in_4bit"],
                        check=False)
    assert proc.returncode != 0
    assert "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64]" in proc.stderr, \
        proc.stderr
    assert "expects [96, 64]" in proc.stderr, proc.stderr
