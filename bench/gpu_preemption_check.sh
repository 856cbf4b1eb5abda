#!/usr/bin/env bash
# Preemption and the ranks' settings check on 2 GPUs with NCCL (issue 30), in one device call:
#   1. torchrun, 2 ranks, Llama-3.2-1B shape: SIGTERM to torchrun after a few logged steps; both
#      ranks stop at one step boundary, save checkpoint-N, exit 143; the time from the signal to
#      the launcher's exit is printed. Then --resume_from_checkpoint true runs to the end.
#   2. two ranks started by hand with torchrun's variables, rank 1 given another --learning_rate:
#      both exit 2 naming it; the time from start to both exits is printed.
# Builds first (scripts/setup.sh, the carried .deps headers) unless SKIP_BUILD=1. Results: stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0} FINETUNE_JOBS=${FINETUNE_JOBS:-30}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  start=$(date +%s)
  bash scripts/setup.sh > /tmp/preemption_setup.log 2>&1 || { tail -30 /tmp/preemption_setup.log; exit 1; }
  echo "build seconds $(( $(date +%s) - start ))"
fi
source build/env.sh
WORK=/tmp/preemption
mkdir -p "$WORK"
python3 bench/shapes.py model --shape llama-3.2-1b --out "$WORK/model" > /dev/null 2>&1
python3 bench/shapes.py data --shape llama-3.2-1b --out "$WORK/rows.jsonl" > /dev/null 2>&1
args=(--model_name "$WORK/model" --dataset "$WORK/rows.jsonl" --max_steps 100000 --per_device_train_batch_size 1
      --gradient_accumulation_steps 4 --logging_steps 1 --max_seq_length 2048)
logged() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }

out=$WORK/run
torchrun --standalone --nproc_per_node=2 --no-python "$FINETUNE_BIN" "${args[@]}" --output_dir "$out" \
  > "$WORK/run.out" 2> "$WORK/run.err" &
launcher=$!
for _ in $(seq 600); do [ "$(logged "$out")" -ge 20 ] && break; sleep 0.5; done
kill -TERM $launcher
signalled=$(date +%s.%N)
wait $launcher
status=$?
echo "torchrun: exit $status, $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$(date +%s.%N)" "$signalled") s after SIGTERM"
grep -h "stopped after step" "$WORK/run.err" | sed 's/^/  /'
ls -d "$out"/checkpoint-* 2>/dev/null | sed 's/^/  /'
step=$(logged "$out")
torchrun --standalone --nproc_per_node=2 --no-python "$FINETUNE_BIN" "${args[@]/100000/$((step + 5))}" \
  --output_dir "$out" --resume_from_checkpoint true > "$WORK/resume.out" 2> "$WORK/resume.err"
echo "resumed to step $((step + 5)): exit $? ($(logged "$out") lines in metrics.jsonl)"

port=29577
start=$(date +%s.%N)
for rank in 0 1; do
  lr=2e-4; [ $rank = 1 ] && lr=1e-3
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$FINETUNE_BIN" "${args[@]}" --output_dir "$WORK/mismatch" --learning_rate $lr > /dev/null 2> "$WORK/mismatch$rank.err" &
done
codes=""
for job in $(jobs -p); do wait "$job"; codes="$codes $?"; done
echo "different --learning_rate: exits$codes, $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$(date +%s.%N)" "$start") s from start (model load included)"
grep -h "different" "$WORK"/mismatch*.err | sed 's/^/  /' | cut -c1-220
