"""--modules_to_save embed_tokens (PEFT's modules_to_save, issue 26): the embedding trains whole
beside the adapter and is saved in adapter_model.safetensors under PEFT's key
(base_model.model.model.embed_tokens.weight: get_peft_model_state_dict drops ModulesToSaveWrapper's
modules_to_save.default), on the tiny untied Llama:

(a) from a PEFT adapter saved with modules_to_save=["embed_tokens"] (its embedding copy moved off
    the base's, so loading it counts), 20 steps (--use_gradient_checkpointing false) equal the transformers + PEFT loop within
    test_train_parity.py's bounds (loss 1e-4 relative per step, every saved tensor 1e-4 relative);
(b) a fresh run's adapter loads in PEFT to the same tensors, and the merged export carries the
    trained embedding as merge_and_unload does;
(c) lm_head (the fused LM-head loss computes no gradient for the head weight), a tied embedding,
    gradient checkpointing (on by default: the checkpointed layers start from a detached embedding
    output) and a bfloat16 model are refused with the reason.
"""
import json

import peft
import torch
from safetensors.torch import load_file

from conftest import run_finetune
from numerics import relative_error
import lora_parity
import reference_loop
import tiny_models

EMBED = "base_model.model.model.embed_tokens.weight"


def test_training_the_embedding_matches_peft(tmp_path):
    base = tmp_path / "llama"
    tiny_models.make_model("llama", base)
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    adapter = reference_loop.make_init_adapter(base, tmp_path / "init", modules_to_save=["embed_tokens"])
    initial = load_file(str(adapter / "adapter_model.safetensors"))
    assert EMBED in initial
    out = tmp_path / "ours"
    lora_parity.train_ours(base, adapter, data, out, merged=tmp_path / "merged", gradient_checkpointing="false")
    _, saved, _ = lora_parity.steps_match_peft(out.name, base, adapter, rows, out)
    assert relative_error(saved[EMBED], initial[EMBED]) > 1e-4  # it trained
    assert json.load(open(out / "adapter_config.json"))["modules_to_save"] == ["embed_tokens"]
    # PEFT loads our adapter to the same tensors, and merges what we merged.
    loaded = peft.PeftModel.from_pretrained(tiny_models.load_reference_model(base), out)
    state = reference_loop.lora_state(loaded)
    assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in saved)
    merged = loaded.merge_and_unload().state_dict()
    ours_merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert torch.equal(ours_merged["model.embed_tokens.weight"], saved[EMBED])
    assert relative_error(ours_merged["model.embed_tokens.weight"], merged["model.embed_tokens.weight"]) <= 1e-6


def test_what_cannot_train_whole_is_refused(tmp_path):
    tied, untied = tmp_path / "tied", tmp_path / "untied"
    tiny_models.make_model("llama_mha_tied", tied)
    tiny_models.make_model("llama", untied)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(4, seed=1))
    args = ["--dataset", data, "--max_steps", 1, "--device", "cpu", "--output_dir", tmp_path / "out"]
    cases = [(["--model_name", tied, "--modules_to_save", "lm_head", "--dtype", "float32"],
              "no gradient for the head weight"),
             (["--model_name", tied, "--modules_to_save", "embed_tokens", "--dtype", "float32"],
              "ties lm_head to embed_tokens"),
             (["--model_name", untied, "--modules_to_save", "embed_tokens", "--dtype", "float32"],
              "needs --use_gradient_checkpointing false"),
             (["--model_name", untied, "--modules_to_save", "embed_tokens", "--dtype", "bfloat16",
               "--use_gradient_checkpointing", "false"], "training them needs --dtype float32")]
    for extra, needle in cases:
        proc = run_finetune(args + extra, check=False)
        assert proc.returncode == 2 and "--modules_to_save" in proc.stderr and needle in proc.stderr, proc.stderr
