"""Shared helpers for the end-to-end tests: they run the real `finetune` binary."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))


def finetune_bin():
    path = os.environ.get("FINETUNE_BIN", os.path.join(ROOT, "build", "finetune"))
    if not os.path.exists(path):
        pytest.fail(f"finetune binary not found at {path}: run scripts/setup.sh (or set FINETUNE_BIN)")
    return path


def run_finetune(args, check=True, env=None, timeout=600):
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([finetune_bin()] + [str(a) for a in args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"finetune {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in output:\n{text}")


def fixture_json(module, generator):
    """$FINETUNE_FIXTURES/<module>/expected.json, which tests/reference/<generator> writes; a missing
    file fails the test with the command that makes it."""
    path = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), module, "expected.json")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: run tests/reference/{generator} {os.path.dirname(path)} "
                    "(scripts/test.sh generates every fixture into $FINETUNE_FIXTURES)")
    with open(path) as f:
        return json.load(f)
