"""Qwen3-MoE and Mixtral (tiny random models of make_moe_fixtures.py: top-1 and top-2 routing,
mlp_only_layers, decoder_sparse_step 2, a sliding window, experts no token reaches) compute,
train, load and generate as transformers 5.17 + PEFT 0.21 do (fp32, CPU):

  * logits of `finetune eval --dump_logits` equal transformers' (1e-5 relative), with experts
    that no token of the row reached;
  * 20 LoRA steps against reference_loop's transformers + PEFT loop, within test_train_parity's
    bounds (loss 1e-4 relative per step, every adapter tensor 1e-4 relative), on the attention
    projections only, and on the attention and the expert stacks (PEFT's target_parameters);
  * PEFT loads our adapter (expert tensors included) and its logits are ours (1e-5);
  * our merged export (per-expert tensors, as the checkpoint stores them), loaded by transformers,
    gives PEFT's merge_and_unload() logits (1e-5);
  * with output_router_logits, the router's load-balancing loss trains as transformers adds it and
    metrics.jsonl reports it (aux_loss); `finetune eval` adds it as transformers' Trainer.evaluate();
  * 2 ranks train like one process with twice the batch, experts unreached on a rank included
    (16-bit and 4-bit bases);
  * greedy `finetune generate` on left-padded batches gives transformers' generate() ids."""
import json

import peft
import pytest
import torch
from safetensors.torch import load_file

from conftest import last_json_line, run_finetune
from numerics import relative_error
import generation_assets as assets
import lora_parity
import make_moe_fixtures as moe
import reference_loop
import tiny_models
from lora_parity import SETTINGS, finetune_args

CASES = list(moe.model_cases())


@pytest.fixture(scope="module", params=CASES)
def base(request, tmp_path_factory):
    case = request.param
    root = tmp_path_factory.mktemp(case)
    moe.make_model(case, root / "base")
    rows = tiny_models.make_tokenized_rows(27, seed=5, completion_only=True)
    data = root / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    return case, root, root / "base", rows, data


def router_hits(model, ids):
    """Per sparse layer, the set of experts the row's tokens reached (transformers' own routing)."""
    with torch.no_grad():
        out = model(input_ids=ids, output_router_logits=True)
    k = model.config.num_experts_per_tok
    return [set(torch.topk(logits, k, dim=-1).indices.flatten().tolist()) for logits in out.router_logits]


def test_logits_match_transformers(base, tmp_path):
    case, root, model_dir, rows, data = base
    ours = lora_parity.eval_logits(model_dir, data, tmp_path / "logits.safetensors")
    model = moe.load_reference_model(model_dir, dtype=torch.float32).eval()
    experts = model.config.num_experts if hasattr(model.config, "num_experts") else model.config.num_local_experts
    worst = lora_parity.dumped_logits_error(ours, model, rows[:8])
    unreached = sum(experts - len(hit) for row in rows[:8]
                    for hit in router_hits(model, torch.tensor([row["input_ids"]])))
    print(f"{case}: logits vs transformers {worst:.3g} (relative); {unreached} (layer, expert) pairs unreached")
    assert unreached > 0  # some expert of some sparse layer saw no token of its row
    assert worst <= 1e-5


@pytest.fixture(scope="module", params=["attention", "experts"])
def trained(request, base):
    case, root, model_dir, rows, data = base
    targets = request.param
    adapter = moe.make_init_adapter(model_dir, root / f"init_{targets}", experts=targets == "experts")
    out = root / f"ours_{targets}"
    lora_parity.train_ours(model_dir, adapter, data, out, merged=root / f"merged_{targets}")
    return case, targets, model_dir, adapter, rows, data, out


def test_lora_steps_match_peft(trained):
    case, targets, model_dir, adapter, rows, data, out = trained
    ours, ours_adapter, _ = lora_parity.steps_match_peft(f"{case} ({targets})", model_dir, adapter, rows, out)
    if targets == "experts":
        assert any(".experts." in name for name in ours_adapter)
    assert ours[-1] < ours[0]


def test_peft_loads_our_adapter_and_logits_match(trained, tmp_path):
    case, targets, model_dir, adapter, rows, data, out = trained
    config = json.loads((out / "adapter_config.json").read_text())
    assert bool(config.get("target_parameters")) == (targets == "experts")
    ours = lora_parity.eval_logits(model_dir, data, tmp_path / "logits.safetensors", init_adapter=out)
    model = peft.PeftModel.from_pretrained(moe.load_reference_model(model_dir, dtype=torch.float32), out).eval()
    worst = lora_parity.dumped_logits_error(ours, model, rows[:6])
    print(f"{case} ({targets}): PEFT-loaded adapter logits {worst:.3g} (relative)")
    assert worst <= 1e-5


def test_merged_export_equals_merge_and_unload(trained):
    """Our merged export (per-expert checkpoint tensors, expert adapters folded in), loaded by
    transformers, gives PEFT's merge_and_unload() logits."""
    case, targets, model_dir, adapter, rows, data, out = trained
    merged = moe.load_reference_model(out.parent / f"merged_{targets}", dtype=torch.float32).eval()
    reference = peft.PeftModel.from_pretrained(moe.load_reference_model(model_dir, dtype=torch.float32),
                                               out).merge_and_unload().eval()
    base = moe.load_reference_model(model_dir, dtype=torch.float32).eval()
    if targets == "experts":  # the expert stacks themselves moved (not only the attention)
        merged_state, base_state = merged.state_dict(), base.state_dict()
        moved = [name for name in base_state if ".experts." in name and
                 relative_error(merged_state[name], base_state[name]) > 1e-4]
        assert moved, "no expert stack carries its adapter: the comparison would be vacuous"
    worst = lora_parity.logits_error(merged, reference, rows[:4])
    for row in rows[:4]:
        assert lora_parity.logits_error(merged, base, [row]) > 1e-4  # the adapter changed the model
    print(f"{case} ({targets}): merged export vs merge_and_unload logits {worst:.3g} (relative)")
    assert worst <= 1e-5


@pytest.mark.parametrize("case", CASES)
def test_greedy_generate_equals_transformers(case, tmp_path):
    tokenizer = assets.make_tokenizer()
    model = moe.make_model(case, tmp_path / "model", lm_head_std=0.1, vocab_size=len(tokenizer),
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           pad_token_id=tokenizer.pad_token_id)
    tokenizer.save_pretrained(tmp_path / "model")
    lora_parity.greedy_generate_matches(model, tokenizer, tmp_path / "model", tmp_path)


AUX_COEF = 0.05  # large enough that the load-balancing term moves the adapters measurably
AUX_STEPS = 8


def train_with_router_loss(model_dir, adapter, rows, steps, batch_size, accumulation, lr, warmup, scheduler,
                           max_grad_norm, weight_decay=0.01):
    """reference_loop.train_reference with transformers' router loss: each micro-batch's loss is its
    token loss sum plus router_aux_loss_coef x aux_loss (load_balancing_loss_func with the
    attention_mask) x its trained tokens, over the step's trained tokens (Note [Router
    load-balancing loss]). Returns (step losses, step aux losses, PEFT model)."""
    torch.manual_seed(0)
    model = peft.PeftModel.from_pretrained(moe.load_reference_model(model_dir, dtype=torch.float32), adapter,
                                           is_trainable=True)
    model.train()
    coef = model.config.router_aux_loss_coef
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay,
                                  foreach=False)
    sched = reference_loop.schedule(scheduler, optimizer, warmup, steps)
    batches = reference_loop.micro_batches(rows, batch_size)
    per_step = [batches[i:i + accumulation] for i in range(0, len(batches), accumulation)]
    losses, aux_losses = [], []
    for step in range(steps):
        collated = [reference_loop.collate(b) for b in per_step[step % len(per_step)]]
        counts = [int((torch.nn.functional.pad(l, (0, 1), value=-100)[:, 1:] != -100).sum()) for _, _, l in collated]
        total = sum(counts)
        step_loss = step_aux = 0.0
        for (ids, mask, labels), count in zip(collated, counts):
            out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
            shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
            token_sum = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                                          shifted.reshape(-1), ignore_index=-100, reduction="sum")
            loss = (token_sum + coef * out.aux_loss * count) / total
            loss.backward()
            step_loss += loss.item()
            step_aux += out.aux_loss.item() * count / total
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        sched.step()
        optimizer.zero_grad()
        losses.append(step_loss)
        aux_losses.append(step_aux)
    return losses, aux_losses, model


@pytest.mark.parametrize("case", ["qwen3_moe_top2", "mixtral_top1_window"])
def test_router_aux_loss_trains_as_transformers(case, tmp_path):
    """output_router_logits in config.json: the load-balancing loss enters the loss and the
    gradients as transformers adds it, and metrics.jsonl reports it as aux_loss."""
    model_dir = tmp_path / "base"
    moe.make_model(case, model_dir, output_router_logits=True, router_aux_loss_coef=AUX_COEF)
    adapter = moe.make_init_adapter(model_dir, tmp_path / "init", experts=True)
    rows = tiny_models.make_tokenized_rows(16, seed=5, completion_only=True)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, rows)
    out = tmp_path / "ours"
    # The term is not linear in the rows of a micro-batch: the reference's literal micro-batches.
    run_finetune(finetune_args(model_dir, adapter, data, out, steps=AUX_STEPS) + ["--step_planning", "literal"])
    ref_losses, ref_aux, ref_model = train_with_router_loss(model_dir, adapter, rows, steps=AUX_STEPS, **SETTINGS)
    lines = [json.loads(line) for line in open(out / "metrics.jsonl")]
    worst_loss = max(abs(m["loss"] - want) / abs(want) for m, want in zip(lines, ref_losses))
    worst_aux = max(abs(m["aux_loss"] - want) / abs(want) for m, want in zip(lines, ref_aux))
    ours_adapter = load_file(str(out / "adapter_model.safetensors"))
    ref_adapter = reference_loop.lora_state(ref_model)
    worst_adapter = max(relative_error(ours_adapter[name], ref) for name, ref in ref_adapter.items())
    print(f"{case}: router loss run vs transformers: loss {worst_loss:.3g}, aux_loss {worst_aux:.3g}, "
          f"adapter {worst_adapter:.3g} (relative)")
    assert len(lines) == AUX_STEPS
    assert worst_loss <= 1e-4 and worst_aux <= 1e-4
    assert worst_adapter <= 1e-4
    # The term matters: without it the adapters end elsewhere.
    plain_losses, plain_model = reference_loop.train_reference(model_dir, adapter, rows, steps=AUX_STEPS, **SETTINGS)
    plain_adapter = reference_loop.lora_state(plain_model)
    assert max(relative_error(plain_adapter[n], ref) for n, ref in ref_adapter.items()) > 1e-3


def router_eval_reference(model, rows, batch_size):
    """The evaluation loss finetune reports: every batch's token loss sum plus router_aux_loss_coef
    x its aux_loss (load_balancing_loss_func with the attention_mask) x its trained tokens, over all
    trained tokens; with one batch, transformers' loss (token mean + coef x aux_loss) itself.
    Returns (that loss, the token loss alone)."""
    coef = model.config.router_aux_loss_coef
    loss_sum = token_sum = tokens = 0.0
    for start in range(0, len(rows), batch_size):
        ids, mask, labels = reference_loop.collate(rows[start:start + batch_size])
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_router_logits=True)
        shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
        batch_sum = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                                      shifted.reshape(-1), ignore_index=-100, reduction="sum").item()
        count = int((shifted != -100).sum())
        token_sum += batch_sum
        loss_sum += batch_sum + coef * out.aux_loss.item() * count
        tokens += count
    return loss_sum / tokens, token_sum / tokens


def trainer_eval_loss(model, rows, work):
    """transformers' Trainer.evaluate() over `rows` in one batch (right-padded as reference_loop)."""
    import transformers

    def collator(features):
        ids, mask, labels = reference_loop.collate(features)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    args = transformers.TrainingArguments(output_dir=str(work), per_device_eval_batch_size=len(rows), report_to=[],
                                          use_cpu=True)
    trainer = transformers.Trainer(model=model, args=args, data_collator=collator, eval_dataset=rows)
    return trainer.evaluate()["eval_loss"]


@pytest.mark.parametrize("case", ["qwen3_moe_top2", "mixtral_top1_window"])
def test_eval_loss_adds_the_router_term_as_transformers(case, tmp_path):
    """output_router_logits in config.json: transformers' MoE forward adds router_aux_loss_coef x
    aux_loss to the loss whenever it gets labels, in evaluation too; `finetune eval` reports
    Trainer.evaluate()'s eval_loss on one batch, and each batch's term weighted by its trained
    tokens on several (the token loss is token-weighted across batches)."""
    model_dir = tmp_path / "base"
    model = moe.make_model(case, model_dir, output_router_logits=True, router_aux_loss_coef=AUX_COEF)
    rows = tiny_models.make_tokenized_rows(7, seed=3, completion_only=True)  # rows of different lengths: padding
    data = tmp_path / "eval.jsonl"
    tiny_models.write_jsonl(data, rows)
    for batch_size in (len(rows), 3):
        proc = run_finetune(["eval", "--model_name", model_dir, "--dataset", data, "--dtype", "float32",
                             "--device", "cpu", "--per_device_eval_batch_size", batch_size])
        ours = last_json_line(proc.stdout)["loss"]
        want, token_loss = router_eval_reference(model, rows, batch_size)
        if batch_size == len(rows):
            hf = trainer_eval_loss(model, rows, tmp_path / "hf")
            print(f"{case}: eval loss {ours:.8g}, Trainer.evaluate {hf:.8g}, token loss alone {token_loss:.8g}")
            assert abs(hf - want) <= 1e-5 * abs(want)  # the reference is transformers' own
        assert abs(ours - want) <= 1e-5 * abs(want), (batch_size, ours, want)
        assert abs(want - token_loss) > 1e-3 * abs(want)  # the router term is there to see


@pytest.mark.parametrize("load_in_4bit", [False, True], ids=["16bit", "4bit"])
def test_two_ranks_train_like_one_process(tmp_path, load_in_4bit):
    """DDP over Gloo with expert adapters: 2 ranks x batch 2 = 1 process x batch 4 (test_ddp.py's
    bound), with top-1 of 8 experts so a rank's micro-batch leaves experts unreached (their adapter
    slices get zero gradients on that rank and still enter the all-reduce); also over a 4-bit base
    (QLoRA: attention projections and expert stacks in NF4)."""
    from ddp_launch import check_ok, run_launched
    from test_ddp import TOLERANCE
    case = "mixtral_top1_window"
    model_dir = tmp_path / "base"
    moe.make_model(case, model_dir)
    adapter = moe.make_init_adapter(model_dir, tmp_path / "init", experts=True)
    rows = tiny_models.make_tokenized_rows(16, seed=7, completion_only=True)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, rows)

    def args(out, batch):
        return ["--model_name", model_dir, "--dataset", data, "--init_adapter", adapter, "--output_dir", out,
                "--max_steps", 4, "--per_device_train_batch_size", batch, "--gradient_accumulation_steps", 1,
                "--learning_rate", 2e-2, "--warmup_steps", 1, "--lr_scheduler_type", "linear",
                "--max_grad_norm", 1.0, "--dtype", "float32", "--device", "cpu", "--ddp_backend", "gloo",
                "--shuffle", "false", "--logging_steps", 1, "--ddp_timeout", 60,
                "--use_gradient_checkpointing", "false"] + (["--load_in_4bit"] if load_in_4bit else [])

    check_ok(run_launched("single", 1, args(tmp_path / "single", 4)), "single process")
    check_ok(run_launched("torchrun", 2, args(tmp_path / "two", 2)), "torchrun")
    single = [json.loads(line) for line in open(tmp_path / "single" / "metrics.jsonl")]
    two = [json.loads(line) for line in open(tmp_path / "two" / "metrics.jsonl")]
    assert len(two) == len(single) == 4
    for got, want in zip(two, single):
        assert got["tokens"] == want["tokens"]
        assert abs(got["loss"] - want["loss"]) <= TOLERANCE * abs(want["loss"])
    got_adapter = load_file(str(tmp_path / "two" / "adapter_model.safetensors"))
    want_adapter = load_file(str(tmp_path / "single" / "adapter_model.safetensors"))
    initial = load_file(str(adapter / "adapter_model.safetensors"))
    assert set(got_adapter) == set(want_adapter)
    worst = 0.0
    for name, want in want_adapter.items():
        assert relative_error(want, initial[name]) > 1e-3, name
        worst = max(worst, relative_error(got_adapter[name], want))
    print(f"{case}: 2 ranks vs 1 process, adapter {worst:.3g} (relative)")
    assert worst <= TOLERANCE
    # Some rank's micro-batch left an expert of some sparse layer unreached (transformers' routing).
    model = moe.load_reference_model(model_dir, dtype=torch.float32).eval()
    unreached = 0
    for rank in range(2):
        rank_rows = rows[rank::2][:2]
        ids, _, _ = reference_loop.collate(rank_rows)
        unreached += sum(model.config.num_local_experts - len(hit) for hit in router_hits(model, ids))
    assert unreached > 0
