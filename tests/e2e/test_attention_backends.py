"""bench/attention_backends.py without a GPU: the packed case's lengths, the FLOP count, the reps at long
rows, the per-KV-head split of flash_groups and cudnn_groups (their forward and backward against
whole-tensor attention, with aten's flash and cuDNN ops replaced by SDPA's math on the CPU), and --dry_run."""
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import attention_backends as ab  # noqa: E402


def test_packed_lengths_fill_the_tokens_within_the_range_but_the_last():
    lengths = ab.packed_lengths(2048, 150, 600, seed=0)
    assert sum(lengths) == 2048
    assert all(150 <= n <= 600 for n in lengths[:-1]) and 0 < lengths[-1] <= 600
    assert lengths == ab.packed_lengths(2048, 150, 600, seed=0)


def test_forward_flops_are_causal_per_sample():
    # 2 x 2 x L^2 x 32 x 128 / 2 for each sample.
    assert ab.Case("c", [1024, 512], 1).forward_flops() == 2 * 4096 * (1024**2 + 512**2)
    assert ab.Case("c", [3, 4], 1).offsets() == [0, 3, 7]


def test_long_rows_get_fewer_reps_but_at_least_two():
    assert ab.row_reps(32768, 5) == 5
    assert ab.row_reps(65536, 8) == 2
    assert ab.row_reps(262144, 5) == 2
    assert ab.row_reps(2048, 5) == 5


def math_attention(q, k, v, offsets):
    """Block-diagonal causal attention in fp32 on (T, H, D), KV heads repeated: the reference."""
    group = q.shape[1] // k.shape[1]
    outs = []
    for s, e in zip(offsets, offsets[1:]):
        heads = lambda t, n: t[s:e].repeat_interleave(n, 1).transpose(0, 1)  # noqa: E731
        outs.append(torch.nn.functional.scaled_dot_product_attention(
            heads(q, 1), heads(k, group), heads(v, group), is_causal=True).transpose(0, 1))
    return torch.cat(outs)


@pytest.fixture
def math_flash(monkeypatch):
    """aten's flash forward and backward replaced by math_attention (CPU)."""
    def forward(q, k, v, cu, max_len):
        out = math_attention(q, k, v, cu.tolist())
        return out, torch.zeros(q.shape[1], q.shape[0]), torch.empty(0), torch.empty(0), None

    def backward(grad_out, q, k, v, out, lse, cu, max_len, rng, unused):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            return torch.autograd.grad(math_attention(*leaves, cu.tolist()), leaves, grad_out)

    monkeypatch.setattr(ab, "flash", forward)
    monkeypatch.setattr(ab, "flash_backward", backward)
    monkeypatch.setattr(ab, "cu_seqlens", lambda case: torch.tensor(case.offsets(), dtype=torch.int32))


def assert_groups_equal_math_attention(groups, case, seed):
    """groups(case, q, k, v)'s attention and its gradients equal causal math attention per sample."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(case.tokens, h, ab.HEAD_DIM, generator=g).requires_grad_()
               for h in (ab.HEADS, ab.KV_HEADS, ab.KV_HEADS))
    grad_out = torch.randn(case.tokens, ab.HEADS, ab.HEAD_DIM, generator=g)
    want = math_attention(q, k, v, case.offsets())
    want_grads = torch.autograd.grad(want, (q, k, v), grad_out)
    attn, note = groups(case, q, k, v)
    out = attn(q, k, v)
    diffs = ab.max_abs_diffs((out, *torch.autograd.grad(out, (q, k, v), grad_out)), (want, *want_grads))
    assert note is None and max(diffs.values()) < 1e-5, diffs


def test_flash_groups_splits_the_heads_by_kv_head_forward_and_backward(math_flash):
    assert_groups_equal_math_attention(ab.flash_groups, ab.Case("packed", [7, 5, 9], 1), seed=0)


@pytest.fixture
def math_cudnn(monkeypatch):
    """aten's cuDNN forward and backward replaced by causal SDPA math on (1, heads, T, D), KV heads repeated (CPU)."""
    def attend(q, k, v):
        group = q.shape[1] // k.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=True)

    def forward(q, k, v):
        assert q.dim() == 4 and q.shape[0] == 1 and k.shape[1] == 1, "one KV head per call, dense (1, heads, T, D)"
        return (attend(q, k, v), torch.zeros(1, q.shape[1], q.shape[2], 1), None, None, q.shape[2], k.shape[2],
                torch.empty(()), torch.empty(()), None)

    def backward(grad_out, q, k, v, out, saved):
        assert grad_out.stride() == out.stride(), "grad_out in out's layout"
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            return torch.autograd.grad(attend(*leaves), leaves, grad_out)

    monkeypatch.setattr(ab, "cudnn", forward)
    monkeypatch.setattr(ab, "cudnn_backward", backward)


def test_cudnn_groups_splits_the_heads_by_kv_head_forward_and_backward(math_cudnn):
    assert_groups_equal_math_attention(ab.cudnn_groups, ab.Case("row-19", [19], 1), seed=1)


def test_cudnn_groups_refuses_packed_rows():
    with pytest.raises(ValueError, match="single rows only"):
        ab.cudnn_groups(ab.Case("packed", [7, 5], 1), None, None, None)


def test_the_default_gets_the_sdpa_backend_of_the_closest_time():
    rows = [{"backend": "sdpa_default", "fwd_bwd_ms": 2.0, "note": "dispatches to flash"},
            {"backend": "sdpa_flash", "fwd_bwd_ms": 2.1}, {"backend": "sdpa_cudnn", "fwd_bwd_ms": 5.0},
            {"backend": "sdpa_efficient", "error": "RuntimeError: No available kernel."}]
    ab.closest_sdpa(rows)
    assert rows[0]["note"] == "dispatches to flash; timing closest to sdpa_flash"


def test_dry_run_plans_every_case_without_a_gpu(capsys):
    ab.dry_run(ab.parse_args(["--dry_run", "--lengths", "32768,131072", "--backends", "flash_varlen,sdpa_flash"]))
    text = capsys.readouterr().out
    assert "row-32768:" in text and "row-131072:" in text and "packed-2048x" in text and "estimate:" in text


def test_an_unknown_backend_is_refused():
    with pytest.raises(SystemExit):
        ab.parse_args(["--backends", "flash_varlen,triton"])
