"""RoPE scaling past the original context (issue 31): `finetune eval` on rows up to three times
longer than where each case's scaling starts gives transformers' logits (1e-5 relative) and loss,
for every rope type a Llama config may name (default, linear, llama3, yarn and its attention
factor variants, dynamic NTK). The cases are tests/reference/make_long_rope_fixtures.py's."""
import pytest
import torch

import make_long_rope_fixtures as long_rope
import tiny_models
from test_eval_parity import eval_matches_reference


@pytest.fixture(scope="module")
def long_rows(tmp_path_factory):
    """Rows of 40 to 96 tokens: all past the 32 positions where scaling starts."""
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    rows = tiny_models.make_tokenized_rows(6, seed=11, min_len=40, max_len=long_rope.SEQUENCE)
    rows[2]["labels"] = [-100] * 30 + rows[2]["input_ids"][30:]  # a completion-only row
    tiny_models.write_jsonl(path, rows)
    return path, rows


@pytest.mark.parametrize("case", list(long_rope.rope_cases()))
def test_eval_past_original_context_matches_transformers(case, tmp_path, long_rows):
    data_path, rows = long_rows
    model = long_rope.make_case(case, tmp_path / case)
    eval_matches_reference(model, rows, tmp_path / case, data_path, tmp_path / "logits.safetensors",
                           extra=["--max_seq_length", 128])


def test_cases_scale_differently():
    """Each scaled case changes the frequencies or the cos/sin factor (a case equal to default tests nothing)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    import transformers
    tables = {}
    for case, kwargs in long_rope.rope_cases().items():
        rotary = LlamaRotaryEmbedding(transformers.LlamaConfig(**kwargs))
        x = torch.zeros(1, 1, long_rope.SEQUENCE, 16)
        cos, _ = rotary(x, torch.arange(long_rope.SEQUENCE).unsqueeze(0))
        tables[case] = cos
    for case, cos in tables.items():
        if case != "default":
            assert not torch.allclose(cos, tables["default"]), case
