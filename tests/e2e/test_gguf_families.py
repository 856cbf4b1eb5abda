"""`finetune export --save_method gguf` for Phi-3 and Gemma-2/3 against llama.cpp's converter and runtime.

(a) convert_hf_to_gguf.py (Phi3MiniModel, Gemma2Model, Gemma3Model) on the same model directory
    writes the same file: every KV pair equal and in the same order (general.name and
    general.size_label aside, as in test_gguf.py), the same tensors in the same order with
    identical types, shapes and bytes: Phi-3's fused attn_qkv / ffn_up and longrope factor tensors,
    Gemma's norms stored as 1 + w, soft-cap and sliding-window keys, the families' vocabularies
    (Phi-3's own sentencepiece list with its added tokens, Phi-4-mini's GPT-2 path, Gemma's
    sentencepiece without space prefix).
(b) llama.cpp (cyllama) loads each file; its logits match transformers' within test_gguf.py's
    per-type bounds and its greedy tokens agree; it tokenizes like transformers.
(c) the mixes (q4_0 ... q5_k_m) equal llama.cpp's quantizer run on our F16 file, byte for byte.
(d) configs llama.cpp would run differently (an untied Gemma-2, Gemma sliding layers off
    llama.cpp's fixed pattern, a query_pre_attn_scalar it ignores) are refused with the reason.
"""
import numpy as np
import pytest

from conftest import run_finetune
import gguf_family_models
import gguf_reference
import llama_cpp_reference
from test_gguf import (LOGIT_BOUNDS, NAME_KEYS, QUANT_LOGIT_BOUNDS, assert_same_gguf, export_gguf_files,
                       exported_cases, llama_cpp_logits_against)

CASES = list(gguf_family_models.CASES)
# test_gguf.py's LOGIT_BOUNDS, but Gemma's F32 and F16 files: llama.cpp's CPU GELU rounds its input
# and output to half (ggml-cpu/vec.h GGML_GELU_FP16, a lookup table), whatever the weights' type
# (measured with the converter's own F32 files: 8.4e-4 for the 3-layer Gemma-2, 3.1e-3 for the
# 6-layer Gemma-3; SiLU families 2.8-3.1e-4), so their bound is 6e-3.
GELU_FP16_BOUND = 6e-3


def logit_bound(case, qtype):
    return max(LOGIT_BOUNDS[qtype], GELU_FP16_BOUND) if case.startswith("gemma") else LOGIT_BOUNDS[qtype]
TEXTS = ["Hello world, 12345 tokens\n\nand  spaces", "  leading spaces, tabs\tand ünïcödé 😀 привет",
         "<start_of_turn>user\nhi<end_of_turn>", "<|user|>\nwhat is 2+2?<|end|>\n<|assistant|>"]


def assert_greedy_agrees_where_decided(got, expected, what):
    """llama.cpp's argmax equals transformers' at every position whose top-2 margin exceeds twice
    the largest logit difference there (soft-capped logits are flat: a closer call may flip)."""
    top2 = np.sort(expected, axis=-1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > 2 * np.abs(got - expected).max(axis=-1)
    if what.endswith("F32"):  # the closest comparison decides most positions: the check is not vacuous
        assert decided.sum() >= len(decided) // 2, f"{what}: only {decided.sum()} positions decided"
    assert (got.argmax(-1) == expected.argmax(-1))[decided].all(), f"{what}: greedy tokens differ"


def key_order(path):
    fields, _, _ = gguf_reference.read_gguf(path)
    return [key for key in fields if key not in NAME_KEYS]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """case -> (model dir, transformers model, {TYPE: our gguf path})."""
    return exported_cases(tmp_path_factory, dict.fromkeys(CASES, "f32,f16,q8_0"), gguf_family_models.make_family_model)


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0"])
@pytest.mark.parametrize("case", CASES)
def test_matches_llama_cpp_converter(exported, tmp_path, case, qtype):
    model_dir, _, files = exported[case]
    reference = tmp_path / "reference.gguf"
    gguf_reference.run_converter(model_dir, gguf_family_models.PRE_TOKENIZER.get(case, "unused"), qtype.lower(),
                                 reference)
    fields, tensors = assert_same_gguf(files[qtype], reference)
    assert key_order(files[qtype]) == key_order(reference)
    arch = fields["general.architecture"][1]
    assert arch == {"phi": "phi3", "gem": "gemma3" if "gemma3" in case else "gemma2"}[case[:3]]
    if case == "phi3_longrope":
        assert tensors["rope_factors_long.weight"][0] == "F32" and "blk.0.attn_qkv.weight" in tensors
        assert fields["tokenizer.ggml.model"][1] == "llama" and "<|assistant|>" in fields["tokenizer.ggml.tokens"][1]
    if case == "phi4_mini":
        assert fields["tokenizer.ggml.model"][1] == "gpt2" and fields["phi3.rope.dimension_count"][1] == 12
    if case.startswith("gemma"):
        assert fields["tokenizer.ggml.add_space_prefix"][1] is False
        assert ("output.weight" in tensors) == (case == "gemma3_untied_softcap")
    if case == "gemma2":
        assert fields["gemma2.attn_logit_softcapping"][1] == pytest.approx(2.0)


@pytest.mark.parametrize("case", CASES)
def test_llama_cpp_logits_match_transformers(exported, case):
    _, model, files = exported[case]
    for qtype, path in sorted(files.items()):
        got, expected, rel = llama_cpp_logits_against(model, path)
        print(f"{case} {qtype}: relative logits error {rel:.3e}")
        assert rel <= logit_bound(case, qtype), f"{case} {qtype}: relative logits error {rel:.3e}"
        assert_greedy_agrees_where_decided(got, expected, f"{case} {qtype}")


@pytest.mark.parametrize("case", ["phi3_longrope", "phi4_mini", "gemma2"])
def test_llama_cpp_tokenizes_like_transformers(exported, case):
    """Byte-level (Phi-4-mini): transformers' ids. Sentencepiece (Phi-3, Gemma): the ids of the
    tokenizer.model the converter reads (sentencepiece itself, with the BOS), and transformers' ids
    for text that does not start with a space: transformers' fast conversion (Metaspace, prepend
    "first") puts no dummy "▁" before a leading space, sentencepiece and llama.cpp do."""
    import sentencepiece
    import transformers
    model_dir, _, files = exported[case]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    spm = None
    if (model_dir / "tokenizer.model").exists():
        spm = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "tokenizer.model"))
    stripping = [t.content for t in tokenizer.added_tokens_decoder.values() if t.lstrip or t.rstrip]
    for text in TEXTS:
        if any(token in text for token in stripping):
            continue
        ours = llama_cpp_reference.llama_cpp_tokenize(files["F16"], text)
        if spm is not None:
            specials = {t: i for i, t in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
                        if t in text and t.startswith("<") and t.endswith(">")}
            if not specials:  # sentencepiece alone knows no added tokens
                assert ours == [tokenizer.bos_token_id] + spm.encode(text), text
        if spm is None or not text[:1].isspace():
            assert ours == tokenizer(text)["input_ids"], text


QUANT_LABELS = ["Q4_0", "Q5_0", "Q6_K", "Q4_K_M", "Q5_K_M"]
# Gemma's quantized files: test_gguf.py's QUANT_LOGIT_BOUNDS doubled. Gemma's four norms per layer
# and GeGLU carry a weight's rounding further than Llama's (measured on the tiny Gemma-2 / Gemma-3:
# Q4_0 0.31 / 0.42, Q5_0 0.15 / 0.25, Q6_K 0.029 / 0.037, Q4_K_M 0.15 / 0.24, Q5_K_M 0.13 / 0.17);
# the files' bytes are llama-quantize's (test_quantized_matches_llama_quantize).
GEMMA_QUANT_LOGIT_BOUNDS = {label: 2 * bound for label, bound in QUANT_LOGIT_BOUNDS.items()}


@pytest.fixture(scope="module")
def quant_exported(exported, tmp_path_factory):
    out = {}
    for case in ("phi3_longrope", "gemma2", "gemma3"):
        model_dir, model, _ = exported[case]
        out[case] = (model, export_gguf_files(model_dir, tmp_path_factory.mktemp(case + "_quant"),
                                              "f16,q4_0,q5_0,q6_k,q4_k_m,q5_k_m"))
    return out


@pytest.mark.parametrize("case", ["phi3_longrope", "gemma2", "gemma3"])
@pytest.mark.parametrize("label", QUANT_LABELS)
def test_quantized_matches_llama_quantize(quant_exported, tmp_path, case, label):
    _, files = quant_exported[case]
    reference = tmp_path / "reference.gguf"
    llama_cpp_reference.llama_quantize(files["F16"], reference, label)
    with open(files[label], "rb") as ours, open(reference, "rb") as ref:
        assert ours.read() == ref.read()


@pytest.mark.parametrize("case", ["phi3_longrope", "gemma2", "gemma3"])
def test_llama_cpp_runs_quantized_files(quant_exported, case):
    model, files = quant_exported[case]
    for label in QUANT_LABELS:
        _, _, rel = llama_cpp_logits_against(model, files[label])
        print(f"{case} {label}: relative logits error {rel:.3e}")
        bounds = GEMMA_QUANT_LOGIT_BOUNDS if case.startswith("gemma") else QUANT_LOGIT_BOUNDS
        assert rel <= bounds[label], f"{case} {label}: relative logits error {rel:.3e}"


@pytest.mark.parametrize("case,message", [
    ("gemma2_mha_untied", "llama.cpp's gemma2 has no output tensor"),
    ("gemma3_mqa_untied", "query_pre_attn_scalar 256.000000 differs from the 12.000000"),
    ("gemma2", "query_pre_attn_scalar 24.000000 differs from the 20.000000"),
    ("gemma3_pattern_2", "layer 1 is a full-attention layer, but llama.cpp's gemma3 fixes the pattern"),
])
def test_configs_llama_cpp_would_run_differently_are_refused(tmp_path, case, message):
    model_dir = tmp_path / case
    if case == "gemma3_pattern_2":  # every other layer full, llama.cpp's every 6th
        config_class, kwargs = gguf_family_models._gemma3(num_hidden_layers=2, sliding_window_pattern=2)
        gguf_family_models.make_model(config_class, kwargs, "gemma_spm", model_dir, 0)
    else:
        gguf_family_models.make_tiny_models_case(case, model_dir)
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))
