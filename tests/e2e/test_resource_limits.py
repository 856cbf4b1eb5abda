"""Runs that meet the real world's limits and mistakes (issue 30): a file-size limit mid-save, two
runs on one --output_dir, an output directory that is the base model, numbers no model or option
has. Each ends in one clear error line with the right exit status, and leaves no half-written
checkpoint."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import finetune_bin, run_finetune
import tiny_models

CPU = ["--device", "cpu", "--dtype", "float32"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    base = root / "base"
    tiny_models.make_model("llama", base)
    train = root / "train.jsonl"
    tiny_models.write_jsonl(train, tiny_models.make_tokenized_rows(16, seed=1))
    return root, base, train


def train_args(base, train, out, steps=4, extra=()):
    return ["--model_name", base, "--dataset", train, "--output_dir", out, "--max_steps", steps,
            "--per_device_train_batch_size", 2, "--logging_steps", 1] + CPU + list(extra)


def one_error(proc, status):
    errors = [line for line in proc.stderr.splitlines() if "[error]" in line]
    assert proc.returncode == status and len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def test_a_file_size_limit_mid_save_is_reported_and_leaves_no_temporary(setup, tmp_path):
    """prlimit --fsize: the write fails with EFBIG (SIGXFSZ is ignored), the save's error path
    reports it naming the file, and no checkpoint-N.tmp-PID stays."""
    root, base, train = setup
    probe = tmp_path / "probe"
    run_finetune(train_args(base, train, probe, steps=2, extra=["--save_steps", 1]))
    largest = max(p.stat().st_size for p in (probe / "checkpoint-1").iterdir())
    limit = largest // 2
    assert (probe / "metrics.jsonl").stat().st_size < limit  # what is written before the save fits
    out = tmp_path / "out"
    proc = subprocess.run(["prlimit", f"--fsize={limit}", finetune_bin()] +
                          [str(a) for a in train_args(base, train, out, steps=2, extra=["--save_steps", 1])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != -25, "killed by SIGXFSZ"
    error = one_error(proc, 1)
    assert "File too large" in error and "checkpoint-1" in error, error
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name or ".old-" in p.name]
    assert not (out / "checkpoint-1").exists()


def test_a_second_run_on_the_same_output_dir_is_refused_naming_the_first(setup, tmp_path):
    root, base, train = setup
    out = tmp_path / "out"
    first = subprocess.Popen([finetune_bin()] + [str(a) for a in train_args(base, train, out, steps=10 ** 7)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / ".finetune.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().startswith("pid")) and time.monotonic() < deadline:
            time.sleep(0.05)
        holder = f"pid {first.pid} host {os.uname().nodename}"
        assert lock.read_text().strip() == holder
        for extra in ([], ["--overwrite_output_dir"]):
            proc = run_finetune(train_args(base, train, out, extra=extra), check=False, timeout=60)
            error = one_error(proc, 2)
            assert f"--output_dir {out} is in use by another finetune run ({holder}" in error, error
        assert first.poll() is None  # the first run goes on
    finally:
        first.terminate()
        first.communicate(timeout=60)
    run_finetune(train_args(base, train, out, steps=1, extra=["--overwrite_output_dir"]))  # released


def test_output_dir_or_save_path_on_the_base_model_is_refused(setup, tmp_path):
    root, base, train = setup
    model = tmp_path / "model"
    shutil.copytree(base, model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    cases = [(["--save_model", "--save_path", model], "--save_path", "is the directory of --model_name"),
             (["--save_model", "--save_path", str(model) + "/../model/"], "--save_path", "is the directory of"),
             ([], "--output_dir", "is the directory of --model_name")]
    for extra, option, needle in cases:
        out = model if option == "--output_dir" else tmp_path / "out"
        args = train_args(model, train, out, steps=1, extra=[str(a) for a in extra])
        error = one_error(run_finetune(args, check=False, timeout=60), 2)
        assert option in error and needle in error and f"--model_name {model}" in error, error
    error = one_error(run_finetune(train_args(model, train, "/", steps=1), check=False, timeout=60), 2)
    assert "--output_dir / is the file system root" in error, error
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before  # untouched


def test_numbers_beyond_any_model_or_option_are_named(setup, tmp_path):
    root, base, train = setup
    for field, value, needle in (("num_hidden_layers", 10 ** 9, "at most 1024"),
                                 ("vocab_size", 2 ** 40, "at most 16777216"),
                                 ("rope_theta", 0, "not a positive finite number")):
        model = tmp_path / field
        shutil.copytree(base, model)
        config = json.loads((model / "config.json").read_text())
        config[field] = value
        if field in config.get("rope_parameters", {}):  # transformers 5 spells it inside
            config["rope_parameters"][field] = value
        (model / "config.json").write_text(json.dumps(config))
        error = one_error(run_finetune(train_args(model, train, tmp_path / "out", steps=1), check=False), 1)
        assert f"{model}/config.json" in error and f'"{field}"' in error and needle in error, error
    error = one_error(run_finetune(train_args(base, train, tmp_path / "o2", extra=["--learning_rate", "1e308"]),
                                   check=False), 2)
    assert "--learning_rate" in error and "1e308" in error and "32-bit float" in error, error
    args = train_args(base, train, tmp_path / "o3", extra=["--dataset_weights", "1,1e308"])
    args[args.index("--dataset") + 1] = f"{train},{train}"
    error = one_error(run_finetune(args, check=False), 2)
    assert "--dataset_weights" in error and "1e+308" in error and "0" * 30 not in error, error


def test_a_read_only_output_dir_is_named_with_the_reason(setup, tmp_path):
    """--output_dir on a read-only file system (a read-only tmpfs in a mount namespace of its own):
    the error carries errno's text, from the run lock, the first file the run creates there."""
    root, base, train = setup
    mount = tmp_path / "ro"
    mount.mkdir()
    args = [finetune_bin()] + [str(a) for a in train_args(base, train, mount, steps=1)]
    script = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script, str(mount)] + args, capture_output=True,
                          text=True, timeout=120)
    if "[error]" not in proc.stderr and proc.returncode != 0:
        pytest.skip(f"no mount namespace here (unshare --mount: {proc.stderr.strip()[-200:]})")
    error = one_error(proc, 1)
    assert str(mount) in error and "Read-only file system" in error, error
