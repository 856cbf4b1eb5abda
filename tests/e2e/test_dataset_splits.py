"""--dataset directories are split as HF datasets splits them: training reads the train split only,
--eval_dataset names a split (or a path), --dataset_split picks another, and a wrong split name is a
usage error listing the splits there are. Tiny model, pre-tokenized rows, about a second a run."""
import json
import re

import pytest

from test_cli_errors import CPU, expect_failure, expect_success, last_json_line
import tiny_models

TRAIN_ROWS, TEST_ROWS = 6, 3
ROWS_KEPT = re.compile(r"data .*: (\d+) rows kept of (\d+) .*?(?:\| eval rows (\d+))?$", re.M)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset_splits")
    tiny_models.make_model("llama", root / "llama")
    data = root / "data"
    data.mkdir()
    tiny_models.write_jsonl(data / "train.jsonl", tiny_models.make_tokenized_rows(TRAIN_ROWS, seed=1))
    tiny_models.write_jsonl(data / "test.jsonl", tiny_models.make_tokenized_rows(TEST_ROWS, seed=2))
    return {"root": root, "model": root / "llama", "data": data}


def train_args(assets, out, *extra):
    return ["--model_name", assets["model"], "--dataset", assets["data"], "--output_dir", out, "--max_steps", 1,
            "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1, *extra] + CPU


def rows(stderr):
    """(rows kept, rows read, eval rows or None) from the banner."""
    match = ROWS_KEPT.search(stderr)
    assert match, f"no data line in the banner:\n{stderr}"
    kept, read, evaluated = match.groups()
    return int(kept), int(read), None if evaluated is None else int(evaluated)


def test_training_reads_the_train_split_only(assets, tmp_path):
    proc = expect_success(train_args(assets, tmp_path / "out"))
    assert rows(proc.stderr) == (TRAIN_ROWS, TRAIN_ROWS, None), proc.stderr  # before splits: 6 + 3 rows
    assert f"{assets['data']}: split train (1 file; splits: train, test)" in proc.stderr


def test_eval_dataset_names_a_split(assets, tmp_path):
    proc = expect_success(train_args(assets, tmp_path / "out", "--eval_dataset", "test"))
    assert rows(proc.stderr) == (TRAIN_ROWS, TRAIN_ROWS, TEST_ROWS), proc.stderr
    assert f"{assets['data']}: split test (1 file; splits: train, test)" in proc.stderr
    assert "eval_loss" in last_json_line(proc.stdout)


def test_dataset_split_picks_another_split(assets, tmp_path):
    proc = expect_success(train_args(assets, tmp_path / "out", "--dataset_split", "test"))
    assert rows(proc.stderr)[:2] == (TEST_ROWS, TEST_ROWS), proc.stderr


def test_eval_action_reads_the_named_split(assets):
    base = ["eval", "--model_name", assets["model"], "--dataset", assets["data"]] + CPU
    assert last_json_line(expect_success(base).stdout)["rows"] == TRAIN_ROWS
    assert last_json_line(expect_success(base + ["--dataset_split", "test"]).stdout)["rows"] == TEST_ROWS
    assert last_json_line(expect_success(base + ["--eval_dataset", "test"]).stdout)["rows"] == TEST_ROWS
    # A directory as --eval_dataset: its test split (there is no validation split).
    assert last_json_line(expect_success(base + ["--eval_dataset", assets["data"]]).stdout)["rows"] == TEST_ROWS


def test_unknown_split_is_a_usage_error_listing_the_splits(assets, tmp_path):
    proc = expect_failure(train_args(assets, tmp_path / "out", "--dataset_split", "validation"), 2,
                          "--dataset_split", '"validation"', "its splits: train, test")
    assert "parameters" not in proc.stderr, "the split must be checked before the model loads"
    expect_failure(train_args(assets, tmp_path / "out", "--eval_dataset", "validation"), 2,
                   "--eval_dataset validation", "no such file or directory", "its splits: train, test")
    assert not (tmp_path / "out").exists()


def test_an_existing_path_wins_over_a_split_name(assets, tmp_path):
    (tmp_path / "test").mkdir()
    tiny_models.write_jsonl(tmp_path / "test" / "rows.jsonl", tiny_models.make_tokenized_rows(2, seed=3))
    proc = expect_success(train_args(assets, tmp_path / "out", "--eval_dataset", "test"), cwd=tmp_path)
    assert rows(proc.stderr)[2] == 2, proc.stderr
    assert "an existing path wins" in proc.stderr
