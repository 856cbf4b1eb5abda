#!/usr/bin/env bash
# Issue 31's remaining measurements for ours, in one device call on a 2-GPU machine (nvidia-h100-x2 or
# nvidia-h200-x2), one lane per GPU, each lane pinned to half of the cores. Carry .deps and .whl.
# Unsloth is not run here: its longest rows come from an earlier call (bench/RESULTS.md) and are passed in.
#   lane 0 (GPU 0), the proxy of bench/long_context_probe.py (2 of 32 layers + ballast, 2 steps) at an
#          H100's capacity (CAPACITY_GIB, default 79.19):
#          ours bf16 LoRA at LORA_LENGTH (default 540,672 = 1.5 x Unsloth's 360,448);
#          ours QLoRA at QLORA_LENGTH (default 393,216, Unsloth's longest: tokens/s at its maximum),
#          with flash and then with FINETUNE_LONG_ROW_ATTENTION=cudnn (its own state file)
#   lane 1 (GPU 1): the head-grouped attention CUDA tests; bench/attention_backends.py with cudnn_groups;
#          the completions-only pair: bench.py --settings best --skip_reference on PAIR_SHAPES (default
#          "qwen3-8b llama-3.2-1b") with the benchmark's rows (half labelled) and with --labels all
#   bash bench/gpu_long_context_pair.sh        (results: $OUT/summary.txt, $OUT/*.json, $OUT/*.txt)
# The build and the bench's models come from bench/gpu_step_planning.sh build (detached), as for its runs.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu_long_context_pair}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 CALL_START=$(date +%s)
TREE=/tmp/step_planning_work/tree
FINETUNE=$TREE/build-gpu/finetune
CAPACITY_GIB=${CAPACITY_GIB:-79.19}
PAIR_SHAPES=${PAIR_SHAPES:-qwen3-8b llama-3.2-1b}
LANE0_CORES=0-$(( $(nproc) / 2 - 1 ))
LANE1_CORES=$(( $(nproc) / 2 ))-$(( $(nproc) - 1 ))
elapsed() { echo $(( $(date +%s) - CALL_START )); }
note() { echo "$* at $(elapsed) s" | tee -a "$OUT/summary.txt"; }

probe() {  # probe GPU CORES STATE LENGTH VARIANT: one length of ours under the capacity
  CUDA_VISIBLE_DEVICES=$1 taskset -c "$2" python3 "$ROOT/bench/long_context_probe.py" --finetune "$FINETUNE" \
    --shapes llama-3.1-8b --layers 2 --steps 2 --tools finetune --variants "$5" --start "$4" --max_length "$4" \
    --gpu_capacity_gib "$CAPACITY_GIB" --budget_s $(( 575 - $(elapsed) )) --work /tmp/longctx-pair \
    --state "$OUT/$3.json" > "$OUT/$3.txt" 2>&1
  note "probe $3 ($5, $4 tokens): exit $?"
}

lane_lengths() {
  probe 0 "$LANE0_CORES" ours-lora-cap "${LORA_LENGTH:-540672}" lora
  probe 0 "$LANE0_CORES" ours-qlora-cap-flash "${QLORA_LENGTH:-393216}" qlora
  FINETUNE_LONG_ROW_ATTENTION=cudnn probe 0 "$LANE0_CORES" ours-qlora-cap-cudnn "${QLORA_LENGTH:-393216}" qlora
}

best_run() {  # best_run SHAPE LABELS: ours at the best setting, one GPU, the build's model; rows labelled as LABELS says
  CUDA_VISIBLE_DEVICES=1 taskset -c "$LANE1_CORES" python3 "$ROOT/bench/bench.py" \
    --finetune "$FINETUNE" --shapes "$1" --settings best --gpus 1 --skip_reference --steps 40 --warmup 10 \
    --labels "$2" --work /tmp/bench --out "$OUT/best-$1-$2" > "$OUT/best-$1-$2.log" 2>&1
  note "best $1 labels $2: exit $?"
}

lane_kernels() {
  (cd "$TREE" && CUDA_VISIBLE_DEVICES=1 timeout 120 build-gpu/finetune_cuda_tests --gtest_filter='HeadGroupAttention.*' \
    > "$OUT/cuda_tests.txt" 2>&1)
  note "HeadGroupAttention tests: exit $?"
  CUDA_VISIBLE_DEVICES=1 timeout 150 python3 "$ROOT/bench/attention_backends.py" --lengths 32768,131072,262144 \
    --backends flash_varlen,flash_groups,cudnn_groups,sdpa_cudnn --out "$OUT/attention.json" > "$OUT/attention.txt" 2>&1
  note "attention kernels: exit $?"
  for shape in $PAIR_SHAPES; do
    best_run "$shape" completions
    best_run "$shape" all
  done
}

RUNS="$PAIR_SHAPES" bash "$ROOT/bench/gpu_step_planning.sh" build > "$OUT/build-start.txt" 2>&1
if [ -d "$ROOT/.whl" ] && [ ! -d /tmp/site/unsloth ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$ROOT"/.whl/*.whl \
    > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
WAIT_S=300 OUT=$OUT bash "$ROOT/bench/gpu_step_planning.sh" wait > "$OUT/wait.txt" 2>&1 || { note "build failed"; exit 1; }
note "built"
source "$TREE/build-gpu/env.sh" 2>/dev/null
lane_lengths &
lane_kernels &
wait
cat "$OUT/summary.txt"
