"""Conversations that make_template_fixtures.py renders with every real chat template shipped in
TRL (trl/chat_templates/*.jinja), as apply_chat_template would pass them: messages, tools,
documents, add_generation_prompt, the tokenizer's special tokens, and extra keyword arguments
(enable_thinking). Templates that refuse a conversation (roles that do not alternate, no system
support, ...) are expected to raise; the C++ engine must raise too.
"""

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "nullable": True},
                "hourly": {"type": "array", "items": {"type": "number"}, "description": "Hourly values"},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "options": {
                    "type": "object",
                    "description": "Search options",
                    "properties": {"safe": {"type": "boolean", "description": "Safe search"}},
                },
            },
            "required": ["query"],
        },
        "return": {"type": "string", "description": "The results"},
    },
}

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "user_assistant": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 = 4."},
    ],
    "system_multi_turn": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "  Another one, with spaces around  \n"},
        {"role": "assistant", "content": "Red.\n"},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français — s'il te plaît."},
        {"role": "user", "content": "héllo wörld 你好 🙂 ΣΊΣΥΦΟΣ \"quotes\" 'single' \\ back\tslash"},
        {"role": "assistant", "content": "Ça va ✓ — 👍🏽 ﬁ ß İ"},
    ],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this"}, {"type": "text", "text": " please."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is a cat."}]},
    ],
    "reasoning": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "<think>\nRayleigh scattering.\n</think>\n\nBecause of Rayleigh scattering."},
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "reasoning_content": "Be polite.", "content": "You're welcome."},
    ],
    "tool_calls": [
        {"role": "system", "content": "You can use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
    ],
    "two_tool_calls": [
        {"role": "user", "content": "Weather in Paris and Rome, and news?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "search", "arguments": {"query": "news", "options": {"safe": True}}}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "name": "search", "content": "nothing new"},
        {"role": "assistant", "content": "Sunny, and nothing new."},
    ],
}

# Which conversations get a `tools` list.
WITH_TOOLS = {"tool_calls", "two_tool_calls"}


def unusual_conversations(count, seed=20240726):
    """Seeded random conversations in shapes real datasets contain: None or empty content, content
    parts with images, tool calls with string or dict arguments (with and without ids, with and
    without the "function" wrapper), reasoning fields, tool results, unexpected roles."""
    import random

    rng = random.Random(seed)
    texts = ["hi", "", " spaced ", "multi\nline\n", "<think>r</think>a", "<think>\nr\n</think>\n\na", "ünï 🙂",
             "{\"json\": 1}", "</s><s>", "<|im_end|>"]

    def content():
        r = rng.random()
        if r < 0.6:
            return rng.choice(texts)
        if r < 0.75:
            return [{"type": "text", "text": rng.choice(texts)}]
        if r < 0.85:
            return [{"type": "image"}, {"type": "text", "text": rng.choice(texts)}]
        return None if r < 0.93 else [{"type": "text", "text": rng.choice(texts)}, {"type": "video"}]

    def tool_call():
        arguments = rng.choice([{"a": 1}, {"q": "x", "n": [1, 2], "o": {"k": None}}, "{\"a\": 1}", {}])
        call = {"type": "function", "function": {"name": rng.choice(["f", "get_weather"]), "arguments": arguments}}
        if rng.random() < 0.5:
            call["id"] = f"call_{rng.randint(0, 99)}"
        return call["function"] if rng.random() < 0.2 else call

    def message(role):
        m = {"role": role, "content": content()}
        if role == "assistant" and rng.random() < 0.3:
            m["tool_calls"] = [tool_call() for _ in range(rng.randint(1, 2))]
        if role == "assistant" and rng.random() < 0.2:
            m["reasoning_content"] = rng.choice(texts)
        if role == "tool" and rng.random() < 0.5:
            m["name"] = "f"
        return m

    for _ in range(count):
        messages = [message("system")] if rng.random() < 0.4 else []
        for _ in range(rng.randint(1, 3)):
            messages.append(message("user"))
            if rng.random() < 0.8:
                messages.append(message("assistant"))
            if rng.random() < 0.2:
                messages.append(message("tool"))
        if rng.random() < 0.15:
            messages.append(message(rng.choice(["developer", "user", "assistant"])))
        yield messages, rng.random() < 0.5, rng.random() < 0.4


def contexts():
    """(name, context) pairs: every conversation with and without a generation prompt, and the
    thinking switch on a few; tool conversations also once without their tools list."""
    for name, messages in CONVERSATIONS.items():
        tools = [WEATHER_TOOL, SEARCH_TOOL] if name in WITH_TOOLS else None
        for add_generation_prompt in (False, True):
            base = {"messages": messages, "tools": tools, "documents": None,
                    "add_generation_prompt": add_generation_prompt, **SPECIAL_TOKENS}
            yield f"{name}/gen={add_generation_prompt}", base
            if name in ("user_assistant", "reasoning", "single_user"):
                for thinking in (False, True):
                    yield f"{name}/gen={add_generation_prompt}/thinking={thinking}", {**base, "enable_thinking": thinking}
        if tools is not None:
            yield f"{name}/no_tools_list", {"messages": messages, "tools": None, "documents": None,
                                            "add_generation_prompt": False, **SPECIAL_TOKENS}
    yield "tools_only/gen=True", {"messages": CONVERSATIONS["single_user"], "tools": [WEATHER_TOOL],
                                  "documents": None, "add_generation_prompt": True, **SPECIAL_TOKENS}
    yield "documents", {"messages": CONVERSATIONS["single_user"], "tools": None,
                        "documents": [{"title": "Doc 1", "text": "Paris is in France."}],
                        "add_generation_prompt": True, **SPECIAL_TOKENS}
    for index, (messages, add_generation_prompt, with_tools) in enumerate(unusual_conversations(8)):
        yield f"unusual/{index}", {"messages": messages, "tools": [WEATHER_TOOL] if with_tools else None,
                                    "documents": None, "add_generation_prompt": add_generation_prompt,
                                    **SPECIAL_TOKENS}
    yield "extra_kwargs", {"messages": CONVERSATIONS["user_assistant"], "tools": None, "documents": None,
                           "add_generation_prompt": False, "date_string": "26 Jul 2024",
                           "custom_instructions": "Be kind.", "reasoning_effort": "high", **SPECIAL_TOKENS}
