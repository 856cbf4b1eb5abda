"""`finetune dpo` on the adapter kinds and exports test_dpo.py does not cover:

(a) DoRA: every step's loss, rewards and log-probs of a 10-step fp32 CPU run from a PEFT DoRA
    adapter equal TRL 1.16's DPOTrainer on PeftModel(base, that adapter) (TRL's reference: a frozen
    copy of it) within test_dpo.py's 1e-5 relative (rewards: of the log-prob sums they are the
    difference of, scale_of) (tests/reference/make_dpo_variants_fixtures.py: test_dpo.py's model,
    rows, optimizer and schedule); the adapter saved has the magnitude vectors and PEFT loads it.
(b) QLoRA: the same against DPOTrainer on the base that transformers + bitsandbytes load in NF4
    (double quantization, fp32 compute) with a LoRA adapter kept in fp32 (what --load_in_4bit
    trains, as test_qlora.py's PEFT reference; TRL itself casts a quantized model's adapter to
    bf16: the fixture generator says why it is undone), and PEFT loads the saved adapter over
    bitsandbytes' 4-bit model, giving the logits `finetune eval --load_in_4bit --adapter` gives.
(c) Export after dpo: `--save_model --save_method merged_16bit --save_gguf` writes a merged
    directory that transformers loads, with PEFT's merge_and_unload() logits of the adapter the run
    saved, and a GGUF file equal to llama.cpp's converter run on that directory, which llama.cpp
    loads."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from conftest import fixture_json, run_finetune
from numerics import relative_error
from test_dpo import TOLERANCE, case_of, metrics
from test_gguf import LOGIT_BOUNDS, PRE_TOKENIZER, TOKENIZERS, assert_same_gguf
import gguf_models
import gguf_reference
import llama_cpp_reference

FIXTURES = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "dpo_variants")
BETA = 0.1  # the cases' (TRL's and finetune's default)
LOGITS_BOUND = 1e-5  # test_qlora.py's: same weights and dtype, GEMM summation order only
MERGE_BOUND = 1e-6   # test_export.py's: W + B A scaling summed in fp32 by both


@pytest.fixture(scope="module")
def expected():
    return fixture_json("dpo_variants", "make_dpo_variants_fixtures.py")


def scale_of(key, want):
    """What a value's 1e-5 is relative to: the value itself, except for the rewards. A reward is
    beta x (policy - reference) log-prob sum, two sums near -90 and -210 here that fp32 knows to
    ~1e-7 relative; over the first steps it is ~1e-3 of them, so it is held to beta x the two sums
    it is the difference of, as test_dpo.py holds rewards/margins to the two rewards (measured
    worst: ~1e-7 of that scale for DoRA and QLoRA, where 1e-5 of the reward itself, 1.7e-5 off at
    DoRA's step 3, is below fp32's rounding of the sums)."""
    def sums(side):
        policy = want[f"logps/{side}"]
        return BETA * (abs(policy) + abs(policy - want[f"rewards/{side}"] / BETA))
    if key in ("rewards/chosen", "rewards/rejected"):
        return sums(key.split("/")[1])
    if key == "rewards/margins":
        return sums("chosen") + sums("rejected")
    return abs(want[key])


def assert_matches_trl(lines, case):
    assert len(lines) == len(case["steps"])
    for step, (got, want) in enumerate(zip(lines, case["steps"]), 1):
        for key, value in want.items():
            bound = TOLERANCE * scale_of(key, want)
            assert abs(got[key] - value) <= bound, f"{case['name']} step {step}: {key} {got[key]} vs TRL {value}"


def run_case(expected, name, out):
    case = case_of(expected, name)
    run_finetune([case["command"], "--model_name", os.path.join(FIXTURES, "base"),
                  "--dataset", os.path.join(FIXTURES, case["data"]),
                  "--init_adapter", os.path.join(FIXTURES, case["adapter"]), "--output_dir", out] +
                 expected["flags"] + case["options"] +
                 ["--dtype", "float32", "--device", "cpu", "--shuffle", "false", "--logging_steps", 1,
                  "--lora_dropout", 0.0, "--use_gradient_checkpointing", "false"])
    return case


def expect_trained_from(out, adapter):
    """The saved adapter has the starting adapter's tensors, every one moved by training."""
    saved = load_file(str(out / "adapter_model.safetensors"))
    initial = load_file(os.path.join(FIXTURES, adapter, "adapter_model.safetensors"))
    assert set(saved) == set(initial)
    for name, tensor in initial.items():
        assert relative_error(saved[name], tensor) > 1e-6, f"{name} did not move"
    return saved


def test_dora_every_step_matches_trl(expected, tmp_path):
    import peft
    import transformers
    out = tmp_path / "dora"
    case = run_case(expected, "dora_sigmoid", out)
    assert_matches_trl(metrics(out), case)
    saved = expect_trained_from(out, "dora_adapter")
    assert sum(name.endswith(".lora_magnitude_vector") for name in saved) == 2 * 7
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(FIXTURES, "base"), dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, out)
    assert model.peft_config["default"].use_dora


def test_qlora_every_step_matches_trl(expected, tmp_path):
    import peft
    import transformers
    import bnb_cpu
    from test_qlora import bnb_model
    bnb_cpu.use_portable_cpu_kernels()  # bitsandbytes' own arithmetic on every host (bnb_cpu.py)
    out = tmp_path / "qlora"
    case = run_case(expected, "qlora_sigmoid", out)
    assert_matches_trl(metrics(out), case)
    expect_trained_from(out, "lora_adapter")
    model = peft.PeftModel.from_pretrained(bnb_model(os.path.join(FIXTURES, "base")), out).eval()
    assert type(model.base_model.model.model.layers[0].self_attn.q_proj.base_layer).__name__ == "Linear4bit"
    rows = [json.loads(line) for line in open(os.path.join(FIXTURES, case["data"]))][:2]
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(FIXTURES, "base"))
    ids = [tokenizer(row["prompt"] + row["chosen"])["input_ids"] for row in rows]
    data = tmp_path / "eval.jsonl"
    with open(data, "w") as f:
        for row_ids in ids:
            f.write(json.dumps({"input_ids": row_ids}) + "\n")
    dump = tmp_path / "logits.safetensors"
    run_finetune(["eval", "--model_name", os.path.join(FIXTURES, "base"), "--adapter", out, "--dataset", data,
                  "--load_in_4bit", "--dtype", "float32", "--device", "cpu", "--per_device_eval_batch_size", 1,
                  "--dump_logits", dump])
    ours = load_file(str(dump))
    for i, row_ids in enumerate(ids):
        with torch.no_grad():
            want = model(input_ids=torch.tensor([row_ids])).logits[0]
        assert relative_error(ours[f"logits.{i}"], want) <= LOGITS_BOUND, i


@pytest.fixture(scope="module")
def exported(tmp_path_factory, expected):  # `expected`: the fixtures (explicit.jsonl) exist
    """A 3-step dpo run on test_gguf.py's llama3_rope model (a tokenizer llama.cpp's converter
    knows) from a fresh LoRA adapter, saving the merged model and an F16 GGUF."""
    root = tmp_path_factory.mktemp("dpo_export")
    base = root / "llama3_rope"
    gguf_models.make_gguf_model("llama3_rope", base, TOKENIZERS)
    saved = root / "saved"
    run_finetune(["dpo", "--model_name", base, "--dataset", os.path.join(FIXTURES, "explicit.jsonl"),
                  "--output_dir", root / "run", "--max_steps", 3, "--per_device_train_batch_size", 2,
                  "--learning_rate", 5e-3, "--max_length", 64, "--dtype", "float32", "--device", "cpu",
                  "--save_model", "--save_method", "merged_16bit", "--save_gguf", "--quantization", "f16",
                  "--save_path", saved])
    return base, root / "run", saved


def test_merged_export_after_dpo_equals_peft_merge_and_unload(exported):
    import peft
    import transformers
    base, run, saved = exported
    reference = peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), run)
    reference = reference.merge_and_unload().eval()
    original = transformers.AutoModelForCausalLM.from_pretrained(base).eval()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(saved).eval()
    ids = torch.tensor([[5, 17, 300, 42, 1000, 7, 1200]])
    with torch.no_grad():
        want, got, before = reference(ids).logits, loaded(ids).logits, original(ids).logits
    assert relative_error(want, before) > 1e-4, "training did not move the merged model: the check would be vacuous"
    assert relative_error(got, want) <= MERGE_BOUND


def test_gguf_after_dpo_is_the_converters_file_and_llama_cpp_loads_it(exported, tmp_path):
    import transformers
    base, run, saved = exported
    ours = saved / "llama3_rope.F16.gguf"
    reference = tmp_path / "reference.f16.gguf"
    gguf_reference.run_converter(saved, PRE_TOKENIZER["llama3_rope"], "f16", reference)
    assert_same_gguf(ours, reference)
    tokens = [5, 17, 300, 42, 1000, 7, 1200, 99, 3, 250]
    with torch.no_grad():
        want = transformers.AutoModelForCausalLM.from_pretrained(saved).eval()(torch.tensor([tokens])).logits[0]
    got = torch.from_numpy(llama_cpp_reference.llama_cpp_logits(str(ours), tokens))
    assert relative_error(got, want) <= LOGIT_BOUNDS["F16"]
