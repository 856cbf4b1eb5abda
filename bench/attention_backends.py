"""Causal bf16 attention backends at Llama-3.1-8B's attention shape (32 query heads, 8 KV heads, head
dim 128), forward and forward + backward, on a GPU: which kernel a long row or packed rows should use.

Cases: one long row per --lengths (default 32768,131072,262144), and packed rows: --packed tokens (2048)
made of samples of --sample_min..--sample_max tokens (150..600, drawn with --seed; the last sample takes
what is left), with cu_seqlens; the packed case times --packed_calls calls per timed rep (a call is
microseconds, launch-bound). Backends (--backends, default all but cudnn_varlen; see DEFAULT_BACKENDS):
  flash_varlen    torch.ops.aten._flash_attention_forward on (T, H, D) with cu_seqlens (GQA native); the
                  reference every other backend's output and dq/dk/dv are compared with
  flash_groups    the same op once per KV head g: query heads [4g, 4g+4) with KV head g, on head slices of
                  the (T, H, D) tensors, outputs written into one (T, H, D) tensor; the backward per group
                  the same way (a torch.autograd.Function calling aten._flash_attention_backward; autograd
                  over slices would make a full-size zero gradient per slice)
  cudnn_varlen    torch.ops.aten._cudnn_attention_forward on (T, H, D) with cu_seqlens; if it refuses the 8
                  KV heads, k/v expanded to 32 heads (repeat_interleave, inside autograd), said in the note
  cudnn_groups    torch.ops.aten._scaled_dot_product_cudnn_attention (dense, causal) once per KV head g on
                  (1, 4, T, D) and (1, 1, T, D) views of the (T, H, D) head slices (cuDNN takes the one KV
                  head for the 4 query heads itself), outputs written into one (T, H, D) tensor; the backward
                  per group with aten._scaled_dot_product_cudnn_attention_backward (a torch.autograd.Function,
                  as flash_groups). Single rows only (the dense op has no cu_seqlens): the packed case
                  reports it as its error. The trainer's cuDNN long-row path (Note [Head-grouped cuDNN
                  attention] in include/finetune/model/head_group_attention.h) runs this scheme
  sdpa_flash, sdpa_cudnn, sdpa_efficient, sdpa_default
                  F.scaled_dot_product_attention on (1, H, T, D) views, is_causal=True, enable_gqa=True,
                  under torch.nn.attention.sdpa_kernel([FLASH_ATTENTION | CUDNN_ATTENTION |
                  EFFICIENT_ATTENTION]), or with no context manager (default). SDPA has no cu_seqlens: on
                  packed rows it is called once per sample and the outputs concatenated (the
                  sdpa_kernel context, entered per call, adds microseconds: visible on packed rows only). The default's note names the backend its
                  dispatcher picks (torch._C._get_sdp_priority_order and the can_use_* checks) and the
                  sdpa_* backend whose forward + backward time is closest.
Each backend: median forward time (under no_grad; one warm-up rep) and forward + backward time
(torch.autograd.grad; warmed by the memory run just before), by CUDA events over --reps reps (fewer at
long rows: reps x (32768 / T)^2, at least 2); achieved TFLOP/s (causal forward FLOPs 2 x 2 x L^2 x H x D /
2 per sample of L tokens, the backward 2.5 x the forward); the peak memory allocated by one forward +
backward above what was allocated before it (inputs and grad_out; the output and dq/dk/dv it returns
included); the max abs difference of the output and dq/dk/dv against flash_varlen. A backend that fails
gets its error line in the table, and the others run.

  python3 bench/attention_backends.py --out OUT/attention_backends.json
  python3 bench/attention_backends.py --lengths 32768 --backends flash_varlen,flash_groups --out /tmp/a.json
  python3 bench/attention_backends.py --lengths 32768,131072 --backends flash_varlen,flash_groups,cudnn_groups,sdpa_cudnn
  python3 bench/attention_backends.py --dry_run     # the planned cases and a time estimate; no GPU
"""
import argparse
import contextlib
import json
import random
import statistics
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Llama-3.1-8B
GROUP = HEADS // KV_HEADS
REFERENCE = "flash_varlen"
# SDPBackend's values (torch/nn/attention/__init__.py), as torch._C._get_sdp_priority_order returns them.
SDP_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
ESTIMATE_TFLOPS = 400  # for --dry_run's time estimate: a flash-class kernel on an H100


@dataclass
class Case:
    """One timing case: the samples' lengths (a single row is one sample), timed `reps` reps of `calls`."""
    name: str
    lengths: list
    reps: int
    calls: int = 1

    @property
    def tokens(self):
        return sum(self.lengths)

    @property
    def max_len(self):
        return max(self.lengths)

    def offsets(self):
        """cu_seqlens as a list: 0, then each sample's end."""
        ends = [0]
        for length in self.lengths:
            ends.append(ends[-1] + length)
        return ends

    def forward_flops(self):
        """Causal attention's forward FLOPs: QK^T and PV, 2 x 2 x L^2 x H x D, halved by the mask."""
        return sum(2 * 2 * length * length * HEADS * HEAD_DIM // 2 for length in self.lengths)


def packed_lengths(tokens, low, high, seed):
    """Sample lengths drawn uniformly from [low, high] that fill `tokens` exactly (the last takes the rest)."""
    rng, lengths = random.Random(seed), []
    while sum(lengths) < tokens:
        lengths.append(min(rng.randint(low, high), tokens - sum(lengths)))
    return lengths


def row_reps(tokens, reps):
    """Fewer reps at long rows: reps x (32768 / T)^2, between 2 and reps."""
    return max(2, min(reps, int(reps * (32768 / tokens) ** 2)))


def cases(args):
    rows = [Case(f"row-{t}", [t], row_reps(t, args.reps)) for t in args.lengths]
    lengths = packed_lengths(args.packed, args.sample_min, args.sample_max, args.seed)
    return rows + [Case(f"packed-{args.packed}x{len(lengths)}", lengths, args.reps, args.packed_calls)]


# --- backends: each factory(case, q, k, v) -> (attn(q, k, v) -> out (T, H, D), note or None) ---

def flash(q, k, v, cu, max_len):
    """aten's flash forward, varlen: (output, logsumexp, rng_state, unused, debug mask)."""
    return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True, False, scale=None)


def flash_backward(grad_out, q, k, v, out, lse, cu, max_len, rng, unused):
    """aten's flash backward, varlen: (dq, dk, dv)."""
    return torch.ops.aten._flash_attention_backward(grad_out, q, k, v, out, lse, cu, cu, max_len, max_len, 0.0,
                                                    True, rng, unused, scale=None)


def flash_varlen(case, q, k, v):
    cu = cu_seqlens(case)
    return (lambda q, k, v: flash(q, k, v, cu, case.max_len)[0]), None


class FlashGroups(torch.autograd.Function):
    """Flash varlen once per KV head g on head slices: query heads [GROUP g, GROUP (g + 1)) with KV head g."""

    @staticmethod
    def forward(ctx, q, k, v, cu, max_len):  # q (T, H, D), k v (T, H_kv, D)
        out = torch.empty_like(q)
        lses = []
        for g in range(k.shape[1]):
            heads = slice(GROUP * g, GROUP * (g + 1))
            o, lse, rng, unused, _ = flash(q[:, heads], k[:, g:g + 1], v[:, g:g + 1], cu, max_len)
            out[:, heads] = o  # (T, GROUP, D)
            lses.append(lse)
        ctx.save_for_backward(q, k, v, out, cu, rng, unused, *lses)
        ctx.max_len = max_len
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, cu, rng, unused, *lses = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        for g, lse in enumerate(lses):
            heads, kv = slice(GROUP * g, GROUP * (g + 1)), slice(g, g + 1)
            dq[:, heads], dk[:, kv], dv[:, kv] = flash_backward(
                grad_out[:, heads], q[:, heads], k[:, kv], v[:, kv], out[:, heads], lse, cu, ctx.max_len, rng, unused)
        return dq, dk, dv, None, None


def flash_groups(case, q, k, v):
    cu = cu_seqlens(case)
    return (lambda q, k, v: FlashGroups.apply(q, k, v, cu, case.max_len)), None


def cudnn_varlen(case, q, k, v):
    """cuDNN's varlen forward; when it refuses the KV heads as they are, k/v expanded to HEADS heads."""
    cu = cu_seqlens(case)

    def native(q, k, v):
        return torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, case.max_len, case.max_len,
                                                       True, 0.0, True, False)[0]

    try:
        with torch.no_grad():
            native(q, k, v)
        return native, None
    except RuntimeError as e:
        note = f"k/v expanded to {HEADS} heads: cuDNN refused {KV_HEADS} KV heads ({first_line(e)})"
        return (lambda q, k, v: native(q, k.repeat_interleave(GROUP, 1), v.repeat_interleave(GROUP, 1))), note


def dense(t):
    """(T, heads, D) -> (1, heads, T, D), a view: the dense layout of SDPA and cuDNN."""
    return t.transpose(0, 1).unsqueeze(0)


def cudnn(q, k, v):
    """aten's cuDNN attention on dense (1, heads, T, D) views, causal, keeping the log-sum-exp for the backward:
    (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug mask)."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)


def cudnn_backward(grad_out, q, k, v, out, saved):
    """aten's cuDNN backward of one cudnn() call, `saved` its outputs but the first: (dq, dk, dv)."""
    lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = saved
    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        grad_out, q, k, v, out, lse, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0, True)


class CudnnGroups(torch.autograd.Function):
    """cuDNN's dense attention once per KV head g, one sample: query heads [GROUP g, GROUP (g + 1)) and KV head
    g as (1, heads, T, D) views of head slices."""

    @staticmethod
    def forward(ctx, q, k, v):  # q (T, H, D), k v (T, H_kv, D)
        out = torch.empty_like(q)
        ctx.calls = []
        for g in range(k.shape[1]):
            heads = slice(GROUP * g, GROUP * (g + 1))
            o, *saved = cudnn(dense(q[:, heads]), dense(k[:, g:g + 1]), dense(v[:, g:g + 1]))
            dense(out[:, heads]).copy_(o)  # (1, GROUP, T, D)
            ctx.calls.append(saved)
        ctx.save_for_backward(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out = ctx.saved_tensors
        grad_out = grad_out.contiguous()  # out's strides, so cuDNN takes each group's view as it is
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        for g, saved in enumerate(ctx.calls):
            heads, kv = slice(GROUP * g, GROUP * (g + 1)), slice(g, g + 1)
            grads = cudnn_backward(dense(grad_out[:, heads]), dense(q[:, heads]), dense(k[:, kv]), dense(v[:, kv]),
                                   dense(out[:, heads]), saved)
            for whole, part, grad in zip((dq, dk, dv), (heads, kv, kv), grads):
                dense(whole[:, part]).copy_(grad)
        ctx.calls = None
        return dq, dk, dv


def cudnn_groups(case, q, k, v):
    if len(case.lengths) != 1:
        raise ValueError(f"single rows only (cuDNN's dense op has no cu_seqlens); {len(case.lengths)} samples")
    return CudnnGroups.apply, None


def sdpa_factory(backend):
    """F.scaled_dot_product_attention on (1, H, L, D) views under sdpa_kernel([backend]) (None: the
    default dispatch), once per sample."""

    def attend(q, k, v):  # (L, H, D) -> (L, H, D)
        view = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731 (1, H, L, D)
        return F.scaled_dot_product_attention(view(q), view(k), view(v), is_causal=True,
                                              enable_gqa=True)[0].transpose(0, 1)

    def factory(case, q, k, v):
        ends = case.offsets()

        def attn(q, k, v):
            with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
                outs = [attend(q[s:e], k[s:e], v[s:e]) for s, e in zip(ends, ends[1:])]
            return outs[0] if len(outs) == 1 else torch.cat(outs)
        return attn, (default_sdpa_note(case, q, k, v) if backend is None else None)
    return factory


def default_sdpa_backend(q, k, v):
    """The backend SDPA's default dispatch picks for (1, H, L, D) inputs, as its dispatcher does: the first
    in torch._C._get_sdp_priority_order() that is enabled and whose can_use_* check accepts them."""
    cuda = torch.backends.cuda
    checks = {1: (cuda.flash_sdp_enabled, cuda.can_use_flash_attention),
              2: (cuda.mem_efficient_sdp_enabled, cuda.can_use_efficient_attention),
              3: (cuda.cudnn_sdp_enabled, cuda.can_use_cudnn_attention),
              0: (cuda.math_sdp_enabled, lambda params: True)}
    params = cuda.SDPAParams(q, k, v, None, 0.0, True, True)
    for backend in torch._C._get_sdp_priority_order():
        enabled, can_use = checks.get(int(backend), (lambda: False, None))
        if enabled() and can_use(params):
            return SDP_NAMES[int(backend)]
    return "none"


def default_sdpa_note(case, q, k, v):
    """The default's pick for the case's longest sample (its dispatch looks at shapes, not values)."""
    start = case.offsets()[case.lengths.index(case.max_len)]
    view = lambda t: t[start:start + case.max_len].transpose(0, 1).unsqueeze(0)  # noqa: E731
    try:
        return f"dispatches to {default_sdpa_backend(view(q), view(k), view(v))}"
    except (AttributeError, RuntimeError, TypeError) as e:
        return f"dispatch unknown ({first_line(e)})"


def backends():
    return {"flash_varlen": flash_varlen, "flash_groups": flash_groups, "cudnn_varlen": cudnn_varlen,
            "cudnn_groups": cudnn_groups,
            "sdpa_flash": sdpa_factory(SDPBackend.FLASH_ATTENTION),
            "sdpa_cudnn": sdpa_factory(SDPBackend.CUDNN_ATTENTION),
            "sdpa_efficient": sdpa_factory(SDPBackend.EFFICIENT_ATTENTION), "sdpa_default": sdpa_factory(None)}


BACKENDS = tuple(backends())
# cudnn_varlen only when named: on an H200 (torch 2.11, cuDNN 9.19) it gave wrong gradients at 32k tokens
# and an illegal memory access at 131k, which poisons the CUDA context and ends the run's remaining cases.
DEFAULT_BACKENDS = tuple(name for name in BACKENDS if name != "cudnn_varlen")


# --- measurement ---

def first_line(error):
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def cu_seqlens(case):
    return torch.tensor(case.offsets(), dtype=torch.int32, device="cuda")


def make_inputs(case, seed):
    """q (T, H, D), k and v (T, H_kv, D) bf16 leaves needing gradients, and grad_out (T, H, D)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda heads: torch.randn(case.tokens, heads, HEAD_DIM, device="cuda", generator=g,  # noqa: E731
                                     dtype=torch.bfloat16)
    q, k, v = (make(h).requires_grad_() for h in (HEADS, KV_HEADS, KV_HEADS))
    return q, k, v, make(HEADS)


def time_ms(fn, reps, calls, warmup):
    """Median milliseconds of one call of `fn` over `reps` CUDA-event-timed reps of `calls` calls, after
    `warmup` untimed reps."""
    for _ in range(warmup * calls):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def peak_and_outputs(attn, q, k, v, grad_out):
    """One forward + backward: the peak bytes allocated above what was allocated before it, and (out, dq,
    dk, dv)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = attn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, (out.detach(), *grads)


def max_abs_diffs(outputs, reference):
    if reference is None:
        return None
    return {name: (a - b).abs().max().float().item()
            for name, a, b in zip(("out", "dq", "dk", "dv"), outputs, reference)}


def measure(name, factory, case, inputs, reference):
    """One backend on one case: a result row, and its (out, dq, dk, dv) (for the reference backend)."""
    q, k, v, grad_out = inputs
    row = {"case": case.name, "backend": name, "tokens": case.tokens, "samples": len(case.lengths)}
    try:
        attn, row["note"] = factory(case, q, k, v)
        peak, outputs = peak_and_outputs(attn, q, k, v, grad_out)
        row["peak_gib"], row["max_abs_diff"] = peak / 2**30, max_abs_diffs(outputs, reference)
        outputs = outputs if name == REFERENCE else None

        def forward():
            with torch.no_grad():
                attn(q, k, v)
        row["fwd_ms"] = time_ms(forward, case.reps, case.calls, warmup=1)
        row["fwd_bwd_ms"] = time_ms(lambda: torch.autograd.grad(attn(q, k, v), (q, k, v), grad_out),
                                    case.reps, case.calls, warmup=0)
    except Exception as e:  # noqa: BLE001 (any backend failure is a result: reported, and the next runs)
        row["error"], outputs = first_line(e), None
    torch.cuda.empty_cache()
    if "fwd_bwd_ms" in row:
        flops = case.forward_flops()
        row["fwd_tflops"] = flops / row["fwd_ms"] / 1e9
        row["fwd_bwd_tflops"] = 3.5 * flops / row["fwd_bwd_ms"] / 1e9
    return row, outputs


def closest_sdpa(rows):
    """Which sdpa_* backend's forward + backward time the default's is closest to (a check of its note)."""
    default = next((r for r in rows if r["backend"] == "sdpa_default" and "fwd_bwd_ms" in r), None)
    timed = [r for r in rows if r["backend"].startswith("sdpa_") and r["backend"] != "sdpa_default"
             and "fwd_bwd_ms" in r]
    if default and timed:
        best = min(timed, key=lambda r: abs(r["fwd_bwd_ms"] - default["fwd_bwd_ms"]))
        default["note"] = (default.get("note") or "") + f"; timing closest to {best['backend']}"


def run_case(case, names, seed):
    """Every backend on one case, the reference first; the inputs freed afterwards."""
    factories, inputs, reference, rows = backends(), make_inputs(case, seed), None, []
    for name in sorted(names, key=lambda n: n != REFERENCE):
        row, outputs = measure(name, factories[name], case, inputs, reference)
        reference = outputs if name == REFERENCE else reference
        rows.append(row)
        print(format_row(row), flush=True)
    closest_sdpa(rows)
    del inputs, reference
    torch.cuda.empty_cache()
    return rows


# --- output ---

def fmt(value, spec):
    return format(value, spec) if value is not None else "-"


def format_row(row):
    if "error" in row:
        return f"{row['case']:18s} {row['backend']:15s} FAILED {row['error'][:160]}"
    diff = row.get("max_abs_diff")
    diffs = ("/".join(fmt(diff[n], ".1e") for n in ("out", "dq", "dk", "dv")) if diff
             else "(reference)" if row["backend"] == REFERENCE else "- (no reference)")
    return (f"{row['case']:18s} {row['backend']:15s} {row['fwd_ms']:10.3f} {row['fwd_tflops']:7.1f} "
            f"{row['fwd_bwd_ms']:10.3f} {row['fwd_bwd_tflops']:7.1f} {row['peak_gib']:8.2f}  {diffs:35s} "
            f"{row.get('note') or ''}")


HEADER = (f"{'case':18s} {'backend':15s} {'fwd ms':>10s} {'TFLOP/s':>7s} {'f+b ms':>10s} {'TFLOP/s':>7s} "
          f"{'peak GiB':>8s}  {'max|diff| out/dq/dk/dv':35s} note")


def print_table(rows):
    print(HEADER)
    for row in rows:
        print(format_row(row))


def environment():
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "total_gib": props.total_memory / 2**30, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "sdp_priority_order": [SDP_NAMES.get(int(b), str(b)) for b in torch._C._get_sdp_priority_order()],
            "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "dtype": "bfloat16"}}


def dry_run(args):
    """The planned cases, and the time they would take at ESTIMATE_TFLOPS (no GPU)."""
    total = 0.0
    print(f"shape: {HEADS} heads, {KV_HEADS} KV heads, head dim {HEAD_DIM}, bf16, causal; backends: "
          + ",".join(args.backends))
    for case in cases(args):
        seconds = case.forward_flops() / (ESTIMATE_TFLOPS * 1e12)
        # one measured forward + backward, forward reps + 1 warm-up, forward + backward reps (x 3.5)
        per_backend = seconds * case.calls * (3.5 + (case.reps + 1) + 3.5 * case.reps)
        total += per_backend * len(args.backends)
        lengths = (f"{len(case.lengths)} samples {min(case.lengths)}..{case.max_len}: {case.lengths}"
                   if len(case.lengths) > 1 else "one row")
        print(f"{case.name}: {case.tokens} tokens, {lengths}; forward {case.forward_flops() / 1e12:.3f} TFLOP; "
              f"{case.reps} reps x {case.calls} calls; ~{per_backend:.1f} s a backend at {ESTIMATE_TFLOPS} TFLOP/s")
    print(f"estimate: ~{total:.0f} s of attention (efficient attention is slower; start-up and allocation not counted)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Causal attention backends at Llama-3.1-8B's shape; see the docstring.")
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    p.add_argument("--lengths", type=ints, default=[32768, 131072, 262144], help="single-row lengths")
    p.add_argument("--packed", type=int, default=2048, help="tokens of the packed case")
    p.add_argument("--sample_min", type=int, default=150)
    p.add_argument("--sample_max", type=int, default=600)
    p.add_argument("--packed_calls", type=int, default=50, help="calls per timed rep of the packed case")
    p.add_argument("--reps", type=int, default=5, help="timed reps (single rows: fewer when long)")
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS), help="comma-separated, of " + ",".join(BACKENDS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON: the environment and every row")
    p.add_argument("--dry_run", action="store_true", help="print the planned cases; no GPU")
    args = p.parse_args(argv)
    args.backends = args.backends.split(",")
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        p.error(f"--backends: unknown {unknown} (have {','.join(BACKENDS)})")
    if not 0 < args.sample_min <= args.sample_max or args.packed < 1 or args.reps < 1:
        p.error("--sample_min <= --sample_max, --packed and --reps must be positive")
    return args


def main():
    args = parse_args()
    if args.dry_run:
        return dry_run(args)
    env = environment()
    print(json.dumps(env))
    print(HEADER)
    rows = []
    for case in cases(args):
        rows += run_case(case, args.backends, args.seed)
    print()
    print_table(rows)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
