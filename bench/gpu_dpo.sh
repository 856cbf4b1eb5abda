#!/usr/bin/env bash
# Preference training on a 2-GPU machine (issue 32), in one device call, after the build and the
# bench models of bench/gpu_step_planning.sh (its `build` then `wait`, in this call or an earlier
# one on the same warm machine; carry .deps and .whl):
#   1. the preference graph tests on the GPU: finetune_cuda_tests --gtest_filter=CUDA_TEST_FILTER
#      (default: *PreferenceMicroStepGraphs.*, bitwise against padded eager, captured ahead, and
#      against fp32 to bf16 rounding); CUDA_TESTS=0 skips them
#   2. TRL's wheels (trl, datasets, dill, multiprocess from .whl) into /tmp/site; nothing of the
#      machine's own site-packages is replaced
#   3. bench/dpo_bench.py: ours (graphed, and eager on 1 GPU) and TRL's DPOTrainer + PEFT on the
#      Llama-3.2-1B and Qwen3-8B shapes, 1 and 2 GPUs, batch 1 x accumulation 4; the 2-GPU run of
#      ours timed over STEPS steps after 5 (default: 200 on the 1B, 60 on the 8B: dpo_bench.py's
#      DEFAULT_STEPS), the 1-GPU runs over the same pairs
# Time: the tests and the bench share CALL_S seconds (default 510) counted from CALL_START (epoch
# seconds; default: this script's start, so export CALL_START=$(date +%s) first when the build
# runs in the same call); the bench skips what no longer fits (see dpo_bench.py) and stops a run
# at what is left. Everything wanted takes ~7-8 min on H100s: with a build in the same call the
# last runs (TRL on 2 GPUs, ours eager on Qwen3-8B) are skipped.
# RESUME=1 (a second call on the same warm machine): the runs that finished in the previous call
# (their results kept in $BENCH_WORK/dpo_bench.json) are not run again; CUDA_TESTS=0 then.
#   OUT=... bash bench/gpu_dpo.sh
# Results under $OUT: summary.txt (appended: versions, the tests' outcome, the bench's summary),
# dpo_bench.json (every run: tokens/s per GPU, steps/s, peak GiB, wall time, graph log lines),
# cuda_tests.log (the tests' own lines and gtest's closing summary), run_logs.txt (each run's
# log end).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu_dpo}
BUILD=${BUILD:-/tmp/step_planning_work/tree/build-gpu}
WORK=${BENCH_WORK:-/tmp/bench}
start=${CALL_START:-$(date +%s)}
left() { echo $(( ${CALL_S:-510} - ($(date +%s) - start) )); }
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
[ -x "$BUILD/finetune" ] || { echo "FAIL: no $BUILD/finetune (run bench/gpu_step_planning.sh build, then wait)" \
  | tee -a "$OUT/summary.txt"; exit 1; }

if [ "${CUDA_TESTS:-1}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 "${CUDA_TEST_TIMEOUT:-180}" "$BUILD/finetune_cuda_tests" \
    --gtest_filter="${CUDA_TEST_FILTER:-*PreferenceMicroStepGraphs.*}" > "$WORK/cuda_tests.full.log" 2>&1
  status=$?
  { grep -E "^\[ graphs|: Failure$|Expected|Which is|^  Actual|relative|\[  (FAILED|PASSED|SKIPPED) " \
      "$WORK/cuda_tests.full.log" | head -150
    sed -n '/^\[==========\] .* ran\./,$p' "$WORK/cuda_tests.full.log"; tail -3 "$WORK/cuda_tests.full.log"; } \
    > "$OUT/cuda_tests.log"
  echo "cuda tests (${CUDA_TEST_FILTER:-*PreferenceMicroStepGraphs.*}): exit $status, $(( $(date +%s) - start )) s" \
    | tee -a "$OUT/summary.txt"
fi

ls "$ROOT"/.whl/{trl,datasets,dill,multiprocess}-*.whl > /dev/null 2>&1 ||
  echo "no TRL wheels under $ROOT/.whl (bash bench/peer_wheels.sh; carry .whl): TRL runs will fail" | tee -a "$OUT/summary.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$ROOT"/.whl/{trl,datasets,dill,multiprocess}-*.whl > "$WORK/pip.log" 2>&1 || tail -3 "$WORK/pip.log"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi -L
  python3 -c "
import importlib.metadata as m
names = ('torch', 'transformers', 'peft', 'trl', 'datasets', 'accelerate')
print('packages:', ', '.join(f'{n} {m.version(n)}' for n in names))"; } 2>&1 | tee -a "$OUT/summary.txt"

budget=$(( $(left) - 10 ))  # 10 s for the logs below
echo "bench budget ${budget} s" | tee -a "$OUT/summary.txt"
python3 "$ROOT/bench/dpo_bench.py" --finetune "$BUILD/finetune" --shapes "${SHAPES:-llama-3.2-1b,qwen3-8b}" \
  --gpus 1,2 ${STEPS:+--steps "$STEPS"} --warmup 5 --ref_steps "${REF_STEPS:-8}" --ref_warmup 2 \
  --budget_s "$budget" --work "$WORK" --out "$OUT" ${RESUME:+--previous "$WORK/dpo_bench.json"} ${BENCH_FLAGS:-} \
  > "$WORK/dpo_bench.out" 2>&1
status=$?
cat "$OUT/dpo_summary.txt" >> "$OUT/summary.txt" 2>/dev/null
rm -f "$OUT/dpo_summary.txt"
[ "$status" = 0 ] || { echo "dpo_bench.py exited $status:"; tail -20 "$WORK/dpo_bench.out"; } | tee -a "$OUT/summary.txt"
for log in "$WORK"/dpo-*.log; do
  [ -f "$log" ] || continue
  echo "===== $log"
  grep -a -E "CUDA graphs|step planning|Error|error" "$log" | head -8
  tail -c 1500 "$log"; echo
done > "$OUT/run_logs.txt"
echo "wall $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
cat "$OUT/summary.txt"
