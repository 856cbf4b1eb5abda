#!/usr/bin/env python3
"""Reference renderings for the data module's chat templates and alpaca prompt.

Usage: make_data_fixtures.py OUTDIR

Writes OUTDIR/chat_templates.json: for each supported chat format, the real Jinja chat template of
its model family, the tokenizer's bos/eos strings, and a list of conversations with the exact text
transformers' `apply_chat_template(messages, tokenize=False)` renders (or `"error": true` where the
template raises). Writes OUTDIR/alpaca.json with Unsloth CLI's alpaca prompt rendered by Python's
str.format, and OUTDIR/sampler.json with epoch permutations from an independent Python
implementation of the sampler's generator and shuffle. The C++ tests (tests/data/test_*.cpp) compare their rendering to these.
"""
import json
import os
import sys

from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

# Qwen/Qwen2.5-*-Instruct tokenizer_config.json: ChatML with a default system prompt when the
# conversation has none.
QWEN25_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# Plain ChatML (OpenHermes, many fine-tunes, and the template `chatml` names here): no default
# system prompt.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

# meta-llama/Meta-Llama-3-8B-Instruct (Llama-3, not 3.1: no default "Cutting Knowledge Date"
# system header). Note `| trim` on every message's content.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

# mistralai/Mistral-7B-Instruct-v0.2 (and v0.1), the tokenizer_config.json template of 2024
# with an optional leading system message folded into the first user turn.
MISTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must "
    "alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of "
    "an initial optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
)

# (format name as chat_format_from_name takes it, template, bos, eos)
FAMILIES = [
    ("qwen2.5", QWEN25_TEMPLATE, None, "<|im_end|>"),
    ("chatml", CHATML_TEMPLATE, None, "<|im_end|>"),
    ("llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
    ("mistral", MISTRAL_TEMPLATE, "<s>", "</s>"),
]


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "single_turn": [m("user", "What is 2 + 2?"), m("assistant", "4")],
    "with_system": [m("system", "You are terse."), m("user", "Hi"), m("assistant", "Hello.")],
    "multi_turn": [
        m("system", "Answer in one line."),
        m("user", "Name a prime."),
        m("assistant", "7"),
        m("user", "Another?"),
        m("assistant", "11"),
        m("user", "And one more, please."),
        m("assistant", "13 is prime too."),
    ],
    "multi_turn_no_system": [
        m("user", "Translate 'cat' to French."),
        m("assistant", "chat"),
        m("user", "And 'dog'?"),
        m("assistant", "chien"),
    ],
    "unicode": [
        m("system", "Réponds en français 🇫🇷."),
        m("user", "日本語で「こんにちは」は？ Ελληνικά; emoji 😀👍🏽"),
        m("assistant", "こんにちは — «bonjour» ✓ 😀"),
    ],
    "whitespace": [
        m("user", "  padded question \n"),
        m("assistant", "\u3000\u00a0 answer with unicode spaces\t\u2003\n "),
    ],
    "multiline": [
        m("user", "Write code:\n\n```python\nprint('x')\n```\n"),
        m("assistant", "Here:\n\n```python\nfor i in range(3):\n    print(i)\n```"),
    ],
    "ends_with_user": [m("user", "First"), m("assistant", "Second"), m("user", "Third")],
    "empty_assistant": [m("user", "Say nothing."), m("assistant", "")],
    "system_in_middle": [m("user", "a"), m("assistant", "b"), m("system", "c"), m("user", "d"), m("assistant", "e")],
    "consecutive_users": [m("user", "a"), m("user", "b"), m("assistant", "c")],
    "starts_with_assistant": [m("assistant", "I speak first."), m("user", "ok")],
    "system_only": [m("system", "Only a system prompt.")],
}


def make_tokenizer(bos, eos):
    vocab = {"<unk>": 0}
    for token in (bos, eos):
        if token is not None:
            vocab[token] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    kwargs = {"unk_token": "<unk>", "eos_token": eos}
    if bos is not None:
        kwargs["bos_token"] = bos
    return PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)


def chat_template_cases():
    families = []
    for name, template, bos, eos in FAMILIES:
        tokenizer = make_tokenizer(bos, eos)
        cases = []
        for conv_name, messages in CONVERSATIONS.items():
            case = {"name": conv_name, "messages": messages}
            try:
                case["expected"] = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
                case["error"] = False
            except Exception:  # the template's raise_exception
                case["expected"] = None
                case["error"] = True
            cases.append(case)
        families.append({"format": name, "template": template, "bos": bos or "", "eos": eos, "cases": cases})
    return families


# Unsloth CLI's alpaca prompt: the literal of unsloth-cli.py's run() (unslothai/unsloth,
# unsloth-cli.py at 015bdef0d94a, unchanged since the script's first version), copied with its
# indentation: the triple-quoted string sits inside a function, so every line after the first
# starts with four spaces, and formatting_prompts_func formats rows with it as it is.
ALPACA_PROMPT = """Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.

    ### Instruction:
    {}

    ### Input:
    {}

    ### Response:
    {}"""


def unsloth_cli_formatting_prompts_func(examples, eos_token):
    """unsloth-cli.py's formatting_prompts_func (batched rows -> {"text": [...]}), EOS_TOKEN given."""
    texts = []
    for instruction, input, output in zip(examples["instruction"], examples["input"], examples["output"]):
        texts.append(ALPACA_PROMPT.format(instruction, input, output) + eos_token)
    return {"text": texts}


def alpaca_cases():
    rows = [
        {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
        {"instruction": "Say hello.", "input": "", "output": "Hello!"},
        {"instruction": "Übersetze: «chat» 🐱", "input": "français\nmultiline", "output": "Katze\n"},
    ]
    eos = "</s>"
    batch = {key: [row[key] for row in rows] for key in ("instruction", "input", "output")}
    texts = unsloth_cli_formatting_prompts_func(batch, eos)["text"]
    return {"eos": eos, "cases": [dict(row, expected=text) for row, text in zip(rows, texts)]}


# The sampler's epoch permutation, written independently of the C++ code: mt19937_64 as the C++
# standard defines it, seeded with splitmix64(seed ^ splitmix64(epoch)), then Fisher-Yates from the
# top with an unbiased bounded draw (redraw values below 2^64 mod range, then take the remainder).
MASK64 = (1 << 64) - 1


class Mt19937_64:
    def __init__(self, seed):
        self.state = [seed & MASK64]
        for i in range(1, 312):
            prev = self.state[-1]
            self.state.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK64)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            mt = self.state
            for k in range(312):
                x = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
                mt[k] = mt[(k + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.index = 0
        y = self.state[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def epoch_permutation(n, seed, epoch):
    rng = Mt19937_64(splitmix64(seed ^ splitmix64(epoch & MASK64)))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        draw = rng()
        while draw < threshold:
            draw = rng()
        j = draw % bound
        order[i], order[j] = order[j], order[i]
    return order


def sampler_cases():
    generator = Mt19937_64(5489)  # self-check against the C++ standard's required value
    for _ in range(9999):
        generator()
    assert generator() == 9981545732273789042
    params = [(10, 1234, 5), (1, 0, 0), (2, 0, 0), (17, 0, 0), (17, 0, 1), (100, 42, 3), (1000, 2**64 - 1, 7),
              (313, 3407, 0)]
    return {"permutations": [{"n": n, "seed": str(seed), "epoch": epoch, "expected": epoch_permutation(n, seed, epoch)}
                             for n, seed, epoch in params]}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_data_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "chat_templates.json"), "w", encoding="utf-8") as f:
        json.dump({"families": chat_template_cases()}, f, ensure_ascii=False, indent=1)
    with open(os.path.join(outdir, "alpaca.json"), "w", encoding="utf-8") as f:
        json.dump(alpaca_cases(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(outdir, "sampler.json"), "w", encoding="utf-8") as f:
        json.dump(sampler_cases(), f)


if __name__ == "__main__":
    main()
