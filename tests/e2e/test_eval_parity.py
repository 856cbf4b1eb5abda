"""`finetune eval` reproduces transformers' logits and loss on every supported model variant."""
import pytest
import torch
from safetensors.torch import load_file

from conftest import last_json_line, run_finetune
import reference_loop
import tiny_models

BATCH = 3  # rows of different lengths: every batch is right-padded


@pytest.fixture(scope="module")
def eval_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    rows = tiny_models.make_tokenized_rows(7, seed=3, completion_only=False)
    rows[1]["labels"] = [-100] * 5 + rows[1]["input_ids"][5:]  # a partly masked row
    tiny_models.write_jsonl(path, rows)
    return path, rows


def reference(model, rows):
    """Per-row logits and the token-summed loss, batched exactly as finetune batches them."""
    logits_per_row, loss_sum, tokens = [], 0.0, 0
    for start in range(0, len(rows), BATCH):
        chunk = rows[start:start + BATCH]
        ids, mask, labels = reference_loop.collate(chunk)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask)
        logits = out.logits.float()
        for i, r in enumerate(chunk):
            logits_per_row.append(logits[i, :len(r["input_ids"])])
        shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
        loss_sum += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                                      ignore_index=-100, reduction="sum").item()
        tokens += int((shifted != -100).sum())
    return logits_per_row, loss_sum / tokens, tokens


def eval_matches_reference(model, rows, model_dir, data_path, dump, extra=()):
    """`finetune eval` in batches of BATCH (fp32, CPU, `extra` options) against reference(): every
    row's logits 1e-5 relative, the token count, and the loss 1e-5 relative. Returns (our result
    line, the reference loss)."""
    proc = run_finetune(["eval", "--model_name", model_dir, "--dataset", data_path, "--dtype", "float32",
                         "--device", "cpu", "--per_device_eval_batch_size", BATCH] + list(extra) +
                        ["--dump_logits", dump])
    result = last_json_line(proc.stdout)
    expected_logits, expected_loss, expected_tokens = reference(model, rows)
    ours = load_file(str(dump))
    assert len(ours) == len(rows)
    for i, ref in enumerate(expected_logits):
        got = ours[f"logits.{i}"]
        assert got.shape == ref.shape
        rel = (got - ref).norm() / ref.norm()
        assert rel <= 1e-5, f"{model_dir.name} row {i}: relative logits error {rel:.3e}"
    assert result["tokens"] == expected_tokens
    assert abs(result["loss"] - expected_loss) <= 1e-5 * abs(expected_loss)
    return result, expected_loss


@pytest.mark.parametrize("case", list(tiny_models.model_cases()))
def test_eval_matches_transformers(case, tmp_path, eval_rows):
    data_path, rows = eval_rows
    model_dir = tmp_path / case
    model = tiny_models.make_model(case, model_dir)
    model.eval()
    result, expected_loss = eval_matches_reference(model, rows, model_dir, data_path, tmp_path / "logits.safetensors")
    assert abs(result["perplexity"] - torch.exp(torch.tensor(expected_loss)).item()) <= 1e-4 * result["perplexity"]
