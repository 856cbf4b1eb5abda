#!/usr/bin/env python3
"""Reference fixtures for the tokenizer module.

Usage: make_tokenizer_fixtures.py OUTDIR

Trains three small tokenizers at test time (seconds, no downloads) on a programmatically generated
multilingual corpus and writes, for each, a model directory plus the ids transformers produces:

  OUTDIR/llama3/      tokenizer.json like Llama-3 (Split with the Llama-3 regex + ByteLevel(use_regex=False),
                      ignore_merges, TemplateProcessing prepending <|begin_of_text|>), tokenizer_config.json
  OUTDIR/llama3_add_eos/  the same tokenizer.json with add_bos_token false / add_eos_token true
  OUTDIR/qwen2/       tokenizer.json like Qwen2 (NFC, Qwen2 regex, no BOS, ByteLevel post-processor),
                      merges written in the "a b" string form, tokenizer_config.json
  OUTDIR/spm_llama2/  tokenizer.model (sentencepiece BPE, byte_fallback, like Llama-2) + tokenizer_config.json
  OUTDIR/spm_llama2_json/  the same tokenizer.model plus the tokenizer.json transformers' LlamaTokenizer
                      converts it to (Metaspace "first", byte fallback): both files, as Llama-2 / TinyLlama ship
  OUTDIR/phi3_legacy/ that tokenizer.json in the older layout Phi-3 / Llama-2 / Mistral-7B-v0.1 ship
                      (Prepend + Replace normalizers, no pre-tokenizer, unk_token), config.json model_type
                      phi3, for which AutoTokenizer runs the file as written
  OUTDIR/mistral_metaspace/  Metaspace(prepend_scheme "always", split) pre-tokenizer and Metaspace decoder,
                      config.json model_type mistral
  OUTDIR/gemma/       a Gemma-style vocabulary (<pad> <eos> <bos> <unk> <mask> <start_of_turn> ..., no dummy
                      prefix) converted by GemmaTokenizer, with tokenizer.model beside it, model_type gemma2
  OUTDIR/<name>/expected.json  {"cases": [{"text", "ids_with_special", "ids_without_special",
                                           "decoded", "decoded_skip_special"}], "special": {...}}

The reference is transformers.AutoTokenizer.from_pretrained(dir); for the tokenizer.json cases the
generator also checks that the bare `tokenizers` library agrees.
"""
import json
import os
import random
import sys
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

WORDS = {
    "latin": ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "training",
              "model", "language", "hello", "world", "data", "learning", "rate", "batch", "gradient"],
    "accents": ["café", "naïve", "résumé", "façade", "über", "Straße", "señor", "niño", "crème", "brûlée",
                "Ångström", "Łódź", "Dvořák", "São", "Paulo"],
    "cyrillic": ["привет", "мир", "обучение", "модель", "язык", "данные", "Москва", "пример"],
    "greek": ["γειά", "σου", "κόσμε", "μάθηση", "γλώσσα", "Αθήνα", "λόγος"],
    "cjk": ["你好", "世界", "机器学习", "模型", "数据", "こんにちは", "日本語", "東京", "カタカナ"],
    "arabic": ["مرحبا", "بالعالم", "تعلم", "الآلة", "نموذج", "اللغة"],
    "hindi": ["नमस्ते", "दुनिया", "मशीन", "लर्निंग", "भाषा", "हिन्दी"],
    "korean": ["안녕하세요", "세계", "기계", "학습", "모델", "한국어"],
    "emoji": ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🚀", "🇫🇷", "✨"],
}
PUNCT = [".", ",", "!", "?", ";", ":", "...", "-", "(", ")", "\"", "'", "—", "«", "»", "¿", "¡"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "if x == 3 and y != 4:\n        print(\"yes\")",
    "const obj = {key: 'value', n: 42};",
    "#include <vector>\nint main() { return 0; }",
    "SELECT name, COUNT(*) FROM users WHERE id > 100;",
]
CONTRACTIONS = ["I'M", "YOU'RE", "WE'VE", "SHE'LL", "HE'D", "IT'S", "DON'T", "I'm", "they're", "we'll",
                "She's", "can't", "WON'T"]


def make_line(rng):
    parts = []
    for _ in range(rng.randint(3, 14)):
        kind = rng.random()
        if kind < 0.55:
            script = rng.choice(list(WORDS))
            word = rng.choice(WORDS[script])
            if rng.random() < 0.15:
                word = word.capitalize()
            if rng.random() < 0.1:
                word = unicodedata.normalize("NFD", word)
            parts.append(word)
        elif kind < 0.65:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        elif kind < 0.75:
            parts.append(rng.choice(PUNCT))
        elif kind < 0.85:
            parts.append(rng.choice(CONTRACTIONS))
        elif kind < 0.9:
            parts.append(rng.choice(CODE))
        else:
            parts.append(rng.choice(["", " ", "  ", "\t", "\n", "\r\n", "   \n"]))
    seps = [" ", " ", " ", "  ", "\t", "\n", ""]
    out = parts[0]
    for p in parts[1:]:
        out += rng.choice(seps) + p
    return out


def training_corpus():
    rng = random.Random(1234)
    return [make_line(rng) for _ in range(4000)]


def test_corpus(specials):
    fixed = [
        "Hello world",
        "hello world, this is a test.",
        " leading space",
        "  two leading spaces and trailing  ",
        "trailing newline\n",
        "\n\nleading newlines",
        "tabs\tand\t\tmore\ttabs",
        "windows\r\nline\r\nendings\r\n",
        "mixed \r\n \n\n  \t whitespace   runs     here",
        "I'M SURE YOU'RE RIGHT, WE'VE SEEN IT. SHE'LL GO, HE'D SAY IT'S DON'T",
        "i'm sure you're right; we've, she'll, he'd, it's, don't",
        "Café naïve résumé — precomposed",
        unicodedata.normalize("NFD", "Café naïve résumé — decomposed"),
        "e\u0301 a\u0308 o\u0302 n\u0303 c\u0327 (combining marks) A\u030a",
        "\u1e9b\u0323 q\u0307\u0323 \u0958 \ufb01 \u2126 \u212b",
        "Привет, мир! Обучение модели.",
        "Γειά σου κόσμε! Μάθηση.",
        "你好，世界！机器学习很有趣。",
        "日本語のテキスト、カタカナとひらがな。",
        "مرحبا بالعالم! تعلم الآلة.",
        "नमस्ते दुनिया। मशीन लर्निंग।",
        "안녕하세요 세계! 한국어 텍스트.",
        unicodedata.normalize("NFD", "안녕하세요 한국어"),
        "emoji 😀 👍🏽 family 👨‍👩‍👧‍👦 flag 🏳️‍🌈 🇫🇷 ❤️ 🚀✨",
        "digits 1 12 123 1234 12345 123456789012345 3.14159 1,000,000 -42 +7 0x1F",
        "year2024 v1.2.3 ab12cd345ef",
        "def f(x):\n    return x * 2\n\n\nclass A:\n\tpass\n",
        "for (int i = 0; i < n; ++i) {\n    sum += a[i];   // accumulate\n}",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
        "   ",
        "\n",
        "a",
        "!!!???...",
        "x\u00a0y\u2003z\u3000w",  # no-break space, em space, ideographic space
        "zero\u200bwidth\u200djoiner",
        "\u2028line\u2029para\u0085nel\u000bvt\u000cff",
        "ẞ ß ǅ ǈ İ ı ſ",
        "Tom's and TOM'S and tom'S",
    ]
    for sp in specials:
        fixed.append(f"{sp}")
        fixed.append(f"before{sp}after")
        fixed.append(f"text {sp} text")
        fixed.append(f"{sp}\n\nnew line after")
        fixed.append(f"  {sp}  spaces around")
    rng = random.Random(99)
    fixed += [make_line(rng) for _ in range(150)]
    return fixed


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)


def train_byte_level(corpus, pattern, special_tokens, use_nfc, bos):
    tok = Tokenizer(models.BPE(ignore_merges=bos is not None))
    if use_nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special_tokens])
    if bos is not None:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                          special_tokens=[(bos, bos_id)]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tok


def added_tokens_decoder(tok):
    out = {}
    for tid, at in sorted(tok.get_added_tokens_decoder().items()):
        out[str(tid)] = {"content": at.content, "lstrip": at.lstrip, "rstrip": at.rstrip,
                         "normalized": at.normalized, "single_word": at.single_word, "special": at.special}
    return out


def make_llama3(outdir, corpus):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>", "<|reserved_special_token_0|>"]
    tok = train_byte_level(corpus, LLAMA3_PATTERN, specials, use_nfc=False, bos="<|begin_of_text|>")
    # A non-special added token that swallows surrounding spaces (lstrip/rstrip).
    tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=False, normalized=False)])
    os.makedirs(outdir, exist_ok=True)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "chat_template": "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
        "added_tokens_decoder": added_tokens_decoder(tok),
    })
    return tok, specials + ["<mask>", "x <mask> y"]


def make_qwen2(outdir, corpus):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = train_byte_level(corpus, QWEN2_PATTERN, specials, use_nfc=True, bos=None)
    # Qwen3 ships <think> as a non-special, unnormalized added token.
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tokenizer.json")
    tok.save(path)
    # Qwen2 ships merges as "a b" strings (older files), Qwen3 as [a, b] lists (what tokenizers
    # writes now, kept by the llama3 fixture); this one is rewritten to the string form.
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    write_json(path, data)
    write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": {"content": "<|endoftext|>", "lstrip": False, "rstrip": False, "normalized": False,
                      "single_word": False, "special": True, "__type": "AddedToken"},
        "clean_up_tokenization_spaces": False,
        "chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "added_tokens_decoder": added_tokens_decoder(tok),
    })
    return Tokenizer.from_file(path), specials + ["<think>", "</think>"]


# Characters the small vocabularies lack: they become <0xNN> byte tokens (byte fallback).
BYTE_FALLBACK_TEXTS = [
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 fraktur",
    "runes \u16a0\u16c7\u16bb and \ua66e, \u2603 snow, \U0001f9ec dna",
    "mixed\u00a0nbsp, tab\tsep, \u0f00 tibetan, \U00010348 gothic",
    "  leading spaces then \u4e28 rare han \u9fa5",
    "<unk> written as text, </s> too",
]


def make_spm(outdir, corpus):
    import sentencepiece as spm
    os.makedirs(outdir, exist_ok=True)
    prefix = os.path.join(outdir, "tokenizer")
    # Llama-2's trainer settings, scaled down.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=prefix, model_type="bpe", vocab_size=2000,
        character_coverage=0.9995, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
    os.remove(prefix + ".vocab")
    special = {"0": "<unk>", "1": "<s>", "2": "</s>"}
    write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "__type": "AddedToken"},
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "legacy": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {tid: {"content": c, "lstrip": False, "rstrip": False, "normalized": False,
                                       "single_word": False, "special": True} for tid, c in special.items()},
    })
    return list(special.values())


def write_config_json(outdir, model_type):
    write_json(os.path.join(outdir, "config.json"), {"model_type": model_type})


def make_spm_json(outdir, spm_dir):
    """tokenizer.model + the tokenizer.json transformers' LlamaTokenizer converts it to."""
    import shutil
    from transformers import LlamaTokenizer
    os.makedirs(outdir, exist_ok=True)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(spm_dir, name), os.path.join(outdir, name))
    saved = os.path.join(outdir, "converted")
    LlamaTokenizer.from_pretrained(spm_dir).save_pretrained(saved)
    shutil.move(os.path.join(saved, "tokenizer.json"), os.path.join(outdir, "tokenizer.json"))
    shutil.rmtree(saved)
    with open(os.path.join(outdir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["tokenizer_class"] = "LlamaTokenizerFast"
    write_json(os.path.join(outdir, "tokenizer_config.json"), config)


def make_rewritten_layout(outdir, json_dir, model_type, normalizer, pre_tokenizer, decoder, unk_token):
    """json_dir's tokenizer.json with another pipeline, for a model type whose AutoTokenizer runs the file."""
    import shutil
    os.makedirs(outdir, exist_ok=True)
    shutil.copy(os.path.join(json_dir, "tokenizer_config.json"), os.path.join(outdir, "tokenizer_config.json"))
    with open(os.path.join(json_dir, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    data["normalizer"] = normalizer
    data["pre_tokenizer"] = pre_tokenizer
    data["decoder"] = decoder
    data["model"]["unk_token"] = unk_token
    write_json(os.path.join(outdir, "tokenizer.json"), data)
    write_config_json(outdir, model_type)
    return Tokenizer.from_file(os.path.join(outdir, "tokenizer.json"))


def make_phi3_legacy(outdir, json_dir):
    replace_space = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    return make_rewritten_layout(
        outdir, json_dir, "phi3",
        normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace_space]},
        pre_tokenizer=None,
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        unk_token="<unk>")


def make_mistral_metaspace(outdir, json_dir):
    return make_rewritten_layout(
        outdir, json_dir, "mistral", normalizer=None,
        pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        unk_token="<unk>")


def make_gemma(outdir, corpus):
    """A Gemma-layout vocabulary: sentencepiece BPE without dummy prefix, Gemma's special ids, converted
    to tokenizer.json by transformers' GemmaTokenizer; tokenizer.model stays beside it."""
    import shutil
    import sentencepiece as spm
    from transformers import GemmaTokenizer
    os.makedirs(outdir, exist_ok=True)
    prefix = os.path.join(outdir, "tokenizer")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_prefix=prefix, model_type="bpe", vocab_size=2000,
        character_coverage=0.9995, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", user_defined_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"],
        num_threads=1, minloglevel=2)
    os.remove(prefix + ".vocab")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "GemmaTokenizer",
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "rstrip": False, "normalized": False,
                                          "single_word": False, "special": True} for i, c in enumerate(specials)},
    })
    saved = os.path.join(outdir, "converted")
    GemmaTokenizer.from_pretrained(outdir).save_pretrained(saved)
    shutil.move(os.path.join(saved, "tokenizer.json"), os.path.join(outdir, "tokenizer.json"))
    shutil.rmtree(saved)
    write_config_json(outdir, "gemma2")
    return specials


def read_spm_proto_without_protobuf():
    """transformers reads tokenizer.model through the protobuf package, which the reference venv lacks
    (AutoTokenizer would then fall back to tiktoken and fail). Only that parse is replaced: the pieces,
    their types and the charsmap are read through the sentencepiece library instead; everything after
    it (merge generation, LlamaTokenizer's Metaspace/ByteFallback pipeline) is transformers' own code."""
    try:
        import google.protobuf  # noqa: F401
        return
    except ImportError:
        pass
    import importlib
    from types import SimpleNamespace
    import sentencepiece as spm
    # By name: once transformers is imported, `transformers.convert_slow_tokenizer` can be the
    # function of that name rather than the module.
    convert_slow_tokenizer = importlib.import_module("transformers.convert_slow_tokenizer")

    def init(self, model):
        sp = spm.SentencePieceProcessor(model_file=model)
        pieces = []
        for i in range(sp.get_piece_size()):
            kind = 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1
            pieces.append(SimpleNamespace(piece=sp.id_to_piece(i), score=sp.get_score(i), type=kind))
        self.proto = SimpleNamespace(
            pieces=pieces,
            trainer_spec=SimpleNamespace(unk_id=sp.unk_id(), model_type=2),
            normalizer_spec=SimpleNamespace(precompiled_charsmap=b""))

    convert_slow_tokenizer.SentencePieceExtractor.__init__ = init


def write_expected(outdir, texts, check_with=None):
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(outdir)
    cases = []
    for text in texts:
        with_special = hf.encode(text, add_special_tokens=True)
        without_special = hf.encode(text, add_special_tokens=False)
        if check_with is not None:
            assert check_with.encode(text, add_special_tokens=True).ids == with_special, text
            assert check_with.encode(text, add_special_tokens=False).ids == without_special, text
        cases.append({
            "text": text,
            "ids_with_special": with_special,
            "ids_without_special": without_special,
            "decoded": hf.decode(with_special, skip_special_tokens=False),
            "decoded_skip_special": hf.decode(with_special, skip_special_tokens=True),
            "decoded_plain": hf.decode(without_special, skip_special_tokens=False),
        })
    special = {}
    for name in ("bos", "eos", "pad"):
        token = getattr(hf, name + "_token")
        special[name + "_token"] = token
        special[name + "_token_id"] = getattr(hf, name + "_token_id") if token is not None else None
    special["vocab_size"] = len(hf)
    special["hf_class"] = type(hf).__name__
    write_json(os.path.join(outdir, "expected.json"), {"cases": cases, "special": special})


def write_nfc_cases(path):
    """Strings and their NFC forms: every character that has a canonical decomposition (composed and
    decomposed), Hangul, and random runs of combining marks in every order."""
    rng = random.Random(7)
    cases = []
    decomposable = [chr(cp) for cp in range(0x110000)
                    if unicodedata.decomposition(chr(cp)) and not unicodedata.decomposition(chr(cp)).startswith("<")]
    for i in range(0, len(decomposable), 40):
        chunk = "".join(decomposable[i:i + 40])
        cases.append(chunk)
        cases.append(unicodedata.normalize("NFD", chunk))
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0323", "\u031b", "\u0345", "\u05b0", "\u093c", "\u3099"]
    bases = list("aeiouAEIOUnNcCsSzZ") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u0915", "\u304b", "\u03b1", "\u0438"]
    for _ in range(400):
        cases.append("".join(rng.choice(bases) + "".join(rng.choice(marks) for _ in range(rng.randint(0, 4)))
                             for _ in range(rng.randint(1, 6))))
    write_json(path, [{"text": c, "nfc": unicodedata.normalize("NFC", c)} for c in cases])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tokenizer_fixtures.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write_nfc_cases(os.path.join(out, "nfc.json"))
    corpus = training_corpus()

    llama3_dir = os.path.join(out, "llama3")
    tok, extra = make_llama3(llama3_dir, corpus)
    write_expected(llama3_dir, test_corpus(extra), check_with=tok)

    # transformers 5 drops add_bos_token / add_eos_token from the config when tokenizer.json exists.
    eos_dir = os.path.join(out, "llama3_add_eos")
    os.makedirs(eos_dir, exist_ok=True)
    with open(os.path.join(llama3_dir, "tokenizer.json"), encoding="utf-8") as f:
        data = f.read()
    with open(os.path.join(eos_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(data)
    with open(os.path.join(llama3_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config.update({"add_bos_token": False, "add_eos_token": True})
    write_json(os.path.join(eos_dir, "tokenizer_config.json"), config)
    write_expected(eos_dir, test_corpus(extra)[:40])

    qwen2_dir = os.path.join(out, "qwen2")
    tok, extra = make_qwen2(qwen2_dir, corpus)
    write_expected(qwen2_dir, test_corpus(extra), check_with=tok)

    spm_dir = os.path.join(out, "spm_llama2")
    extra = make_spm(spm_dir, corpus)
    read_spm_proto_without_protobuf()
    write_expected(spm_dir, test_corpus(extra))

    spm_json_dir = os.path.join(out, "spm_llama2_json")
    make_spm_json(spm_json_dir, spm_dir)
    write_expected(spm_json_dir, test_corpus(extra) + BYTE_FALLBACK_TEXTS)
    phi3_dir = os.path.join(out, "phi3_legacy")
    tok = make_phi3_legacy(phi3_dir, spm_json_dir)
    write_expected(phi3_dir, test_corpus(extra) + BYTE_FALLBACK_TEXTS, check_with=tok)
    mistral_dir = os.path.join(out, "mistral_metaspace")
    tok = make_mistral_metaspace(mistral_dir, spm_json_dir)
    write_expected(mistral_dir, test_corpus(extra) + BYTE_FALLBACK_TEXTS, check_with=tok)
    gemma_dir = os.path.join(out, "gemma")
    extra = make_gemma(gemma_dir, corpus)
    write_expected(gemma_dir, test_corpus(extra) + BYTE_FALLBACK_TEXTS)


if __name__ == "__main__":
    main()
