#!/usr/bin/env python3
"""Reference renderings for the chat-template engine (src/template/).

Usage: make_template_fixtures.py OUTDIR

Renders with transformers' own jinja2 environment (chat_template_utils._compile_jinja_template:
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols, the AssistantTracker
{% generation %} tag, its tojson filter and the raise_exception / strftime_now globals):
  - every feature case of template_cases.py;
  - every real chat template shipped in the installed TRL package (trl/chat_templates/*.jinja) on
    every conversation of template_conversations.py.
Writes OUTDIR/cases.json:
  {"templates": {name: source},
   "cases": [{"name", "template": name, "context": {...}, "expected": EXPECTED}]}
where EXPECTED is {"text": str, "generation_spans": [[begin, end], ...]} or
{"error": exception class name, "message": str}. Generation spans are what
apply_chat_template(..., return_assistant_tokens_mask=True) records (transformers'
_render_with_assistant_indices: character positions), converted to UTF-8 byte offsets of the text.
strftime_now is pinned to 2024-07-26 13:05:09 local time; the C++ test gives its engine the same
clock. Writes OUTDIR/divergences.json the same way for template_cases.DIVERGENCES, which jinja2
renders and the engine refuses.
"""
import datetime
import glob
import json
import os
import sys

import trl
from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import template_cases  # noqa: E402
import template_conversations  # noqa: E402

PINNED_NOW = datetime.datetime(2024, 7, 26, 13, 5, 9)


def pinned_strftime_now(format):
    return PINNED_NOW.strftime(format)


def byte_offset(text, index):
    """UTF-8 byte offset of character position `index`; positions past the end (a span of output
    that was never written out) continue one byte per character."""
    if index <= len(text):
        return len(text[:index].encode("utf-8"))
    return len(text.encode("utf-8")) + index - len(text)


def render(source, context):
    """What transformers renders (text and generation spans), or the exception it raises."""
    try:
        compiled = _compile_jinja_template(source)
        if {"messages", "tools", "documents", "add_generation_prompt"} <= context.keys():
            # apply_chat_template's own path.
            kwargs = dict(context)
            text, spans = _render_with_assistant_indices(
                compiled, kwargs.pop("messages"), kwargs.pop("tools"), kwargs.pop("documents"),
                kwargs.pop("add_generation_prompt"), strftime_now=pinned_strftime_now, **kwargs)
        else:
            # The same, for contexts without those four keys.
            blocks, spans = [], []
            with compiled.environment.activate_tracker(blocks, spans):
                for block in compiled.generate(**context, strftime_now=pinned_strftime_now):
                    blocks.append(block)
                text = "".join(blocks)
    except Exception as error:  # noqa: BLE001 - every failure is an expected outcome
        return {"error": type(error).__name__, "message": str(error)}
    return {"text": text, "generation_spans": [[byte_offset(text, a), byte_offset(text, b)] for a, b in spans]}


def trl_templates():
    directory = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    paths = sorted(glob.glob(os.path.join(directory, "*.jinja")))
    if len(paths) < 50:
        sys.exit(f"expected TRL's ~70 chat templates in {directory}, found {len(paths)}")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            yield "trl/" + os.path.basename(path)[: -len(".jinja")], f.read()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)

    templates, cases = {}, []
    for name, source, context in template_cases.CASES:
        templates[name] = source
        cases.append({"name": name, "template": name, "context": context, "expected": render(source, context)})
    for template_name, source in trl_templates():
        templates[template_name] = source
        for context_name, context in template_conversations.contexts():
            cases.append({"name": f"{template_name}/{context_name}", "template": template_name, "context": context,
                          "expected": render(source, context)})
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "cases": cases}, f, indent=1)

    divergences = []
    for name, source, context in template_cases.DIVERGENCES:
        expected = render(source, context)
        if "error" in expected:
            sys.exit(f"divergence case {name} is not a divergence: jinja2 fails too ({expected})")
        divergences.append({"name": name, "template": source, "context": context, "expected": expected})
    with open(os.path.join(out_dir, "divergences.json"), "w", encoding="utf-8") as f:
        json.dump(divergences, f, indent=1)

    rendered = sum("text" in case["expected"] for case in cases)
    spans = sum(len(case["expected"].get("generation_spans", [])) for case in cases)
    print(f"{len(cases)} cases ({rendered} rendered, {len(cases) - rendered} raising, {spans} generation spans), "
          f"{sum(name.startswith('trl/') for name in templates)} TRL templates -> {out_dir}")


if __name__ == "__main__":
    main()
