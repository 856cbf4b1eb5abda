"""--neftune_noise_alpha (TRL's NEFTune, issue 26) against transformers' own hook
(neftune_reference.py: neftune_post_forward_hook attached by activate_neftune to the PEFT model's
input embeddings, the global generator seeded before each micro-batch with finetune's seed rule):

(a) 20 fp32 LoRA steps on the CPU, micro-batches of 2 right-padded samples (L = the longer one)
    and of 1 sample (L = its length), equal the reference within test_train_parity.py's bounds
    (loss 1e-4 relative per step, every adapter tensor 1e-4 relative); the same reference with
    the next seed, or without noise, is outside them (the test sees the noise itself);
(b) the evaluation after training has no noise: its loss equals transformers' in eval mode with
    the hook attached, and `finetune eval` of the saved adapter;
(c) alpha 0 and None are off: bit for bit the run without the option;
(d) combinations that could not be TRL's are refused with the reason (--packing, --step_planning
    balanced), as are a negative alpha and the commands that have no NEFTune (eval, generate,
    export, dpo, orpo);
(e) on 2 ranks the parameters stay equal across ranks at every step, with noise.
"""
import json

import pytest
from safetensors.torch import load_file
import torch

from conftest import last_json_line, run_finetune
from numerics import relative_error
import neftune_reference
import reference_loop
import lora_parity as parity
import tiny_models

ALPHA = 5.0
SEED = 3407
EVAL_BATCH = 3
CASES = {"batch2_accumulation2": dict(batch_size=2, accumulation=2),
         "batch1_accumulation4": dict(batch_size=1, accumulation=4)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("neftune")
    base, adapter, rows, data = parity.make_llama_run(root)
    eval_rows = tiny_models.make_tokenized_rows(7, seed=11, completion_only=True)
    eval_data = root / "eval.jsonl"
    tiny_models.write_jsonl(eval_data, eval_rows)
    return root, base, adapter, rows, data, eval_rows, eval_data


def settings(case):
    return dict(parity.SETTINGS, **CASES[case])


def neftune_args(base, adapter, data, out, case, *extra):
    return parity.finetune_args(base, adapter, data, out, **CASES[case]) + \
        ["--neftune_noise_alpha", ALPHA, "--seed", SEED] + list(extra)


def worst_loss_error(ours, reference):
    return max(abs(got - want) / abs(want) for got, want in zip(ours, reference))


@pytest.mark.parametrize("case", list(CASES))
def test_training_matches_transformers_neftune_hook(setup, case):
    root, base, adapter, rows, data, eval_rows, eval_data = setup
    out = root / f"ours_{case}"
    proc = run_finetune(neftune_args(base, adapter, data, out, case, "--eval_dataset", eval_data,
                                     "--per_device_eval_batch_size", EVAL_BATCH))
    assert "NEFTune: uniform noise (alpha 5)" in proc.stderr + proc.stdout
    s = settings(case)
    ref_losses, ref_model, ref_eval = neftune_reference.train_with_neftune(
        base, adapter, rows, alpha=ALPHA, run_seed=SEED, steps=parity.STEPS, eval_rows=eval_rows,
        eval_batch_size=EVAL_BATCH, **s)
    ours = parity.step_losses(out)
    assert len(ours) == parity.STEPS
    for step, (got, want) in enumerate(zip(ours, ref_losses), 1):
        assert abs(got - want) <= 1e-4 * abs(want), f"step {step}: loss {got} vs reference {want}"
    saved = load_file(str(out / "adapter_model.safetensors"))
    reference = reference_loop.lora_state(ref_model)
    assert set(saved) == set(reference)
    for name, ref in reference.items():
        assert relative_error(saved[name], ref) <= 1e-4, name
    worst_tensor = max(relative_error(saved[name], ref) for name, ref in reference.items())

    # (b) the evaluation after training: no noise, as transformers' hook in eval mode.
    ours_eval = last_json_line(proc.stdout)["eval_loss"]
    assert abs(ours_eval - ref_eval) <= 1e-4 * abs(ref_eval), (ours_eval, ref_eval)
    standalone = run_finetune(["eval", "--model_name", base, "--dataset", eval_data, "--init_adapter", out,
                               "--dtype", "float32", "--device", "cpu", "--per_device_eval_batch_size", EVAL_BATCH])
    assert abs(last_json_line(standalone.stdout)["loss"] - ours_eval) <= 1e-6 * abs(ours_eval)

    # The bound sees the noise: another seed's noise, or none, is outside it.
    plain_losses, _ = reference_loop.train_reference(base, adapter, rows, steps=parity.STEPS, **s)
    assert worst_loss_error(ours, plain_losses) > 1e-3
    if case == "batch2_accumulation2":
        other_seed, _, _ = neftune_reference.train_with_neftune(base, adapter, rows, alpha=ALPHA, run_seed=SEED + 1,
                                                                steps=parity.STEPS, **s)
        assert worst_loss_error(ours, other_seed) > 1e-3
        print(f"{case}: the next seed's noise differs by up to {worst_loss_error(ours, other_seed):.2e}")
    print(f"{case}: worst loss error {worst_loss_error(ours, ref_losses):.2e}, worst adapter tensor error "
          f"{worst_tensor:.2e} (relative); without noise the losses differ by up to "
          f"{worst_loss_error(ours, plain_losses):.2e}; eval loss {ours_eval} vs {ref_eval}")


def test_alpha_zero_and_none_are_the_run_without_neftune(setup, tmp_path):
    root, base, adapter, rows, data, _, _ = setup
    runs = {}
    for name, extra in {"unset": [], "zero": ["--neftune_noise_alpha", 0], "none": ["--neftune_noise_alpha", "None"]}.items():
        out = tmp_path / name
        run_finetune(parity.finetune_args(base, adapter, data, out, steps=5) + extra)
        runs[name] = (parity.step_losses(out), load_file(str(out / "adapter_model.safetensors")))
    losses, tensors = runs["unset"]
    for name in ("zero", "none"):
        assert runs[name][0] == losses, name
        for key, tensor in tensors.items():
            assert torch.equal(runs[name][1][key], tensor), (name, key)


def test_combinations_that_are_not_trl_are_refused(setup, tmp_path):
    root, base, adapter, rows, data, _, _ = setup
    train = ["--model_name", base, "--dataset", data, "--output_dir", tmp_path / "out", "--max_steps", 1,
             "--device", "cpu", "--neftune_noise_alpha", ALPHA]

    def refusal(args, *expected):
        proc = run_finetune(args, check=False)
        assert proc.returncode == 2, proc.stderr
        for text in expected:
            assert text in proc.stderr, proc.stderr

    refusal(train + ["--packing", "true"], "--neftune_noise_alpha: not with --packing true")
    refusal(train + ["--step_planning", "balanced"], "--neftune_noise_alpha: needs --step_planning literal")
    refusal(["--model_name", base, "--dataset", data, "--device", "cpu", "--neftune_noise_alpha", -1],
            "--neftune_noise_alpha")
    for command in ("eval", "generate", "export", "dpo", "orpo"):
        refusal([command, "--model_name", base, "--neftune_noise_alpha", ALPHA],
                f"--neftune_noise_alpha is not an option of `finetune {command}`")
    # Literal planning (the default with NEFTune) is accepted when named.
    run_finetune(train + ["--step_planning", "literal", "--dtype", "float32"])
    assert json.loads(open(tmp_path / "out" / "metrics.jsonl").readline())["step"] == 1


def test_two_ranks_train_with_noise_and_stay_consistent(setup, tmp_path):
    """On 2 ranks (gloo) each rank seeds its micro-batches with its own rank (embedding_noise_seed):
    the run completes with the parameters checked equal across ranks at every step, and its losses
    are not the noise-free run's."""
    from ddp_launch import check_ok, run_launched
    root, base, adapter, rows, data, _, _ = setup
    losses = {}
    for name, extra in {"plain": [], "neftune": ["--neftune_noise_alpha", ALPHA]}.items():
        out = tmp_path / name
        args = parity.finetune_args(base, adapter, data, out, steps=4) + ["--ddp_check_consistency_steps", 1] + extra
        check_ok(run_launched("torchrun", 2, args), f"2 ranks, {name}")
        losses[name] = parity.step_losses(out)
    assert len(losses["neftune"]) == 4
    assert worst_loss_error(losses["neftune"], losses["plain"]) > 1e-3
