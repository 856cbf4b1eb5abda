"""`finetune export`: merging an adapter without training, and the same export after training.

(a) merged_16bit of a base + random PEFT adapter equals PEFT's merge_and_unload() (fp32 on the CPU:
    W + B @ A * scaling summed in fp32 by both, bound 1e-6 relative per tensor for summation
    order), and transformers loads the directory and gives the merged model's logits.
(b) --save_method gguf with the adapter equals llama.cpp's converter run on our merged_16bit
    directory, byte for byte (general.name/size_label aside, see test_gguf.py).
(c) After training, --save_method merged_16bit --save_gguf writes the merged directory and the
    GGUF files; the GGUF equals `finetune export` of the trained adapter.
"""
import filecmp
import os

import peft
import pytest
import torch
import transformers
from safetensors.torch import load_file

from conftest import last_json_line, run_finetune
from test_gguf import NAME_KEYS, PRE_TOKENIZER, TOKENIZERS, assert_same_gguf
import gguf_models
import gguf_reference
import reference_loop
import tiny_models

CPU = ["--device", "cpu", "--dtype", "float32"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    base = root / "llama3_rope"
    gguf_models.make_gguf_model("llama3_rope", base, TOKENIZERS)
    adapter = reference_loop.make_init_adapter(base, root / "adapter")
    return root, base, adapter


def test_merged_16bit_equals_peft_merge_and_unload(setup):
    root, base, adapter = setup
    out = root / "merged"
    run_finetune(["export", "--model_name", base, "--adapter", adapter, "--save_method", "merged_16bit",
                  "--save_path", out] + CPU)
    reference = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), adapter)
    reference = reference.merge_and_unload().eval()
    expected = reference.state_dict()
    ours = load_file(str(out / "model.safetensors"))
    assert set(ours) == set(expected) - {"lm_head.weight"}  # tied: saved once, as transformers does
    worst = 0.0
    for name, tensor in ours.items():
        rel = ((tensor - expected[name]).norm() / expected[name].norm()).item()
        worst = max(worst, rel)
        assert rel <= 1e-6, f"{name}: relative error {rel:.3e}"
    print(f"merged_16bit vs merge_and_unload: worst relative error {worst:.3e}")
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[5, 17, 300, 42, 1000]])
    with torch.no_grad():
        rel = ((loaded(ids).logits - reference(ids).logits).norm() / reference(ids).logits.norm()).item()
    assert rel <= 1e-6, rel


def test_gguf_with_adapter_equals_converter_on_merged_directory(setup):
    root, base, adapter = setup
    merged = root / "merged_for_gguf"
    run_finetune(["export", "--model_name", base, "--adapter", adapter, "--save_method", "merged_16bit",
                  "--save_path", merged] + CPU)
    proc = run_finetune(["export", "--model_name", base, "--adapter", adapter, "--save_method", "gguf",
                         "--quantization", "q8_0,f16", "--save_path", root / "gguf"] + CPU)
    files = last_json_line(proc.stdout)["gguf_files"]
    assert [os.path.basename(f) for f in files] == ["llama3_rope.Q8_0.gguf", "llama3_rope.F16.gguf"]
    for path, outtype in zip(files, ("q8_0", "f16")):
        reference = root / f"reference.{outtype}.gguf"
        gguf_reference.run_converter(merged, PRE_TOKENIZER["llama3_rope"], outtype, reference)
        assert_same_gguf(path, reference)


def test_train_save_gguf_writes_what_export_writes(setup):
    root, base, adapter = setup
    data = root / "train.jsonl"
    rows = tiny_models.make_tokenized_rows(8, seed=1, vocab=2600, completion_only=True)
    tiny_models.write_jsonl(data, rows)
    out = root / "run"
    run_finetune(["train", "--model_name", base, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
                  "--max_steps", 2, "--per_device_train_batch_size", 2, "--learning_rate", 5e-3,
                  "--save_model", "--save_method", "merged_16bit", "--save_gguf", "--quantization", "q8_0",
                  "--save_path", root / "saved"] + CPU)
    assert (root / "saved" / "model.safetensors").exists()
    trained_gguf = root / "saved" / "llama3_rope.Q8_0.gguf"
    proc = run_finetune(["export", "--model_name", base, "--adapter", out, "--save_method", "gguf",
                         "--quantization", "q8_0", "--save_path", root / "exported"] + CPU)
    assert last_json_line(proc.stdout)["gguf_files"] == [str(root / "exported" / "llama3_rope.Q8_0.gguf")]
    assert filecmp.cmp(trained_gguf, root / "exported" / "llama3_rope.Q8_0.gguf", shallow=False)
    fields, _, _ = gguf_reference.read_gguf(trained_gguf)
    assert fields["general.file_type"][1] == 7
