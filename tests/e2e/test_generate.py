"""`finetune generate` reproduces transformers' generate() token for token on tiny Llama and Qwen3
models (CPU, fp32): greedy on one prompt (streamed) and on left-padded batches (raw and chat
prompts), with a PEFT adapter (unmerged) and a merged model, seeded sampling with every warper,
EOS ids from generation_config.json, stop strings and max_new_tokens; bad prompt files are
refused naming the file and line."""
import json

import peft
import pytest
import torch
import transformers

from conftest import run_finetune
import generation_assets as assets
import reference_loop

CPU = ["--device", "cpu", "--dtype", "float32"]
NEW_TOKENS = 12
PROMPT_LINES = [{"prompt": "Reverse the order of the words: red"},
                {"prompt": "The"},
                {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Count the words. cat dog"}]},
                {"prompt": "Below is an instruction that describes a task. caf\u00e9"},
                {"prompt": "sun moon"}]
BATCH = 3  # two batches: [0, 1, 2] and [3, 4], both left-padded


@pytest.fixture(scope="module")
def tokenizer():
    return assets.make_tokenizer()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model_dir(request, tmp_path_factory, tokenizer):
    directory = tmp_path_factory.mktemp(request.param)
    model = assets.make_model(request.param, directory, tokenizer)
    return directory, model


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    assets.write_jsonl(path, PROMPT_LINES)
    return path


def batched_prompt_ids(tokenizer):
    ids = [assets.prompt_ids(tokenizer, line) for line in PROMPT_LINES]
    return [ids[i:i + BATCH] for i in range(0, len(ids), BATCH)]


def run_prompts(model_path, prompts_path, *extra):
    proc = run_finetune(["generate", "--model_name", model_path, "--prompts", prompts_path,
                         "--generation_batch_size", BATCH, "--max_new_tokens", NEW_TOKENS, *CPU, *extra])
    return assets.read_jsonl_lines(proc.stdout), proc


def check_against_reference(results, expected, tokenizer):
    assert [r["prompt_index"] for r in results] == list(range(len(expected)))
    for result, ids in zip(results, expected):
        assert result["token_ids"] == ids, f"prompt {result['prompt_index']}"
        assert result["text"] == tokenizer.decode(ids, skip_special_tokens=True)
        assert result["finish_reason"] == ("eos" if ids[-1] == tokenizer.eos_token_id else "length")


def test_greedy_single_prompt_streams_transformers_text(model_dir, tokenizer):
    directory, model = model_dir
    prompt = PROMPT_LINES[0]["prompt"]
    proc = run_finetune(["generate", "--model_name", directory, "--prompt", prompt, "--max_new_tokens", NEW_TOKENS, *CPU])
    [ids] = assets.reference_generate(model, [[tokenizer(prompt)["input_ids"]]], {tokenizer.eos_token_id},
                                      tokenizer.pad_token_id, do_sample=False, max_new_tokens=NEW_TOKENS)
    # run_finetune reads stdout as text: universal newlines turn "\r" and "\r\n" into "\n".
    expected = tokenizer.decode(ids, skip_special_tokens=True) + "\n"
    assert proc.stdout == expected.replace("\r\n", "\n").replace("\r", "\n")
    assert "generate | prefill" in proc.stderr and "tokens/s" in proc.stderr


def test_greedy_padded_batches_match_transformers(model_dir, tokenizer, prompts_file):
    directory, model = model_dir
    results, _ = run_prompts(directory, prompts_file)
    expected = assets.reference_generate(model, batched_prompt_ids(tokenizer), {tokenizer.eos_token_id},
                                         tokenizer.pad_token_id, do_sample=False, max_new_tokens=NEW_TOKENS)
    check_against_reference(results, expected, tokenizer)


def test_sampling_with_every_warper_matches_transformers(model_dir, tokenizer, prompts_file):
    """One multinomial per step over the batch from a generator seeded like torch.manual_seed: the
    same draws, so the same ids (the scores agree to ~1e-6; a draw would flip only on a near-tie)."""
    directory, model = model_dir
    results, _ = run_prompts(directory, prompts_file, "--temperature", 0.8, "--top_k", 20, "--top_p", 0.9,
                             "--repetition_penalty", 1.2, "--seed", 123)
    torch.manual_seed(123)
    expected = assets.reference_generate(model, batched_prompt_ids(tokenizer), {tokenizer.eos_token_id},
                                         tokenizer.pad_token_id, do_sample=True, temperature=0.8, top_k=20,
                                         top_p=0.9, repetition_penalty=1.2, max_new_tokens=NEW_TOKENS)
    check_against_reference(results, expected, tokenizer)
    greedy, _ = run_prompts(directory, prompts_file)
    assert [r["token_ids"] for r in results] != [r["token_ids"] for r in greedy]


@pytest.fixture(scope="module")
def adapter_dirs(tmp_path_factory, tokenizer):
    """A tiny Llama, a random PEFT adapter on it, and the merged model (PEFT's merge_and_unload)."""
    root = tmp_path_factory.mktemp("adapter")
    base = root / "base"
    assets.make_model("llama", base, tokenizer, seed=1)
    adapter = reference_loop.make_init_adapter(base, root / "adapter")
    base_model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = peft.PeftModel.from_pretrained(base_model, adapter).eval()
    merged = root / "merged"
    merged_model = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter).merge_and_unload()
    merged_model.save_pretrained(merged, safe_serialization=True)
    tokenizer.save_pretrained(merged)
    return base, adapter, peft_model, merged, merged_model.eval()


def test_adapter_matches_peft_and_merged_model_matches_transformers(adapter_dirs, tokenizer, prompts_file):
    base, adapter, peft_model, merged, merged_model = adapter_dirs
    kwargs = dict(do_sample=False, max_new_tokens=NEW_TOKENS)
    eos = {tokenizer.eos_token_id}
    with_adapter, _ = run_prompts(base, prompts_file, "--adapter", adapter)
    expected = assets.reference_generate(peft_model, batched_prompt_ids(tokenizer), eos, tokenizer.pad_token_id,
                                         **kwargs)
    check_against_reference(with_adapter, expected, tokenizer)
    from_merged, _ = run_prompts(merged, prompts_file)
    expected_merged = assets.reference_generate(merged_model, batched_prompt_ids(tokenizer), eos,
                                                tokenizer.pad_token_id, **kwargs)
    check_against_reference(from_merged, expected_merged, tokenizer)
    plain, _ = run_prompts(base, prompts_file)
    assert [r["token_ids"] for r in plain] != [r["token_ids"] for r in with_adapter], "the adapter changed nothing"


def test_eos_from_generation_config_stop_strings_and_max_new_tokens(tmp_path, tokenizer, prompts_file):
    directory = tmp_path / "model"
    model = assets.make_model("llama", directory, tokenizer, seed=2)
    prompt = PROMPT_LINES[0]["prompt"]
    one = tmp_path / "one.jsonl"
    assets.write_jsonl(one, [PROMPT_LINES[0]])
    [free] = run_prompts(directory, one)[0]
    assert free["finish_reason"] == "length" and len(free["token_ids"]) == NEW_TOKENS

    # A second EOS id in generation_config.json: the token greedy decoding emits 4th ends the row there.
    extra_eos = free["token_ids"][3]
    config_path = directory / "generation_config.json"
    config = json.loads(config_path.read_text())
    config["eos_token_id"] = [tokenizer.eos_token_id, extra_eos]
    config_path.write_text(json.dumps(config))
    model.generation_config = transformers.GenerationConfig.from_pretrained(directory)
    [stopped] = run_prompts(directory, one)[0]
    [expected] = assets.reference_generate(model, [[tokenizer(prompt)["input_ids"]]], {tokenizer.eos_token_id, extra_eos},
                                           tokenizer.pad_token_id, do_sample=False, max_new_tokens=NEW_TOKENS)
    assert stopped["token_ids"] == expected == free["token_ids"][:free["token_ids"].index(extra_eos) + 1]
    assert stopped["finish_reason"] == "eos"

    # A stop string inside the free text: the text is cut before it, the ids end at the token completing it.
    config_path.write_text(json.dumps(dict(config, eos_token_id=tokenizer.eos_token_id)))
    text = free["text"]
    stop = text[len(text) // 2:len(text) // 2 + 2]
    [cut] = run_prompts(directory, one, "--stop", json.dumps(["never seen", stop]))[0]
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == text[:text.index(stop)]
    ids = cut["token_ids"]
    assert ids == free["token_ids"][:len(ids)]
    assert stop in tokenizer.decode(ids) and stop not in tokenizer.decode(ids[:-1])

    [short] = run_prompts(directory, one, "--max_new_tokens", 3)[0]
    assert short["token_ids"] == free["token_ids"][:3] and short["finish_reason"] == "length"


def test_bad_prompt_files_name_the_file_and_line(tmp_path, tokenizer):
    directory = tmp_path / "model"
    assets.make_model("llama", directory, tokenizer)
    missing = run_finetune(["generate", "--model_name", directory, "--prompts", tmp_path / "nope.jsonl", *CPU],
                           check=False)
    assert missing.returncode != 0 and "nope.jsonl" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 3}\n')
    proc = run_finetune(["generate", "--model_name", directory, "--prompts", bad, *CPU], check=False)
    assert proc.returncode != 0 and f"{bad}:2" in proc.stderr and "prompt" in proc.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "fine"}\n\n{"prompt": \n')
    proc = run_finetune(["generate", "--model_name", directory, "--prompts", broken, *CPU], check=False)
    assert proc.returncode != 0 and f"{broken}:3" in proc.stderr and "not JSON" in proc.stderr


def test_generation_stops_at_the_models_context(tmp_path, tokenizer):
    """A row stops ("length") when it reaches config.json's max_position_embeddings, so a huge
    --max_new_tokens never sizes the KV cache beyond the model's context; a prompt that already
    fills the context is an error naming it."""
    directory = tmp_path / "model"
    assets.make_model("llama", directory, tokenizer, seed=2)
    one = tmp_path / "one.jsonl"
    assets.write_jsonl(one, [PROMPT_LINES[0]])
    [free] = run_prompts(directory, one)[0]
    prompt_tokens = len(tokenizer(PROMPT_LINES[0]["prompt"])["input_ids"])
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps(dict(config, max_position_embeddings=prompt_tokens + 5)))
    [capped] = run_prompts(directory, one, "--max_new_tokens", 10**12)[0]
    assert capped["finish_reason"] == "length" and capped["token_ids"] == free["token_ids"][:5]

    config_path.write_text(json.dumps(dict(config, max_position_embeddings=prompt_tokens)))
    proc = run_finetune(["generate", "--model_name", directory, "--prompts", one, *CPU], check=False)
    assert proc.returncode == 1 and "max_position_embeddings" in proc.stderr and str(prompt_tokens) in proc.stderr
