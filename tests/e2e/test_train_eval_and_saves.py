"""Evaluation during training, --eval_split, checkpoints and the final summary."""
import json

import pytest
from safetensors.torch import load_file

from conftest import last_json_line, run_finetune
from train_eval_run import common, make_train_eval_run


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalsaves")
    return (root, *make_train_eval_run(root))


def test_eval_steps_report_the_loss_finetune_eval_gives_for_the_saved_checkpoint(setup):
    root, base, adapter, train, evalset = setup
    out = root / "with_eval"
    proc = run_finetune(common(base, adapter, train, out) +
                        ["--eval_dataset", evalset, "--eval_steps", 3, "--save_steps", 3,
                         "--per_device_eval_batch_size", 3])
    lines = [json.loads(l) for l in open(out / "metrics.jsonl")]
    evals = {l["step"]: l["eval_loss"] for l in lines if "eval_loss" in l}
    assert sorted(evals) == [3, 6]
    summary = last_json_line(proc.stdout)
    assert summary["eval_loss"] == evals[6]
    # checkpoint-3 is a PEFT adapter; evaluating it standalone reproduces the in-training eval loss.
    assert (out / "checkpoint-3" / "adapter_model.safetensors").exists()
    # HF's save_strategy "steps" also saves at the last step: the same adapter as the final save.
    last, final = (load_file(str(d / "adapter_model.safetensors")) for d in (out / "checkpoint-6", out))
    assert last.keys() == final.keys() and all(last[name].equal(final[name]) for name in final)
    for step, directory in ((3, out / "checkpoint-3"), (6, out)):
        standalone = last_json_line(run_finetune(["eval", "--model_name", base, "--dataset", evalset, "--init_adapter",
                                                  directory, "--dtype", "float32", "--device", "cpu"]).stdout)
        assert abs(standalone["loss"] - evals[step]) <= 1e-6 * evals[step]
    assert evals[6] != evals[3]
    ckpt = load_file(str(out / "checkpoint-3" / "adapter_model.safetensors"))
    final = load_file(str(out / "adapter_model.safetensors"))
    assert any(float((ckpt[k] - final[k]).abs().max()) > 0 for k in final)


def test_eval_split_holds_out_rows(setup):
    root, base, adapter, train, evalset = setup
    out = root / "split"
    proc = run_finetune(common(base, adapter, train, out) + ["--eval_split", 0.25, "--eval_steps", 2])
    assert "eval rows 5" in proc.stderr  # ceil(0.25 * 20)
    lines = [json.loads(l) for l in open(out / "metrics.jsonl")]
    assert [l["step"] for l in lines if "eval_loss" in l] == [2, 4, 6]
    assert last_json_line(proc.stdout)["eval_loss"] > 0


def test_epochs_define_the_step_count(setup):
    root, base, adapter, train, evalset = setup
    out = root / "epochs"
    proc = run_finetune(common(base, adapter, train, out, max_steps=0) + ["--num_train_epochs", 1.5])
    # 20 rows, batch 2 -> 10 steps per epoch -> 15 steps for 1.5 epochs.
    assert last_json_line(proc.stdout)["steps"] == 15
    lines = [json.loads(l) for l in open(out / "metrics.jsonl")]
    assert abs(lines[-1]["epoch"] - 1.5) < 1e-9
