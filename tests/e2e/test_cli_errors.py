"""Bad input gets a clear error and the right exit status from the real binary, never a crash or a hang.

Exit 2: a usage problem (flag, value, config file, missing required option).
Exit 1: a bad input file (model, checkpoint, dataset, adapter) or an unwritable output.
Every message must name what is wrong (option, file, line, tensor) and must reach stderr; stdout
carries only results. Each run uses a tiny model and takes about a second.
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ROOT, finetune_bin, last_json_line
import tiny_models

TIMEOUT_S = 60  # every run here takes ~1 s; a hang must fail, not stall the suite
CRASH_MARKERS = ["Segmentation fault", "terminate called", "Aborted", "core dumped", "Exception raised from",
                 "frame #", "Traceback"]
CPU = ["--device", "cpu", "--dtype", "float32"]
ONE_STEP = ["--max_steps", 1, "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1] + CPU


def clean_env(extra=None):
    """The caller's environment minus FINETUNE_<OPTION> variables that could change the outcome."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FINETUNE_") or k in ("FINETUNE_BIN", "FINETUNE_FIXTURES")}
    env.update(extra or {})
    return env


def run(args, env=None, cwd=None):
    proc = subprocess.run([finetune_bin()] + [str(a) for a in args], capture_output=True, text=True,
                          env=clean_env(env), cwd=cwd, timeout=TIMEOUT_S)
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr and marker not in proc.stdout, \
            f"crash marker {marker!r}:\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def expect_failure(args, status, *needles, env=None, cwd=None):
    """Runs finetune, asserts the exit status and that stderr names every needle."""
    proc = run(args, env=env, cwd=cwd)
    detail = f"finetune {' '.join(map(str, args))}\nexit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == status, detail
    for needle in needles:
        assert str(needle) in proc.stderr, f"stderr does not name {needle!r}\n{detail}"
    assert "[error]" not in proc.stdout, f"the error went to stdout\n{detail}"
    return proc


def expect_success(args, env=None, cwd=None):
    proc = run(args, env=env, cwd=cwd)
    assert proc.returncode == 0, f"finetune {' '.join(map(str, args))} exited {proc.returncode}\n" \
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def leftover_temp_files(root):
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if ".tmp." in f]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_errors")
    tiny_models.make_model("llama", root / "llama")
    tiny_models.make_model("llama_sharded", root / "sharded")
    rows = tiny_models.make_tokenized_rows(6, seed=1)
    tiny_models.write_jsonl(root / "rows.jsonl", rows)
    return {"root": root, "model": root / "llama", "sharded": root / "sharded", "rows": root / "rows.jsonl",
            "row_list": rows}


@pytest.fixture(scope="module")
def trained(assets):
    """One successful training run (checkpoint + final adapter + merged export) shared by several tests."""
    out = assets["root"] / "trained"
    proc = expect_success(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", out,
                           "--max_steps", 2, "--save_steps", 1, "--per_device_train_batch_size", 2,
                           "--gradient_accumulation_steps", 1, "--save_model", "true",
                           "--save_method", "merged_16bit", "--save_path", out / "merged"] + CPU)
    return out, proc


def copy_model(assets, tmp_path, name="model"):
    target = tmp_path / name
    shutil.copytree(assets["model"], target)
    return target


def eval_args(model, data):
    return ["eval", "--model_name", model, "--dataset", data] + CPU


# ---------------------------------------------------------------------------------------------
# Usage errors: exit 2


@pytest.mark.parametrize("args,needles", [
    (["--no_such_option", "1"], ["no_such_option"]),
    (["--r", "abc"], ["--r", "abc"]),
    (["--r", "0"], ["--r"]),
    (["--learning_rate", "-1"], ["--learning_rate", "-1"]),
    (["--lora_dropout", "1.5"], ["--lora_dropout", "1.5"]),
    (["--dtype", "float64"], ["--dtype", "float64"]),
    (["--optim", "rmsprop"], ["--optim", "rmsprop", "not supported", "adamw_torch", "adamw_8bit", "sgd", "adafactor"]),
    (["--save_method", "gguf_q8_0"], ["--save_method", "gguf_q8_0", "not supported", "--quantization"]),
    (["--r", "4", "--r", "0"], ["--r", "0"]),  # a repeated flag takes the last value, validated
    (["stray_word"], ["stray_word"]),
    (["--lora_r", "0"], ["--lora_r", "expected an integer >= 1"]),  # an alias is named as typed
    (["--loftq_config", '{"loftq_bits": 4}'], ["--loftq_config", "LoftQ", "only None is accepted"]),
    (["--push_gguf", "--hub_path", "me/tuned"], ["--push_gguf", "--save_model"]),
    (["--push_model"], ["--push_model", "--hub_path"]),
    (["--quantization", "q3_k_s"], ["--quantization", "q3_k_s", "f16", "q8_0"]),
    (["--report_to", "wandb"], ["--report_to", "wandb", "metrics.jsonl", "tensorboard"]),
    (["--lerning_rate", "1e-4"], ["--lerning_rate", "did you mean --learning_rate?"]),
    (["--dataset_split", "train[:10%]"], ["--dataset_split", "expected a split name"]),
])
def test_bad_flag_or_value_is_a_usage_error(assets, args, needles):
    proc = expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"]] + args, 2, *needles)
    assert "--help" in proc.stderr  # points at the option list


def test_malformed_config_file_names_the_file(assets, tmp_path):
    config = tmp_path / "broken.json"
    config.write_text('{"r": 8,\n  "lora_alpha": }\n')
    expect_failure(["--config", config, "--model_name", assets["model"], "--dataset", assets["rows"]], 2,
                   config, "JSON")


def test_unknown_config_key_names_the_key(assets, tmp_path):
    config = tmp_path / "typo.json"
    config.write_text(json.dumps({"r": 8, "lora_alpah": 16}))
    expect_failure(["--config", config, "--model_name", assets["model"], "--dataset", assets["rows"]], 2,
                   config, "lora_alpah")


def test_missing_config_file_names_it(assets, tmp_path):
    expect_failure(["--config", tmp_path / "absent.json", "--model_name", assets["model"]], 2,
                   tmp_path / "absent.json")


def test_help_lists_the_commands():
    proc = expect_success(["--help"])
    assert proc.stdout.startswith("Usage: finetune [train|eval|generate|chat|export|dpo|orpo|plot] "), proc.stdout
    for command in ["train", "eval", "generate", "chat", "export", "dpo", "orpo"]:
        assert re.search(rf"^  {command} ", proc.stdout, flags=re.MULTILINE), proc.stdout
    assert "finetune COMMAND --help" in proc.stdout
    assert "--learning_rate" not in proc.stdout  # each command's own help lists its options


def test_each_command_has_its_own_help():
    exported = expect_success(["export", "--help"]).stdout
    assert exported.startswith("Usage: finetune export --model_name M"), exported
    for option in ["--save_method", "--save_path", "--quantization", "--adapter <string>", "--model_name"]:
        assert option in exported
    for option in ["--learning_rate", "--init_adapter", "--prompt ", "--ddp_timeout"]:
        assert option not in exported, option
    generated = expect_success(["generate", "--help"]).stdout
    assert "--prompts" in generated and "--max_steps" not in generated


def test_version_names_the_build():
    proc = expect_success(["--version"])
    assert re.match(r"finetune \d+\.\d+\.\d+\nLibTorch \d+\.\d+\.\d+\S*, (CUDA \d+\.\d+|CPU only)\n",
                    proc.stdout), proc.stdout


@pytest.mark.parametrize("args,needles", [
    (["--adapter", "X"], ["--adapter is not an option of `finetune train`", "eval, generate, chat, export",
                          "did you mean --init_adapter?"]),
    (["generate", "--prompt", "p", "--init_adapter", "X"],
     ["--init_adapter is not an option of `finetune generate`", "did you mean --adapter?"]),
    (["export", "--save_method", "gguf", "--learning_rate", "1e-4"],
     ["--learning_rate is not an option of `finetune export`"]),
    (["eval", "--dataset", "d.jsonl", "--adapter", "a", "--init_adapter", "b"], ["--adapter and --init_adapter"]),
    (["--save_gguf"], ["--save_gguf", "--save_model"]),
])
def test_an_option_the_command_does_not_read_is_a_usage_error(assets, args, needles):
    command = args[:1] if args[0] in ("generate", "export", "eval") else []
    rest = args[len(command):]
    extra = [] if command else ["--dataset", assets["rows"]]
    expect_failure(command + ["--model_name", assets["model"]] + extra + rest, 2, *needles)


def test_a_shared_config_file_serves_every_command(assets, tmp_path):
    """Keys of other commands are ignored (said at debug level); the command's own take effect."""
    config = tmp_path / "shared.json"
    config.write_text(json.dumps({"learning_rate": 1e-3, "max_new_tokens": 3, "per_device_eval_batch_size": 2}))
    proc = expect_success(eval_args(assets["model"], assets["rows"]) + ["--config", config, "--log_level", "debug"])
    assert f"{config}: learning_rate: not read by `finetune eval`; ignored" in proc.stderr
    assert f"{config}: max_new_tokens: not read by `finetune eval`; ignored" in proc.stderr
    assert "per_device_eval_batch_size: not read" not in proc.stderr  # eval's own option


def test_eval_with_adapter_evaluates_the_adapter(assets, trained):
    base = last_json_line(expect_success(eval_args(assets["model"], assets["rows"])).stdout)["loss"]
    adapted = last_json_line(expect_success(eval_args(assets["model"], assets["rows"]) +
                                            ["--adapter", trained[0]]).stdout)["loss"]
    same = last_json_line(expect_success(eval_args(assets["model"], assets["rows"]) +
                                         ["--init_adapter", trained[0]]).stdout)["loss"]
    assert adapted == same  # one setting under two names
    assert adapted != base


def test_space_separated_list_values(assets, tmp_path):
    """Unsloth's nargs='+': --target_modules q_proj v_proj."""
    out = tmp_path / "out"
    expect_success(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", out,
                    "--target_modules", "q_proj", "v_proj"] + ONE_STEP)
    assert sorted(json.loads((out / "adapter_config.json").read_text())["target_modules"]) == ["q_proj", "v_proj"]


def test_epochs_without_max_steps_decide_the_step_count(assets, tmp_path):
    """6 rows, batch 2, no accumulation: 3 steps an epoch; --num_train_epochs 2 alone gives 6 steps."""
    args = ["--model_name", assets["model"], "--dataset", assets["rows"], "--per_device_train_batch_size", 2,
            "--gradient_accumulation_steps", 1] + CPU
    proc = expect_success(args + ["--output_dir", tmp_path / "a", "--num_train_epochs", 2])
    assert last_json_line(proc.stdout)["steps"] == 6
    proc = expect_success(args + ["--output_dir", tmp_path / "b", "--num_train_epochs", 2, "--max_steps", 1])
    assert last_json_line(proc.stdout)["steps"] == 1  # a positive --max_steps wins, as in HF


def test_a_mistyped_local_model_path_is_not_a_hub_request(assets, tmp_path):
    (tmp_path / "models").mkdir()
    expect_failure(eval_args("models/qwen4", assets["rows"]), 1, "local directory models/qwen4 not found",
                   cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})


def test_the_summary_lists_what_the_run_wrote(trained):
    out, proc = trained
    outputs = last_json_line(proc.stdout)["outputs"]
    for name in ["adapter_config.json", "adapter_model.safetensors", "checkpoint-1", "metrics.jsonl"]:
        assert str(out / name) in outputs["output_dir"], outputs
    assert all(os.path.exists(path) for path in outputs["output_dir"]), outputs
    assert outputs["save_path"] == str(out / "merged") and outputs["gguf_files"] == []


def test_export_lists_the_files_in_save_path(assets, trained, tmp_path):
    out = tmp_path / "merged"
    proc = expect_success(["export", "--model_name", assets["model"], "--adapter", trained[0], "--save_method",
                           "merged_16bit", "--save_path", out] + CPU)
    files = last_json_line(proc.stdout)["files"]
    assert files == sorted(str(p) for p in out.iterdir() if p.is_file()), files
    assert str(out / "config.json") in files and any(f.endswith(".safetensors") for f in files), files


def test_export_save_path_on_the_base_model_is_refused(assets, trained, tmp_path):
    """`finetune export --save_path` is kept apart from the model as train's outputs are (issue 30):
    the model's own directory (however spelled), a folder inside it, and / are usage errors before
    anything is loaded or written; the model stays byte for byte."""
    model = copy_model(assets, tmp_path)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    for save_path, needle in ((model, f"--save_path {model} is the directory of --model_name {model}"),
                              (str(model) + "/../model/", "is the directory of --model_name"),
                              (model / "merged", f"lies inside the directory of --model_name {model}"),
                              ("/", "--save_path / is the file system root")):
        proc = expect_failure(["export", "--model_name", model, "--adapter", trained[0], "--save_method",
                               "merged_16bit", "--save_path", save_path] + CPU, 2, needle)
        assert "model exported" not in proc.stderr
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_train_help_lists_every_group():
    proc = expect_success(["train", "--help"])
    lines = proc.stdout.splitlines()
    for group in ["model:", "LoRA:", "training:", "data:", "saving:", "logging:", "distributed:"]:
        assert group in lines, f"--help has no {group!r} group:\n{proc.stdout}"
    for option in ["--model_name", "--r", "--learning_rate", "--dataset", "--output_dir", "--report_to",
                   "--ddp_timeout", "--config"]:
        assert option in proc.stdout


def test_no_arguments_asks_for_a_model():
    expect_failure([], 2, "--model_name")


@pytest.mark.parametrize("action", [[], ["train"], ["eval"]])
def test_action_without_data_asks_for_a_dataset(assets, action):
    expect_failure(action + ["--model_name", assets["model"]] + CPU, 2, "--dataset")


def test_action_word_after_options_is_rejected(assets):
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "eval"], 2, "eval")


def test_precedence_file_then_environment_then_command_line(assets, tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model_name": str(assets["model"]), "dataset": str(assets["rows"]),
                                  "max_steps": 3, "output_dir": str(tmp_path / "from_file"),
                                  "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
                                  "device": "cpu", "dtype": "float32"}))
    env = {"FINETUNE_MAX_STEPS": "2", "FINETUNE_OUTPUT_DIR": str(tmp_path / "from_env")}
    cases = [([], {}, 3, "from_file"), ([], env, 2, "from_env"),
             (["--max_steps", 1, "--output_dir", tmp_path / "from_cli"], env, 1, "from_cli")]
    for cli, case_env, steps, out in cases:
        proc = expect_success(["--config", config] + cli, env=case_env)
        assert last_json_line(proc.stdout)["steps"] == steps
        metrics = (tmp_path / out / "metrics.jsonl").read_text().splitlines()
        assert len(metrics) == steps, f"{out}: {metrics}"
        assert (tmp_path / out / "adapter_model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from_cli", "from_env", "from_file", "run.json"]


def test_bad_value_errors_only_where_it_wins(assets, tmp_path):
    """A bad value in a lower layer is harmless once a higher layer overrides it (an option eval reads)."""
    option, variable = "--per_device_eval_batch_size", "FINETUNE_PER_DEVICE_EVAL_BATCH_SIZE"
    config = tmp_path / "bad_batch.json"
    config.write_text(json.dumps({option[2:]: "abc"}))
    base = eval_args(assets["model"], assets["rows"])
    expect_failure(base + ["--config", config], 2, option, config, "abc")
    expect_success(base + ["--config", config], env={variable: "4"})
    expect_failure(base + ["--config", config], 2, option, variable, "xyz", env={variable: "xyz"})
    expect_success(base + ["--config", config, option, "4"], env={variable: "xyz"})
    expect_failure(base + [option, "-3"], 2, option, env={variable: "4"})


def test_unknown_finetune_environment_variable_is_a_usage_error(assets):
    """A FINETUNE_ variable that is no option is a typo or an option finetune lacks: refused, named."""
    expect_failure(eval_args(assets["model"], assets["rows"]), 2, "FINETUNE_NOT_AN_OPTION",
                   "unknown environment variable", env={"FINETUNE_NOT_AN_OPTION": "1"})
    expect_failure(eval_args(assets["model"], assets["rows"]), 2, "FINETUNE_LORA_ALPA",
                   "did you mean FINETUNE_LORA_ALPHA?", env={"FINETUNE_LORA_ALPA": "32"})
    expect_success(["--help"], env={"FINETUNE_NOT_AN_OPTION": "1"})  # help always works


def test_long_row_attention_variable_names_a_kernel(assets):
    """FINETUNE_LONG_ROW_ATTENTION (read into the kernel policy): a value that names no kernel is a usage
    error naming the accepted ones; either kernel on the CPU (no head groups there) runs."""
    args = eval_args(assets["model"], assets["rows"])
    expect_failure(args, 2, "FINETUNE_LONG_ROW_ATTENTION=1", "cudnn", env={"FINETUNE_LONG_ROW_ATTENTION": "1"})
    expect_success(args, env={"FINETUNE_LONG_ROW_ATTENTION": "cudnn"})
    expect_success(args, env={"FINETUNE_LONG_ROW_ATTENTION": "flash"})


def test_norm_rope_kernel_variable_says_aten_or_fused(assets):
    """FINETUNE_NORM_ROPE_KERNEL (read into the kernel policy): a value other than aten or fused is a
    usage error naming both; either runs on the CPU (no fused kernels there)."""
    args = eval_args(assets["model"], assets["rows"])
    expect_failure(args, 2, "FINETUNE_NORM_ROPE_KERNEL=on", "fused", env={"FINETUNE_NORM_ROPE_KERNEL": "on"})
    for value in ["aten", "fused"]:
        expect_success(args, env={"FINETUNE_NORM_ROPE_KERNEL": value})


def test_graphed_all_reduce_variable_names_a_schedule(assets, tmp_path):
    """FINETUNE_GRAPHED_ALL_REDUCE (a benchmark's switch, read by train): a value that names no
    schedule is a usage error naming the accepted ones; either schedule trains on the CPU (no graphs)."""
    args = ["--model_name", assets["model"], "--dataset", assets["rows"], "--max_steps", 1] + CPU
    expect_failure(args + ["--output_dir", tmp_path / "x"], 2, "FINETUNE_GRAPHED_ALL_REDUCE=later", "overlapped",
                   env={"FINETUNE_GRAPHED_ALL_REDUCE": "later"})
    for value in ["after_replay", "overlapped"]:
        expect_success(args + ["--output_dir", tmp_path / value], env={"FINETUNE_GRAPHED_ALL_REDUCE": value})


def test_graph_max_tokens_variable_takes_a_positive_count(assets, tmp_path):
    """FINETUNE_CUDA_GRAPH_MAX_TOKENS (a benchmark's switch, read by train): anything but a positive
    count of tokens is a usage error naming the variable; a count trains on the CPU (no graphs)."""
    args = ["--model_name", assets["model"], "--dataset", assets["rows"], "--max_steps", 1] + CPU
    for bad in ["0", "-5", "2k", "99999999999999999999"]:
        expect_failure(args + ["--output_dir", tmp_path / "x"], 2, "FINETUNE_CUDA_GRAPH_MAX_TOKENS=" + bad,
                       "positive number of tokens", env={"FINETUNE_CUDA_GRAPH_MAX_TOKENS": bad})
    expect_success(args + ["--output_dir", tmp_path / "ok"], env={"FINETUNE_CUDA_GRAPH_MAX_TOKENS": "8192"})


def project_script_variables():
    """The FINETUNE_* names the project's own scripts use, options excepted."""
    options = set()
    for line in expect_success(["--help"]).stdout.splitlines():
        options.update(m.upper() for m in re.findall(r"--(\w+)", line))
    names = set()
    for pattern in ["scripts/*.sh", ".ci/*", "bench/*.py", "tests/e2e/conftest.py", "tests/e2e/ddp_launch.py",
                    "tests/reference/*.py"]:
        for path in glob.glob(os.path.join(ROOT, pattern)):
            with open(path, encoding="utf-8") as f:
                names.update(re.findall(r"\bFINETUNE_([A-Z0-9_]+)", f.read()))
    return sorted(f"FINETUNE_{name}" for name in names if name not in options)


def test_variables_the_project_scripts_export_are_tolerated(assets):
    """scripts/setup.sh writes build/env.sh, scripts/test.sh and demo.sh export more: the binary runs
    under all of them, so none may be taken for a mistyped option."""
    names = project_script_variables()
    assert {"FINETUNE_FIXTURES", "FINETUNE_PYTHON", "FINETUNE_ROOT", "FINETUNE_BUILD_DIR", "FINETUNE_JOBS"} <= set(names)
    expect_success(eval_args(assets["model"], assets["rows"]), env={name: "1" for name in names})


def test_an_unsloth_command_line_runs_with_only_the_program_name_changed(assets, tmp_path):
    """unsloth-cli.py's own example, minus what finetune refuses with a reason (4-bit, 8-bit Adam,
    tensorboard, GGUF, the hub), shrunk to a tiny CPU run."""
    out = tmp_path / "out"
    proc = expect_success([
        "--model_name", assets["model"], "--max_seq_length", 64, "--dtype", "None", "--dataset", assets["rows"],
        "--r", 8, "--lora_alpha", 16, "--lora_dropout", 0.1, "--bias", "none", "--use_gradient_checkpointing",
        "unsloth", "--random_state", 3407, "--use_rslora", "--loftq_config", "None", "--use_dora", "false",
        "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1, "--warmup_steps", 1,
        "--max_steps", 2, "--learning_rate", 2e-4, "--logging_steps", 1, "--optim", "adamw_torch",
        "--weight_decay", 0.005, "--lr_scheduler_type", "linear", "--seed", 3407, "--output_dir", out,
        "--report_to", "none", "--save_model", "--save_path", tmp_path / "model", "--device", "cpu"])
    assert last_json_line(proc.stdout)["steps"] == 2
    assert "LoRA r=8 " in proc.stderr and "(rsLoRA)" in proc.stderr
    assert "float32 on cpu" in proc.stderr  # None = auto: float32 on the CPU
    # --save_model's default method is Unsloth's, merged_16bit: a full model, not an adapter.
    assert (tmp_path / "model" / "config.json").exists() and not (tmp_path / "model" / "adapter_config.json").exists()


def test_lora_r_is_r_everywhere(assets, tmp_path):
    """--lora_r (torchrun refuses --r), lora_r in a config file, FINETUNE_LORA_R: one option."""
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"lora_r": 4}))
    for args, env, rank in [(["--lora_r", 8], {}, 8), (["--config", config], {}, 4), ([], {"FINETUNE_LORA_R": "6"}, 6),
                            (["--r", 2, "--lora_r", 3], {}, 3)]:
        out = tmp_path / f"out_{rank}"
        proc = expect_success(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", out]
                              + args + ONE_STEP, env=env)
        assert f"LoRA r={rank} " in proc.stderr
        assert json.loads((out / "adapter_config.json").read_text())["r"] == rank
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"]] + ONE_STEP, 2,
                   "FINETUNE_R", "FINETUNE_LORA_R", env={"FINETUNE_R": "4", "FINETUNE_LORA_R": "8"})


# ---------------------------------------------------------------------------------------------
# Model problems: exit 1, naming the file


def test_missing_model_directory_lists_where_it_looked(assets, tmp_path):
    missing = tmp_path / "no_such_model"
    expect_failure(eval_args(missing, assets["rows"]), 1, missing, "not found")


def test_missing_hub_model_lists_the_cache_path(assets, tmp_path):
    cache = tmp_path / "hf_cache"
    cache.mkdir()
    expect_failure(eval_args("org/name", assets["rows"]), 1, "org/name", cache / "models--org--name",
                   env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})


def edit_config(model_dir, change):
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


def test_malformed_config_json(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    (model / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    expect_failure(eval_args(model, assets["rows"]), 1, model / "config.json", "JSON")


def test_unsupported_architecture(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    edit_config(model, lambda c: c.update(architectures=["GPT2LMHeadModel"], model_type="gpt2"))
    expect_failure(eval_args(model, assets["rows"]), 1, model / "config.json", "GPT2LMHeadModel",
                   "LlamaForCausalLM")


@pytest.mark.parametrize("field", ["rope_parameters", "rope_scaling"])
def test_unsupported_rope_type(assets, tmp_path, field):
    model = copy_model(assets, tmp_path)

    def use_longrope(config):  # Phi-3's; finetune reads it from Phi3Config only (yarn and dynamic are supported)
        config.pop("rope_parameters", None)
        config[field] = ({"rope_type": "longrope", "factor": 4.0, "rope_theta": 10000.0} if field == "rope_parameters"
                         else {"type": "longrope", "factor": 4.0})
    edit_config(model, use_longrope)
    expect_failure(eval_args(model, assets["rows"]), 1, model / "config.json", "longrope", field)


def test_truncated_safetensors(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    expect_failure(eval_args(model, assets["rows"]), 1, weights, "truncated")


def test_safetensors_header_longer_than_the_file(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    weights = model / "model.safetensors"
    with open(weights, "r+b") as f:
        f.write(struct.pack("<Q", 10**9))
    expect_failure(eval_args(model, assets["rows"]), 1, weights, "header")


def rewrite_weights(path, change):
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def test_missing_tensor(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    name = "model.layers.1.self_attn.k_proj.weight"
    rewrite_weights(model / "model.safetensors", lambda t: t.pop(name))
    expect_failure(eval_args(model, assets["rows"]), 1, model / "model.safetensors", name, "missing")


def test_tensor_with_wrong_shape(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    name = "model.layers.0.mlp.down_proj.weight"
    rewrite_weights(model / "model.safetensors", lambda t: t.update({name: torch.zeros(64, 64)}))
    expect_failure(eval_args(model, assets["rows"]), 1, model / "model.safetensors", name, "[64, 64]", "[64, 128]")


def test_sharded_checkpoint_with_a_missing_shard(assets, tmp_path):
    model = tmp_path / "sharded"
    shutil.copytree(assets["sharded"], model)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[1]
    (model / shard).unlink()
    expect_failure(eval_args(model, assets["rows"]), 1, model / "model.safetensors.index.json", shard,
                   "does not exist")


# ---------------------------------------------------------------------------------------------
# Data problems: exit 1, naming file and line


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_broken_jsonl_line_names_the_line(assets, tmp_path):
    good = [json.dumps(r) for r in assets["row_list"]]
    data = write_lines(tmp_path / "broken.jsonl", good[:2] + ['{"input_ids": [5, 6,'] + good[2:])
    expect_failure(eval_args(assets["model"], data), 1, f"{data}:3")


def test_skip_bad_rows_skips_and_reports(assets, tmp_path):
    good = [json.dumps(r) for r in assets["row_list"]]
    data = write_lines(tmp_path / "broken.jsonl", good[:2] + ['{"input_ids": [5, 6,'] + good[2:])
    proc = expect_success(eval_args(assets["model"], data) + ["--skip_bad_rows"])
    result = last_json_line(proc.stdout)
    assert result["rows"] == len(good) and result["rows_skipped"] == 1
    assert f"{data}:3" in proc.stderr  # the warning still says which row was dropped

    proc = expect_success(["--model_name", assets["model"], "--dataset", data, "--skip_bad_rows", "true",
                           "--output_dir", tmp_path / "out"] + ONE_STEP)
    assert "1 malformed skipped" in proc.stderr
    assert f"{len(good)} rows kept of {len(good) + 1}" in proc.stderr


def test_unknown_dataset_format(assets, tmp_path):
    data = write_lines(tmp_path / "odd.jsonl", [json.dumps({"question": "a", "reply": "b"})] * 2)
    expect_failure(eval_args(assets["model"], data), 1, f"{data}:1", "format", "question")


def test_empty_dataset(assets, tmp_path):
    data = write_lines(tmp_path / "empty.jsonl", [])
    expect_failure(eval_args(assets["model"], data), 1, data)
    expect_failure(["--model_name", assets["model"], "--dataset", data, "--output_dir", tmp_path / "out"]
                   + ONE_STEP, 1, data)


def test_missing_dataset_file(assets, tmp_path):
    expect_failure(eval_args(assets["model"], tmp_path / "absent.jsonl"), 1, tmp_path / "absent.jsonl")


def test_labels_and_input_ids_of_different_lengths(assets, tmp_path):
    good = [json.dumps(r) for r in assets["row_list"]]
    data = write_lines(tmp_path / "mismatch.jsonl", good[:3] + [json.dumps({"input_ids": [5, 6, 7, 8],
                                                                            "labels": [5, 6, 7]})])
    expect_failure(eval_args(assets["model"], data), 1, f"{data}:4", "labels", "input_ids")


# ---------------------------------------------------------------------------------------------
# Adapter problems


def test_init_adapter_without_adapter_config(assets, tmp_path):
    adapter = tmp_path / "not_an_adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--init_adapter", adapter,
                    "--output_dir", tmp_path / "out"] + ONE_STEP, 1, adapter / "adapter_config.json")
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_init_adapter_with_wrong_tensor_shape(assets, tmp_path, trained):
    adapter = tmp_path / "adapter"
    shutil.copytree(trained[0], adapter, ignore=shutil.ignore_patterns("checkpoint-*", "merged"))
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    name = next(k for k in sorted(tensors) if "lora_A" in k)
    bad_shape = (tensors[name].shape[0] // 2, tensors[name].shape[1] // 2)
    rewrite_weights(adapter / "adapter_model.safetensors", lambda t: t.update({name: torch.zeros(bad_shape)}))
    for args in (["--output_dir", tmp_path / "out"] + ONE_STEP, None):
        cmd = (["--model_name", assets["model"], "--dataset", assets["rows"]] + args if args
               else eval_args(assets["model"], assets["rows"]))
        expect_failure(cmd + ["--init_adapter", adapter], 1, adapter / "adapter_model.safetensors", name,
                       f"[{bad_shape[0]}, {bad_shape[1]}]")


def test_init_adapter_that_is_fine_loads(assets, tmp_path, trained):
    """The control for the two tests above: the unmodified adapter is accepted."""
    expect_success(eval_args(assets["model"], assets["rows"]) + ["--init_adapter", trained[0]])


# ---------------------------------------------------------------------------------------------
# Output problems


@pytest.mark.parametrize("below", [None, "run"])
def test_output_dir_blocked_by_a_regular_file(assets, tmp_path, below):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me\n")
    output_dir = blocker / below if below else blocker
    proc = expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir",
                           output_dir] + ONE_STEP, 1, "--output_dir", output_dir, f"'{blocker}'")
    assert "step 1/" not in proc.stderr, "it should fail before training, not at the final save"
    assert blocker.read_text() == "keep me\n"
    assert not list(tmp_path.rglob("adapter_*")) and not leftover_temp_files(tmp_path)


def test_save_path_blocked_by_a_regular_file(assets, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", tmp_path / "out",
                    "--save_model", "true", "--save_path", blocker / "merged"] + ONE_STEP, 1, "--save_path", blocker)
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_successful_run_leaves_no_temporary_files(trained):
    out, proc = trained
    summary = last_json_line(proc.stdout)
    assert summary["steps"] == 2
    assert (out / "adapter_model.safetensors").exists() and (out / "adapter_config.json").exists()
    assert (out / "checkpoint-1" / "adapter_model.safetensors").exists()
    assert (out / "merged" / "config.json").exists()
    assert leftover_temp_files(out) == []
    # stdout carries only the result; the log lines go to stderr
    assert all(line.startswith("{") for line in proc.stdout.strip().splitlines()), proc.stdout


# ---------------------------------------------------------------------------------------------
# Inputs checked against the model before training


def test_out_of_vocabulary_token_id_is_a_row_error(assets, tmp_path):
    rows = tmp_path / "oov.jsonl"
    good = assets["row_list"]
    bad = {"input_ids": [5, 6, tiny_models.VOCAB, 7], "labels": [5, 6, tiny_models.VOCAB, 7]}
    tiny_models.write_jsonl(rows, [good[0], bad] + good[1:])
    base = ["--model_name", assets["model"], "--dataset", rows, "--output_dir", tmp_path / "out"] + ONE_STEP
    expect_failure(base, 1, f"{rows}:2", "input_ids", str(tiny_models.VOCAB), f"vocab_size is {tiny_models.VOCAB}")
    proc = expect_success(base + ["--skip_bad_rows"])
    assert "1 malformed skipped" in proc.stderr


def test_tokenizer_id_outside_the_embedding_is_refused(assets, tmp_path):
    model = copy_model(assets, tmp_path)
    vocab = {"a": 0, "b": 1, "ab": 2, "huge": 200_000_000}  # a 2e8 id must not allocate 2e8 entries
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                 "post_processor": None, "decoder": None,
                 "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]}}
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    expect_failure(eval_args(model, assets["rows"]), 1, str(model), "token id 200000000",
                   f"vocab_size {tiny_models.VOCAB}")


def test_rank_larger_than_the_projections_is_refused_before_allocating(assets, tmp_path):
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", tmp_path / "out",
                    "--r", 2_000_000] + ONE_STEP, 2, "--r", "2000000", "use --r <=")


def test_adapter_of_another_architecture_is_refused(assets, tmp_path, trained):
    other = tmp_path / "qwen2"
    tiny_models.make_model("qwen2", other)  # the same sizes, another architecture
    adapter = tmp_path / "adapter"
    shutil.copytree(trained[0], adapter, ignore=shutil.ignore_patterns("checkpoint-*", "merged"))
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(other)
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    expect_failure(eval_args(assets["model"], assets["rows"]) + ["--init_adapter", adapter], 2,
                   adapter / "adapter_config.json", "Qwen2ForCausalLM", "LlamaForCausalLM")


def test_lora_options_that_disagree_with_the_init_adapter_are_refused(assets, tmp_path, trained):
    r = json.loads((trained[0] / "adapter_config.json").read_text())["r"]
    base = ["--model_name", assets["model"], "--dataset", assets["rows"], "--init_adapter", trained[0]] + ONE_STEP
    expect_failure(base + ["--output_dir", tmp_path / "a", "--r", r // 2], 2, "--r", str(r // 2), str(r),
                   "adapter_config.json")
    expect_failure(base + ["--output_dir", tmp_path / "b", "--lora_alpha", 3], 2, "--lora_alpha", "3")
    expect_failure(base + ["--output_dir", tmp_path / "d", "--use_dora"], 2, "--use_dora", "true", "false")
    expect_success(base + ["--output_dir", tmp_path / "c", "--r", r])  # the same value is fine


def test_adapter_config_field_of_the_wrong_type_names_the_field(assets, tmp_path, trained):
    adapter = tmp_path / "adapter"
    shutil.copytree(trained[0], adapter, ignore=shutil.ignore_patterns("checkpoint-*", "merged"))
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["lora_dropout"] = "a lot"
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    proc = expect_failure(eval_args(assets["model"], assets["rows"]) + ["--init_adapter", adapter], 1,
                          adapter / "adapter_config.json", "'lora_dropout'")
    assert "json.exception" not in proc.stderr


def test_epochs_that_overflow_the_step_count_are_refused(assets, tmp_path):
    expect_failure(["--model_name", assets["model"], "--dataset", assets["rows"], "--output_dir", tmp_path / "out",
                    "--max_steps", 0, "--num_train_epochs", 1e300] + CPU, 2, "--num_train_epochs")
