#!/usr/bin/env bash
# The long-context probe (issue 31) on the GPU machine: the longest single row that trains for
# LONGCTX_STEPS steps for ours, Unsloth and the transformers + PEFT loop, one shape per device call
# (results under $OUT). Carry .whl (bench/peer_wheels.sh fills it here) and .deps (the build's headers),
# as for gpu_peers.sh:
#   bash bench/gpu_long_context.sh qwen3-8b        build (incremental), then the probe on that shape
#   bash bench/gpu_long_context.sh llama-3.1-8b
# LONGCTX_VARIANTS (lora,qlora), LONGCTX_TOOLS (finetune,unsloth,loop), LONGCTX_START (16384),
# LONGCTX_BUDGET_S (seconds of probing in this call; default: what is left of 560 s after the build),
# LONGCTX_FLAGS (more probe flags, e.g. --finetune_flags '--offload_activations false' or
# --resolution 16384), and the proxy (bench/long_context_probe.py's docstring):
#   LONGCTX_LAYERS   the model cut to its first K decoder layers for ours and Unsloth (default: the full
#                    depth); the loop stays at full depth (it keeps every layer's checkpoint on the GPU)
#   LONGCTX_STEPS    optimizer steps an attempt trains (default 3); tokens/s over all but the first
#   LONGCTX_BALLAST  auto|none|BYTES (default auto): GPU memory bench/gpu_ballast.py holds during every
#                    attempt; auto = what the removed layers would hold (bf16 or NF4 base weights + fp32
#                    LoRA r 16 with gradients and AdamW states), none at full depth
#   FINETUNE_LONG_ROW_ATTENTION=flash  (passed through to ours) long single-sample rows' attention through
#                    flash per KV head instead of cuDNN (Note [Head-grouped cuDNN attention]; the banner's
#                    kernels line says which); unset: cuDNN below 2^31 query elements, flash above
#   LONGCTX_CAPACITY_GIB  emulate a GPU of this many GiB (--gpu_capacity_gib): the ballast process also holds
#                    the card's memory beyond it, e.g. 79.19 (the total torch reports for an H100 80GB HBM3)
#                    when the call lands on an H200 (139.8 GiB); default: the card as it is. Only free
#                    memory is emulated (the speed is the real card's); the state keys end in @<GiB>GiB
# Every result row records its layers, the full depth, the ballast, the GPU capacity and the steps.
#
# A full-depth step cannot be probed in a 10-minute call at the lengths in question. Per layer and
# step, causal attention costs 2*L^2*d_attn FLOP forward (d_attn = heads x head_dim = 4096 on both
# shapes), about x4.5 with the recompute and backward: 9*L^2*4096; the linear layers about 7 x the
# layer's parameters x L (6-8: forward, recompute, the input gradient; Qwen3-8B 193M, Llama-3.1-8B 218M
# a layer), the LM head about 6 x its parameters x L/2 (the labelled half). At ~350 TFLOP/s effective
# on an H100, per step:
#   L = 65,536,  2 layers: attention 2 x 0.45 s + linear 0.5 s + head 0.35 s      ~ 1.8 s
#   L = 262,144, 2 layers: attention 2 x 7.2 s + linear 2 s + head 1.4 s         ~ 18 s
#   L = 342,000 (Unsloth's Llama-3.1-8B QLoRA claim on 80 GB), 2 layers: 2 x 12.3 s + 3 s + 1.5 s ~ 29 s;
#                          at 32 layers: 32 x 12.3 s + 48 s + 1.5 s ~ 445 s, x 3 steps ~ 22 minutes.
# An attempt adds its start-up (model load; Unsloth's import and compile ~30-60 s; the ballast ~5 s):
# with 2 layers and 2 steps, ~1 minute at 64k-128k, ~1.5-2 minutes at 256k-512k. Doubling from 65,536
# to an out-of-memory failure at 512k is 4 attempts, then bisection down to --resolution: 8 more at
# 1024, 4 at 16384. Recommended for one device session (about 30 minutes, 10 per call; the state
# carries the search from call to call, LONGCTX_STATE):
#   LONGCTX_LAYERS=2 LONGCTX_STEPS=2 LONGCTX_START=65536 LONGCTX_VARIANTS=qlora \
#   LONGCTX_TOOLS=finetune,unsloth LONGCTX_FLAGS='--resolution 16384' LONGCTX_CAPACITY_GIB=79.19 \
#   bash bench/gpu_long_context.sh llama-3.1-8b
# (LONGCTX_CAPACITY_GIB=79.19 keeps the 80 GB H100 whichever card the call gets.)
# and the loop, at full depth, from 16384 in a call of its own (LONGCTX_TOOLS=loop).
# A call that runs out of time leaves $OUT/long_context-<shape>.json; set LONGCTX_STATE to that file
# (copied into the repository, so it travels) to go on from it in the next call. The models (each
# depth the probe needs, made by the probe within its budget) and rows stay in /tmp/longctx while the
# machine is held.
set -uo pipefail
shape=${1:?qwen3-8b|llama-3.1-8b}
OUT=${OUT:-/tmp/gpu_long_context}
mkdir -p "$OUT"
call_start=$(date +%s)
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1 NCCL_NVLS_ENABLE=0
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
export LD_LIBRARY_PATH=$PWD/.deps/lib:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { echo "FAIL: build"; tail -40 "$OUT/setup.log"; exit 1; }
echo "build seconds $(( $(date +%s) - call_start ))"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 || { echo "FAIL: pip install of .whl (see pip.log)"; tail -5 "$OUT/pip.log"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
source build/env.sh
work=/tmp/longctx
mkdir -p "$work"
state="$OUT/long_context-$shape.json"
[ -n "${LONGCTX_STATE:-}" ] && [ -f "$LONGCTX_STATE" ] && cp "$LONGCTX_STATE" "$state"
spent=$(( $(date +%s) - call_start ))
budget=${LONGCTX_BUDGET_S:-$(( 560 - spent ))}
python3 bench/long_context_probe.py --finetune "$FINETUNE_BIN" --shapes "$shape" \
  --variants "${LONGCTX_VARIANTS:-lora,qlora}" --tools "${LONGCTX_TOOLS:-finetune,unsloth,loop}" \
  --start "${LONGCTX_START:-16384}" --steps "${LONGCTX_STEPS:-3}" --ballast "${LONGCTX_BALLAST:-auto}" \
  ${LONGCTX_LAYERS:+--layers "$LONGCTX_LAYERS"} ${LONGCTX_CAPACITY_GIB:+--gpu_capacity_gib "$LONGCTX_CAPACITY_GIB"} \
  --budget_s "$budget" --state "$state" --work "$work" \
  ${LONGCTX_FLAGS:-} 2>&1 \
  | tee "$OUT/probe-$shape.txt" | tail -30
status=${PIPESTATUS[0]}
for log in "$work"/*-"$shape"-*.log; do
  [ -f "$log" ] || continue
  { echo "== $log"; tail -n 8 "$log"; } >> "$OUT/attempt-logs.txt"
done
[ "$status" = 0 ] && echo "PASS: probe ran ($shape)" || echo "FAIL: probe exited $status ($shape)"
exit "$status"
