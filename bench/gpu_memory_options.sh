#!/usr/bin/env bash
# The seed setting's memory options on/off on the GPU machine (issue 25, item 6): for each VARIANT,
# the peak and what is alive there (bench/gpu_memory_snapshot.sh, STEPS_MEMORY steps) and the speed
# (bench/bench.py, seed setting, ours only, STEPS timed steps after 10), on SHAPE (default qwen3-8b),
# one GPU. Needs the tree, build and inputs of `bench/gpu_step_planning.sh build` + `wait` (run from
# the same tree). Variants (cumulative; each sets the three options explicitly):
#   base       --lm_head_loss row_chunks  --lora_operand_cache true  --offload_activations auto  (before)
#   tiles      --lm_head_loss vocab_tiles --lora_operand_cache true  --offload_activations auto
#   per_use    --lm_head_loss vocab_tiles --lora_operand_cache false --offload_activations auto
#   offload    --lm_head_loss vocab_tiles --lora_operand_cache false --offload_activations true
#   VARIANTS="base tiles" bash bench/gpu_memory_options.sh memory    peaks and their contents
#   VARIANTS="base tiles" bash bench/gpu_memory_options.sh speed     tokens/s (SETTING=seed or best)
# Results: $OUT/summary.txt (one line per run), $OUT/memory-<variant>/memory-<shape>.txt.
set -uo pipefail
phase=${1:?memory|speed}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/memory_options}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
TREE=${TREE:-/tmp/step_planning_work/tree}
FINETUNE=${FINETUNE:-$TREE/build-gpu/finetune}
BENCH=${BENCH:-/tmp/bench}
SHAPE=${SHAPE:-qwen3-8b}
SETTING=${SETTING:-seed}

options_of() {  # variant -> "lm_head_loss lora_operand_cache offload_activations"
  case "$1" in
    base) echo "row_chunks true auto" ;;
    tiles) echo "vocab_tiles true auto" ;;
    per_use) echo "vocab_tiles false auto" ;;
    offload) echo "vocab_tiles false true" ;;
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}

for variant in ${VARIANTS:-base tiles per_use offload}; do
  read -r head_loss cache offload <<< "$(options_of "$variant")" || exit 1
  case "$phase" in
    memory)
      OUT=$OUT/memory-$variant STEPS=${STEPS_MEMORY:-12} SHAPE=$SHAPE FINETUNE=$FINETUNE BENCH=$BENCH \
        WORK=/tmp/memory_options_work/$variant SETTING_ARGS="--per_device_train_batch_size 1 --gradient_accumulation_steps 4 \
--lm_head_loss $head_loss --lora_operand_cache $cache --offload_activations $offload" \
        bash "$ROOT/bench/gpu_memory_snapshot.sh" > /dev/null 2>&1
      echo "memory $SHAPE $variant: $(grep -a -m1 -i 'peak' "$OUT/memory-$variant/memory-$SHAPE.txt")" | tee -a "$OUT/summary.txt"
      ;;
    speed)
      mkdir -p "$OUT/speed-$variant"
      FINETUNE_LM_HEAD_LOSS=$head_loss FINETUNE_LORA_OPERAND_CACHE=$cache FINETUNE_OFFLOAD_ACTIVATIONS=$offload \
        python3 "$ROOT/bench/bench.py" --finetune "$FINETUNE" --shapes "$SHAPE" --settings "$SETTING" --gpus 1 \
        --skip_reference --steps "${STEPS:-60}" --warmup 10 --work "$BENCH" --out "$OUT/speed-$variant" \
        > "$OUT/speed-$variant.log" 2>&1
      python3 - "$OUT/speed-$variant/bench-$SHAPE.json" "$SHAPE $SETTING $variant" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    ours = json.load(open(sys.argv[1]))[0]["ours"]
    print(f"speed {sys.argv[2]}: {ours['tokens_per_s_per_gpu']:.0f} tok/s/GPU, peak {ours['peak_memory_gib']} GiB")
except Exception as e:  # the run failed: its log is beside the summary
    print(f"speed {sys.argv[2]}: FAILED ({e})")
PY
      ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
done
