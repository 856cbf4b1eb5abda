#!/usr/bin/env bash
# Where a second rank's time goes (issue 25): the seed setting (batch 1 x accumulation 4, balanced
# planning) of each shape run as
#   alone    one process on GPU 0 (ALONE_GPU=1: on GPU 1);
#   pair     two independent one-GPU processes at once (GPU 0 and GPU 1), no communication;
#   ddp      two ranks under torchrun;
#   <base>-<variant>  one of those with one change: VARIANT_ARGS_<variant> flags and
#            VARIANT_ENV_<variant> environment (nographs, onebucket, ctas4, omp8, overlapped, simple,
#            ncclinfo, normrope, aten below: overlapped launches the graphed micro-steps' bucket all-reduces
#            during the replay, Note [Bucket all-reduces during a replay] in ddp/grad_reducer.h;
#            ncclinfo logs the transport NCCL chose, in the run's log; normrope runs the fused q/k
#            RMSNorm + RoPE kernel, the default; aten runs ATen's RMSNorm, then the fused RoPE);
# all over the same global batches: a one-GPU run takes twice the steps and warm-up of a two-rank
# run. While each run trains, nvidia-smi samples the SM clock, power and throttle reasons of both
# GPUs (mean over the samples where the GPU is busy). With PROFILE=1 each mode is run a second
# time with --profile_start_step, over the same global batches (the two-rank run's steps
# PROFILE_START..+9, the one-GPU run's twice as many), and the kernel time per category is summed
# over the ranks: equal work, so any difference is the kernels running slower.
# Needs the tree and inputs of `bench/gpu_step_planning.sh build` (FINETUNE, /tmp/bench).
#   RUNS="llama-3.2-1b qwen3-8b" MODES="alone pair ddp ddp-onebucket" STEPS=60 PROFILE=1 \
#     bash bench/gpu_rank_contention.sh
# Results: $OUT/contention.txt (one line per run) and $OUT/contention-profiles.txt.
set -uo pipefail
OUT=${OUT:-/tmp/rank_contention}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FINETUNE=${FINETUNE:-/tmp/step_planning_work/tree/build-gpu/finetune}
BENCH=${BENCH:-/tmp/bench}
WORK=${WORK:-/tmp/rank_contention_work}
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-10}
PROFILE_START=${PROFILE_START:-21}
VARIANT_ARGS_nographs="--cuda_graphs false"
VARIANT_ARGS_onebucket="--ddp_bucket_cap_mb 4096"
VARIANT_ENV_ctas4="NCCL_MAX_CTAS=4 NCCL_MIN_CTAS=1"
VARIANT_ENV_omp8="OMP_NUM_THREADS=8"
VARIANT_ENV_overlapped="FINETUNE_GRAPHED_ALL_REDUCE=overlapped"
VARIANT_ENV_simple="NCCL_PROTO=Simple"
VARIANT_ENV_ncclinfo="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH"
VARIANT_ENV_normrope="FINETUNE_NORM_ROPE_KERNEL=fused"
VARIANT_ENV_aten="FINETUNE_NORM_ROPE_KERNEL=aten"
mkdir -p "$WORK"

# The setting's flags: the seed setting unless SETTING_ARGS says otherwise (the 8B shape's best:
# SETTING_ARGS="--per_device_train_batch_size 1 --gradient_accumulation_steps 1 --packing true").
SETTING_ARGS=${SETTING_ARGS:---per_device_train_batch_size 1 --gradient_accumulation_steps 4}
echo "# warm-up $WARMUP, timed $STEPS two-rank steps (twice as many one-GPU steps); $SETTING_ARGS" >> "$OUT/contention.txt"

# finetune's command for SHAPE into DIR, STEPS steps logged every LOG steps.
command_for() {
  local shape=$1 dir=$2 steps=$3 log=$4
  echo "$FINETUNE --model_name $BENCH/$shape --dataset $BENCH/$shape.jsonl --max_steps $steps" \
       "$SETTING_ARGS --learning_rate 2e-4" \
       "--max_seq_length 2048 --warmup_steps 5 --logging_steps $log --output_dir $dir --overwrite_output_dir" \
       "--dtype bfloat16 --use_gradient_checkpointing true --step_planning balanced"
}

start_sampler() {  # nvidia-smi every 200 ms into $1
  nvidia-smi --query-gpu=index,utilization.gpu,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 200 > "$1" 2>/dev/null &
  echo $!
}

clock_summary() {  # mean SM clock / power of busy samples per GPU, and the throttle reasons seen
  python3 - "$1" <<'PY'
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 6 or not parts[1].isdigit() or int(parts[1]) < 50:
        continue
    rows[parts[0]].append((float(parts[2]), float(parts[3]), float(parts[4]), parts[5]))
out = []
for gpu, samples in sorted(rows.items()):
    n = len(samples)
    reasons = sorted({s[3] for s in samples})
    out.append(f"gpu{gpu} {sum(s[0] for s in samples)/n:.0f} MHz {sum(s[1] for s in samples)/n:.0f} W "
               f"{max(s[2] for s in samples):.0f} C throttle {'/'.join(reasons)} ({n} busy samples)")
print("; ".join(out) if out else "no busy samples")
PY
}

tokens_per_second() {  # tokens/s per GPU of a run's metrics.jsonl after its first (warm-up) window
  python3 - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
first, last = lines[0], lines[-1]
print(f"{(last['tokens'] - first['tokens']) / (last['elapsed_s'] - first['elapsed_s']) / int(sys.argv[2]):.0f}")
PY
}

# run SHAPE MODE [PROFILE]: one mode's run(s); prints "tok/s per GPU" (two numbers for pair).
run_mode() {
  local shape=$1 mode=$2 profile=${3:-}
  local base=${mode%%-*} variant="" tag=$shape-$mode${profile:+-profile}
  [[ "$mode" == *-* ]] && variant=${mode#*-}
  local args_var=VARIANT_ARGS_$variant env_var=VARIANT_ENV_$variant
  local extra="" envs=""
  [ -n "$variant" ] && { extra=${!args_var:-}; envs=${!env_var:-}; }
  local ranks=2 steps=$((WARMUP + STEPS)) log=$WARMUP prof=""
  [ "$base" = alone ] || [ "$base" = pair ] && { ranks=1; steps=$((2 * steps)); log=$((2 * WARMUP)); }
  if [ -n "$profile" ]; then
    if [ "$ranks" = 1 ]; then prof="--profile_start_step $((2 * PROFILE_START - 1)) --profile_steps 20"
    else prof="--profile_start_step $PROFILE_START --profile_steps 10"; fi
    steps=$(( ranks == 1 ? 2 * PROFILE_START + 19 : PROFILE_START + 9 ))
  fi
  local sampler
  sampler=$(start_sampler "$WORK/$tag.smi")
  case $base in
    alone)
      env $envs CUDA_VISIBLE_DEVICES=${ALONE_GPU:-0} $(command_for "$shape" "$WORK/$tag" $steps $log) $extra $prof \
        > "$WORK/$tag.log" 2>&1 ;;
    pair)
      env $envs CUDA_VISIBLE_DEVICES=0 $(command_for "$shape" "$WORK/$tag-a" $steps $log) $extra $prof \
        > "$WORK/$tag-a.log" 2>&1 &
      local first=$!
      env $envs CUDA_VISIBLE_DEVICES=1 $(command_for "$shape" "$WORK/$tag-b" $steps $log) $extra $prof \
        > "$WORK/$tag-b.log" 2>&1
      wait "$first" ;;
    *)
      env $envs torchrun --no-python --standalone --nproc_per_node=2 \
        $(command_for "$shape" "$WORK/$tag" $steps $log) $extra $prof > "$WORK/$tag.log" 2>&1 ;;
  esac
  kill "$sampler" 2>/dev/null
  local clocks
  clocks=$(clock_summary "$WORK/$tag.smi")
  if [ -n "$profile" ]; then
    for dir in "$WORK/$tag" "$WORK/$tag-a" "$WORK/$tag-b"; do
      for f in "$dir"/kernel_summary-rank*.txt; do
        [ -f "$f" ] || continue
        { echo "== $tag $(basename "$dir") $(basename "$f") | $clocks"; head -9 "$f"; } >> "$OUT/contention-profiles.txt"
      done
      for trace in "$dir"/profile-rank*.json; do  # the host's side of the window (bench/trace_host_summary.py)
        [ -f "$trace" ] || continue
        python3 "$(dirname "${BASH_SOURCE[0]}")/trace_host_summary.py" "$trace" >> "$OUT/trace-summaries.txt" 2>&1
        [ "${KEEP_TRACES:-0}" = 1 ] && gzip -c "$trace" > "$OUT/$tag-$(basename "$trace").gz"
      done
    done
    return
  fi
  local speed
  if [ "$base" = pair ]; then
    speed="$(tokens_per_second "$WORK/$tag-a/metrics.jsonl" 1 2>/dev/null || echo FAILED) and $(tokens_per_second "$WORK/$tag-b/metrics.jsonl" 1 2>/dev/null || echo FAILED)"
  else
    speed=$(tokens_per_second "$WORK/$tag/metrics.jsonl" $ranks 2>/dev/null || echo FAILED)
  fi
  local logs=("$WORK/$tag.log")  # this run's own logs only (a variant's tag extends this one's)
  [ "$base" = pair ] && logs=("$WORK/$tag-a.log" "$WORK/$tag-b.log")
  local graphs
  graphs=$(grep -ho "CUDA graphs: [0-9]* micro-step shapes captured, [0-9]* replays" "${logs[@]}" | head -1)
  local peak  # rank 0's peak allocated device memory, from the summary line finetune prints
  peak=$(grep -ho '"peak_memory_gib":[0-9.]*' "${logs[@]}" | head -1 | cut -d: -f2)
  echo "$shape $mode: $speed tok/s/GPU, peak ${peak:-?} GiB | ${graphs:-no graphs} | $clocks" | tee -a "$OUT/contention.txt"
  [[ "$speed" == *FAILED* ]] && tail -c 1500 "${logs[@]}" | tee -a "$OUT/contention.txt"
}

for shape in ${RUNS:-llama-3.2-1b qwen3-8b}; do
  for mode in ${MODES:-alone pair ddp ddp-onebucket}; do
    run_mode "$shape" "$mode"
  done
  if [ "${PROFILE:-0}" = 1 ]; then
    for mode in ${PROFILE_MODES:-alone pair ddp}; do run_mode "$shape" "$mode" profile; done
  fi
done
