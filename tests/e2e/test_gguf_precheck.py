"""A GGUF export asked of a training run (--save_model with --save_method gguf or --save_gguf)
that cannot succeed is refused before training starts (exit 2, nothing trained), naming what
cannot be exported: a vocabulary llama.cpp's converter has no GGUF form for, or a --quantization
type whose blocks do not divide the model's rows."""
import json
import os
import shutil

import pytest

from conftest import run_finetune
import gguf_models
import tiny_models

TOKENIZERS = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "tokenizer")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ggufprecheck")
    bare = root / "bare"  # no tokenizer files: no vocabulary to export
    tiny_models.make_model("qwen2", bare)
    train = root / "train.jsonl"
    tiny_models.write_jsonl(train, tiny_models.make_tokenized_rows(8, seed=1))
    return root, bare, train


def train_args(model, train, out, extra):
    return ["--model_name", model, "--dataset", train, "--output_dir", out, "--max_steps", 2, "--dtype", "float32",
            "--device", "cpu", "--save_model", "--save_path", out / "model"] + extra


@pytest.mark.parametrize("extra,option", [(["--save_method", "gguf"], "--save_method gguf"),
                                          (["--save_gguf", "--quantization", "f16", "q8_0"], "--save_gguf")])
def test_a_vocabulary_without_a_gguf_form_is_refused_before_training(setup, extra, option):
    root, bare, train = setup
    out = root / ("vocab_" + option.split()[-1].lstrip("-"))
    proc = run_finetune(train_args(bare, train, out, extra), check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"{option} (checked before training)" in proc.stderr
    assert not (out / "metrics.jsonl").exists()  # no step ran


def test_a_quantization_that_cannot_encode_the_rows_is_refused_before_training(setup):
    root, bare, train = setup
    model = root / "rows100"
    gguf_models.make_gguf_model("qwen2", model, TOKENIZERS)
    config = json.load(open(model / "config.json"))
    config["intermediate_size"] = 100  # down_proj rows of 100 values: no Q4_0 blocks of 32 (checked before any weight is read)
    json.dump(config, open(model / "config.json", "w"))
    out = root / "q4_0"
    proc = run_finetune(train_args(model, train, out, ["--save_method", "gguf", "--quantization", "q4_0"]), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--quantization q4_0: the model has rows of 100 values, not a multiple of 32" in proc.stderr
    assert not (out / "metrics.jsonl").exists()
