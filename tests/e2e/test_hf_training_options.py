"""HF TrainingArguments' training options end to end, each against transformers' own code:
eval/save strategies, load_best_model_at_end and EarlyStoppingCallback (the step training stops
after and the best checkpoint, as HF's callbacks decide them on the run's own eval losses), the
learning rate of every step under --lr_scheduler_type/--lr_scheduler_kwargs (= get_scheduler),
Adafactor's state through a checkpoint (a resumed run ends bit-identical), --save_only_model
checkpoints and --run_name."""
import json
import types

import pytest
import torch
from safetensors.torch import load_file

from conftest import last_json_line, run_finetune
from train_eval_run import common, make_train_eval_run


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfoptions")
    return (root, *make_train_eval_run(root))


def metrics_lines(out):
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def hf_early_stopping(eval_losses, patience, threshold):
    """HF's EarlyStoppingCallback.on_evaluate then Trainer._determine_best_metric over the losses,
    one evaluation per step (eval_steps = save_steps = 1): (stop step or None, best metric, best step)."""
    from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import EarlyStoppingCallback
    args = TrainingArguments(output_dir="unused", report_to=[], eval_strategy="steps", eval_steps=1, save_steps=1,
                             load_best_model_at_end=True, metric_for_best_model="eval_loss")
    state, control = TrainerState(), TrainerControl()
    callback = EarlyStoppingCallback(patience, threshold)
    trainer = types.SimpleNamespace(args=args, state=state)
    for step, loss in eval_losses:
        state.global_step = step
        callback.on_evaluate(args, state, control, {"eval_loss": loss})
        Trainer._determine_best_metric(trainer, {"eval_loss": loss}, None)
        if control.should_training_stop:
            return step, state.best_metric, state.best_global_step
    return None, state.best_metric, state.best_global_step


def test_early_stopping_and_the_best_model_are_hfs(setup):
    root, base, adapter, train, evalset = setup
    out = root / "early"
    # A threshold no evaluation beats: the patience runs out after 1 + 2 evaluations.
    proc = run_finetune(common(base, adapter, train, out) +
                        ["--eval_dataset", evalset, "--eval_steps", 1, "--save_steps", 1, "--load_best_model_at_end",
                         "--early_stopping_patience", 2, "--early_stopping_threshold", 10.0,
                         "--per_device_eval_batch_size", 3])
    lines = metrics_lines(out)
    evals = [(l["step"], l["eval_loss"]) for l in lines if "eval_loss" in l]
    stop, best_metric, best_step = hf_early_stopping(evals, 2, 10.0)
    assert stop == 3 and [step for step, _ in evals] == [1, 2, 3]
    summary = last_json_line(proc.stdout)
    assert summary["steps"] == 3 and summary["stopped_early_at_step"] == 3
    assert summary["best_metric"] == best_metric == min(loss for _, loss in evals)
    best_dir = out / f"checkpoint-{best_step}"
    assert summary["best_model_checkpoint"] == str(best_dir)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    state = json.load(open(out / "checkpoint-3" / "trainer_state.json"))
    assert state["best_metric"] == best_metric and state["best_model_checkpoint"] == str(best_dir)
    # The saved adapter is the best checkpoint's, and evaluating it gives the best eval loss.
    best, final = (load_file(str(d / "adapter_model.safetensors")) for d in (best_dir, out))
    assert best.keys() == final.keys() and all(best[k].equal(final[k]) for k in final)
    standalone = last_json_line(run_finetune(["eval", "--model_name", base, "--dataset", evalset, "--init_adapter", out,
                                              "--dtype", "float32", "--device", "cpu"]).stdout)
    assert abs(standalone["loss"] - best_metric) <= 1e-6 * best_metric


def test_load_best_keeps_the_best_checkpoint_under_save_total_limit(setup):
    root, base, adapter, train, evalset = setup
    out = root / "limit"
    proc = run_finetune(common(base, adapter, train, out, max_steps=4) +
                        ["--eval_dataset", evalset, "--eval_steps", 1, "--save_steps", 1, "--load_best_model_at_end",
                         "--save_total_limit", 1, "--learning_rate", 0.5])
    evals = [(l["step"], l["eval_loss"]) for l in metrics_lines(out) if "eval_loss" in l]
    _, best_metric, best_step = hf_early_stopping(evals, 10**6, 0.0)
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    # HF's _rotate_checkpoints: the newest, and the best while it is not the newest (limit 1 keeps 2).
    assert kept == sorted({f"checkpoint-{best_step}", "checkpoint-4"})
    assert last_json_line(proc.stdout)["best_metric"] == best_metric


@pytest.mark.parametrize("scheduler,kwargs", [("polynomial", {"lr_end": 1e-5, "power": 2.0}),
                                              ("cosine_with_restarts", {"num_cycles": 2}),
                                              ("warmup_stable_decay", {"num_decay_steps": 3, "decay_type": "linear"}),
                                              ("cosine_with_min_lr", {"min_lr": 1e-3})])
def test_every_steps_learning_rate_is_get_schedulers(setup, scheduler, kwargs):
    root, base, adapter, train, evalset = setup
    out = root / f"lr_{scheduler}"
    run_finetune(common(base, adapter, train, out, max_steps=8) +
                 ["--lr_scheduler_type", scheduler, "--lr_scheduler_kwargs", json.dumps(kwargs), "--warmup_steps", 2])
    from transformers import get_scheduler
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-3)
    lambda_ = get_scheduler(scheduler, optimizer, num_warmup_steps=2, num_training_steps=8,
                            scheduler_specific_kwargs=dict(kwargs)).lr_lambdas[0]
    # The line of step s logs the rate of its update, LambdaLR's after s - 1 scheduler steps.
    assert [l["lr"] for l in metrics_lines(out)] == [5e-3 * lambda_(s - 1) for s in range(1, 9)]


def test_adafactor_resumes_bit_identically(setup):
    root, base, adapter, train, evalset = setup
    whole, part = root / "adafactor_whole", root / "adafactor_part"
    args = ["--optim", "adafactor", "--save_steps", 2]
    run_finetune(common(base, adapter, train, whole, max_steps=4) + args)
    run_finetune(common(base, adapter, train, part, max_steps=4) + args)
    resumed = root / "adafactor_resumed"
    run_finetune(common(base, adapter, train, resumed, max_steps=4) + args +
                 ["--resume_from_checkpoint", part / "checkpoint-2"])
    state = load_file(str(whole / "checkpoint-2" / "optimizer.safetensors"))
    assert any(name.startswith("exp_avg_sq_row/") for name in state)  # transformers' state names
    a, b = (load_file(str(d / "adapter_model.safetensors")) for d in (whole, resumed))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_save_only_model_checkpoints_hold_the_adapter_and_refuse_to_resume(setup):
    root, base, adapter, train, evalset = setup
    out = root / "model_only"
    proc = run_finetune(common(base, adapter, train, out, max_steps=4) +
                        ["--save_steps", 2, "--save_only_model", "--run_name", "light run"])
    files = sorted(p.name for p in (out / "checkpoint-2").iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", "trainer_state.json"]
    summary = last_json_line(proc.stdout)
    assert summary["run_name"] == "light run"
    assert "light run" in (out / "report.html").read_text()
    refused = run_finetune(common(base, adapter, train, out, max_steps=6) +
                           ["--save_steps", 2, "--resume_from_checkpoint", "true"], check=False)
    assert refused.returncode == 2
    assert "written with --save_only_model" in refused.stderr
