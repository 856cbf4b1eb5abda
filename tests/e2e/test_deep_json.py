"""Deeply nested JSON (~120 KB of '[' or '{') in every JSON input the binary reads: an error naming
the file (exit 1, or 2 for --config), or a skipped row under --skip_bad_rows; never a crash.

Before parsing was depth-limited (util/json_parse.h, 128 levels), a --config file like this
segfaulted, and the other files were accepted, leaving later copies and dumps to recurse.
"""
import json
import shutil

import pytest

from test_cli_errors import CPU, ONE_STEP, eval_args, expect_failure, expect_success, write_lines
import tiny_models

LIMIT_MESSAGE = "nests deeper than 128 levels"


def nested(bracket, size=120_000):
    """~size bytes of nothing but nesting: [[[...]]] or {"a":{"a":...0...}}."""
    if bracket == "[":
        levels = size // 2
        return "[" * levels + "]" * levels
    levels = size // 6
    return '{"a":' * levels + "0" + "}" * levels


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep_json")
    tiny_models.make_model("llama", root / "llama")
    rows = tiny_models.make_tokenized_rows(6, seed=1)
    tiny_models.write_jsonl(root / "rows.jsonl", rows)
    return {"model": root / "llama", "rows": root / "rows.jsonl", "row_list": rows}


@pytest.mark.parametrize("bracket", ["[", "{"])
@pytest.mark.parametrize("where", ["whole_file", "unused_key"])
def test_deep_config_json(assets, tmp_path, bracket, where):
    model = tmp_path / "model"
    shutil.copytree(assets["model"], model)
    config = model / "config.json"
    if where == "whole_file":
        config.write_text(nested(bracket))
    else:
        text = config.read_text().rstrip().rstrip("}")
        config.write_text(text + ', "unused": ' + nested(bracket) + "}")
    expect_failure(eval_args(model, assets["rows"]), 1, config, LIMIT_MESSAGE)


@pytest.mark.parametrize("bracket", ["[", "{"])
def test_deep_dataset_row(assets, tmp_path, bracket):
    good = [json.dumps(r) for r in assets["row_list"]]
    deep_row = '{"input_ids": [1, 2], "meta": ' + nested(bracket) + "}"
    data = write_lines(tmp_path / "deep.jsonl", good[:2] + [deep_row] + good[2:])
    expect_failure(eval_args(assets["model"], data), 1, f"{data}:3", LIMIT_MESSAGE)

    proc = expect_success(eval_args(assets["model"], data) + ["--skip_bad_rows"])
    assert f"{data}:3" in proc.stderr and LIMIT_MESSAGE in proc.stderr  # the warning names the row
    proc = expect_success(["--model_name", assets["model"], "--dataset", data, "--skip_bad_rows", "true",
                           "--output_dir", tmp_path / "out"] + ONE_STEP)
    assert "1 malformed skipped" in proc.stderr
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("bracket", ["[", "{"])
def test_deep_json_dataset_file(assets, tmp_path, bracket):
    data = tmp_path / "deep.json"
    data.write_text("[" + json.dumps(assets["row_list"][0]) + ", " + nested(bracket) + "]")
    expect_failure(eval_args(assets["model"], data), 1, data, LIMIT_MESSAGE)


@pytest.mark.parametrize("bracket", ["[", "{"])
@pytest.mark.parametrize("where", ["whole_file", "option_value"])
def test_deep_config_option_file(assets, tmp_path, bracket, where):
    config = tmp_path / "run.json"
    config.write_text(nested(bracket) if where == "whole_file"
                      else '{"r": 4, "target_modules": ' + nested(bracket) + "}")
    expect_failure(["--config", config, "--model_name", assets["model"], "--dataset", assets["rows"]] + CPU, 2,
                   "--config", config, LIMIT_MESSAGE)


@pytest.mark.parametrize("bracket", ["[", "{"])
@pytest.mark.parametrize("where", ["whole_file", "unused_key"])
def test_deep_adapter_config(assets, tmp_path, bracket, where):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}
    text = nested(bracket) if where == "whole_file" else json.dumps(config)[:-1] + ', "unused": ' + nested(bracket) + "}"
    (adapter / "adapter_config.json").write_text(text)
    expect_failure(eval_args(assets["model"], assets["rows"]) + ["--init_adapter", adapter], 1,
                   adapter / "adapter_config.json", LIMIT_MESSAGE)
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--init_adapter", adapter,
                    "--output_dir", tmp_path / "out"] + ONE_STEP, 1, adapter / "adapter_config.json", LIMIT_MESSAGE)
