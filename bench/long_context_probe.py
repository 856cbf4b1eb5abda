"""Long-context probe (issue 31, GPU machine): the longest single row that trains, for us, Unsloth and
the transformers + PEFT loop, in the same call.

For each tool, shape (bench/shapes.py) and variant (lora: bf16 base; qlora: 4-bit NF4 base), gradient
checkpointing on (ours: --use_gradient_checkpointing true; Unsloth: use_gradient_checkpointing="unsloth",
its offloaded checkpointing; the loop: transformers' non-reentrant checkpointing), batch 1: a row of L
tokens (completions-only: the second half labelled, as the benchmark's rows) trains for --steps optimizer
steps (3). L doubles from --start while that succeeds, then bisects between the longest success and the
shortest failure down to --resolution tokens (1k). Every attempt is its own subprocess, so an
out-of-memory failure leaves the next attempt a clean device. An attempt's tokens/s is measured over
the steps after the first (step 1 warms up), as bench.py measures.

The proxy (--layers K): an 8B step at the lengths in question takes many minutes (causal attention is
quadratic in L, once per layer), so the model may be the shape's first K decoder layers, with a
ballast: a separate process (bench/gpu_ballast.py) holding, during every attempt, the GPU bytes the
removed layers would hold (removed_layers_bytes: frozen base weights + LoRA adapters with their
gradients and AdamW states). Time per attempt falls by about depth/K; a tool's own peak memory then
excludes the ballast. What the proxy does not reproduce: per-layer activations a tool keeps on the
GPU (ours and Unsloth offload the checkpointed layer inputs to host memory, so theirs are per-layer
constant; the loop keeps every layer's checkpoint on the GPU, so it runs at full depth unless
--loop_layers says otherwise), and the host memory the offloaded checkpoints would take at full depth
(layers x L x hidden x 2 bytes). Every result records its layers, the full depth, the ballast and the
steps; a proxy's state key ends in /<K>of<N>L+<ballast GiB>GiB.

GPU capacity (--gpu_capacity_gib C, e.g. 79.19: the total torch.cuda.mem_get_info reports for an H100
80GB HBM3): every attempt's ballast process also holds what the card has beyond C GiB
(gpu_ballast.py --gpu_capacity), so the tools find the free memory of a C GiB card, e.g. the issue's
80 GB H100 on a 139.8 GiB H200. A ballast process runs for a capacity even when the removed layers
hold nothing (full depth). Only free memory is emulated: the speed is the real card's, and a tool that
reads the card's total still sees the real one. The capacity is part of every result's setting and of
the state key (a suffix @<C>GiB), so results at different capacities never mix.

Device calls last at most 10 minutes: --budget_s (or LONGCTX_BUDGET_S) stops starting attempts that
would not finish in time, and every attempt's result is written to --state at once, so a later call
given the same --state (and the same --work, while the machine stays warm) goes on where this one
stopped. Prints a table; the state file is the JSON record. --dry_run prints each probe's depth,
ballast, GPU capacity and first command, and runs nothing.

  python3 bench/long_context_probe.py --finetune build/finetune --shapes qwen3-8b --variants qlora \\
      --tools finetune,unsloth,loop --layers 2 --steps 2 --state OUT/long_context.json --work /tmp/longctx \\
      [--gpu_capacity_gib 79.19]
"""
import argparse
import contextlib
import json
import math
import os
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402
import shapes  # noqa: E402

TOOLS = ("finetune", "unsloth", "loop")
VARIANT_FLAGS = {"lora": [], "qlora": ["--load_in_4bit"]}
# Every tool's adapter (peer_common.lora_config, Unsloth's get_peft_model in peer_unsloth_train.py, our
# defaults): r 16 on every linear projection of a layer. The adapters are fp32 in all three (ours:
# src/lora/attach_lora.cpp; PEFT 0.21's get_peft_model upcasts bf16 adapters, autocast_adapter_dtype=True;
# Unsloth 2026.10.9's prepare_model_for_kbit_training casts lora_A/B to fp32, float32_mixed_precision),
# and so are their gradients and AdamW's two moments: 16 bytes a parameter.
LORA_R = 16
LORA_BYTES_PER_PARAM = 4 + 4 + 8
# Model types with q/k RMSNorm weights (head_dim each) beside a layer's input and post-attention ones
# (hidden each); norms stay bf16 under QLoRA too.
QK_NORM_MODEL_TYPES = ("qwen3",)
DENSE_MODEL_TYPES = ("llama", "qwen3")


def projection_shapes(config):
    """(in_features, out_features) of every linear projection of one dense decoder layer, by PEFT's names."""
    hidden, intermediate = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden),
            "gate_proj": (hidden, intermediate), "up_proj": (hidden, intermediate),
            "down_proj": (intermediate, hidden)}


def nf4_bytes(numel, blocksize=64, nested_blocksize=256):
    """A weight as bitsandbytes' quantize_4bit(blocksize=64, compress_statistics=True) keeps it on the GPU:
    the packed 4-bit codes (numel / 2 bytes), one uint8 absmax code per block of 64 (the absmax nested in
    8 bits), one fp32 absmax per 256 of those. Left out: the per-weight constants (the 16-entry fp32 NF4
    code, the fp32 offset: 68 bytes) and the 256-entry nested code bitsandbytes shares."""
    blocks = math.ceil(numel / blocksize)
    return math.ceil(numel / 2) + blocks + 4 * math.ceil(blocks / nested_blocksize)


def layer_bytes(config, model_type, variant):
    """GPU bytes one decoder layer holds under LoRA training: its frozen base weights (bf16, or the
    projections in NF4 for qlora; the norms bf16) and its adapters with gradients and AdamW states."""
    if model_type not in DENSE_MODEL_TYPES:
        raise ValueError(f"ballast: no layer arithmetic for model type {model_type!r} (have {DENSE_MODEL_TYPES})")
    projections = projection_shapes(config).values()
    if variant == "qlora":
        base = sum(nf4_bytes(n_in * n_out) for n_in, n_out in projections)
    else:
        base = sum(2 * n_in * n_out for n_in, n_out in projections)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    norms = 2 * config["hidden_size"] + (2 * head_dim if model_type in QK_NORM_MODEL_TYPES else 0)
    adapters = sum(LORA_R * (n_in + n_out) for n_in, n_out in projections)
    return base + 2 * norms + LORA_BYTES_PER_PARAM * adapters


def removed_layers_bytes(config, model_type, variant, layers):
    """The ballast of a model cut to its first `layers` decoder layers: the bytes its other layers would
    hold on the GPU (layer_bytes each). Embeddings, final norm and LM head are kept by the cut model."""
    removed = config["num_hidden_layers"] - layers
    if removed < 0 or layers < 1:
        raise ValueError(f"ballast: {layers} layers of a {config['num_hidden_layers']}-layer model")
    return removed * layer_bytes(config, model_type, variant) if removed else 0


def full_depth(shape):
    return shapes.SHAPES[shape][2]["num_hidden_layers"]


def model_dir(work, shape, layers):
    """The model's directory: the shape's name, with -<K>l when cut to K layers."""
    return os.path.join(work, shape if layers == full_depth(shape) else f"{shape}-{layers}l")


def tool_layers(args, tool, shape):
    """The depth `tool` is probed at: --layers, but the loop (its checkpoints stay on the GPU, so a cut
    model would overstate its length) at --loop_layers, the full depth by default."""
    layers = args.loop_layers if tool == "loop" else args.layers
    if layers is not None and not 1 <= layers <= full_depth(shape):
        raise ValueError(f"{tool}: {layers} layers of {shape}, which has {full_depth(shape)}")
    return full_depth(shape) if layers is None else layers


def ballast_size(args, shape, variant, layers):
    """--ballast in bytes: auto is removed_layers_bytes when cut (0 at full depth), none is 0."""
    if args.ballast == "none":
        return 0
    if args.ballast != "auto":
        return int(args.ballast)
    config_class, _, config = shapes.SHAPES[shape]
    return removed_layers_bytes(config, config_class.model_type, variant, layers)


def capacity_bytes(capacity_gib):
    """--gpu_capacity_gib in bytes (None without one)."""
    return None if capacity_gib is None else round(capacity_gib * 2**30)


def ballast_command(nbytes, capacity):
    """bench/gpu_ballast.py's command line: `nbytes`, and --gpu_capacity `capacity` bytes when given."""
    cmd = [sys.executable, os.path.join(HERE, "gpu_ballast.py"), "--bytes", str(nbytes)]
    return cmd + (["--gpu_capacity", str(capacity)] if capacity is not None else [])


@contextlib.contextmanager
def ballast(nbytes, log_path, capacity=None, timeout=120):
    """bench/gpu_ballast.py holding `nbytes`, and the card's bytes beyond `capacity` when given (same
    environment, so the same CUDA_VISIBLE_DEVICES), while the block runs; yields its JSON line (None
    when it holds nothing: 0 bytes and no capacity). Killed on leaving, whatever happened."""
    if nbytes <= 0 and capacity is None:
        yield None
        return
    with open(log_path, "w") as log:
        proc = subprocess.Popen(ballast_command(nbytes, capacity), stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            why = f"exited {proc.wait()}" if ready else f"no JSON line within {timeout} s"
            raise RuntimeError(f"ballast of {nbytes} bytes (GPU capacity {capacity}): {why} (log: {log_path})")
        yield json.loads(line)
    finally:
        proc.kill()
        proc.wait()


def rows_path(work, shape, length, steps):
    return os.path.join(work, f"rows-{shape}-{length}x{steps}.jsonl")


def rows_file(work, shape, length, steps):
    """`steps` rows of `length` tokens (one per optimizer step), the second half of each labelled."""
    path = rows_path(work, shape, length, steps)
    if not os.path.exists(path):
        import torch
        vocab = shapes.SHAPES[shape][2]["vocab_size"]
        g = torch.Generator().manual_seed(length)
        with open(path + ".tmp", "w") as f:
            for _ in range(steps):
                ids = torch.randint(100, vocab - 100, (length,), generator=g).tolist()
                f.write(json.dumps({"input_ids": ids, "labels": [-100] * (length // 2) + ids[length // 2:]}) + "\n")
        os.rename(path + ".tmp", path)
    return path


def command(tool, args, model, data, length, variant, out_dir):
    """The attempt's command line: --steps optimizer steps, the first one untimed."""
    flags = VARIANT_FLAGS[variant]
    if tool == "finetune":
        return [args.finetune, "--model_name", model, "--dataset", data, "--max_steps", str(args.steps),
                "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1",
                "--max_seq_length", str(length), "--logging_steps", "1", "--warmup_steps", "0",
                "--output_dir", out_dir, "--overwrite_output_dir", "--dtype", "bfloat16",
                "--use_gradient_checkpointing", "true"] + flags + args.finetune_flags.split()
    script = "peer_unsloth_train.py" if tool == "unsloth" else "reference_train.py"
    cmd = [sys.executable, os.path.join(HERE, script), "--model", model, "--data", data, "--batch", "1",
           "--accum", "1", "--steps", str(args.steps - 1), "--warmup_steps", "1",
           "--max_seq_length", str(length)] + flags
    return cmd + (["--out", out_dir] if tool == "unsloth" else [])


def finetune_result(stdout, out_dir):
    """tokens/s over the steps after the first from metrics.jsonl (logging every step), peak memory from
    the summary line."""
    summary = json.loads(stdout.strip().splitlines()[-1])
    lines = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if '"step"' in l]
    first, last = lines[0], lines[-1]
    return {"tokens_per_s": (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"]),
            "peak_memory_gib": summary.get("peak_memory_gib")}


def attempt_dir(probe, length):
    """An attempt's output directory (its log beside it): tool-shape-variant-length, -<K>l when cut."""
    out_dir = os.path.join(probe.args.work, f"{probe.tool}-{probe.shape}-{probe.variant}-{length}")
    return out_dir + (f"-{probe.layers}l" if probe.layers != probe.full_layers else "")


def run_tool(probe, length, out_dir, log_path):
    """The tool's process on `length` tokens beside the probe's ballast: (CompletedProcess, the ballast's
    JSON line)."""
    args, model = probe.args, model_dir(probe.args.work, probe.shape, probe.layers)
    data = rows_file(args.work, probe.shape, length, args.steps)
    cmd = command(probe.tool, args, model, data, length, probe.variant, out_dir)
    with ballast(probe.ballast_bytes, out_dir + ".ballast.log", capacity_bytes(probe.capacity_gib)) as held:
        with open(log_path, "w") as log:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, timeout=args.attempt_timeout,
                                  cwd=args.work, env=peers.environment(args.work))
    return proc, held


def attempt(probe, length):
    """One subprocess run of `length` tokens: {"ok": bool, "tokens_per_s", "peak_memory_gib", "wall_s", "error",
    "ballast"}."""
    args, out_dir = probe.args, attempt_dir(probe, length)
    log_path = out_dir + ".log"
    t0 = time.time()
    try:
        proc, held = run_tool(probe, length, out_dir, log_path)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {args.attempt_timeout} s", "wall_s": time.time() - t0}
    except (RuntimeError, ValueError, OSError) as e:  # the ballast did not come up, or a command did not start
        return {"ok": False, "error": str(e), "wall_s": time.time() - t0}
    with open(log_path, "a") as log:
        log.write("\n--- stdout ---\n" + proc.stdout)
    wall = time.time() - t0
    if proc.returncode != 0:
        text = open(log_path, errors="replace").read().lower()
        oom = "out of memory" in text or "outofmemory" in text
        return {"ok": False, "oom": oom, "error": peers.failure_reason(log_path, proc.returncode), "wall_s": wall,
                "ballast": held}
    try:
        result = finetune_result(proc.stdout, out_dir) if probe.tool == "finetune" else peers.result_line(proc.stdout)
        result = {"tokens_per_s": result.get("tokens_per_s", result.get("tokens_per_s_per_gpu")),
                  "peak_memory_gib": result.get("peak_memory_gib")}
    except (ValueError, KeyError, IndexError, AttributeError, OSError) as e:
        return {"ok": False, "error": f"no result: {e} (log: {log_path})", "wall_s": wall}
    return dict(result, ok=True, wall_s=wall, ballast=held)


def probe_key(tool, shape, variant, layers, ballast_bytes, capacity_gib=None):
    """The state's key of a probe: tool/shape/variant, with /<K>of<N>L+<ballast GiB>GiB for a proxy and
    @<capacity>GiB for an emulated GPU capacity (written as given, so different capacities never mix)."""
    key = f"{tool}/{shape}/{variant}"
    if layers != full_depth(shape) or ballast_bytes:
        key += f"/{layers}of{full_depth(shape)}L+{ballast_bytes / 2**30:.2f}GiB"
    return key + (f"@{capacity_gib:g}GiB" if capacity_gib is not None else "")


class Probe:
    """The doubling-then-bisection search of one (tool, shape, variant), its attempts kept in `state`."""

    def __init__(self, args, state, tool, shape, variant):
        self.args, self.state = args, state
        self.tool, self.shape, self.variant = tool, shape, variant
        self.layers, self.full_layers = tool_layers(args, tool, shape), full_depth(shape)
        self.ballast_bytes = ballast_size(args, shape, variant, self.layers)
        self.capacity_gib = args.gpu_capacity_gib
        self.key = probe_key(tool, shape, variant, self.layers, self.ballast_bytes, self.capacity_gib)
        self.attempts = state.setdefault("attempts", {}).setdefault(self.key, {})

    def setting(self):
        """What every result of this probe was measured with."""
        return {"layers": self.layers, "full_layers": self.full_layers, "ballast_bytes": self.ballast_bytes,
                "gpu_capacity_gib": self.capacity_gib, "steps": self.args.steps}

    def run(self, length, deadline):
        """The attempt at `length` (from the state when already made); None when out of time."""
        if str(length) in self.attempts:
            return self.attempts[str(length)]
        expected = max((a.get("wall_s", 0) for a in self.attempts.values()), default=self.args.first_attempt_s)
        if time.time() + expected > deadline:
            return None
        print(f"[probe] {self.key} {length} tokens ...", flush=True)
        result = dict(attempt(self, length), **self.setting())
        print(f"[probe] {self.key} {length}: " + ("ok %.0f tokens/s" % result["tokens_per_s"] if result["ok"]
                                                  else "failed: " + result["error"][:200]), flush=True)
        self.attempts[str(length)] = result
        save_state(self.args.state, self.state)
        return result

    def search(self, deadline):
        """The longest length that trained, and whether the search finished. Only out-of-memory failures
    bound the search; any other failure ends it (see the state's "error" of that attempt)."""
        if self.args.lengths:
            return self.first_that_trains(deadline)
        ok, failed = 0, None
        length = self.args.start
        while length <= self.args.max_length:  # doubling
            result = self.run(length, deadline)
            if result is None:
                return ok, False
            if not result["ok"]:
                if not result.get("oom"):  # a broken run (missing wheel, a bug): bisecting would repeat it
                    return ok, True
                failed = length
                break
            ok, length = length, length * 2
        if failed is None:
            return ok, True  # trained at --max_length
        while failed - ok > self.args.resolution:  # bisection on multiples of the resolution
            middle = (ok + failed) // 2 // self.args.resolution * self.args.resolution
            if middle in (ok, failed):
                break
            result = self.run(middle, deadline)
            if result is None:
                return ok, False
            if result["ok"]:
                ok = middle
            elif not result.get("oom"):
                return ok, True
            else:
                failed = middle
        return ok, True


    def first_that_trains(self, deadline):
        """--lengths, longest first: the first that trains (0 if none did), and whether the list was
    settled (a length trained, or every one ran out of memory)."""
        for length in sorted(self.args.lengths, reverse=True):
            result = self.run(length, deadline)
            if result is None:
                return 0, False
            if result["ok"]:
                return length, True
            if not result.get("oom"):
                return 0, True
        return 0, True


def length_list(text):
    """--lengths: comma-separated positive token counts."""
    lengths = [int(value) for value in text.split(",")]
    if any(length < 1 for length in lengths):
        raise ValueError(text)
    return lengths


def save_state(path, state):
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="The longest single row that trains (issue 31); see the module docstring.")
    p.add_argument("--finetune", required=True)
    p.add_argument("--shapes", default="qwen3-8b")
    p.add_argument("--variants", default="lora,qlora")
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--start", type=int, default=16384, help="the first length tried")
    p.add_argument("--max_length", type=int, default=1 << 20)
    p.add_argument("--resolution", type=int, default=1024)
    p.add_argument("--lengths", type=length_list, default=None,
                   help="instead of doubling and bisection: these lengths, longest first, until one trains "
                        "(e.g. the lengths that decide a bound, after a search on the same machine)")
    p.add_argument("--budget_s", type=float, default=float(os.environ.get("LONGCTX_BUDGET_S", 540)))
    p.add_argument("--attempt_timeout", type=int, default=420)
    p.add_argument("--first_attempt_s", type=float, default=90, help="expected time of a probe's first attempt")
    p.add_argument("--finetune_flags", default="", help="extra flags of ours, e.g. '--offload_activations false'")
    p.add_argument("--steps", type=int, default=3,
                   help="optimizer steps an attempt trains (at least 2); tokens/s over all but the first")
    p.add_argument("--layers", type=int, default=None,
                   help="the proxy: the shape's first K decoder layers (default: its full depth) for ours and Unsloth")
    p.add_argument("--loop_layers", type=int, default=None,
                   help="the loop's depth (default: the full depth, whatever --layers says: it keeps every "
                        "layer's checkpoint on the GPU)")
    p.add_argument("--ballast", default="auto",
                   help="GPU bytes held by bench/gpu_ballast.py during every attempt: auto (the removed layers' "
                        "bytes when cut, removed_layers_bytes; none at full depth), none, or a number of bytes")
    p.add_argument("--gpu_capacity_gib", type=float, default=None,
                   help="emulate a GPU of this many GiB on a larger card: every attempt's ballast process also "
                        "holds the card's memory beyond it (gpu_ballast.py --gpu_capacity). 79.19 is the total "
                        "torch.cuda.mem_get_info reports for an H100 80GB HBM3 (default: the card as it is)")
    p.add_argument("--dry_run", action="store_true",
                   help="print each probe's depth, ballast, GPU capacity and first command")
    p.add_argument("--state", required=True, help="JSON record of every attempt; read first when it exists")
    p.add_argument("--work", default="/tmp/longctx")
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps: at least 2 (the first step is not timed)")
    if args.ballast not in ("auto", "none") and not args.ballast.isdigit():
        p.error(f"--ballast: auto, none or a number of bytes, not {args.ballast!r}")
    if args.gpu_capacity_gib is not None and not args.gpu_capacity_gib > 0:
        p.error(f"--gpu_capacity_gib: a positive number of GiB, not {args.gpu_capacity_gib}")
    return args


def probes(args, state):
    for shape in args.shapes.split(","):
        for variant in args.variants.split(","):
            yield shape, variant, [Probe(args, state, tool, shape, variant) for tool in args.tools.split(",")]


def describe(probe):
    """One line of what a probe runs at: depth, ballast, GPU capacity, steps (the loop's full-depth rule
    said)."""
    text = f"[probe] {probe.key}: {probe.layers} of {probe.full_layers} layers"
    if probe.ballast_bytes:
        text += f", ballast {probe.ballast_bytes} bytes ({probe.ballast_bytes / 2**30:.2f} GiB)"
    if probe.capacity_gib is not None:
        text += f", GPU capacity {probe.capacity_gib:g} GiB (the ballast holds the card's memory beyond it)"
    if probe.tool == "loop" and probe.args.layers is not None and probe.args.loop_layers is None:
        text += " (the loop at full depth: it keeps every layer's checkpoint on the GPU)"
    return text + f", {probe.args.steps} steps"


def dry_run(args, state):
    """Each probe's setting and the command of its first attempt; nothing is made or run."""
    for shape, variant, group in probes(args, state):
        for probe in group:
            print(describe(probe))
            model, data = model_dir(args.work, shape, probe.layers), rows_path(args.work, shape, args.start, args.steps)
            out_dir = attempt_dir(probe, args.start)
            if probe.ballast_bytes or probe.capacity_gib is not None:
                print("  ballast: " + " ".join(ballast_command(probe.ballast_bytes, capacity_bytes(probe.capacity_gib))))
            print("  " + " ".join(command(probe.tool, args, model, data, args.start, variant, out_dir)))


def make_models(args, state):
    """Every model the probes need (each shape at each depth), kept in --work when already there. Each is
    made by a process of its own (bench/shapes.py): this one must hold no CUDA context or cached GPU
    memory while the attempts run."""
    for shape, _, group in probes(args, state):
        for layers in sorted({probe.layers for probe in group}):
            cmd = [sys.executable, os.path.join(HERE, "shapes.py"), "model", "--shape", shape,
                   "--out", model_dir(args.work, shape, layers)]
            if layers != full_depth(shape):
                cmd += ["--layers", str(layers)]
            print(f"[probe] model: {' '.join(cmd[2:])}", flush=True)
            subprocess.run(cmd, check=True)


def print_table(summary):
    """The longest row per probe; a title line for each proxy depth and each emulated GPU capacity, so no
    row reads as full depth or as the card it ran on."""
    rows = summary.values()
    proxies = {(r["layers"], r["full_layers"]) for r in rows if r.get("layers", 0) < r.get("full_layers", 0)}
    for layers, full in sorted(proxies):
        print(f"proxy: {layers} of {full} layers + ballast (rows {layers}/{full}; not a full-depth measurement)")
    for gib in sorted({r["gpu_capacity_gib"] for r in rows if r.get("gpu_capacity_gib") is not None}):
        print(f"GPU capacity: {gib:g} GiB emulated by the ballast (rows @{gib:g}GiB; the speed is the real card's)")
    print(f"{'tool/shape/variant':58s} {'longest':>9s} {'tokens/s':>10s} {'peak GiB':>9s} {'layers':>7s} "
          f"{'ballast GiB':>11s} {'GPU GiB':>8s} {'steps':>5s}  finished")
    for key, row in summary.items():
        tps = "%.0f" % row["tokens_per_s"] if row.get("tokens_per_s") else "-"
        peak = "%.1f" % row["peak_memory_gib"] if row.get("peak_memory_gib") else "-"
        layers = f"{row['layers']}/{row['full_layers']}" if "layers" in row else "-"
        ballast_gib = "%.2f" % (row["ballast_bytes"] / 2**30) if "ballast_bytes" in row else "-"
        capacity = "%g" % row["gpu_capacity_gib"] if row.get("gpu_capacity_gib") is not None else "card"
        print(f"{key:58s} {row['longest']:9d} {tps:>10s} {peak:>9s} {layers:>7s} {ballast_gib:>11s} "
              f"{capacity:>8s} {row.get('steps', '-')!s:>5s}  {row['finished']}")


def main():
    args = parse_args()
    state = json.load(open(args.state)) if os.path.exists(args.state) else {}
    if args.dry_run:
        return dry_run(args, state)
    deadline = time.time() + args.budget_s
    os.makedirs(args.work, exist_ok=True)
    make_models(args, state)
    summary = state.setdefault("longest", {})
    for shape, variant, group in probes(args, state):
        for probe in group:
            print(describe(probe), flush=True)
            longest, finished = probe.search(deadline)
            summary[probe.key] = dict(probe.setting(), longest=longest, finished=finished,
                                      tokens_per_s=probe.attempts.get(str(longest), {}).get("tokens_per_s"),
                                      peak_memory_gib=probe.attempts.get(str(longest), {}).get("peak_memory_gib"))
            save_state(args.state, state)
        # Ours at the longest row Unsloth trained: the tokens/s comparison at its maximum.
        layers = tool_layers(args, "unsloth", shape)
        peer = summary.get(probe_key("unsloth", shape, variant, layers, ballast_size(args, shape, variant, layers),
                                     args.gpu_capacity_gib), {})
        if "finetune" in args.tools and peer.get("finished") and peer.get("longest"):
            Probe(args, state, "finetune", shape, variant).run(peer["longest"], deadline)
    print_table(summary)
    save_state(args.state, state)


if __name__ == "__main__":
    main()
