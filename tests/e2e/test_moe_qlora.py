"""QLoRA on Qwen3-MoE and Mixtral (tiny random models of make_moe_fixtures.py; fp32, CPU).

transformers 5.17 + bitsandbytes quantize nn.Linear layers only, so their BitsAndBytesConfig model
keeps the fused expert parameters 16-bit. finetune's --load_in_4bit quantizes the expert tensors
too, each per-expert checkpoint tensor on its own as bitsandbytes quantized an expert's nn.Linear
(transformers 4.x's per-expert modules); the bytes are checked against bitsandbytes' in
tests/weights/test_expert_weights_4bit.cpp. The reference here is transformers + bitsandbytes on
a copy of the model whose expert tensors hold bitsandbytes' dequantized values
(make_moe_fixtures.fake_quantized_copy): its attention (and mlp_only layers') projections are
bitsandbytes' Linear4bit, its experts are exactly what our 4-bit experts dequantize to.

  * logits of `finetune eval --load_in_4bit` equal that reference's (1e-5 relative), and differ
    from the 16-bit model's (the experts really are quantized);
  * 20 QLoRA steps (attention only; attention + expert stacks through target_parameters) equal
    transformers + bitsandbytes + PEFT on that reference within test_moe_parity's bounds (1e-4);
  * a checkpoint transformers saved in 4-bit (experts 16-bit there) loads with 16-bit experts, as
    transformers loads it; one storing every per-expert tensor 4-bit (the hub's bnb-4bit MoE repos)
    loads as stored;
  * the merged_16bit export of the 4-bit run (experts dequantized, adapters folded in), loaded by
    transformers, gives PEFT's merge_and_unload() logits on the fully dequantized model (1e-5);
    merged_4bit keeps the experts 16-bit (those values) and transformers loads it.
"""
import peft
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import run_finetune
import bnb_cpu
import lora_parity
import make_moe_fixtures as moe
import tiny_models
from lora_parity import finetune_args

bnb_cpu.use_portable_cpu_kernels()  # bitsandbytes' own arithmetic on every host (bnb_cpu.py)

CASES = ["qwen3_moe_top2", "mixtral_top1_window"]  # mlp_only layer + top-2; top-1 of 8 + window
LOGITS_BOUND = 1e-5    # as test_moe_parity: same weights, same dtype, GEMM summation order only


def bnb_config():
    import transformers
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                           bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.float32)


def bnb_model(path):
    return moe.load_reference_model(path, dtype=torch.float32, device_map="cpu",
                                    quantization_config=bnb_config()).eval()


@pytest.fixture(scope="module", params=CASES)
def base(request, tmp_path_factory):
    case = request.param
    root = tmp_path_factory.mktemp(case + "_4bit")
    moe.make_model(case, root / "base")
    moe.fake_quantized_copy(root / "base", root / "experts_dequantized")
    moe.fake_quantized_copy(root / "base", root / "all_dequantized", projections=True)
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return case, root, rows, data


def our_4bit_logits(model_dir, data, dump, init_adapter=None):
    adapter = ["--init_adapter", init_adapter] if init_adapter else []
    run_finetune(["eval", "--model_name", model_dir, "--dataset", data, *adapter, "--dtype", "float32",
                  "--device", "cpu", "--per_device_eval_batch_size", 4, "--dump_logits", dump, "--load_in_4bit"])
    return load_file(str(dump))


def test_4bit_logits_equal_bitsandbytes_with_dequantized_experts(base, tmp_path):
    case, root, rows, data = base
    ours = our_4bit_logits(root / "base", data, tmp_path / "logits.safetensors")
    worst = lora_parity.dumped_logits_error(ours, bnb_model(root / "experts_dequantized"), rows[:8])
    # Reference check: the 4-bit experts matter (a model with 16-bit experts is measurably elsewhere).
    sixteen_bit_experts = lora_parity.dumped_logits_error(ours, bnb_model(root / "base"), rows[:8])
    print(f"{case}: --load_in_4bit logits vs transformers+bitsandbytes with bnb-dequantized experts {worst:.3g}; "
          f"vs 16-bit experts {sixteen_bit_experts:.3g} (relative)")
    assert sixteen_bit_experts > 1e-4
    assert worst <= LOGITS_BOUND


def test_checkpoint_transformers_saved_in_4bit_keeps_its_16bit_experts(base, tmp_path):
    """A MoE model transformers + bitsandbytes saved in 4-bit (its Linear4bit layers packed, the
    experts written 16-bit per expert) loads as stored: logits equal that 4-bit model's."""
    case, root, rows, data = base
    reference = bnb_model(root / "base")
    reference.save_pretrained(tmp_path / "saved_4bit")
    saved = load_file(str(tmp_path / "saved_4bit" / "model.safetensors"))
    assert any(name.endswith("q_proj.weight.absmax") for name in saved)
    assert any(moe.EXPERT_TENSOR.search(name) and saved[name].dtype == torch.float32 for name in saved)
    run_finetune(["eval", "--model_name", tmp_path / "saved_4bit", "--dataset", data, "--dtype", "float32",
                  "--device", "cpu", "--per_device_eval_batch_size", 4, "--dump_logits", tmp_path / "logits.safetensors"])
    worst = lora_parity.dumped_logits_error(load_file(str(tmp_path / "logits.safetensors")), reference, rows[:8])
    print(f"{case}: transformers-saved 4-bit checkpoint (16-bit experts) logits {worst:.3g} (relative)")
    assert worst <= LOGITS_BOUND


def test_checkpoint_with_4bit_expert_tensors_loads_as_stored(base, tmp_path):
    """The layout of the hub's *-bnb-4bit MoE repos (saved by transformers 4.x, whose experts were
    Linear4bit modules): every per-expert tensor stored as bitsandbytes' packed codes and quant
    state. Loaded as stored, it computes as --load_in_4bit on the 16-bit model."""
    case, root, rows, data = base
    bnb_model(root / "base").save_pretrained(tmp_path / "saved_4bit")
    checkpoint = tmp_path / "saved_4bit" / "model.safetensors"
    tensors = {name: t for name, t in load_file(str(checkpoint)).items() if not moe.EXPERT_TENSOR.search(name)}
    moe.write_expert_nf4(root / "base", tmp_path / "experts.safetensors")
    tensors.update(load_file(str(tmp_path / "experts.safetensors")))
    save_file(tensors, str(checkpoint), metadata={"format": "pt"})
    run_finetune(["eval", "--model_name", tmp_path / "saved_4bit", "--dataset", data, "--dtype", "float32",
                  "--device", "cpu", "--per_device_eval_batch_size", 4, "--dump_logits", tmp_path / "logits.safetensors"])
    ours = load_file(str(tmp_path / "logits.safetensors"))
    worst = lora_parity.dumped_logits_error(ours, bnb_model(root / "experts_dequantized"), rows[:8])
    print(f"{case}: checkpoint with 4-bit expert tensors, logits vs bnb-dequantized experts {worst:.3g} (relative)")
    assert worst <= LOGITS_BOUND


@pytest.fixture(scope="module", params=["attention", "experts"])
def trained(request, base):
    case, root, rows, data = base
    targets = request.param
    adapter = moe.make_init_adapter(root / "base", root / f"init_{targets}", experts=targets == "experts")
    out = root / f"ours_{targets}"
    run_finetune(finetune_args(root / "base", adapter, data, out) +
                 ["--load_in_4bit", "--save_model", "--save_method", "merged_16bit",
                  "--save_path", root / f"merged_{targets}"])
    return case, targets, root, adapter, rows, out


def test_qlora_steps_match_peft_with_bitsandbytes(trained):
    case, targets, root, adapter, rows, out = trained
    ours, saved, _ = lora_parity.steps_match_peft(
        f"{case} ({targets}), QLoRA vs PEFT+bitsandbytes (bnb-dequantized experts)", root / "experts_dequantized",
        adapter, rows, out, require_moved=True, quantization_config=bnb_config())
    assert (targets == "experts") == any(".experts." in name for name in saved)
    assert ours[-1] < ours[0]


def test_merged_16bit_from_4bit_experts_equals_merge_and_unload(trained):
    """merged_16bit from a 4-bit MoE base: every projection and expert tensor dequantized (as
    bitsandbytes' dequantize_4bit), the adapters folded in fp32; transformers loads it and its
    logits are PEFT's merge_and_unload() on the model holding those dequantized weights."""
    case, targets, root, adapter, rows, out = trained
    merged = moe.load_reference_model(root / f"merged_{targets}", dtype=torch.float32).eval()
    dequantized = moe.load_reference_model(root / "all_dequantized", dtype=torch.float32).eval()
    reference = peft.PeftModel.from_pretrained(moe.load_reference_model(root / "all_dequantized",
                                                                        dtype=torch.float32), out).merge_and_unload()
    saved = load_file(str(root / f"merged_{targets}" / "model.safetensors"))
    dequantized_tensors = load_file(str(root / "all_dequantized" / "model.safetensors"))
    assert set(saved) == set(dequantized_tensors)  # per-expert tensors, as the checkpoint stores them
    untouched = [n for n in saved if moe.EXPERT_TENSOR.search(n) and torch.equal(saved[n], dequantized_tensors[n])]
    if targets == "experts":
        assert not untouched, f"expert tensors without their adapter: {untouched[:3]}"
    else:  # no expert adapter: the export is the dequantized experts themselves
        assert len(untouched) == sum(1 for n in saved if moe.EXPERT_TENSOR.search(n))
    worst = lora_parity.logits_error(merged, reference.eval(), rows[:4])
    for row in rows[:4]:
        assert lora_parity.logits_error(merged, dequantized, [row]) > 1e-4  # the adapter changed the model
    print(f"{case} ({targets}): merged_16bit of the 4-bit run vs merge_and_unload {worst:.3g} (relative)")
    assert worst <= LOGITS_BOUND


def test_merged_4bit_keeps_experts_16bit_and_transformers_loads_it(trained, tmp_path):
    """merged_4bit from a 4-bit MoE base: the projections merged and re-quantized (Linear4bit in
    transformers), the experts written 16-bit (dequantized, adapters folded in: the merged_16bit
    export's values), as transformers 5 holds a bitsandbytes model's experts; transformers loads it
    and `finetune eval` of it gives its logits."""
    case, targets, root, adapter, rows, out = trained
    export = tmp_path / "merged4"
    run_finetune(["export", "--model_name", root / "base", "--adapter", out, "--load_in_4bit", "--dtype", "float32",
                  "--device", "cpu", "--save_method", "merged_4bit", "--save_path", export])
    saved = load_file(str(export / "model.safetensors"))
    merged16 = load_file(str(root / f"merged_{targets}" / "model.safetensors"))
    experts = [name for name in saved if moe.EXPERT_TENSOR.search(name)]
    assert experts and all(torch.equal(saved[name], merged16[name]) for name in experts)
    assert any(name.endswith("q_proj.weight.absmax") for name in saved)
    loaded = moe.load_reference_model(export, dtype=torch.float32, device_map="cpu").eval()
    assert type(loaded.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    data = tmp_path / "rows.jsonl"
    tiny_models.write_jsonl(data, rows[:4])
    run_finetune(["eval", "--model_name", export, "--dataset", data, "--dtype", "float32", "--device", "cpu",
                  "--per_device_eval_batch_size", 4, "--dump_logits", tmp_path / "logits.safetensors"])
    worst = lora_parity.dumped_logits_error(load_file(str(tmp_path / "logits.safetensors")), loaded, rows[:4])
    print(f"{case} ({targets}): merged_4bit export, finetune vs transformers logits {worst:.3g} (relative)")
    assert worst <= LOGITS_BOUND
