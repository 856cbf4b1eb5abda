"""Dataset shapes through the real binary: raw text files, several datasets with weights, a chat
template from a file (named in the banner), kwargs reaching the template, and the report of rows
that truncation leaves with nothing to train on."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_finetune

TIMEOUT_S = 120
CPU = ["--device", "cpu", "--dtype", "float32", "--max_steps", 1, "--per_device_train_batch_size", 2,
       "--gradient_accumulation_steps", 1, "--save_model", "false"]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    made = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_assets.py"), str(root / "demo")],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert made.returncode == 0, made.stderr
    with open(root / "demo" / "train.jsonl", encoding="utf-8") as f:
        alpaca = [json.loads(line) for line in f][:12]
    write_jsonl(root / "a.jsonl", alpaca[:8])
    write_jsonl(root / "b.jsonl", alpaca[8:])
    write_jsonl(root / "chat.jsonl", [{"messages": [{"role": "user", "content": r["instruction"] + " " + r["input"]},
                                                    {"role": "assistant", "content": r["output"]}]} for r in alpaca])
    (root / "book.txt").write_text(" ".join(r["instruction"] + " " + r["output"] for r in alpaca * 4), encoding="utf-8")
    return {"root": root, "model": root / "demo" / "model", "alpaca": alpaca}


def banner_rows(stderr):
    match = re.search(r"data .*?: ([\d,]+) rows kept of ([\d,]+)", stderr)
    assert match, stderr
    return int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))


def out(assets, name):
    return ["--output_dir", assets["root"] / ("out-" + name)]


def test_raw_text_file_trains_on_chunks(assets):
    proc = run_finetune(["--model_name", assets["model"], "--raw_text_file", assets["root"] / "book.txt",
                         "--chunk_size", 32, "--stride", 8] + CPU + out(assets, "raw"), timeout=TIMEOUT_S)
    match = re.search(r"raw text .*book.txt: (\d+) chunks of up to 32 tokens \(stride 8\)", proc.stderr)
    assert match and int(match.group(1)) > 3, proc.stderr
    assert banner_rows(proc.stderr)[0] == int(match.group(1))


def test_dataset_weights_repeat_and_leave_out(assets):
    data = f"{assets['root'] / 'a.jsonl'},{assets['root'] / 'b.jsonl'}"
    proc = run_finetune(["--model_name", assets["model"], "--dataset", data, "--dataset_weights", "0.5,2"] + CPU +
                        out(assets, "weights"), timeout=TIMEOUT_S)
    assert banner_rows(proc.stderr) == (4 + 2 * 4, 12)
    proc = run_finetune(["--model_name", assets["model"], "--dataset", data, "--dataset_weights", "1"] + CPU +
                        out(assets, "weights-bad"), check=False, timeout=TIMEOUT_S)
    assert proc.returncode == 2 and "--dataset_weights has 1 weights but --dataset names 2 datasets" in proc.stderr


def test_chat_template_file_and_kwargs_are_used_and_named(assets, tmp_path):
    template = tmp_path / "mine.jinja"
    template.write_text("{% for m in messages %}<|begin_of_text|>{{ m.role }}: {{ m.content }}{{ suffix }}\n"
                        "{% endfor %}", encoding="utf-8")
    base = ["--model_name", assets["model"], "--dataset", assets["root"] / "chat.jsonl",
            "--chat_template", template, "--train_on_completions", "false"] + CPU
    plain = run_finetune(base + out(assets, "tmpl"), timeout=TIMEOUT_S)
    assert f"chat template: file {template}" in plain.stderr, plain.stderr
    longer = run_finetune(base + ["--chat_template_kwargs", '{"suffix": " and a long tail of extra words"}'] +
                          out(assets, "tmpl-kwargs"), timeout=TIMEOUT_S)
    tokens = lambda stderr: int(re.search(r"([\d,]+) tokens, ", stderr).group(1).replace(",", ""))
    assert tokens(longer.stderr) > tokens(plain.stderr), "the kwarg must reach the template"
    bad = run_finetune(base[:-len(CPU)] + ["--chat_template", "no_such_template"] + CPU, check=False, timeout=TIMEOUT_S)
    assert bad.returncode == 2 and "neither a template name" in bad.stderr, bad.stderr


def test_no_chat_template_means_a_clear_error_for_conversations(assets):
    proc = run_finetune(["--model_name", assets["model"], "--dataset", assets["root"] / "chat.jsonl"] + CPU +
                        out(assets, "nochat"), check=False, timeout=TIMEOUT_S)
    assert proc.returncode == 1, proc.stderr
    assert "chat.jsonl:1: messages rows need a chat template" in proc.stderr, proc.stderr


def test_rows_truncated_away_are_reported_with_the_length_that_keeps_them(assets):
    proc = run_finetune(["--model_name", assets["model"], "--dataset", assets["root"] / "a.jsonl",
                         "--max_seq_length", 16] + CPU + out(assets, "trunc"), check=False, timeout=TIMEOUT_S)
    assert proc.returncode == 1, proc.stderr
    match = re.search(r"the training set is empty: no row has a trainable token \(8 rows lost every trainable token "
                      r"to truncation \(longest prompt (\d+) tokens; --max_seq_length (\d+) would keep them\)\)",
                      proc.stderr)
    assert match, proc.stderr
    keep = int(match.group(2))
    assert keep == int(match.group(1)) + 1
    ok = run_finetune(["--model_name", assets["model"], "--dataset", assets["root"] / "a.jsonl",
                       "--max_seq_length", keep] + CPU + out(assets, "trunc-ok"), timeout=TIMEOUT_S)
    assert banner_rows(ok.stderr)[0] >= 1
