"""The example option files in configs/ load with --config and train.

Each file names a real hub model and dataset and GPU settings; here every one runs a few steps on
the CPU with the model, dataset, device, dtype, step count, sequence length and output directory
overridden on the command line (a tiny random Llama and a few rows of the right shape, built once
for the module), and the values it keeps from the file are checked where the run shows them: the
banner on stderr (batch x accumulation, LoRA r/alpha, steps per epoch, trainable tokens),
adapter_config.json and metrics.jsonl. A config file without an entry in SCENARIOS fails
test_every_config_has_a_scenario, so a new example cannot go untested.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, last_json_line, run_finetune
from tiny_models import write_jsonl

CONFIG_DIR = os.path.join(ROOT, "configs")
TIMEOUT_S = 120  # each run takes about a second; a hang must fail, not stall the suite

# What every run overrides: the tiny assets, the CPU, and a short run. The constant schedule makes
# every step's lr the file's learning_rate, so metrics.jsonl shows it.
STEPS = 2
MAX_SEQ_LENGTH = 256
CPU_OVERRIDES = {"device": "cpu", "dtype": "float32", "max_steps": STEPS, "max_seq_length": MAX_SEQ_LENGTH,
                 "lr_scheduler_type": "constant"}

# config file -> the data shape it trains on, and overrides beyond CPU_OVERRIDES.
SCENARIOS = {
    "qwen3-8b-alpaca-2gpu.json": {"data": "alpaca"},
    "llama-3.2-1b-instruct-alpaca.json": {"data": "alpaca"},
    "llama-3.2-1b-instruct-chat.json": {"data": "chat"},
    "llama-3.2-1b-alpaca-packed.json": {"data": "alpaca"},
    # require_loss_decrease needs a loss that falls: enough steps for quarters of 2, a tiny model's lr.
    "smoke-test.json": {"data": "alpaca", "overrides": {"max_steps": 8, "learning_rate": 5e-3}},
}

ALPACA_ROWS = 32
# A Llama-3-style chat template: enough for --chat_template auto to pick llama3.
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

BATCH_LINE = re.compile(r"batch (\d+) per device x (\d+) accumulation x (\d+) ranks = \d+ \| "
                        r"(?:step planning \w+ \| )?(\d+) steps per epoch, "
                        r"(\d+) steps")
LORA_LINE = re.compile(r"LoRA r=(\d+) alpha=([0-9.e+-]+) ")
DATA_LINE = re.compile(r"data .*: ([\d,]+) rows kept of [\d,]+ \(\d+ without trainable tokens, \d+ malformed skipped, "
                       r"(\d+) truncated\), ([\d,]+) tokens, ([\d,]+) trainable")
MODEL_LINE = re.compile(r"finetune \| model .* parameters, (\w+) on (\w+)")


def config_path(name):
    return os.path.join(CONFIG_DIR, name)


def load_config(name):
    with open(config_path(name), encoding="utf-8") as f:
        return json.load(f)


def config_names():
    return sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith(".json"))


def as_args(options):
    args = []
    for key, value in options.items():
        args += [f"--{key}", str(value).lower() if isinstance(value, bool) else value]
    return args


def parse_banner(stderr):
    """The banner's numbers: batch, accumulation, ranks, steps per epoch, steps, LoRA, data, dtype."""
    found = {}
    for name, pattern in (("batch", BATCH_LINE), ("lora", LORA_LINE), ("data", DATA_LINE), ("model", MODEL_LINE)):
        match = pattern.search(stderr)
        assert match, f"no {name} line in the banner:\n{stderr}"
        found[name] = match.groups()
    number = lambda text: int(text.replace(",", ""))
    batch, accumulation, ranks, steps_per_epoch, steps = map(int, found["batch"])
    rows, truncated, tokens, trainable = map(number, found["data"])
    return {"batch": batch, "accumulation": accumulation, "ranks": ranks, "steps_per_epoch": steps_per_epoch,
            "steps": steps, "r": int(found["lora"][0]), "alpha": float(found["lora"][1]), "rows": rows,
            "truncated": truncated, "tokens": tokens, "trainable": trainable, "dtype": found["model"][0],
            "device": found["model"][1]}


def read_metrics(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def unpacked_steps_per_epoch(rows, batch, accumulation):
    return math.ceil(math.ceil(rows / batch) / accumulation)


@pytest.fixture(scope="module", autouse=True)
def clean_environment():
    """FINETUNE_<OPTION> variables of the caller would sit between the file and the command line."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("FINETUNE_") and key not in ("FINETUNE_BIN", "FINETUNE_FIXTURES"):
                patch.delenv(key)
        yield


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The demo's tiny Llama + BPE tokenizer, a copy of it with a Llama-3 chat template, and small datasets."""
    root = tmp_path_factory.mktemp("configs")
    made = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_assets.py"), str(root / "demo")],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert made.returncode == 0, f"make_demo_assets.py failed:\n{made.stdout}\n{made.stderr}"
    with open(root / "demo" / "train.jsonl", encoding="utf-8") as f:
        alpaca = [json.loads(line) for line in f][:ALPACA_ROWS]
    write_jsonl(root / "alpaca.jsonl", alpaca)

    chat_model = root / "chat_model"
    shutil.copytree(root / "demo" / "model", chat_model)
    (chat_model / "chat_template.jinja").write_text(LLAMA3_CHAT_TEMPLATE, encoding="utf-8")
    # Both conversational shapes, one file each: `messages` (role/content) and ShareGPT (from/value).
    chat = root / "chat"
    chat.mkdir()
    half = len(alpaca) // 2
    write_jsonl(chat / "messages.jsonl", [
        {"messages": [{"role": "system", "content": "You manipulate words."},
                      {"role": "user", "content": f"{r['instruction']}\n{r['input']}"},
                      {"role": "assistant", "content": r["output"]}]} for r in alpaca[:half]])
    write_jsonl(chat / "sharegpt.jsonl", [
        {"conversations": [{"from": "human", "value": f"{r['instruction']}\n{r['input']}"},
                           {"from": "gpt", "value": r["output"]}]} for r in alpaca[half:]])

    # One row repeated to fill exactly one global batch of the smoke config: every step sees the
    # same rows, so at a negligible learning rate every step's loss is the same number.
    smoke = load_config("smoke-test.json")
    write_jsonl(root / "one_row.jsonl",
                [alpaca[0]] * (smoke["per_device_train_batch_size"] * smoke["gradient_accumulation_steps"]))
    return {"root": root, "model": root / "demo" / "model", "chat_model": chat_model,
            "alpaca": root / "alpaca.jsonl", "chat": chat, "one_row": root / "one_row.jsonl"}


def config_overrides(name, assets, out_dir):
    """The command-line options that put config `name` on the tiny assets and the CPU."""
    scenario = SCENARIOS[name]
    chat = scenario["data"] == "chat"
    return {"model_name": assets["chat_model"] if chat else assets["model"],
            "dataset": assets["chat"] if chat else assets["alpaca"],
            "output_dir": out_dir, **CPU_OVERRIDES, **scenario.get("overrides", {})}


@pytest.fixture(scope="module")
def config_runs(assets):
    """Runs each config once with its overrides (memoized): name -> (file, effective options, proc, out_dir)."""
    done = {}

    def run(name):
        if name not in done:
            out_dir = assets["root"] / ("out-" + name[:-len(".json")])
            overrides = config_overrides(name, assets, out_dir)
            proc = run_finetune(["--config", config_path(name)] + as_args(overrides), check=False, timeout=TIMEOUT_S)
            file_options = load_config(name)
            done[name] = (file_options, {**file_options, **overrides}, proc, out_dir)
        return done[name]

    return run


def test_every_config_has_a_scenario():
    names = config_names()
    assert names, f"no configs in {CONFIG_DIR}"
    missing = [n for n in names if n not in SCENARIOS]
    assert not missing, f"configs without a test scenario (add them to SCENARIOS in {__file__}): {missing}"
    stale = [n for n in SCENARIOS if n not in names]
    assert not stale, f"SCENARIOS names configs that no longer exist: {stale}"


def test_configs_use_only_known_options_and_name_hub_ids():
    help_text = run_finetune(["train", "--help"], timeout=TIMEOUT_S).stdout  # the configs are training runs
    known = set()  # every name of every option: "  --r, --lora_r <int>"
    for names in re.findall(r"^\s+(--\w+(?:, --\w+)*) <", help_text, flags=re.MULTILINE):
        known.update(name.strip()[2:] for name in names.split(","))
    assert {"require_loss_decrease", "model_name", "r", "lora_r"} <= known, help_text
    for name in config_names():
        options = load_config(name)
        unknown = sorted(set(options) - known)
        assert not unknown, f"{name}: options finetune does not know: {unknown}"
        for key in ("model_name", "dataset"):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", options.get(key, "")), f"{name}: {key} should be a hub id ORG/NAME"


@pytest.mark.parametrize("name", config_names())
def test_config_trains_with_its_values_and_command_line_overrides(name, config_runs):
    assert name in SCENARIOS, f"{name} has no scenario"
    file_options, expected, proc, out_dir = config_runs(name)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    summary = last_json_line(proc.stdout)
    banner = parse_banner(proc.stderr)

    # The command line beat the file: its step count and its dtype (the files are GPU runs).
    assert file_options.get("max_steps") != expected["max_steps"]
    assert summary["steps"] == expected["max_steps"] == banner["steps"]
    assert (banner["dtype"], banner["device"]) == ("float32", "cpu")
    assert banner["truncated"] == 0  # else the token counts below would not mean what they say

    # The file's values took effect where the run shows them.
    assert (banner["batch"], banner["accumulation"], banner["ranks"]) == \
        (expected["per_device_train_batch_size"], expected["gradient_accumulation_steps"], 1)
    assert (banner["r"], banner["alpha"]) == (expected["r"], expected["lora_alpha"])
    with open(os.path.join(out_dir, "adapter_config.json"), encoding="utf-8") as f:
        adapter = json.load(f)
    assert (adapter["r"], adapter["lora_alpha"]) == (expected["r"], expected["lora_alpha"])
    if "lora_dropout" in expected:
        assert adapter["lora_dropout"] == expected["lora_dropout"]
    if "target_modules" in expected:
        assert sorted(adapter["target_modules"]) == sorted(expected["target_modules"])
    assert os.path.exists(os.path.join(out_dir, "adapter_model.safetensors"))

    metrics = read_metrics(out_dir)
    if expected.get("logging_steps", 1) == 1:
        assert [m["step"] for m in metrics] == list(range(1, expected["max_steps"] + 1))
    for m in metrics:
        assert m["lr"] == pytest.approx(expected["learning_rate"], rel=1e-6)

    unpacked = unpacked_steps_per_epoch(banner["rows"], banner["batch"], banner["accumulation"])
    if expected.get("packing", False):
        assert banner["steps_per_epoch"] < unpacked, "packing should put several samples in one row"
    else:
        assert banner["steps_per_epoch"] == unpacked
    if expected.get("train_on_completions", True):
        assert banner["trainable"] < banner["tokens"] - banner["rows"], "prompts should not be trained on"
    if expected.get("require_loss_decrease", False):
        losses = [m["loss"] for m in metrics]
        quarter = max(1, len(losses) // 4)
        assert sum(losses[-quarter:]) < sum(losses[:quarter]), losses


def test_chat_config_auto_template_is_the_tokenizers_and_the_command_line_wins(config_runs, assets, tmp_path):
    name = "llama-3.2-1b-instruct-chat.json"
    file_options, _, auto_proc, _ = config_runs(name)
    assert (file_options["chat_template"], file_options["train_on_completions"]) == ("auto", True)
    assert auto_proc.returncode == 0, auto_proc.stderr
    auto = parse_banner(auto_proc.stderr)
    assert auto["rows"] == ALPACA_ROWS  # both files, messages and ShareGPT, were read

    overrides = {**config_overrides(name, assets, tmp_path / "out"), "chat_template": "llama3",
                 "train_on_completions": False}
    explicit = parse_banner(run_finetune(["--config", config_path(name)] + as_args(overrides),
                                         timeout=TIMEOUT_S).stderr)
    assert explicit["tokens"] == auto["tokens"], "auto should have rendered the tokenizer's Llama-3 template"
    assert explicit["trainable"] == explicit["tokens"] - explicit["rows"]  # every token but each row's first


def test_packed_config_environment_beats_file_and_command_line_beats_both(config_runs, assets, tmp_path):
    name = "llama-3.2-1b-alpaca-packed.json"
    file_options, _, packed_proc, _ = config_runs(name)
    assert file_options["packing"] is True and file_options["gradient_accumulation_steps"] == 1
    assert packed_proc.returncode == 0, packed_proc.stderr
    packed = parse_banner(packed_proc.stderr)

    overrides = {**config_overrides(name, assets, tmp_path / "out"), "packing": False}
    proc = run_finetune(["--config", config_path(name)] + as_args(overrides), timeout=TIMEOUT_S,
                        env={"FINETUNE_GRADIENT_ACCUMULATION_STEPS": "2", "FINETUNE_PACKING": "true"})
    unpacked = parse_banner(proc.stderr)
    assert unpacked["accumulation"] == 2  # environment over the file
    assert unpacked["steps_per_epoch"] == unpacked_steps_per_epoch(unpacked["rows"], unpacked["batch"], 2)
    assert packed["steps_per_epoch"] < unpacked_steps_per_epoch(packed["rows"], packed["batch"], 1)


def test_smoke_config_fails_after_saving_when_the_loss_cannot_fall(assets, tmp_path):
    name = "smoke-test.json"
    assert load_config(name)["require_loss_decrease"] is True
    steps = 4
    # Adam moves every LoRA B entry by about the learning rate, whatever the gradient's size, so the
    # loss still edges down: by ~8e-7 a step at lr 1e-9 on this model, enough to pass the check.
    # At 1e-30 the change is far below float32 resolution: every step computes the same loss.
    overrides = {"model_name": assets["model"], "dataset": assets["one_row"], **CPU_OVERRIDES, "max_steps": steps,
                 "learning_rate": 1e-30}
    out_dir = tmp_path / "flat"
    proc = run_finetune(["--config", config_path(name)] + as_args({**overrides, "output_dir": out_dir}),
                        check=False, timeout=TIMEOUT_S)
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "--require_loss_decrease" in proc.stderr
    losses = [m["loss"] for m in read_metrics(out_dir)]
    assert len(losses) == steps and len(set(losses)) == 1, losses
    assert last_json_line(proc.stdout)["steps"] == steps  # the run finished and reported before failing
    for saved in ("adapter_model.safetensors", "adapter_config.json"):
        assert os.path.exists(os.path.join(out_dir, saved)), f"{saved} missing: the adapter is saved before the check"

    # The command line turns the file's check off.
    proc = run_finetune(["--config", config_path(name)] +
                        as_args({**overrides, "output_dir": tmp_path / "unchecked", "require_loss_decrease": False}),
                        timeout=TIMEOUT_S)
    assert last_json_line(proc.stdout)["steps"] == steps
