"""Fixtures for test_chat_tokenization: real tokenizers (trained here, as in the tokenizer
fixtures) with real chat templates, and the token ids transformers produces for whole
conversations (apply_chat_template(tokenize=True)) and for alpaca rows (tokenizer(text)).

  OUTDIR/<family>/   tokenizer files with chat_template set, rows.jsonl, expected.json
"""
import json
import os
import sys

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_data_fixtures as data_fx  # noqa: E402
import make_tokenizer_fixtures as tok_fx  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "It is 4."}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue"}, {"role": "user", "content": "Another one, please!"},
     {"role": "assistant", "content": "Green, then red. Über café naïve 東京 🎉"}],
    [{"role": "user", "content": "  spaces around  "}, {"role": "assistant", "content": "\n\nnew lines\tand tabs"}],
]

ALPACA = [
    {"instruction": "Reverse the word.", "input": "abc", "output": "cba"},
    {"instruction": "Say hello.", "input": "", "output": "Hello there, friend."},
]


def set_template(directory, template):
    path = os.path.join(directory, "tokenizer_config.json")
    config = json.load(open(path, encoding="utf-8"))
    config["chat_template"] = template
    tok_fx.write_json(path, config)


def ids_of(encoded):
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        return list(encoded["input_ids"])
    return list(encoded)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpus = tok_fx.training_corpus()
    tok_fx.read_spm_proto_without_protobuf()
    families = {
        "llama3": (lambda d: tok_fx.make_llama3(d, corpus), data_fx.LLAMA3_TEMPLATE),
        "chatml": (lambda d: tok_fx.make_qwen2(d, corpus), data_fx.CHATML_TEMPLATE),
        "mistral": (lambda d: tok_fx.make_spm(d, corpus), data_fx.MISTRAL_TEMPLATE),
    }
    for family, (make, template) in families.items():
        directory = os.path.join(out, family)
        make(directory)
        set_template(directory, template)
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        conversations = CONVERSATIONS
        expected = {"conversations": [ids_of(tokenizer.apply_chat_template(c, tokenize=True)) for c in conversations],
                    "alpaca": [tokenizer(data_fx.ALPACA_PROMPT.format(r["instruction"], r["input"], r["output"]) +
                                         tokenizer.eos_token)["input_ids"] for r in ALPACA]}
        with open(os.path.join(directory, "conversations.jsonl"), "w", encoding="utf-8") as f:
            for c in conversations:
                f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
        with open(os.path.join(directory, "alpaca.jsonl"), "w", encoding="utf-8") as f:
            for r in ALPACA:
                f.write(json.dumps(r) + "\n")
        tok_fx.write_json(os.path.join(directory, "expected.json"), expected)


if __name__ == "__main__":
    main()
