#!/usr/bin/env bash
# The long-context probe (issue 31) on the GPU machine: the longest single row that trains for 3 steps
# for ours, Unsloth and the transformers + PEFT loop, one shape per device call (results under $OUT).
# Carry .whl (bench/peer_wheels.sh fills it here) and .deps (the build's headers), as for gpu_peers.sh:
#   bash bench/gpu_long_context.sh qwen3-8b        build (incremental), then the probe on that shape
#   bash bench/gpu_long_context.sh llama-3.1-8b
# LONGCTX_VARIANTS (lora,qlora), LONGCTX_TOOLS (finetune,unsloth,loop), LONGCTX_START (16384),
# LONGCTX_BUDGET_S (seconds of probing in this call; default: what is left of 560 s after the build and
# the model), LONGCTX_FLAGS (more probe flags, e.g. --finetune_flags '--offload_activations false').
# A call that runs out of time leaves $OUT/long_context-<shape>.json; set LONGCTX_STATE to that file
# (copied into the repository, so it travels) to go on from it in the next call. The models and rows
# stay in /tmp/longctx while the machine is held.
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
python3 bench/shapes.py model --shape "$shape" --out "$work/$shape" > "$OUT/model.log" 2>&1 \
  || { echo "FAIL: model"; tail -20 "$OUT/model.log"; exit 1; }
state="$OUT/long_context-$shape.json"
[ -n "${LONGCTX_STATE:-}" ] && [ -f "$LONGCTX_STATE" ] && cp "$LONGCTX_STATE" "$state"
spent=$(( $(date +%s) - call_start ))
budget=${LONGCTX_BUDGET_S:-$(( 560 - spent ))}
python3 bench/long_context_probe.py --finetune "$FINETUNE_BIN" --shapes "$shape" \
  --variants "${LONGCTX_VARIANTS:-lora,qlora}" --tools "${LONGCTX_TOOLS:-finetune,unsloth,loop}" \
  --start "${LONGCTX_START:-16384}" --budget_s "$budget" --state "$state" --work "$work" ${LONGCTX_FLAGS:-} 2>&1 \
  | tee "$OUT/probe-$shape.txt" | tail -30
status=${PIPESTATUS[0]}
for log in "$work"/*-"$shape"-*.log; do
  [ -f "$log" ] || continue
  { echo "== $log"; tail -n 8 "$log"; } >> "$OUT/attempt-logs.txt"
done
[ "$status" = 0 ] && echo "PASS: probe ran ($shape)" || echo "FAIL: probe exited $status ($shape)"
exit "$status"
