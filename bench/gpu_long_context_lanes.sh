#!/usr/bin/env bash
# Issue 31's measurements in one device call, one lane per GPU (LANES, one word per GPU in order; each
# lane pinned to its share of the cores; a word of lanes joined by + runs them one after the other on
# that GPU, e.g. qlora+loop). Carry .deps and .whl.
#   lora     ours bf16 LoRA at LORA_LENGTH (default 540,672 = 1.5 x Unsloth's 360,448 on Llama-3.1-8B);
#            if that runs out of memory, the probe bisects below it until the call's time is up; a
#            comma-separated list instead tries those lengths, longest first, until one trains
#   qlora    ours QLoRA at QLORA_LENGTH (default 393,216, Unsloth's longest: tokens/s at its maximum),
#            long rows' attention as ours chooses it (cuDNN per KV head below 2^31 query elements);
#            below it on failure, as lora
#   qlora-flash  the same with FINETUNE_LONG_ROW_ATTENTION=flash (its own state file)
#   kernels  the head-grouped attention CUDA tests; bench/attention_backends.py with cudnn_groups; the
#            completions-only pair: bench.py --settings best --skip_reference on PAIR_SHAPES (default
#            "qwen3-8b llama-3.2-1b") with the benchmark's rows (half labelled) and with --labels all
#   loop     the transformers + PEFT loop's longest row at full depth, QLoRA then bf16 LoRA, from
#            LOOP_START (16,384) to LOOP_RESOLUTION (8,192) tokens
#   unsloth-lora, unsloth-qlora   Unsloth's longest row, from 262,144 to 32,768 tokens' resolution; with
#            UNSLOTH_LORA_LENGTHS / UNSLOTH_QLORA_LENGTHS (comma-separated) only those, longest first, until
#            one trains (a search already made on the shape, confirmed in this call: e.g. 425984,393216)
# Every probe but the loop's is bench/long_context_probe.py's proxy (2 of the shape's layers + ballast,
# 2 steps), all at an H100's capacity (CAPACITY_GIB, default 79.19), on SHAPE (default llama-3.1-8b).
#   LANES="lora qlora kernels loop" bash bench/gpu_long_context_lanes.sh      (4 GPUs; the default)
#   LANES="lora+qlora kernels+loop" bash bench/gpu_long_context_lanes.sh      (2 GPUs)
# Results: $OUT/summary.txt, $OUT/*.json, $OUT/*.txt. The build and the bench's models come from
# bench/gpu_step_planning.sh build (detached, so it goes on after the call on a machine that stays
# warm), as for its runs. The lanes that run only peers (unsloth-lora, unsloth-qlora, loop) start
# once the build's models are written (they are made on GPU 0, and a probe's ballast sizes itself
# from the free memory), beside the build; a lane that runs ours waits for the build (so
# unsloth-qlora+qlora runs Unsloth during the build). REUSE_BUILD=1 (a later call on the same warm
# machine) starts no build and waits for the one already there.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu_long_context_lanes}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 CALL_START=$(date +%s)
TREE=/tmp/step_planning_work/tree
FINETUNE=$TREE/build-gpu/finetune
CAPACITY_GIB=${CAPACITY_GIB:-79.19}
SHAPE=${SHAPE:-llama-3.1-8b}
PAIR_SHAPES=${PAIR_SHAPES:-qwen3-8b llama-3.2-1b}
read -ra LANE_NAMES <<< "${LANES:-lora qlora kernels loop}"
CORES_PER_LANE=$(( $(nproc) / ${#LANE_NAMES[@]} ))
END_S=${END_S:-575}
elapsed() { echo $(( $(date +%s) - CALL_START )); }
note() { echo "$* at $(elapsed) s" | tee -a "$OUT/summary.txt"; }

probe() {  # probe GPU STATE args...: one probe on SHAPE under the capacity, until END_S
  local gpu=$1 state=$2; shift 2
  local first=$(( gpu * CORES_PER_LANE ))
  CUDA_VISIBLE_DEVICES=$gpu taskset -c "$first-$(( first + CORES_PER_LANE - 1 ))" \
    python3 "$ROOT/bench/long_context_probe.py" --finetune "$FINETUNE" --shapes "$SHAPE" \
    --gpu_capacity_gib "$CAPACITY_GIB" --budget_s $(( END_S - $(elapsed) )) --work "/tmp/longctx-$gpu" \
    --state "$OUT/$state.json" "$@" > "$OUT/$state.txt" 2>&1
  note "probe $state ($*): exit $?"
}

ours_at() {  # ours_at GPU STATE VARIANT LENGTHS: ours on the proxy, at LENGTH, or with a comma-separated
  # list the first of them (longest first) that trains
  if [[ "$4" == *,* ]]; then
    probe "$1" "$2" --layers 2 --steps 2 --tools finetune --variants "$3" --lengths "$4"
  else
    probe "$1" "$2" --layers 2 --steps 2 --tools finetune --variants "$3" --start "$4" --max_length "$4"
  fi
}

lane_lora() { ours_at "$1" "ours-lora-$SHAPE" lora "${LORA_LENGTH:-540672}"; }
lane_qlora() { ours_at "$1" "ours-qlora-$SHAPE" qlora "${QLORA_LENGTH:-393216}"; }
lane_qlora-flash() {
  FINETUNE_LONG_ROW_ATTENTION=flash ours_at "$1" "ours-qlora-flash-$SHAPE" qlora "${QLORA_LENGTH:-393216}"
}
lane_loop() {
  probe "$1" "loop-$SHAPE" --steps 2 --tools loop --variants qlora,lora --start "${LOOP_START:-16384}" \
    --resolution "${LOOP_RESOLUTION:-8192}"
}
unsloth() {  # unsloth GPU VARIANT [LENGTHS]: its longest row, or the first of LENGTHS (longest first) that trains
  if [ -n "${3:-}" ]; then
    probe "$1" "unsloth-$2-$SHAPE" --layers 2 --steps 2 --tools unsloth --variants "$2" --lengths "$3"
  else
    probe "$1" "unsloth-$2-$SHAPE" --layers 2 --steps 2 --tools unsloth --variants "$2" --start 262144 \
      --resolution 32768
  fi
}
lane_unsloth-lora() { unsloth "$1" lora "${UNSLOTH_LORA_LENGTHS:-}"; }
lane_unsloth-qlora() { unsloth "$1" qlora "${UNSLOTH_QLORA_LENGTHS:-}"; }

best_run() {  # best_run GPU SHAPE LABELS: ours at the best setting, one GPU, the build's model
  CUDA_VISIBLE_DEVICES=$1 python3 "$ROOT/bench/bench.py" \
    --finetune "$FINETUNE" --shapes "$2" --settings best --gpus 1 --skip_reference --steps 40 --warmup 10 \
    --labels "$3" --work /tmp/bench --out "$OUT/best-$2-$3" > "$OUT/best-$2-$3.log" 2>&1
  note "best $2 labels $3: exit $?"
}

lane_kernels() {
  (cd "$TREE" && CUDA_VISIBLE_DEVICES=$1 timeout 120 build-gpu/finetune_cuda_tests --gtest_filter='HeadGroupAttention.*' \
    > "$OUT/cuda_tests.txt" 2>&1)
  note "HeadGroupAttention tests: exit $?"
  CUDA_VISIBLE_DEVICES=$1 timeout 150 python3 "$ROOT/bench/attention_backends.py" --lengths 32768,131072,262144 \
    --backends flash_varlen,flash_groups,cudnn_groups,sdpa_cudnn --out "$OUT/attention.json" > "$OUT/attention.txt" 2>&1
  note "attention kernels: exit $?"
  for shape in $PAIR_SHAPES; do
    best_run "$1" "$shape" completions
    best_run "$1" "$shape" all
  done
}

peer_only() {  # peer_only LANE: whether the lane runs only peers (no build needed)
  case $1 in unsloth-lora|unsloth-qlora|loop) return 0 ;; *) return 1 ;; esac
}
wait_for_inputs() {  # a peer lane: the build's models are made on GPU 0 (bench/shapes.py), and a ballast
  # sizes itself from the GPU's free memory, so no peer probe starts before they are written
  while [ ! -f /tmp/step_planning_work/inputs.rc ] && [ "$(elapsed)" -lt "$END_S" ]; do sleep 5; done
}
wait_for_build() {  # once per lane that needs ours: the build (and the bench's models) done, its env sourced
  WAIT_S=$(( END_S - $(elapsed) )) OUT=$OUT bash "$ROOT/bench/gpu_step_planning.sh" wait >> "$OUT/wait.txt" 2>&1 ||
    { note "build failed or unfinished"; return 1; }
  source "$TREE/build-gpu/env.sh" 2>/dev/null || true
}
run_lanes() {  # run_lanes GPU WORD: the word's lanes (joined by +) one after the other; a lane that runs
  # ours waits for the build first, so a peer lane before it runs beside the build (after its models)
  local lane
  for lane in ${2//+/ }; do
    if peer_only "$lane"; then wait_for_inputs; else wait_for_build || return; fi
    "lane_$lane" "$1"
  done
}
for word in "${LANE_NAMES[@]}"; do
  for lane in ${word//+/ }; do
    declare -F "lane_$lane" > /dev/null || { echo "unknown lane '$lane' in LANES" >&2; exit 2; }
  done
done
# REUSE_BUILD=1 on a machine still warm from an earlier call: keep its build and models
[ -n "${REUSE_BUILD:-}" ] || RUNS="$PAIR_SHAPES" JOBS=${JOBS:-$(( $(nproc) - 2 ))} \
  bash "$ROOT/bench/gpu_step_planning.sh" build > "$OUT/build-start.txt" 2>&1
if [ -d "$ROOT/.whl" ] && [ ! -d /tmp/site/unsloth ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$ROOT"/.whl/*.whl \
    > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
for gpu in "${!LANE_NAMES[@]}"; do
  run_lanes "$gpu" "${LANE_NAMES[$gpu]}" &
done
wait
cat "$OUT/summary.txt"
