"""Fixtures for test_dataset_shapes: dataset files of every shape finetune reads, with the token
ids and labels the references make of them.

  OUTDIR/tokenizer/        a byte-level BPE tokenizer (Llama-3 style, BOS from the post-processor)
  OUTDIR/raw/<name>        raw text files; expected: unsloth's RawTextDataLoader chunks
                           (unsloth/dataprep/raw_text.py of the pinned wheel, loaded by path)
  OUTDIR/layouts/<name>    .json files in the layouts HF datasets reads (array, JSON Lines,
                           columns); expected: the rows datasets.load_dataset("json") yields
  OUTDIR/rows/<name>       text, alpaca and plain prompt/completion rows; expected: the ids and
                           labels of TRL's own tokenization path (trl.data_utils._tokenize,
                           common_prefix_length, SFTTrainer's add_eos rule)
  OUTDIR/expected.json     all of the above
"""
import importlib.util
import json
import os
import sys

import datasets
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixtures as tok_fx  # noqa: E402
from trl.data_utils import _tokenize, common_prefix_length  # noqa: E402

from make_data_fixtures import ALPACA_PROMPT as UNSLOTH_ALPACA_TEMPLATE  # noqa: E402

# The prompt part of unsloth-cli.py's alpaca template: everything before the output's {}.
ALPACA_PROMPT = UNSLOTH_ALPACA_TEMPLATE[:UNSLOTH_ALPACA_TEMPLATE.rindex("{}")]


def unsloth_raw_text_module():
    """unsloth/dataprep/raw_text.py from the installed wheel, without importing unsloth itself
    (whose __init__ needs a GPU)."""
    import importlib.metadata as md
    files = [f for f in md.files("unsloth") if str(f).endswith("dataprep/raw_text.py")]
    spec = importlib.util.spec_from_file_location("unsloth_raw_text", files[0].locate())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path, content, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as f:
        f.write(content)


def raw_cases(out, tokenizer):
    loader_module = unsloth_raw_text_module()
    corpus = " ".join(tok_fx.training_corpus()[:40])
    files = {
        "book.txt": ("\ufeff" + corpus + "\r\nSecond paragraph\rthird line.\n").encode("utf-8"),
        "notes.md": ("# Title\n\n" + corpus[:300] + " Über 東京 🎉\n").encode("utf-8"),
        "rows.jsonl": "\n".join([json.dumps({"text": corpus[:200]}), "not json", json.dumps({"content": "c" * 50}),
                                 json.dumps({"text": "", "body": "skipped: text is the first string field"}),
                                 json.dumps([1, 2]), json.dumps({"prompt": "p " * 30})]).encode("utf-8"),
        "array.json": json.dumps([{"text": corpus[:150]}, {"description": "d " * 40}]).encode("utf-8"),
        "lines.json": (json.dumps({"message": "m " * 40}) + "\n" + json.dumps({"text": "t " * 40}) + "\n").encode("utf-8"),
        "short.txt": "just a few words".encode("utf-8"),
    }
    settings = [(16, 4), (7, 0), (32, 31), (2048, 512), (10, 0)]
    cases = []
    for name, content in files.items():
        path = os.path.join(out, "raw", name)
        write(path, content, "wb")
        for chunk_size, stride in settings:
            loader = loader_module.RawTextDataLoader(tokenizer, chunk_size, stride)
            dataset = loader.load_from_file(path)
            cases.append({"file": "raw/" + name, "chunk_size": chunk_size, "stride": stride,
                          "chunks": [list(ids) for ids in dataset["input_ids"]]})
    # An exact multiple with stride 0: unsloth ends a full window at EOS instead of a lone-EOS chunk.
    n = len(tokenizer(corpus, add_special_tokens=False)["input_ids"])
    write(os.path.join(out, "raw", "exact.txt"), corpus)
    loader = loader_module.RawTextDataLoader(tokenizer, n + 1, 0)
    cases.append({"file": "raw/exact.txt", "chunk_size": n + 1, "stride": 0,
                  "chunks": [list(ids) for ids in loader.load_from_file(os.path.join(out, "raw", "exact.txt"))["input_ids"]]})
    return cases


def layout_cases(out):
    rows = [{"text": "alpha", "id": 1}, {"text": "beta ünï", "id": 2}, {"text": "gamma", "id": 3}]
    layouts = {
        "array.json": json.dumps(rows, indent=2, ensure_ascii=False),
        "lines.json": "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
        "columns.json": json.dumps({"text": [r["text"] for r in rows], "id": [r["id"] for r in rows]}, indent=2,
                                   ensure_ascii=False),
        "one_line.json": json.dumps(rows[0]),
    }
    layouts["lines.txt"] = "first line\r\nsecond\u2028third\n\nfifth ünï 東京\rsixth\x0cseventh\n"
    cases = []
    for name, content in layouts.items():
        path = os.path.join(out, "layouts", name)
        write(path, content)
        builder = "text" if name.endswith(".txt") else "json"
        loaded = datasets.load_dataset(builder, data_files=path, split="train", cache_dir=os.path.join(out, ".hf_cache"))
        cases.append({"file": "layouts/" + name, "rows": loaded.to_list()})
    return cases


def trl_text_row(tokenizer, text):
    eos = tokenizer.eos_token
    if not text.endswith(eos):
        text = text + eos
    ids = _tokenize(tokenizer, text)["input_ids"]
    return {"input_ids": ids, "labels": ids}


def trl_prompt_completion(tokenizer, prompt, completion):
    eos = tokenizer.eos_token
    if not completion.endswith(eos):
        completion = completion + eos
    prompt_ids = _tokenize(tokenizer, prompt)["input_ids"]
    ids = _tokenize(tokenizer, prompt + completion)["input_ids"]
    prompt_len = common_prefix_length(prompt_ids, ids)
    return {"input_ids": ids, "labels": [-100] * prompt_len + ids[prompt_len:]}


def row_cases(out, tokenizer):
    eos = tokenizer.eos_token
    text_rows = [{"text": "Plain text to model."}, {"text": "Already ends with EOS" + eos}, {"text": "Ünïcödé 東京 🎉  "}]
    pair_rows = [{"prompt": "Question: what is 2+2?\nAnswer:", "completion": " 4"},
                 {"prompt": "Translate 'chat' to English:", "completion": " cat" + eos},
                 {"prompt": "Merge across the boundary: abc", "completion": "def and more"}]
    alpaca_rows = [{"instruction": "Reverse the word.", "input": "abc", "output": "cba"},
                   {"instruction": "Say hello.", "input": "", "output": "Hello there, friend."},
                   {"instruction": "No input key.", "output": "fine"}]
    groups = {
        "text.jsonl": (text_rows, [trl_text_row(tokenizer, r["text"]) for r in text_rows]),
        "pairs.jsonl": (pair_rows, [trl_prompt_completion(tokenizer, r["prompt"], r["completion"]) for r in pair_rows]),
        # Unsloth CLI formats alpaca rows with its prompt; the output is the completion.
        "alpaca.jsonl": (alpaca_rows, [trl_prompt_completion(tokenizer, ALPACA_PROMPT.format(r["instruction"], r.get("input", "")),
                                                              r["output"]) for r in alpaca_rows]),
    }
    cases = []
    for name, (rows, expected) in groups.items():
        write(os.path.join(out, "rows", name), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        cases.append({"file": "rows/" + name, "samples": expected})
    return cases


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tok_dir = os.path.join(out, "tokenizer")
    tok_fx.make_llama3(tok_dir, tok_fx.training_corpus())
    tokenizer = transformers.AutoTokenizer.from_pretrained(tok_dir)
    expected = {"raw": raw_cases(out, tokenizer), "layouts": layout_cases(out), "rows": row_cases(out, tokenizer)}
    tok_fx.write_json(os.path.join(out, "expected.json"), expected)
    print(f"{len(expected['raw'])} raw text cases, {len(expected['layouts'])} layouts, {len(expected['rows'])} row files")


if __name__ == "__main__":
    main()
