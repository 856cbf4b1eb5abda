"""`finetune dpo` and `finetune orpo` against TRL 1.16's DPOTrainer and ORPOTrainer
(tests/reference/make_dpo_run_fixtures.py): every step's loss, rewards and log-probs of a 10-step
fp32 CPU run on a tiny Llama with LoRA, started from the same adapter (TRL's reference: a frozen
copy of it), on the same rows, optimizer and schedule, within 1e-5 relative, for each DPO loss type,
ORPO, and both dataset forms (explicit prompt strings, implicit-prompt conversations). Then: 2 ranks
train like 1 process with the same global batch; --precompute_ref_log_probs gives TRL's numbers; a
run resumed from a checkpoint (inside a logging window) is bitwise the uninterrupted one; options of
the wrong command and files that are not preference rows are refused."""
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import fixture_json, run_finetune
from ddp_launch import check_ok, run_launched
from numerics import relative_error

FIXTURES = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "dpo_run")
TOLERANCE = 1e-5  # relative, fp32 against TRL
DDP_TOLERANCE = 1e-6  # relative, fp32: 2 ranks against 1 process, only the summation order differs


@pytest.fixture(scope="module")
def expected():
    return fixture_json("dpo_run", "make_dpo_run_fixtures.py")


def case_of(expected, name):
    return next(case for case in expected["cases"] if case["name"] == name)


def run_args(expected, case, out, extra=()):
    return ([case["command"], "--model_name", os.path.join(FIXTURES, "base"),
             "--dataset", os.path.join(FIXTURES, case["data"]), "--init_adapter", os.path.join(FIXTURES, "init_adapter"),
             "--output_dir", out] + expected["flags"] + case["options"] +
            ["--dtype", "float32", "--device", "cpu", "--shuffle", "false", "--logging_steps", 1, "--lora_dropout", 0.0,
             "--use_gradient_checkpointing", "false", "--ddp_backend", "gloo"] + list(extra))


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def scale_of(key, want):
    """What a value's 1e-5 is relative to: the value itself; for a difference of two nearly equal
    values, those values (their fp32 rounding, ~1e-7 of log-probs, is all such a difference near 0
    can be known to): rewards/margins of the two rewards, ORPO's log_odds_chosen of the two average
    log-probs it is formed from."""
    if key == "rewards/margins":
        return abs(want["rewards/chosen"]) + abs(want["rewards/rejected"])
    if key == "log_odds_chosen":
        return abs(want["logps/chosen"]) + abs(want["logps/rejected"])
    return abs(want[key])


LOGP_ROUNDING = 1e-7  # relative: fp32 sums of a sequence's token log-probs, ours and TRL's, in different orders


def log_prob_floor(key, want, beta):
    """A DPO reward is beta * (policy log-prob sum - reference log-prob sum): two nearly equal sums,
    each known to fp32 rounding (LOGP_ROUNDING of itself), so the reward is known to
    LOGP_ROUNDING * beta * (|policy| + |reference|) whatever its own size (on an AMD EPYC, ours and
    TRL's step-3 rewards/chosen, -0.0569, differ by 1.1e-6: 1.2e-7 of the log-probs it is formed
    from). A margin is the difference of the two rewards: both floors. 0 for anything else."""
    def floor(side):
        reward, policy = want[f"rewards/{side}"], want[f"logps/{side}"]
        return LOGP_ROUNDING * beta * (abs(policy) + abs(policy - reward / beta))
    if key in ("rewards/chosen", "rewards/rejected"):
        return floor(key.split("/")[1])
    if key == "rewards/margins":
        return floor("chosen") + floor("rejected")
    return 0.0


def beta_of(case):
    options = case["options"]
    return float(options[options.index("--beta") + 1]) if "--beta" in options else 0.1  # TRL's default


def assert_matches_trl(lines, case):
    assert len(lines) == len(case["steps"])
    beta = beta_of(case)
    for step, (got, want) in enumerate(zip(lines, case["steps"]), 1):
        for key, value in want.items():
            # A quantity TRL computes as exactly 0 (step 1's rewards: the policy is still the
            # reference) has no relative scale: there ours must be 0 to fp32 rounding of the log-probs.
            scale = scale_of(key, want)
            bound = TOLERANCE * scale if scale != 0 else 1e-6
            if case["command"] == "dpo":
                bound += log_prob_floor(key, want, beta)
            assert abs(got[key] - value) <= bound, f"{case['name']} step {step}: {key} {got[key]} vs TRL {value}"


CASE_NAMES = ["sigmoid_explicit", "sigmoid_implicit", "hinge_explicit", "ipo_implicit", "robust_explicit",
              "orpo_explicit", "orpo_implicit"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_step_matches_trl(expected, tmp_path, name):
    case = case_of(expected, name)
    out = tmp_path / "out"
    run_finetune(run_args(expected, case, out))
    assert_matches_trl(metrics(out), case)


def test_precomputed_reference_log_probs_give_trls_numbers(expected, tmp_path):
    case = case_of(expected, "sigmoid_implicit")
    out = tmp_path / "out"
    proc = run_finetune(run_args(expected, case, out, ["--precompute_ref_log_probs"]))
    assert "reference log-probs of 8 pairs precomputed" in proc.stderr
    assert_matches_trl(metrics(out), case)


def adapter(out):
    return load_file(str(out / "adapter_model.safetensors"))


def test_two_ranks_train_like_one_process(expected, tmp_path):
    """1 process x batch 1 x accumulation 4 against 2 ranks x batch 1 x accumulation 2: the same 4
    pairs per step. DPO's loss is a mean over pairs, so the default (balanced) planning may move
    pairs between ranks and micro-batches freely; each pair stays whole on one rank."""
    case = case_of(expected, "sigmoid_explicit")
    one, two = tmp_path / "one", tmp_path / "two"
    check_ok(run_launched("single", 1, run_args(expected, case, one)), "1 process")
    check_ok(run_launched("torchrun", 2, run_args(expected, case, two, ["--gradient_accumulation_steps", 2])), "2 ranks")
    for got, want in zip(metrics(two), metrics(one), strict=True):
        for key in ["loss"] + list(case["steps"][0]):
            # A reward is beta x a difference of log-prob sums in the hundreds: the 1e-7 by which
            # the summation order moves those sums is ~1e-6 of a reward, so rewards get TRL's 1e-5.
            tolerance = TOLERANCE if key.startswith("rewards/") else DDP_TOLERANCE
            scale = scale_of(key, want)
            assert abs(got[key] - want[key]) <= (tolerance * scale if scale != 0 else 1e-7), (got["step"], key)
    a, b = adapter(two), adapter(one)
    assert a.keys() == b.keys()
    for name in b:
        assert relative_error(a[name], b[name]) <= DDP_TOLERANCE, name


def test_resumed_run_is_bitwise_the_uninterrupted_one(expected, tmp_path):
    """Logged every 3 steps, saved at step 4: the checkpoint holds step 4's metrics of an open
    logging window, which the resumed run logs at step 6 as the uninterrupted one does."""
    case = case_of(expected, "sigmoid_explicit")
    full = tmp_path / "full"
    extra = ["--logging_steps", 3, "--save_steps", 4]
    run_finetune(run_args(expected, case, full, extra))
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    shutil.rmtree(resumed / "checkpoint-8")
    shutil.rmtree(resumed / "checkpoint-10")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (resumed / name).unlink()
    run_finetune(run_args(expected, case, resumed, extra + ["--resume_from_checkpoint", resumed / "checkpoint-4"]))
    got, want = metrics(resumed), metrics(full)
    assert [m["step"] for m in got] == [3, 6, 9, 10]
    for g, w in zip(got, want, strict=True):
        for key in ["loss", "grad_norm", "lr", "tokens"] + list(case["steps"][0]):
            assert g[key] == w[key], (g["step"], key)  # bit for bit
    a, b = adapter(resumed), adapter(full)
    for name in b:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("command, option, readers", [
    ("train", ["--beta", "0.1"], "dpo, orpo"),
    ("train", ["--loss_type", "ipo"], "dpo"),
    ("orpo", ["--loss_type", "ipo"], "dpo"),
    ("orpo", ["--precompute_ref_log_probs"], "dpo"),
    ("dpo", ["--packing"], "train"),
    ("dpo", ["--eval_split", "0.1"], "train"),
])
def test_options_of_another_command_are_refused(tmp_path, command, option, readers):
    proc = run_finetune([command, "--model_name", tmp_path, "--dataset", tmp_path / "d.jsonl"] + option, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"{option[0]} is not an option of `finetune {command}` (it is read by {readers}" in proc.stderr


def test_a_file_without_preference_fields_is_refused_by_name(expected, tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "chosen": "x"}) + "\n")
    case = case_of(expected, "sigmoid_explicit")
    proc = run_finetune(run_args(expected, dict(case, data=str(data)), tmp_path / "out"), check=False)
    assert proc.returncode == 1
    assert f"{data}: not a preference dataset: its first row has no field \"rejected\"" in proc.stderr
