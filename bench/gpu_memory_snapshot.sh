#!/usr/bin/env bash
# Where a run's GPU memory goes (issue 25, item 6): one training run of SHAPE at SETTING_ARGS (the
# seed setting unless told) with FINETUNE_CUDA_MEMORY_HISTORY, so that train records the caching
# allocator's history from before the model loads; then bench/memory_snapshot_summary.py lists what
# is alive at the peak by finetune frame. Needs the tree and inputs of
# `bench/gpu_step_planning.sh build` (FINETUNE, /tmp/bench).
#   SHAPE=qwen3-8b STEPS=12 bash bench/gpu_memory_snapshot.sh
# Results: $OUT/memory-<shape>.txt (the run's memory lines and summary, then the peak's contents).
set -uo pipefail
OUT=${OUT:-/tmp/memory_snapshot}
mkdir -p "$OUT"
FINETUNE=${FINETUNE:-/tmp/step_planning_work/tree/build-gpu/finetune}
BENCH=${BENCH:-/tmp/bench}
SHAPE=${SHAPE:-qwen3-8b}
STEPS=${STEPS:-12}
SETTING_ARGS=${SETTING_ARGS:---per_device_train_batch_size 1 --gradient_accumulation_steps 4}
WORK=${WORK:-/tmp/memory_snapshot_work}
mkdir -p "$WORK"
snapshot=$WORK/$SHAPE.pickle
report=$OUT/memory-$SHAPE.txt
# shellcheck disable=SC2086
FINETUNE_CUDA_MEMORY_HISTORY=$snapshot TORCH_SYMBOLIZE_MODE=fast "$FINETUNE" --model_name "$BENCH/$SHAPE" \
  --dataset "$BENCH/$SHAPE.jsonl" --max_steps "$STEPS" $SETTING_ARGS --learning_rate 2e-4 --max_seq_length 2048 \
  --warmup_steps 5 --logging_steps 1 --output_dir "$WORK/run-$SHAPE" --overwrite_output_dir --dtype bfloat16 \
  --use_gradient_checkpointing true > "$WORK/$SHAPE.log" 2>&1
status=$?
{ echo "# $SHAPE, $STEPS steps, $SETTING_ARGS: exit $status"
  grep -a -i "memory\|graphs" "$WORK/$SHAPE.log" | head
  tail -1 "$WORK/$SHAPE.log"
  python3 "$(dirname "${BASH_SOURCE[0]}")/memory_snapshot_summary.py" "$snapshot" --top 30 --largest "${LARGEST:-40}"; } > "$report" 2>&1
head -20 "$report"
exit "$status"
