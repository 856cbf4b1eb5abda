"""`finetune chat` with piped stdin: each turn's prompt is transformers' apply_chat_template of the
conversation so far (system prompt, earlier turns with our replies), and each reply is
transformers' greedy generate() on it; /reset forgets the conversation."""
import re
import subprocess

import pytest

from conftest import finetune_bin
import generation_assets as assets

NEW_TOKENS = 10
CPU = ["--device", "cpu", "--dtype", "float32"]
TURN_LINE = re.compile(r"chat \| turn (\d+): (\d+) prompt tokens, (\d+) new, finish_reason (\w+)")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    tokenizer = assets.make_tokenizer()
    directory = tmp_path_factory.mktemp("chat_model")
    return directory, assets.make_model("llama", directory, tokenizer, seed=3), tokenizer


def run_chat(directory, stdin, *extra):
    # Bytes, not text: a reply may hold "\r", which text mode would turn into "\n".
    proc = subprocess.run([finetune_bin(), "chat", "--model_name", str(directory), "--max_new_tokens", str(NEW_TOKENS),
                           *CPU, *extra], input=stdin.encode(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode(), proc.stderr.decode()


def reference_replies(model, tokenizer, turns, system_prompt=None):
    """The prompt length and greedy reply of each turn, the conversation growing by our replies."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    out = []
    for user in turns:
        messages.append({"role": "user", "content": user})
        ids = assets.chat_ids(tokenizer, messages)
        [new] = assets.reference_generate(model, [[ids]], {tokenizer.eos_token_id}, tokenizer.pad_token_id,
                                          do_sample=False, max_new_tokens=NEW_TOKENS)
        reply = tokenizer.decode(new, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": reply})
        out.append((len(ids), reply))
    return out


def test_two_turns_follow_the_chat_template_and_transformers(chat_model):
    directory, model, tokenizer = chat_model
    turns = ["hello there", "how are you? caf\u00e9"]
    stdout, stderr = run_chat(directory, "\n".join(turns) + "\n", "--system_prompt", "Be brief.")
    expected = reference_replies(model, tokenizer, turns, system_prompt="Be brief.")
    assert stdout == "".join(reply + "\n" for _, reply in expected)
    logged = [(int(m.group(2)), int(m.group(3))) for m in TURN_LINE.finditer(stderr)]
    assert [prompt for prompt, _ in logged] == [length for length, _ in expected]
    assert "> " not in stdout  # no prompt marker when stdin is not a terminal


def test_reset_forgets_and_exit_ends(chat_model):
    directory, model, tokenizer = chat_model
    stdout, stderr = run_chat(directory, "sun moon\n/reset\nsun moon\n/exit\nnever answered\n")
    [(length, reply)] = reference_replies(model, tokenizer, ["sun moon"])
    assert stdout == reply + "\n" + reply + "\n"
    assert [int(m.group(2)) for m in TURN_LINE.finditer(stderr)] == [length, length]
