#!/usr/bin/env python3
"""Fixtures for executing real chat templates: for 24 model families, a tiny tokenizer (trained here,
no downloads) carrying the family's special tokens and its real chat template, conversations, and
what transformers / TRL make of them.

Usage: make_chat_templates_fixtures.py OUTDIR

Templates: TRL's copies in the installed package (trl/chat_templates/*.jinja, read at run time) and,
for the families TRL lacks, the copies committed in tests/reference/chat_templates/ (README.md
there names each source). Layout (every family directory loads with AutoTokenizer.from_pretrained):

  OUTDIR/families.json                     [{"family", "template_source", "template_storage", ...}]
  OUTDIR/<family>/tokenizer.json | tokenizer.model, tokenizer_config.json
                  chat_template.jinja      (family smollm2 only: the template lives here, not in the config)
  OUTDIR/<family>/conversations.jsonl      {"messages", ["tools"], ["chat_template_kwargs"], ["add_generation_prompt"]}
  OUTDIR/<family>/prompt_completion.jsonl  {"prompt": [messages], "completion": [assistant message], ["chat_template_kwargs"]}
  OUTDIR/<family>/plain_prompt_completion.jsonl  {"prompt": str, "completion": str}
  OUTDIR/<family>/expected.json            see tests/reference/chat_templates/README.md ("Fixture layout")

Masks: assistant_masks_generation is TRL's own (SFTTrainer._prepare_dataset with
assistant_only_loss=True; only for templates with {% generation %} markers, i.e. the *_training
families); assistant_masks_prefix is tests/reference/chat_masks.py's per-turn prefix difference
(every family). Prompt-completion masks are TRL's completion_mask (the same preparation with
completion_only_loss=True).
"""
import copy
import json
import os
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chat_masks  # noqa: E402
import make_tokenizer_fixtures as tok_fx  # noqa: E402

STORED = os.path.join(HERE, "chat_templates")

# ---------------------------------------------------------------------------------------------
# Conversations
# ---------------------------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
# Nine alphanumeric characters: Mistral's templates insist on it.
TOOL_CALL = {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

CONVERSATIONS = [
    {"name": "single_turn",
     "messages": [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "It is 4."}]},
    {"name": "system_two_turns",
     "messages": [{"role": "system", "content": "You are a terse assistant."},
                  {"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "Another one, please!"}, {"role": "assistant", "content": "Green, then red."}]},
    {"name": "three_turns_no_system",
     "messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello. How can I help?"},
                  {"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "1, 2, 3."},
                  {"role": "user", "content": "Thanks"}, {"role": "assistant", "content": "You're welcome!"}]},
    {"name": "unicode",
     "messages": [{"role": "user", "content": "Café, naïve, Ångström — 東京で会いましょう 😀 x\u3000y"},
                  {"role": "assistant", "content": "Über-gut ! 你好，世界。 👨\u200d👩\u200d👧 ✓\u3000fin 🇫🇷"},
                  {"role": "user", "content": "\u3000全角スペース\u3000と русский текст?"},
                  {"role": "assistant", "content": "Да. ¿Qué más? — ✨"}]},
    {"name": "unicode_system",
     "messages": [{"role": "system", "content": "Réponds en français, s'il te plaît. 🇫🇷"},
                  {"role": "user", "content": "Bonjour ! Ça va ?"},
                  {"role": "assistant", "content": "Très bien, merci. Et vous ?"}]},
    {"name": "whitespace",
     "messages": [{"role": "user", "content": "  padded question \t\n"},
                  {"role": "assistant", "content": "\n\n  indented answer\twith a tab  \n"}]},
    {"name": "reasoning_in_content",
     "messages": [{"role": "user", "content": "What is 6 * 7?"},
                  {"role": "assistant", "content": "<think>\nSix sevens are forty-two.\n</think>\n\nIt is 42."}]},
    {"name": "reasoning_content_field",
     "messages": [{"role": "user", "content": "Is 7 prime?"},
                  {"role": "assistant", "content": "Yes.", "reasoning_content": "7 has no divisor but 1 and 7."},
                  {"role": "user", "content": "And 9?"},
                  {"role": "assistant", "content": "No, 9 = 3 * 3.", "reasoning_content": "3 divides 9."}]},
    {"name": "tool_call",
     "tools": [WEATHER_TOOL],
     "messages": [{"role": "system", "content": "You can look the weather up."},
                  {"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                  {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                   "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
                  {"role": "assistant", "content": "It is 18 °C and clear in Paris."}]},
    {"name": "tools_listed_no_call",
     "tools": [WEATHER_TOOL],
     "messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello!"}]},
    {"name": "list_content",
     "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "A short description."}]}]},
    {"name": "list_content_system",
     "messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                  {"role": "user", "content": [{"type": "text", "text": "Why is the sea salty?"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "Rivers carry salts into it."}]}]},
    {"name": "generation_prompt", "add_generation_prompt": True,
     "messages": [{"role": "user", "content": "Continue the list: a, b,"}, {"role": "assistant", "content": "c, d,"},
                  {"role": "user", "content": "More."}]},
    {"name": "generation_prompt_system", "add_generation_prompt": True,
     "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello?"}]},
]

PROMPT_COMPLETION = [
    {"name": "single",
     "prompt": [{"role": "user", "content": "What is the capital of France?"}],
     "completion": [{"role": "assistant", "content": "Paris."}]},
    {"name": "system_unicode",
     "prompt": [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Colour of the sky? 🌤"}],
     "completion": [{"role": "assistant", "content": "Bleu — blue."}]},
    {"name": "multi_turn_prompt",
     "prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Say 'ok'."}],
     "completion": [{"role": "assistant", "content": "ok"}]},
]

PLAIN_PROMPT_COMPLETION = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    {"prompt": "Translate 'cat' to French:", "completion": " chat 🐱"},
    {"prompt": "2+2=", "completion": "4"},
]

# ---------------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------------

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                   "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEEPSEEK_SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                     "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                     "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
                     "<｜tool▁output▁end｜>", "<|im_start|>", "<|im_end|>"]
MISTRAL_V3_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                      "[/TOOL_RESULTS]"]
NEMO_SPECIALS = ["<unk>", "<s>", "</s>"] + MISTRAL_V3_CONTROL
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
PHI35_ADDED = [("<|endoftext|>", False), ("<|assistant|>", True), ("<|placeholder1|>", True), ("<|placeholder2|>", True),
               ("<|placeholder3|>", True), ("<|placeholder4|>", True), ("<|system|>", True), ("<|end|>", True),
               ("<|placeholder5|>", True), ("<|placeholder6|>", True), ("<|user|>", True)]  # (content, rstrip)
DATE = {"date_string": "26 Jul 2024"}


def F(name, source, kind, **kw):
    family = {"family": name, "template_source": source, "kind": kind, "specials": [], "nonspecial": [], "bos": None,
              "eos": None, "pad": None, "unk": None, "bos_in_post_processor": False, "storage": "tokenizer_config",
              "kwargs": {}, "rstrip": {}, "add_prefix_space": None}
    family.update(kw)
    return family


def families():
    llama3 = dict(specials=LLAMA3_SPECIALS, bos="<|begin_of_text|>", eos="<|eot_id|>", bos_in_post_processor=True)
    qwen25 = dict(specials=QWEN_SPECIALS, nonspecial=["<tool_call>", "</tool_call>"], eos="<|im_end|>", pad="<|endoftext|>")
    qwen3 = dict(specials=QWEN_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>",
                 nonspecial=["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
    deepseek = dict(specials=DEEPSEEK_SPECIALS, nonspecial=["<think>", "</think>"], bos="<｜begin▁of▁sentence｜>",
                    eos="<｜end▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>", bos_in_post_processor=True)
    gemma = dict(added=[(s, True, False) for s in GEMMA_SPECIALS], bos="<bos>", eos="<eos>", pad="<pad>",
                 add_prefix_space=False)
    phi35 = dict(added=[(c, True, r) for c, r in PHI35_ADDED], bos="<s>", eos="<|endoftext|>", pad="<|endoftext|>")
    hermes_specials = LLAMA3_SPECIALS + ["<|im_start|>", "<|im_end|>"]
    return [
        F("llama3", "trl:llama3.jinja", "bl_llama3", **llama3),
        F("llama3_1", "trl:llama3_1.jinja", "bl_llama3", **llama3),
        F("llama3_2", "trl:llama3_2.jinja", "bl_llama3", kwargs=DATE, **llama3),
        F("qwen2_5", "trl:qwen2_5.jinja", "bl_qwen2", **qwen25),
        F("qwen3_think", "trl:qwen3.jinja", "bl_qwen2", kwargs={"enable_thinking": True}, **qwen3),
        F("qwen3_nothink", "trl:qwen3.jinja", "bl_qwen2", kwargs={"enable_thinking": False}, **qwen3),
        F("deepseek_r1_distill", "trl:deepseek_r1_distill.jinja", "bl_qwen2", **deepseek),
        F("gemma2", "trl:gemma.jinja", "spm", **gemma),
        F("gemma3", "trl:gemma3.jinja", "spm", **gemma),
        F("phi3_5", "trl:phi3_5.jinja", "spm", **phi35),
        F("mistral_v0_1", "stored:mistral_v0_1.jinja", "spm", bos="<s>", eos="</s>", unk="<unk>"),
        F("mistral_v0_3", "stored:mistral_v0_3.jinja", "spm_mistral_v3", bos="<s>", eos="</s>", unk="<unk>"),
        F("mistral_nemo", "stored:mistral_nemo.jinja", "bl_llama3", specials=NEMO_SPECIALS, bos="<s>", eos="</s>",
          unk="<unk>", bos_in_post_processor=True),
        F("phi_4", "stored:phi_4.jinja", "bl_llama3", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_sep|>"],
          bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>"),
        F("smollm2", "stored:smollm2.jinja", "bl_gpt2", specials=QWEN_SPECIALS, bos="<|im_start|>", eos="<|im_end|>",
          pad="<|im_end|>", unk="<|endoftext|>", storage="chat_template.jinja"),
        F("chatml", "stored:chatml.jinja", "spm", added=[("<|im_start|>", True, False), ("<|im_end|>", True, False)],
          bos="<s>", eos="<|im_end|>", unk="<unk>"),
        F("hermes2_pro", "stored:chatml.jinja+stored:hermes2_pro_tool_use.jinja", "bl_llama3", specials=hermes_specials,
          nonspecial=["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"],
          bos="<|begin_of_text|>", eos="<|im_end|>", bos_in_post_processor=True, storage="named_list"),
        # TRL's training templates ({% generation %} markers): TRL's own assistant masks.
        F("llama3_training", "trl:llama3_training.jinja", "bl_llama3", **llama3),
        F("qwen2_5_training", "trl:qwen2_5_training.jinja", "bl_qwen2", **qwen25),
        F("qwen3_training", "trl:qwen3_training.jinja", "bl_qwen2", **qwen3),
        F("deepseek_r1_distill_training", "trl:deepseek_r1_distill_training.jinja", "bl_qwen2", **deepseek),
        F("gemma2_training", "trl:gemma_training.jinja", "spm", **gemma),
        F("gemma3_training", "trl:gemma3_training.jinja", "spm", **gemma),
        F("phi3_5_training", "trl:phi3_5_training.jinja", "spm", **phi35),
    ]


def trl_template_dir():
    import trl
    return os.path.join(os.path.dirname(trl.__file__), "chat_templates")


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def load_template(source):
    """The template text, or {name: text} for a named list ("a+b": default, then tool_use)."""
    parts = source.split("+")
    texts = []
    for part in parts:
        where, name = part.split(":", 1)
        texts.append(read_text(os.path.join(trl_template_dir() if where == "trl" else STORED, name)))
    if len(texts) == 1:
        return texts[0]
    return {"default": texts[0], "tool_use": texts[1]}


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------

GPT2_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def byte_level_pre(pattern):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def make_byte_level(directory, base_json, family):
    """One BPE vocabulary (trained once) dressed as the family's tokenizer.json: normalizer,
    pre-tokenizer, added tokens and post-processor like the family's."""
    from tokenizers import AddedToken, Tokenizer, processors
    data = copy.deepcopy(base_json)
    kind = family["kind"]
    if kind == "bl_llama3":
        data["normalizer"] = None
        data["pre_tokenizer"] = byte_level_pre(tok_fx.LLAMA3_PATTERN)
        data["model"]["ignore_merges"] = True
    elif kind == "bl_qwen2":
        data["normalizer"] = {"type": "NFC"}
        data["pre_tokenizer"] = byte_level_pre(tok_fx.QWEN2_PATTERN)
        data["model"]["ignore_merges"] = False
    elif kind == "bl_gpt2":
        data["normalizer"] = None
        data["pre_tokenizer"] = GPT2_BYTE_LEVEL
        data["model"]["ignore_merges"] = False
    else:
        raise ValueError(kind)
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in family["specials"]])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in family["nonspecial"]])
    byte_level = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    if family["bos_in_post_processor"]:
        bos = family["bos"]
        tok.post_processor = processors.Sequence([byte_level, processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, tok.token_to_id(bos))])])
    else:
        tok.post_processor = byte_level
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
              "model_max_length": 131072, "added_tokens_decoder": tok_fx.added_tokens_decoder(tok)}
    return config


def train_spm(prefix, corpus, control_symbols=()):
    import sentencepiece as spm
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=prefix, model_type="bpe", vocab_size=2000,
        character_coverage=0.9995, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2,
        control_symbols=list(control_symbols))
    os.remove(prefix + ".vocab")
    return prefix + ".model"


def make_spm(directory, model_path, family):
    """tokenizer.model plus tokenizer_config.json with the family's tokens as added tokens (ids after
    the sentencepiece vocabulary, as Phi-3 / ChatML fine-tunes of Llama-2 and Mistral ship them)."""
    import sentencepiece as spm
    os.makedirs(directory, exist_ok=True)
    shutil.copy(model_path, os.path.join(directory, "tokenizer.model"))
    sp = spm.SentencePieceProcessor(model_file=model_path)
    decoder = {}
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i):
            decoder[str(i)] = {"content": sp.id_to_piece(i), "lstrip": False, "rstrip": False, "normalized": False,
                               "single_word": False, "special": True}
    next_id = sp.get_piece_size()
    for content, special, rstrip in family.get("added", []):
        decoder[str(next_id)] = {"content": content, "lstrip": False, "rstrip": rstrip, "normalized": False,
                                 "single_word": False, "special": special}
        next_id += 1
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False, "legacy": False,
              "clean_up_tokenization_spaces": False, "added_tokens_decoder": decoder}
    if family["add_prefix_space"] is not None:
        config["add_prefix_space"] = family["add_prefix_space"]
    return config


def write_family_tokenizer(directory, family, template, bases):
    if family["kind"].startswith("bl_"):
        config = make_byte_level(directory, bases["byte_level"], family)
    else:
        config = make_spm(directory, bases[family["kind"]], family)
    for key in ("bos", "eos", "pad", "unk"):
        config[key + "_token"] = family[key]
    storage = family["storage"]
    if storage == "tokenizer_config":
        config["chat_template"] = template
    elif storage == "named_list":
        config["chat_template"] = [{"name": name, "template": text} for name, text in template.items()]
    elif storage == "chat_template.jinja":
        with open(os.path.join(directory, "chat_template.jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(template)
    else:
        raise ValueError(storage)
    tok_fx.write_json(os.path.join(directory, "tokenizer_config.json"), config)


# ---------------------------------------------------------------------------------------------
# Expected values
# ---------------------------------------------------------------------------------------------

def error_of(exc):
    return {"type": type(exc).__name__, "message": str(exc)}


def ids_of(encoded):
    if hasattr(encoded, "keys"):
        return list(encoded["input_ids"])
    return list(encoded)


def conversation_row(tokenizer, row, family_kwargs, bos_text):
    messages = row["messages"]
    tools = row.get("tools")
    kwargs = dict(family_kwargs)
    add_generation_prompt = bool(row.get("add_generation_prompt", False))
    out = {"name": row["name"], "template_kwargs": kwargs, "add_generation_prompt": add_generation_prompt}
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt, **kwargs)
        ids = ids_of(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                                   add_generation_prompt=add_generation_prompt, **kwargs))
    except Exception as exc:  # the template raised: the C++ side must raise too
        out["error"] = error_of(exc)
        return out
    out.update({"error": None, "text": text, "input_ids": ids,
                "starts_with_bos": bool(bos_text) and text.startswith(bos_text)})
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(encoded["input_ids"]) == ids, (row["name"], "tokenizer(rendered text) != apply_chat_template ids")
    offsets = [list(o) for o in encoded["offset_mapping"]]
    out["token_offsets"] = offsets
    if add_generation_prompt:
        return out
    try:
        ref = chat_masks.prefix_assistant_mask(tokenizer, messages, tools=tools, **kwargs)
    except Exception as exc:  # a prefix of the conversation does not render
        out.update({"message_spans": None, "assistant_spans": None, "assistant_spans_bytes": None,
                    "assistant_masks_prefix": None, "prefix_error": error_of(exc)})
        return out
    assert ref["text"] == text and ref["input_ids"] == ids
    out.update({"message_spans": ref["message_spans"], "assistant_spans": ref["assistant_spans"],
                "assistant_spans_bytes": chat_masks.char_spans_to_byte_spans(text, ref["assistant_spans"]),
                "assistant_masks_prefix": ref["assistant_mask"], "prefix_error": None,
                "assistant_masks_prefix_tokens": chat_masks.prefix_token_mask(tokenizer, messages, tools=tools, **kwargs)})
    return out


class TrlPreparation:
    """TRL's SFT dataset preparation itself: SFTTrainer._prepare_dataset (tokenize_fn / _tokenize,
    labels folded from assistant_masks / completion_mask), called on a one-row datasets.Dataset with the
    state SFTTrainer.__init__ would give it, without building a model."""

    def __init__(self, workdir):
        import datasets
        from trl import SFTConfig, SFTTrainer
        from trl.chat_template_utils import get_training_chat_template, has_generation_markers
        datasets.disable_progress_bars()
        datasets.disable_caching()
        self.datasets = datasets
        self.prepare = SFTTrainer._prepare_dataset
        self.has_generation_markers = has_generation_markers
        self.get_training_chat_template = get_training_chat_template
        common = dict(output_dir=os.path.join(workdir, "trl"), max_length=None, report_to=[], use_cpu=True, bf16=False,
                      dataset_num_proc=None)
        self.args = {
            "assistant": SFTConfig(assistant_only_loss=True, **common),
            "completion": SFTConfig(completion_only_loss=True, **common),
        }

    def _run(self, tokenizer, row, mode):
        from datasets import Dataset, Features, Json, List, Value
        args = self.args[mode]
        # SFTTrainer.__init__: with assistant_only_loss, a template without generation markers is
        # swapped for TRL's training template; otherwise the tokenizer's own is used.
        if args.assistant_only_loss and not self.has_generation_markers(tokenizer.chat_template):
            chat_template = self.get_training_chat_template(tokenizer)
        else:
            chat_template = None
        owner = SimpleNamespace(_tokenizer=tokenizer, chat_template=chat_template,
                                completion_only_loss=mode == "completion")
        if "messages" in row:
            features = Features({"messages": List(Json()), "tools": Json(), "chat_template_kwargs": Json()})
        elif isinstance(row["prompt"], list):
            features = Features({"prompt": List(Json()), "completion": List(Json()), "chat_template_kwargs": Json()})
        else:
            features = Features({"prompt": Value("string"), "completion": Value("string")})
        dataset = Dataset.from_list([row], features=features)
        prepared = self.prepare(owner, dataset, tokenizer, args, False, None, "train")[0]
        mask = [0 if label == -100 else 1 for label in prepared["labels"]]
        return list(prepared["input_ids"]), mask

    def assistant_mask(self, tokenizer, messages, tools, kwargs):
        return self._run(tokenizer, {"messages": messages, "tools": tools, "chat_template_kwargs": kwargs}, "assistant")

    def completion_mask(self, tokenizer, row):
        return self._run(tokenizer, row, "completion")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def build_family(out, family, bases, trl_prep, transformers):
    directory = os.path.join(out, family["family"])
    template = load_template(family["template_source"])
    write_family_tokenizer(directory, family, template, bases)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    loaded = tokenizer.chat_template
    assert (loaded == template) if not isinstance(template, dict) else (loaded == template), family["family"]
    default_template = template["default"] if isinstance(template, dict) else template
    has_markers = trl_prep.has_generation_markers(default_template)
    kwargs = family["kwargs"]
    bos_text = tokenizer.bos_token or ""

    # conversations.jsonl: what a dataset row looks like (TRL's column names).
    lines = []
    for row in CONVERSATIONS:
        line = {"messages": row["messages"]}
        if row.get("tools"):
            line["tools"] = row["tools"]
        if kwargs:
            line["chat_template_kwargs"] = kwargs
        if row.get("add_generation_prompt"):
            line["add_generation_prompt"] = True
        lines.append(line)
    write_jsonl(os.path.join(directory, "conversations.jsonl"), lines)

    rows = []
    for row in CONVERSATIONS:
        result = conversation_row(tokenizer, row, kwargs, bos_text)
        if has_markers and result["error"] is None and not result["add_generation_prompt"]:
            trl_ids, trl_mask = trl_prep.assistant_mask(tokenizer, row["messages"], row.get("tools"), kwargs)
            # TRL renders through the same apply_chat_template; its ids are the conversation's ids.
            assert trl_ids == result["input_ids"], (family["family"], row["name"], "TRL ids differ")
            result["assistant_masks_generation"] = trl_mask
        rows.append(result)

    pc_lines, pc_rows = [], []
    for row in PROMPT_COMPLETION:
        line = {"prompt": row["prompt"], "completion": row["completion"]}
        if kwargs:
            line["chat_template_kwargs"] = kwargs
        pc_lines.append(line)
        entry = {"name": row["name"], "template_kwargs": kwargs}
        try:
            ids, mask = trl_prep.completion_mask(tokenizer, {**line, "chat_template_kwargs": kwargs})
            entry.update({"error": None, "input_ids": ids, "completion_mask": mask,
                          "text": tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False, **kwargs)})
        except Exception as exc:
            entry["error"] = error_of(exc)
        pc_rows.append(entry)
    write_jsonl(os.path.join(directory, "prompt_completion.jsonl"), pc_lines)

    plain_rows = []
    for row in PLAIN_PROMPT_COMPLETION:
        ids, mask = trl_prep.completion_mask(tokenizer, dict(row))
        plain_rows.append({"prompt": row["prompt"], "completion": row["completion"], "input_ids": ids,
                           "completion_mask": mask})
    write_jsonl(os.path.join(directory, "plain_prompt_completion.jsonl"), PLAIN_PROMPT_COMPLETION)

    special = {}
    for name in ("bos", "eos", "pad", "unk"):
        token = getattr(tokenizer, name + "_token")
        special[name + "_token"] = token
        special[name + "_token_id"] = tokenizer.convert_tokens_to_ids(token) if token is not None else None
    first_ok = next((r for r in rows if r["error"] is None), None)
    expected = {
        "family": family["family"],
        "template_source": family["template_source"],
        "template_storage": family["storage"],
        "tokenizer_kind": family["kind"],
        "has_generation_markers": has_markers,
        **special,
        "starts_with_bos": bool(first_ok and first_ok["starts_with_bos"]),
        "template_kwargs": kwargs,
        "conversations": rows,
        "prompt_completion": pc_rows,
        "plain_prompt_completion": plain_rows,
    }
    tok_fx.write_json(os.path.join(directory, "expected.json"), expected)
    tokens = sum(len(r.get("input_ids", [])) for r in rows + pc_rows + plain_rows)
    return {"family": family["family"], "template_source": family["template_source"],
            "template_storage": family["storage"], "tokenizer_kind": family["kind"],
            "has_generation_markers": has_markers, "starts_with_bos": expected["starts_with_bos"],
            "rows": len(rows) + len(pc_rows) + len(plain_rows),
            "errors": sum(1 for r in rows + pc_rows if r.get("error")), "tokens": tokens}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_chat_templates_fixtures.py OUTDIR")
    out = sys.argv[1]
    started = time.time()
    os.makedirs(out, exist_ok=True)
    import transformers
    transformers.logging.set_verbosity_error()
    tok_fx.read_spm_proto_without_protobuf()

    corpus = tok_fx.training_corpus()
    work = tempfile.mkdtemp(prefix="chat_templates_")
    try:
        base = tok_fx.train_byte_level(corpus, tok_fx.LLAMA3_PATTERN, [], use_nfc=False, bos=None)
        bases = {"byte_level": json.loads(base.to_str()),
                 "spm": train_spm(os.path.join(work, "spm", "tokenizer"), corpus),
                 "spm_mistral_v3": train_spm(os.path.join(work, "spm_v3", "tokenizer"), corpus, MISTRAL_V3_CONTROL)}
        trl_prep = TrlPreparation(work)
        summary = [build_family(out, family, bases, trl_prep, transformers) for family in families()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tok_fx.write_json(os.path.join(out, "families.json"), summary)

    header = f"{'family':30} {'template source':58} {'rows':>4} {'errors':>6} {'tokens':>6}  gen-markers  bos-text"
    print(header)
    print("-" * len(header))
    for s in summary:
        print(f"{s['family']:30} {s['template_source']:58} {s['rows']:>4} {s['errors']:>6} {s['tokens']:>6}  "
              f"{'yes' if s['has_generation_markers'] else 'no':11}  {'yes' if s['starts_with_bos'] else 'no'}")
    print(f"{len(summary)} families in {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
