"""`finetune export --save_method gguf` for Qwen3-MoE (llama.cpp's qwen3moe) and Mixtral (llama.cpp's
llama with experts) against llama.cpp's converter, quantizer and runtime.

The models (gguf_moe_models.py) are saved by transformers 5.17's save_pretrained, which writes one
tensor per expert and projection (Qwen3-MoE mlp.experts.E.gate_proj; Mixtral
block_sparse_moe.experts.E.w1): the layout convert_hf_to_gguf.py reads, stacking each layer's
experts itself. finetune reads the same directory into its fused stacks (mlp.experts.gate_up_proj)
and writes the GGUF from those.

(a) convert_hf_to_gguf.py (Qwen3MoeModel; LlamaModel for Mixtral) on the same model directory
    writes the same file: every KV pair equal and in the same order (expert_count,
    expert_used_count, qwen3moe's expert_feed_forward_length; general.name and general.size_label
    aside, as in test_gguf.py), the same tensors in the same order (each layer's experts where the
    converter stacks them) with identical types (ffn_gate_inp F32), shapes and bytes, for f32, f16
    and q8_0.
(b) llama.cpp (cyllama) loads each file; its logits match transformers' within test_gguf.py's
    per-type bounds, and its greedy tokens agree wherever the top-2 margin decides.
(c) the mixes (q4_0 ... q5_k_m) equal llama.cpp's quantizer run on our F16 file, byte for byte,
    with its MoE rules: 8 experts put attn_v and attn_k in Q8_0 and Q4_K_M's attn_output in
    Q5_K; ffn_down_exps of the layers use_more_bits picks get Q6_K in the _K_M mixes; the router
    stays F32.
(d) after LoRA training, the GGUF written with --save_gguf is the converter's file of the merged
    directory written beside it.
(e) MoE configs llama.cpp would run differently (dense layers, unnormalised top-k weights, a
    sliding window) are refused with the reason, and before training when a run asks for a GGUF.
"""
import json
import os

import numpy as np
import pytest
import torch

from conftest import run_finetune
import gguf_moe_models
import gguf_reference
import llama_cpp_reference
import make_moe_fixtures
import tiny_models
from test_gguf import LOGIT_BOUNDS, TOKENS, assert_same_gguf, export_gguf
from test_gguf_families import assert_greedy_agrees_where_decided, key_order

TOKENIZERS = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "tokenizer")
CASES = ["qwen3moe", "mixtral8"]
QUANT_CASES = ["qwen3moe", "mixtral8", "wide_qwen3moe", "wide_mixtral8"]
QUANT_LABELS = ["Q4_0", "Q5_0", "Q6_K", "Q4_K_M", "Q5_K_M"]
EXPECTED_ARCH = {"qwen3moe": "qwen3moe", "mixtral8": "llama"}


def labelled(files):
    return {os.path.basename(f).split(".")[-2]: f for f in files}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """case -> (model dir, transformers model, pre-tokenizer, {TYPE: our gguf path})."""
    out = {}
    for case in CASES:
        root = tmp_path_factory.mktemp(case)
        model_dir = root / case
        model, pre = gguf_moe_models.make_moe_gguf_model(case, model_dir, TOKENIZERS)
        out[case] = (model_dir, model, pre, labelled(export_gguf(model_dir, root / "gguf", "f32,f16,q8_0")))
    return out


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0"])
@pytest.mark.parametrize("case", CASES)
def test_matches_llama_cpp_converter(exported, tmp_path, case, qtype):
    model_dir, model, pre, files = exported[case]
    reference = tmp_path / "reference.gguf"
    gguf_reference.run_converter(model_dir, pre, qtype.lower(), reference)
    fields, tensors = assert_same_gguf(files[qtype], reference)
    assert key_order(files[qtype]) == key_order(reference)
    arch = EXPECTED_ARCH[case]
    assert fields["general.architecture"][1] == arch
    assert fields[f"{arch}.expert_count"][1] == (4 if case == "qwen3moe" else 8)
    assert fields[f"{arch}.expert_used_count"][1] == 2
    if case == "qwen3moe":
        assert fields["qwen3moe.expert_feed_forward_length"][1] == 32
    experts = model.config.num_experts if case == "qwen3moe" else model.config.num_local_experts
    width = model.config.moe_intermediate_size if case == "qwen3moe" else model.config.intermediate_size
    hidden = model.config.hidden_size
    assert tensors["blk.0.ffn_gate_inp.weight"][:2] == ("F32", (hidden, experts))
    for name, shape in (("gate", (hidden, width, experts)), ("up", (hidden, width, experts)),
                        ("down", (width, hidden, experts))):
        assert tensors[f"blk.0.ffn_{name}_exps.weight"][1] == shape


def relative_logits_error(got, expected):
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


@pytest.mark.parametrize("case", CASES)
def test_llama_cpp_logits_match_transformers(exported, case):
    _, model, _, files = exported[case]
    with torch.no_grad():
        expected = model(torch.tensor([TOKENS])).logits[0].numpy()
    for qtype, path in sorted(files.items()):
        got = llama_cpp_reference.llama_cpp_logits(path, TOKENS)
        assert got.shape == expected.shape
        rel = relative_logits_error(got, expected)
        print(f"{case} {qtype}: relative logits error {rel:.3e}")
        assert rel <= LOGIT_BOUNDS[qtype], f"{case} {qtype}: relative logits error {rel:.3e}"
        assert_greedy_agrees_where_decided(got, expected, f"{case} {qtype}")


@pytest.fixture(scope="module")
def quant_exported(tmp_path_factory):
    """case -> (transformers model, {label: our gguf path})."""
    out = {}
    for case in QUANT_CASES:
        root = tmp_path_factory.mktemp(case + "_quant")
        model, _ = gguf_moe_models.make_moe_gguf_model(case, root / case, TOKENIZERS)
        files = export_gguf(root / case, root / "gguf", "f16,q4_0,q5_0,q6_k,q4_k_m,q5_k_m")
        out[case] = (model, labelled(files))
    return out


@pytest.mark.parametrize("case", QUANT_CASES)
@pytest.mark.parametrize("label", QUANT_LABELS)
def test_quantized_matches_llama_quantize(quant_exported, tmp_path, case, label):
    _, files = quant_exported[case]
    reference = tmp_path / "reference.gguf"
    llama_cpp_reference.llama_quantize(files["F16"], reference, label)
    _, tensors = assert_same_gguf(files[label], reference)
    with open(files[label], "rb") as ours, open(reference, "rb") as ref:
        assert ours.read() == ref.read()
    types = {name: qtype for name, (qtype, *_) in tensors.items()}
    print(f"{case} {label}: tensor types {sorted(set(types.values()))}")
    assert types["blk.0.ffn_gate_inp.weight"] == "F32"
    if case.endswith("mixtral8"):  # llama.cpp's 8-expert rules
        assert types["blk.1.attn_v.weight"] == types["blk.1.attn_k.weight"] == "Q8_0"
    if case == "wide_mixtral8" and label == "Q4_K_M":
        assert types["blk.1.attn_output.weight"] == "Q5_K"
    if case.startswith("wide") and label.endswith("_K_M"):
        # use_more_bits(i, 3) picks layer 2 only (i < 3 / 8 = 0 never; i >= 7 * 3 / 8 = 2; (i - 0) % 3 == 2)
        assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in range(3)] == [label[:4], label[:4], "Q6_K"]


# Relative logits error of llama.cpp on the quantized MoE files vs transformers (fp32), about 2x the
# largest measured on the four models (Q4_0 0.44-0.73, Q5_0 0.20-0.56, Q6_K 0.09-0.30, Q4_K_M
# 0.21-0.43, Q5_K_M 0.20-0.54), above test_gguf.py's dense QUANT_LOGIT_BOUNDS: the errors are not
# monotone in the bits (Q6_K 0.30 vs Q5_K_M 0.21 on qwen3moe), as when a changed hidden state moves
# some token's top-k choice of experts. Greedy tokens are printed, not asserted; the exactness check
# is the byte comparison with llama.cpp's quantizer above.
MOE_QUANT_LOGIT_BOUNDS = {"Q4_0": 1.5, "Q5_0": 1.2, "Q6_K": 0.6, "Q4_K_M": 0.9, "Q5_K_M": 1.1}


@pytest.mark.parametrize("case", QUANT_CASES)
def test_llama_cpp_runs_quantized_files(quant_exported, case):
    model, files = quant_exported[case]
    with torch.no_grad():
        expected = model(torch.tensor([TOKENS])).logits[0].numpy()
    for label in QUANT_LABELS:
        got = llama_cpp_reference.llama_cpp_logits(files[label], TOKENS)
        rel = relative_logits_error(got, expected)
        agree = int((got.argmax(-1) == expected.argmax(-1)).sum())
        print(f"{case} {label}: relative logits error {rel:.3e}, greedy agreement {agree}/{len(TOKENS)}")
        assert rel <= MOE_QUANT_LOGIT_BOUNDS[label], f"{case} {label}: relative logits error {rel:.3e}"


@pytest.mark.parametrize("experts", [False, True], ids=["attention", "attention_and_experts"])
@pytest.mark.parametrize("case", CASES)
def test_trained_model_gguf_is_the_converters_of_its_merged_export(exported, tmp_path, case, experts):
    """LoRA on the attention projections (and the expert stacks), 3 steps; --save_method merged_16bit
    --save_gguf: the GGUF equals the converter's file of the merged directory written beside it, and
    holds the adapters' updates."""
    model_dir, _, pre, _ = exported[case]
    adapter = make_moe_fixtures.make_init_adapter(model_dir, tmp_path / "init", experts=experts)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(8, seed=3))
    merged = tmp_path / "merged"
    run_finetune(["train", "--model_name", model_dir, "--dataset", data, "--init_adapter", adapter,
                  "--output_dir", tmp_path / "out", "--max_steps", 3, "--learning_rate", 5e-3,
                  "--dtype", "float32", "--device", "cpu", "--save_model", "--save_method", "merged_16bit",
                  "--save_gguf", "--quantization", "f16", "--save_path", merged])
    ours = merged / f"{case}.F16.gguf"
    reference = tmp_path / "reference.gguf"
    gguf_reference.run_converter(merged, pre, "f16", reference)
    assert_same_gguf(ours, reference)
    base = tmp_path / "base.gguf"
    gguf_reference.run_converter(model_dir, pre, "f16", base)
    _, trained, _ = gguf_reference.read_gguf(ours)
    _, untouched, _ = gguf_reference.read_gguf(base)
    assert trained["blk.0.attn_q.weight"][2] != untouched["blk.0.attn_q.weight"][2]  # the adapter is in it
    for expert_tensor in ("blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"):
        changed = trained[expert_tensor][2] != untouched[expert_tensor][2]
        assert changed == experts, f"{expert_tensor}: changed {changed}, expert adapters {experts}"


# case -> (config overrides, the refusal's words)
REFUSED = {
    "qwen3moe_mlp_only_layers": ("qwen3moe", dict(mlp_only_layers=[1]),
                                 "layer 1 is a dense MLP layer (mlp_only_layers / decoder_sparse_step), but "
                                 "llama.cpp's qwen3moe runs experts in every layer"),
    "qwen3moe_sparse_step_2": ("qwen3moe", dict(decoder_sparse_step=2), "layer 0 is a dense MLP layer"),
    "qwen3moe_unnormalised": ("qwen3moe", dict(norm_topk_prob=False),
                              "norm_topk_prob is false, but llama.cpp's qwen3moe always renormalises the top-2"),
    "mixtral_window": ("mixtral8", dict(sliding_window=5),
                       "sliding_window 5 is set, but llama.cpp's llama has no sliding-window attention"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_configs_llama_cpp_would_run_differently_are_refused(tmp_path, name):
    case, overrides, message = REFUSED[name]
    model_dir = tmp_path / name
    gguf_moe_models.make_moe_gguf_model(case, model_dir, TOKENIZERS, **overrides)
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--save_path", tmp_path / "o",
                         "--device", "cpu"], check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not list((tmp_path / "o").glob("*.gguf"))


def test_refused_before_training(tmp_path):
    case, overrides, message = REFUSED["qwen3moe_mlp_only_layers"]
    model_dir = tmp_path / "model"
    gguf_moe_models.make_moe_gguf_model(case, model_dir, TOKENIZERS, **overrides)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(8, seed=1))
    out = tmp_path / "out"
    proc = run_finetune(["train", "--model_name", model_dir, "--dataset", data, "--output_dir", out, "--max_steps", 2,
                         "--dtype", "float32", "--device", "cpu", "--save_model", "--save_method", "gguf",
                         "--save_path", out / "model"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--save_method gguf (checked before training)" in proc.stderr and message in proc.stderr
    assert not (out / "metrics.jsonl").exists()  # no step ran


def test_eight_expert_mix_needs_rows_of_32_before_training(tmp_path):
    """With 8 experts llama.cpp's quantizer writes attn_k / attn_v as Q8_0 in every mix, with no
    fallback for rows that are not a multiple of 32: refused before any weight is read."""
    model_dir = tmp_path / "model"
    gguf_moe_models.make_moe_gguf_model("mixtral8", model_dir, TOKENIZERS)
    config = json.loads((model_dir / "config.json").read_text())
    config["hidden_size"] = 80  # (checked before any weight is read)
    (model_dir / "config.json").write_text(json.dumps(config))
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(8, seed=1))
    out = tmp_path / "out"
    proc = run_finetune(["train", "--model_name", model_dir, "--dataset", data, "--output_dir", out, "--max_steps", 2,
                         "--dtype", "float32", "--device", "cpu", "--save_model", "--save_method", "gguf",
                         "--quantization", "q4_k_m", "--save_path", out / "model"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--quantization q4_k_m: the model has rows of 80 values, not a multiple of 32" in proc.stderr
    assert "writes them as Q8_0" in proc.stderr
    assert not (out / "metrics.jsonl").exists()
