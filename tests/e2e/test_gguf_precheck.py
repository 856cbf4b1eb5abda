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


def on_disk_listing(stderr):
    """The `on disk:` part of a failed final save's error: {directory: [names]}."""
    line = next(line for line in stderr.splitlines() if "final save failed" in line)
    listing = line.split("; on disk: ", 1)[1]
    found = {}
    for part in listing.split("; ")[:2]:
        directory, _, names = part.rpartition(": ")
        if directory:
            found[directory] = [] if names == "nothing" else names.split(", ")
    return line, found


def test_an_error_after_training_lists_exactly_what_is_on_disk(setup, tmp_path):
    """What the precheck cannot foresee still fails after training: here the GGUF file's path is
    taken by a directory. The error names the cause and lists what is on disk, both directories as
    the file system has them (the adapter and run files in --output_dir, the merged model in
    --save_path), and says no checkpoint was written."""
    root, bare, train = setup
    model = tmp_path / "qwen2"
    gguf_models.make_gguf_model("qwen2", model, TOKENIZERS)
    extra = ["--save_method", "merged_16bit", "--save_gguf", "--quantization", "q8_0"]
    probe = tmp_path / "probe"
    run_finetune(train_args(model, train, probe, extra))
    gguf_name = next(p.name for p in (probe / "model").iterdir() if p.name.endswith(".gguf"))
    out = tmp_path / "out"
    (out / "model" / gguf_name).mkdir(parents=True)  # the GGUF cannot be renamed into place
    (out / "model" / gguf_name / "in_the_way").write_text("x")
    proc = run_finetune(train_args(model, train, out, extra), check=False)
    assert proc.returncode == 1, proc.stderr
    line, listed = on_disk_listing(proc.stderr)
    assert gguf_name in line and "no checkpoint was written (--save_steps)" in line, line
    run_files = sorted(p.name for p in out.iterdir() if p.name not in ("model", ".finetune.lock"))
    assert listed[str(out)] == run_files, line
    assert {"adapter_model.safetensors", "adapter_config.json", "metrics.jsonl"} <= set(run_files)
    assert listed[str(out / "model")] == sorted(p.name for p in (out / "model").iterdir()), line
    assert {"model.safetensors", "config.json", gguf_name} <= set(listed[str(out / "model")]), line
    steps = [json.loads(line).get("step") for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert 2 in steps, steps  # the last step trained before the save failed
