"""Reference for the "per-turn prefix difference" assistant mask, the mask a chat template without
{% generation %} markers can still give: which characters of a rendered conversation each message
adds, found by rendering prefixes of the conversation and comparing them with the whole.

Definitions (render(msgs, gen) is the template applied to msgs with add_generation_prompt=gen and
with the same tools and template variables as the whole conversation):

  full  = render(messages, False)
  cp(a, b) = number of leading characters a and b have in common
  P_0   = 0,  P_j = cp(full, render(messages[:j], False))  for j = 1 .. n
  message_spans[j] = [P_j, P_(j+1))          the characters message j adds (the first message also
                                             takes whatever the template writes before it, e.g. BOS);
                                             null where a prefix the span needs does not render
  for every assistant message k:
    start_k = cp(full, render(messages[:k], True))   (after the generation prompt; 0 when k == 0)
    end_k   = P_(k+1)                                 (its end of turn included, as rendered)
    assistant_spans: [start_k, end_k)

A token is an assistant token (mask 1) when its first character lies inside an assistant span. Token
character offsets come from the fast tokenizer over the rendered text with add_special_tokens=False
(the template writes the BOS text itself where it wants one, and apply_chat_template(tokenize=True)
tokenizes the rendered text exactly that way).

Spans are in characters (Unicode code points, Python str indices); char_spans_to_byte_spans gives the
same spans in UTF-8 bytes.
"""


def common_prefix_len(a, b):
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _prefix_bounds(render, messages, full):
    """P_j for j = 0 .. n (None where render(messages[:j]) raises)."""
    bounds = [0]
    for j in range(1, len(messages) + 1):
        if j == len(messages):
            bounds.append(len(full))
            continue
        try:
            bounds.append(common_prefix_len(full, render(messages[:j], False)))
        except Exception:  # e.g. a template that requires a user message after the system one
            bounds.append(None)
    return bounds


def message_spans(render, messages, full=None):
    """[P_j, P_(j+1)) for every message j, None where a needed prefix does not render.
    render(msgs, add_generation_prompt) -> str."""
    if full is None:
        full = render(messages, False)
    bounds = _prefix_bounds(render, messages, full)
    return [None if bounds[j] is None or bounds[j + 1] is None else [bounds[j], bounds[j + 1]]
            for j in range(len(messages))]


def assistant_spans(render, messages, full=None):
    """[{"message_index": k, "start": start_k, "end": end_k}] for every assistant message k. Raises
    when render(messages[:k], True) or render(messages[:k + 1], False) raises."""
    if full is None:
        full = render(messages, False)
    out = []
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        start = common_prefix_len(full, render(messages[:k], True)) if k > 0 else 0
        end = len(full) if k + 1 == len(messages) else common_prefix_len(full, render(messages[:k + 1], False))
        out.append({"message_index": k, "start": min(start, end), "end": end})
    return out


def char_spans_to_byte_spans(text, spans):
    """The same [start, end) spans in UTF-8 byte offsets of text."""
    byte_at = [0]
    for ch in text:
        byte_at.append(byte_at[-1] + len(ch.encode("utf-8")))
    return [{**s, "start": byte_at[s["start"]], "end": byte_at[s["end"]]} for s in spans]


def token_mask(offsets, spans):
    """1 for a token whose first character (offsets[i][0]) lies in one of the [start, end) spans."""
    return [1 if any(s["start"] <= begin < s["end"] for s in spans) else 0 for begin, _ in offsets]


def prefix_assistant_mask(tokenizer, messages, **kwargs):
    """Everything above for one conversation with a transformers fast tokenizer; kwargs go to
    apply_chat_template (tools, template variables such as enable_thinking). Returns
    {"text", "input_ids", "offsets", "message_spans", "assistant_spans", "assistant_mask"}."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("add_generation_prompt", "tokenize")}

    def render(msgs, add_generation_prompt):
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)

    full = render(messages, False)
    spans = message_spans(render, messages, full)
    assistant = assistant_spans(render, messages, full)
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [list(o) for o in encoded["offset_mapping"]]
    return {"text": full, "input_ids": list(encoded["input_ids"]), "offsets": offsets, "message_spans": spans,
            "assistant_spans": assistant, "assistant_mask": token_mask(offsets, assistant)}


def prefix_token_mask(tokenizer, messages, **kwargs):
    """The per-turn prefix difference on tokens, as finetune computes it (data/chat_tokenization.h)
    and as TRL computes a prompt/completion mask (trl.data_utils.common_prefix_length): for every
    assistant message k, its tokens start where the tokens of messages[:k] rendered with the
    generation prompt stop agreeing with the whole conversation's (0 when k == 0), and end where
    those of messages[:k + 1] do. Raises when a prefix does not render."""
    from trl.data_utils import common_prefix_length
    kwargs = {k: v for k, v in kwargs.items() if k not in ("add_generation_prompt", "tokenize")}

    def ids(msgs, add_generation_prompt):
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    full = ids(messages, False)
    mask = [0] * len(full)
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        start = common_prefix_length(ids(messages[:k], True), full) if k > 0 else 0
        end = common_prefix_length(ids(messages[:k + 1], False), full)
        for i in range(start, end):
            mask[i] = 1
    return mask
