"""--packing trains exactly like unpacked batches of the same samples (fp32, CPU): each epoch is one
optimizer step over all samples, so both layouts see the same data in every step."""
import json

import torch
from safetensors.torch import load_file

from conftest import run_finetune
import reference_loop
import tiny_models


def test_packed_training_equals_unpacked(tmp_path):
    base = tmp_path / "base"
    tiny_models.make_model("qwen3", base)
    adapter = reference_loop.make_init_adapter(base, tmp_path / "adapter")
    rows = tiny_models.make_tokenized_rows(6, seed=9, min_len=5, max_len=30, completion_only=True)
    data = tmp_path / "rows.jsonl"
    tiny_models.write_jsonl(data, rows)
    common = ["--model_name", base, "--dataset", data, "--init_adapter", adapter, "--max_steps", 3,
              "--learning_rate", 1e-2, "--warmup_steps", 0, "--shuffle", "false", "--logging_steps", 1,
              "--dtype", "float32", "--device", "cpu", "--gradient_accumulation_steps", 1,
              # Adam divides by sqrt(v) + eps: with the default eps an element whose gradient is ~1e-9
              # moves by the full learning rate in a direction set by rounding noise, so two equal
              # computations summed in a different order can disagree there. A larger eps keeps the
              # update a smooth function of the gradient; the comparison bounds stay as they are.
              "--adam_epsilon", 1e-4]
    run_finetune(common + ["--output_dir", tmp_path / "unpacked", "--per_device_train_batch_size", 6])
    # 6 samples of <= 30 tokens pack into at most 2 rows of 96: one micro-batch of 2 rows per epoch.
    run_finetune(common + ["--output_dir", tmp_path / "packed", "--per_device_train_batch_size", 2, "--packing",
                           "--max_seq_length", 96])
    losses = {name: [json.loads(l)["loss"] for l in open(tmp_path / name / "metrics.jsonl")]
              for name in ("unpacked", "packed")}
    assert len(losses["packed"]) == 3
    for a, b in zip(losses["packed"], losses["unpacked"]):
        assert abs(a - b) <= 1e-5 * abs(b)
    tokens = [json.loads(l)["tokens"] for l in open(tmp_path / "packed" / "metrics.jsonl")]
    assert tokens[-1] == 3 * sum(len(r["input_ids"]) for r in rows)
    packed = load_file(str(tmp_path / "packed" / "adapter_model.safetensors"))
    unpacked = load_file(str(tmp_path / "unpacked" / "adapter_model.safetensors"))
    for name, ref in unpacked.items():
        assert float((packed[name] - ref).norm() / ref.norm()) <= 1e-5, name
