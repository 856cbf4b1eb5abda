#!/usr/bin/env python3
"""Does utf8proc's NFC give the same results as the references finetune's own NFC tables follow?

Usage: $FINETUNE_PYTHON tests/reference/compare_nfc_utf8proc.py [--library libutf8proc.so.2]
Needs the utf8proc runtime (Debian: apt-get install libutf8proc2; not a build dependency: the
build keeps its own tables, see the README's library table).

Issue 24 item 12 asks to replace src/tokenizer/unicode_nfc*.cpp (tables generated from Python's
unicodedata) by a packaged Unicode library, utf8proc, if it gives identical results on the
tokenizer corpora. This script answers that, against two references:
  - Python's unicodedata.normalize("NFC") (what our tables are generated from), and
  - the `tokenizers` library's normalizers.NFC() (Rust; what transformers runs for Qwen2/Qwen3's
    tokenizer.json, i.e. the reference the tokenizer tests compare against).
on these inputs:
  1. every code point alone (surrogates excluded),
  2. every code point after a base letter and before combining marks of classes 220/230 (the
     canonical reordering and composition paths),
  3. every NFD decomposition of a decomposable character, and Hangul L V T sequences,
  4. 200,000 random strings drawn from the code points that take part in normalization,
  5. the tokenizer test corpora (tests/reference/make_tokenizer_fixtures.py's test and training
     corpora, and its NFC cases).
It prints the number of differing strings per pair and input set, with a few examples, and the
Unicode versions involved. Exit status 0 when utf8proc equals both references everywhere.
"""
import argparse
import ctypes
import ctypes.util
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SEPARATOR = "\n"  # a starter that composes with nothing: NFC(a + "\n" + b) == NFC(a) + "\n" + NFC(b)


def load_utf8proc(path):
    library = ctypes.CDLL(path or ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
    library.utf8proc_map.restype = ctypes.c_ssize_t
    library.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    library.utf8proc_unicode_version.restype = ctypes.c_char_p
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.free.argtypes = [ctypes.c_void_p]

    stable_compose = (1 << 1) | (1 << 3)  # UTF8PROC_STABLE | UTF8PROC_COMPOSE: utf8proc_NFC's options

    def nfc(text):
        # utf8proc_map with an explicit length (utf8proc_NFC would stop at an embedded U+0000).
        data = text.encode("utf-8")
        pointer = ctypes.c_void_p()
        length = library.utf8proc_map(data, len(data), ctypes.byref(pointer), stable_compose)
        if length < 0:
            raise RuntimeError(f"utf8proc_map failed ({length}) on {text!r}")
        result = ctypes.string_at(pointer, length).decode("utf-8")
        libc.free(pointer)
        return result

    return nfc, library.utf8proc_unicode_version().decode()


def batched(normalize, strings, size=2000):
    """normalize() over many strings in few calls, joined by SEPARATOR."""
    out = []
    for i in range(0, len(strings), size):
        chunk = strings[i:i + size]
        parts = normalize(SEPARATOR.join(chunk)).split(SEPARATOR)
        if len(parts) != len(chunk):
            parts = [normalize(s) for s in chunk]  # a string held the separator itself
        out.extend(parts)
    return out


def scalar_values():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def participates(cp):
    ch = chr(cp)
    return unicodedata.combining(ch) != 0 or (unicodedata.decomposition(ch) and not
                                              unicodedata.decomposition(ch).startswith("<")) \
        or unicodedata.normalize("NFD", ch) != ch or 0x1100 <= cp <= 0x11FF or 0xAC00 <= cp <= 0xD7A3


def input_sets():
    code_points = scalar_values()
    sets = {"every code point alone": [chr(cp) for cp in code_points if chr(cp) != SEPARATOR]}
    sets["every code point between a base and marks"] = [
        "a" + chr(cp) + "\u0323\u0301" for cp in code_points if chr(cp) != SEPARATOR]
    decomposable = [chr(cp) for cp in code_points if unicodedata.normalize("NFD", chr(cp)) != chr(cp)]
    hangul = [chr(l) + chr(v) + (chr(t) if t else "") for l in range(0x1100, 0x1113) for v in range(0x1161, 0x1176)
              for t in [0] + list(range(0x11A8, 0x11C3, 5))]
    sets["NFD of decomposables, Hangul jamo"] = [unicodedata.normalize("NFD", c) for c in decomposable] + hangul
    pool = [chr(cp) for cp in code_points if participates(cp)] + list("aeiouAEIOU")
    rng = random.Random(2024)
    sets["random strings of participating code points"] = [
        "".join(rng.choice(pool) for _ in range(rng.randint(1, 8))) for _ in range(200000)]
    try:
        import make_tokenizer_fixtures as fixtures
        corpora = fixtures.training_corpus() + fixtures.test_corpus(["<|im_start|>", "<|endoftext|>"])
        sets["tokenizer corpora"] = [line for text in corpora for line in text.split(SEPARATOR)]
    except Exception as e:  # noqa: BLE001 - the generator's imports are optional here
        print(f"(tokenizer corpora skipped: {e})")
    return sets


def assigned_in_python(text):
    return all(unicodedata.category(ch) != "Cn" for ch in text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", help="path of libutf8proc (default: the system's)")
    args = parser.parse_args()
    utf8proc_nfc, utf8proc_unicode = load_utf8proc(args.library)
    references = {"unicodedata": lambda s: unicodedata.normalize("NFC", s)}
    try:
        from tokenizers import normalizers
        import tokenizers
        references["tokenizers"] = normalizers.NFC().normalize_str
        tokenizers_version = tokenizers.__version__
    except ImportError:
        tokenizers_version = "not installed"
    print(f"utf8proc Unicode {utf8proc_unicode}; Python {sys.version.split()[0]} unicodedata Unicode "
          f"{unicodedata.unidata_version}; tokenizers {tokenizers_version}")

    identical = True
    for name, strings in input_sets().items():
        results = {"utf8proc": batched(utf8proc_nfc, strings)}
        for reference_name, reference in references.items():
            results[reference_name] = batched(reference, strings)
        # utf8proc against each reference; and, for context, our tables' source against tokenizers.
        pairs = [("utf8proc", reference_name) for reference_name in references]
        if "tokenizers" in references:
            pairs.append(("unicodedata", "tokenizers"))
        for left, right in pairs:
            differing = [(s, a, b) for s, a, b in zip(strings, results[left], results[right]) if a != b]
            in_python_unicode = [d for d in differing if assigned_in_python(d[0])]
            if left == "utf8proc":
                identical &= not differing
            print(f"{name} ({len(strings)} strings): {left} vs {right}: {len(differing)} differ, "
                  f"{len(in_python_unicode)} of them use only code points assigned in Unicode "
                  f"{unicodedata.unidata_version}")
            for text, got, want in differing[:3]:
                print(f"    {ascii(text)}: {left} {ascii(got)}, {right} {ascii(want)}")
    print("identical" if identical else "NOT identical")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
