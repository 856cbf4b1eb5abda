"""Fixtures for test_preference_rows, test_orpo_rows, test_preference_loss and
test_dpo_objective, produced by TRL 1.16's own code.

  OUTDIR/<family>/   tokenizer files with chat_template set, rows.jsonl, expected.json: for each
                     truncation setting, each row as DPOTrainer._prepare_dataset and
                     DataCollatorForPreference leave it (dropped, or the chosen and rejected
                     input_ids and labels, labels = input_ids where completion_mask is set, else
                     -100, as DPOTrainer._compute_loss builds them); and extract_prompt's output
                     for rows without a prompt; orpo_rows.jsonl and expected.json's "orpo": each
                     row as ORPOTrainer's maybe_extract_prompt, maybe_apply_chat_template and
                     tokenize_row leave it, for several max_length
  OUTDIR/objective/  base/ (a tiny Llama of tiny_models.py), adapter/ (a PEFT LoRA adapter with
                     non-zero lora_B), rows.json (pairs as chosen/rejected input_ids and labels)
                     and expected.json: DPOTrainer._compute_loss on that PeftModel and those
                     pairs (reference = adapters disabled) for sigmoid, hinge and ipo, and
                     orpo_expected.json: ORPOTrainer.get_batch_loss_metrics on that model and pairs
  OUTDIR/losses.json per-sequence log-prob sums (policy and reference, chosen and rejected) and
                     completion lengths, with the loss and metrics DPOTrainer._compute_loss logs
                     for each loss type, and ORPO's loss and metrics from
                     ORPOTrainer.get_batch_loss_metrics / odds_ratio_loss
"""
import collections
import json
import os
import sys
import types

import datasets
import torch
import transformers
from datasets import Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # ORPO lives in trl.experimental
import make_data_fixtures as data_fx  # noqa: E402
import tiny_models  # noqa: E402
import make_tokenizer_fixtures as tok_fx  # noqa: E402
from trl.data_utils import extract_prompt, maybe_apply_chat_template, maybe_extract_prompt  # noqa: E402
from trl.experimental.orpo.orpo_trainer import ORPOTrainer  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

TEXT_ROWS = [
    {"prompt": "The sky is", "chosen": " blue.", "rejected": " green, like grass and trees."},
    {"prompt": "Question: what is 2 + 2?\nAnswer:", "chosen": " 4", "rejected": " It is five, of course."},
    {"prompt": "Über café naïve 東京", "chosen": " 🎉 yes", "rejected": " no"},
]
IMPLICIT_TEXT_ROWS = [
    {"chosen": "The sky is blue today.", "rejected": "The sky is green today."},  # space moves to the completions
    {"chosen": "Über café ☕ oui", "rejected": "Über café ☕ non merci"},             # code points, not bytes
    {"chosen": "abc", "rejected": "abcdef"},                                        # a prefix: TRL keeps the last char out
]
CONVERSATIONS_ROWS = [
    {"prompt": [{"role": "user", "content": "What is 2 + 2?"}],
     "chosen": [{"role": "assistant", "content": "It is 4."}],
     "rejected": [{"role": "assistant", "content": "It is 5, or maybe 22, depending on how you read it."}]},
    {"prompt": [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a colour."},
                {"role": "assistant", "content": "Blue"}, {"role": "user", "content": "Another one, please!"}],
     "chosen": [{"role": "assistant", "content": "Green."}],
     "rejected": [{"role": "assistant", "content": "No. Über café naïve 東京 🎉"}]},
]
IMPLICIT_CONVERSATIONS_ROWS = [
    {"chosen": [{"role": "user", "content": "What color is the sky?"}, {"role": "assistant", "content": "It is blue."}],
     "rejected": [{"role": "user", "content": "What color is the sky?"},
                  {"role": "assistant", "content": "It is green, and the grass is blue."}]},
    {"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye, friend."}],
     "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Whatever."}]},
]
FORMS = {"text": TEXT_ROWS, "implicit_text": IMPLICIT_TEXT_ROWS, "conversations": CONVERSATIONS_ROWS,
         "implicit_conversations": IMPLICIT_CONVERSATIONS_ROWS}
# ORPO extracts the prompt when the row's is of another kind than the completions (DPO refuses it).
ORPO_EXTRA_ROWS = [
    {"prompt": "an ignored string prompt", "chosen": IMPLICIT_CONVERSATIONS_ROWS[0]["chosen"],
     "rejected": IMPLICIT_CONVERSATIONS_ROWS[0]["rejected"]},
]
ORPO_MAX_LENGTHS = [1024, 12, 30]
# (max_length, truncation_mode): none, and lengths that cut completions, prompts, and drop rows.
TRUNCATIONS = [(None, "keep_start"), (12, "keep_start"), (12, "keep_end"), (30, "keep_start"), (30, "keep_end")]


def set_template(directory, template):
    path = os.path.join(directory, "tokenizer_config.json")
    config = json.load(open(path, encoding="utf-8"))
    config["chat_template"] = template
    tok_fx.write_json(path, config)


def trl_processed_row(tokenizer, row, max_length, truncation_mode):
    """One row through DPOTrainer._prepare_dataset and DataCollatorForPreference; None if dropped."""
    owner = types.SimpleNamespace(_tokenizer=tokenizer)
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=max_length, truncation_mode=truncation_mode)
    dataset = DPOTrainer._prepare_dataset(owner, Dataset.from_list([row]), tokenizer, args, "train")
    if len(dataset) == 0:
        return None
    example = dataset[0]
    collator = DataCollatorForPreference(pad_token_id=0, max_length=max_length, truncation_mode=truncation_mode)
    batch = collator([{k: example[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}])
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    out = {}
    for i, name in enumerate(("chosen", "rejected")):
        keep = batch["attention_mask"][i].bool()
        out[name + "_input_ids"] = batch["input_ids"][i][keep].tolist()
        out[name + "_labels"] = labels[i][keep].tolist()
    return out


def trl_orpo_row(tokenizer, row, max_length):
    """One row through ORPOTrainer's maybe_extract_prompt, maybe_apply_chat_template and tokenize_row."""
    owner = types.SimpleNamespace(is_encoder_decoder=False, processing_class=tokenizer, max_length=max_length)
    owner.build_tokenized_answer = lambda prompt, answer: ORPOTrainer.build_tokenized_answer(owner, prompt, answer)
    example = maybe_apply_chat_template(maybe_extract_prompt(dict(row)), tokenizer)
    batch = ORPOTrainer.tokenize_row(owner, example)
    return {key: batch[key] for key in ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels")}


def write_family(directory, make, template):
    make(directory)
    set_template(directory, template)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    rows, expected = [], {"truncations": [], "extracted": []}
    for form, form_rows in FORMS.items():
        for row in form_rows:
            rows.append(row)
            expected["extracted"].append(extract_prompt(row) if "prompt" not in row else None)
    for max_length, mode in TRUNCATIONS:
        processed = [trl_processed_row(tokenizer, row, max_length, mode) for row in rows]
        expected["truncations"].append({"max_length": max_length, "truncation_mode": mode, "rows": processed})
    orpo_rows = rows + ORPO_EXTRA_ROWS
    expected["orpo"] = [{"max_length": max_length, "rows": [trl_orpo_row(tokenizer, row, max_length) for row in orpo_rows]}
                        for max_length in ORPO_MAX_LENGTHS]
    for name, written in (("rows.jsonl", rows), ("orpo_rows.jsonl", orpo_rows)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            for row in written:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tok_fx.write_json(os.path.join(directory, "expected.json"), expected)


class _Accelerator:
    device = torch.device("cpu")

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather

    def unwrap_model(self, model):
        return model


def fp32_list(tensor):
    return [float(v) for v in tensor.float().tolist()]


def dpo_case(loss_type, beta, label_smoothing, sums, lengths):
    """DPOTrainer._compute_loss on a stand-in model whose per-token log-probs sum to `sums`."""
    batch, width = lengths.size(0), int(lengths.max()) + 1
    positions = torch.arange(width)
    completion_mask = (positions >= 1) & (positions <= lengths.unsqueeze(1))  # (2B, T): token 0 is the prompt
    per_token = torch.zeros(batch, width - 1)
    for row in range(batch):
        n = int(lengths[row])
        per_token[row, :n] = sums[row] / n
        per_token[row, n - 1] = sums[row] - per_token[row, : n - 1].sum()  # the fp32 sum is sums[row] exactly
    policy_sums = per_token.sum(dim=1)

    def model(**kwargs):
        zeros = torch.zeros_like(per_token)
        return types.SimpleNamespace(log_probs=per_token, entropy=zeros, mean_logits=zeros,
                                     is_top1=torch.zeros_like(per_token, dtype=torch.bool))

    owner = types.SimpleNamespace(
        model=types.SimpleNamespace(training=True), accelerator=_Accelerator(), aux_loss_enabled=False,
        ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type],
        loss_weights=[1.0], beta=beta, label_smoothing=label_smoothing, use_weighting=False,
        _metrics={"train": collections.defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    ref = torch.randn(batch, dtype=torch.float32) * 3 - 20
    inputs = {"input_ids": torch.zeros(batch, width, dtype=torch.long), "attention_mask": torch.ones(batch, width),
              "completion_mask": completion_mask.long(), "ref_chosen_logps": ref[: batch // 2],
              "ref_rejected_logps": ref[batch // 2:]}
    loss = DPOTrainer._compute_loss(owner, model, inputs, False)
    metrics = {k: v[0] for k, v in owner._metrics["train"].items() if k.startswith(("rewards/", "logps/"))}
    half = batch // 2
    return {"loss_type": loss_type, "beta": beta, "label_smoothing": label_smoothing,
            "policy_chosen_logps": fp32_list(policy_sums[:half]), "policy_rejected_logps": fp32_list(policy_sums[half:]),
            "reference_chosen_logps": fp32_list(ref[:half]), "reference_rejected_logps": fp32_list(ref[half:]),
            "chosen_lengths": lengths[:half].tolist(), "rejected_lengths": lengths[half:].tolist(),
            "loss": float(loss), "metrics": metrics}


def orpo_case(beta, chosen, rejected, nll):
    """ORPOTrainer.get_batch_loss_metrics with the forward replaced by the given mean log-probs and NLL."""
    owner = types.SimpleNamespace(beta=beta, accelerator=_Accelerator(), aux_loss_enabled=False)
    owner.odds_ratio_loss = lambda c, r: ORPOTrainer.odds_ratio_loss(owner, c, r)
    logits = torch.zeros(chosen.size(0), 2, 3)
    owner.concatenated_forward = lambda model, batch: (chosen, rejected, logits, logits, nll)
    loss, metrics = ORPOTrainer.get_batch_loss_metrics(owner, None, {}, "train")
    keep = ("rewards/", "logps/", "nll_loss", "log_odds_ratio", "log_odds_chosen")
    return {"beta": beta, "chosen_mean_logps": fp32_list(chosen), "rejected_mean_logps": fp32_list(rejected),
            "nll_loss": float(nll), "loss": float(loss), "metrics": {k: v for k, v in metrics.items() if k.startswith(keep)}}


def write_losses(path):
    torch.manual_seed(0)
    dpo, orpo = [], []
    for loss_type, beta, label_smoothing in [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.0), ("hinge", 0.1, 0.0),
                                             ("hinge", 2.0, 0.0), ("ipo", 0.1, 0.0), ("ipo", 0.7, 0.0),
                                             ("robust", 0.1, 0.1), ("robust", 0.3, 0.25)]:
        for batch in (1, 4):
            sums = (torch.randn(2 * batch) * 3 - 20).float()
            lengths = torch.randint(1, 9, (2 * batch,))
            dpo.append(dpo_case(loss_type, beta, label_smoothing, sums, lengths))
    for beta in (0.1, 0.25, 1.0):
        for batch in (1, 4):
            chosen = -(torch.rand(batch) * 3 + 0.01).float()  # mean log-probs, both sides of log1mexp's branch
            rejected = -(torch.rand(batch) * 3 + 0.01).float()
            orpo.append(orpo_case(beta, chosen, rejected, torch.tensor(2.5, dtype=torch.float32) + torch.rand(())))
    tok_fx.write_json(path, {"dpo": dpo, "orpo": orpo})


def random_pairs(count, seed, vocab):
    g = torch.Generator().manual_seed(seed)
    ids = lambda low, high: torch.randint(3, vocab, (int(torch.randint(low, high + 1, (1,), generator=g)),),
                                          generator=g).tolist()
    return [{"prompt_ids": ids(2, 6), "chosen_ids": ids(1, 7), "rejected_ids": ids(1, 7)} for _ in range(count)]


def write_objective(out):
    os.makedirs(out, exist_ok=True)
    model = tiny_models.make_model("llama", os.path.join(out, "base"), seed=3)
    with torch.no_grad():  # sharper next-token distributions, so the adapter moves the log-ratios by O(1)
        model.lm_head.weight.mul_(30.0)
    model.save_pretrained(os.path.join(out, "base"), safe_serialization=True)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=128, lora_dropout=0.0,
                                                  target_modules=["q_proj", "v_proj", "o_proj", "down_proj"]))
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=g) * 2.0)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    add_fused_lm_head(peft_model.get_base_model(), outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    peft_model.train()
    pairs = random_pairs(3, seed=5, vocab=tiny_models.VOCAB)
    inputs = DataCollatorForPreference(pad_token_id=0)(pairs)
    rows = {"chosen": [], "rejected": []}
    for pair in pairs:
        for side in ("chosen", "rejected"):
            rows[side].append({"input_ids": pair["prompt_ids"] + pair[side + "_ids"],
                               "labels": [-100] * len(pair["prompt_ids"]) + pair[side + "_ids"]})
    cases = []
    for loss_type, beta in [("sigmoid", 0.1), ("hinge", 0.5), ("ipo", 0.1)]:
        owner = types.SimpleNamespace(
            model=peft_model, ref_model=None, accelerator=_Accelerator(), aux_loss_enabled=False, ld_alpha=None,
            precompute_ref_logps=False, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
            beta=beta, label_smoothing=0.0, use_weighting=False, args=types.SimpleNamespace(gradient_checkpointing_kwargs=None),
            _metrics={"train": collections.defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
        loss = DPOTrainer._compute_loss(owner, peft_model, inputs, False)
        metrics = {k: v[0] for k, v in owner._metrics["train"].items() if k.startswith(("rewards/", "logps/"))}
        cases.append({"loss_type": loss_type, "beta": beta, "loss": loss.item(), "metrics": metrics})
    tok_fx.write_json(os.path.join(out, "rows.json"), rows)
    tok_fx.write_json(os.path.join(out, "expected.json"), cases)
    tok_fx.write_json(os.path.join(out, "orpo_expected.json"), orpo_objective_cases(out, rows))


def orpo_objective_cases(out, rows):
    """ORPOTrainer.get_batch_loss_metrics (its own concatenated_forward) on the saved model and pairs."""
    from peft import PeftModel
    from trl.experimental.utils import DPODataCollatorWithPadding

    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(out, "base"), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, os.path.join(out, "adapter"))
    model.train()
    features = []
    for chosen, rejected in zip(rows["chosen"], rows["rejected"], strict=True):
        feature = {}
        for side, row in (("chosen", chosen), ("rejected", rejected)):
            feature[side + "_input_ids"] = row["input_ids"]
            feature[side + "_attention_mask"] = [1] * len(row["input_ids"])
            feature[side + "_labels"] = row["labels"]
        features.append(feature)
    batch = DPODataCollatorWithPadding(pad_token_id=0, is_encoder_decoder=False)(features)
    cases = []
    for beta in (0.1, 0.5):
        owner = types.SimpleNamespace(beta=beta, accelerator=_Accelerator(), aux_loss_enabled=False,
                                      is_encoder_decoder=False, padding_value=0,
                                      concatenated_inputs=ORPOTrainer.concatenated_inputs,
                                      get_batch_logps=ORPOTrainer.get_batch_logps)
        owner.odds_ratio_loss = lambda c, r, owner=owner: ORPOTrainer.odds_ratio_loss(owner, c, r)
        owner.concatenated_forward = lambda m, b, owner=owner: ORPOTrainer.concatenated_forward(owner, m, b)
        loss, metrics = ORPOTrainer.get_batch_loss_metrics(owner, model, batch, "train")
        keep = ("rewards/", "logps/", "nll_loss", "log_odds_ratio", "log_odds_chosen")
        cases.append({"beta": beta, "loss": loss.item(),
                      "metrics": {k: v for k, v in metrics.items() if k.startswith(keep)}})
    return cases


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    corpus = tok_fx.training_corpus()
    tok_fx.read_spm_proto_without_protobuf()
    families = {
        "llama3": (lambda d: tok_fx.make_llama3(d, corpus), data_fx.LLAMA3_TEMPLATE),
        "chatml": (lambda d: tok_fx.make_qwen2(d, corpus), data_fx.CHATML_TEMPLATE),
        "mistral": (lambda d: tok_fx.make_spm(d, corpus), data_fx.MISTRAL_TEMPLATE),
    }
    for family, (make, template) in families.items():
        write_family(os.path.join(out, family), make, template)
    write_losses(os.path.join(out, "losses.json"))
    write_objective(os.path.join(out, "objective"))


if __name__ == "__main__":
    main()
