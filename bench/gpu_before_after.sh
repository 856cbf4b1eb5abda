#!/usr/bin/env bash
# A change measured against the commit before it, on one GPU, in the same device session: both
# trees are built side by side, then the GPU suite and the bf16 parity checks run on the new tree
# and bench/bench.py times both trees on the same settings, alternating. Carry .deps (headers for
# the build) and .before (the old tree: `git archive REV | tar -x -C .before`).
#   bash bench/gpu_before_after.sh build    copy both trees under /tmp and start their builds,
#                                           detached (setsid), so the command returns at once
#   bash bench/gpu_before_after.sh wait     wait for both builds (up to WAIT_S, default 540 s)
#   bash bench/gpu_before_after.sh check    tests/cuda, the CUDA core cases, bf16 logits and
#                                           training parity on the new tree (bench/gpu_cuda_tests.sh)
#   bash bench/gpu_before_after.sh bench    BENCH_RUNS (default "llama-3.2-1b:best qwen3-8b:seed"),
#                                           each timed before, after, after, before
# Results under $OUT: summary.txt (one line per step and per timed run) and the build and check logs.
set -uo pipefail
phase=${1:?build|wait|check|bench}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/before_after}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FINETUNE_SKIP_APT=1 FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
TREES=/tmp/trees

build_tree() {  # name: configure + build /tmp/trees/<name> into its build-gpu/
  local tree=$TREES/$1
  (cd "$tree" && PCRE2_ROOT=$tree/.deps GLOO_ROOT=$tree/.deps CURL_ROOT=$tree/.deps FINETUNE_BUILD_DIR=$tree/build-gpu \
     FINETUNE_JOBS=8 bash scripts/setup.sh) > "$TREES/build-$1.log" 2>&1
  echo $? > "$TREES/build-$1.rc"
}

case "$phase" in
  build)
    rm -rf "$TREES" && mkdir -p "$TREES/after"
    tar -C "$ROOT" --exclude=./.before --exclude='./build*' -cf - . | tar -C "$TREES/after" -xf -
    cp -r "$ROOT/.before" "$TREES/before" && cp -r "$ROOT/.deps" "$TREES/before/.deps"
    export -f build_tree; export TREES
    setsid nohup bash -c 'build_tree before & build_tree after & wait' > "$TREES/builds.log" 2>&1 < /dev/null &
    echo "builds started in $TREES"
    ;;
  wait)
    deadline=$(( $(date +%s) + ${WAIT_S:-540} ))
    while [ ! -f "$TREES/build-before.rc" ] || [ ! -f "$TREES/build-after.rc" ]; do
      [ "$(date +%s)" -ge "$deadline" ] && { echo "builds still running"; tail -2 "$TREES"/build-*.log; exit 1; }
      sleep 5
    done
    for name in before after; do
      echo "build $name: exit $(cat "$TREES/build-$name.rc")" | tee -a "$OUT/summary.txt"
      cp "$TREES/build-$name.log" "$OUT/"
    done
    grep -q '^0$' "$TREES/build-before.rc" && grep -q '^0$' "$TREES/build-after.rc"
    ;;
  check)
    # gpu_cuda_tests.sh writes a file per step; one combined log comes back ($OUT/check.log).
    CHECK=/tmp/before_after_check
    cd "$TREES/after" && OUT=$CHECK SKIP_BUILD=1 BUILD_DIR=$TREES/after/build-gpu bash bench/gpu_cuda_tests.sh
    status=$?
    source "$TREES/after/build-gpu/env.sh"
    python3 bench/gpu_train_parity.py --finetune "$FINETUNE_BIN" --model /tmp/bench/llama-3.2-1b \
      --data /tmp/bench/llama-3.2-1b.jsonl --work /tmp/bench > "$CHECK/train_parity.json" 2> "$CHECK/train_parity.log"
    train_status=$?
    tail -5 "$CHECK/train_parity.json"
    cat "$CHECK/summary.txt" >> "$OUT/summary.txt"
    echo "gpu_train_parity llama-3.2-1b: exit $train_status" | tee -a "$OUT/summary.txt"
    for f in "$CHECK"/*; do echo "===== $f"; tail -c 20000 "$f"; done > "$OUT/check.log"
    [ "$status" -eq 0 ] && [ "$train_status" -eq 0 ]
    ;;
  bench)
    # Few files come back from a device call: each run's JSON and log stay under $LOGS, and one
    # line per run goes to summary.txt (tokens/s per GPU and peak GiB).
    LOGS=/tmp/before_after_logs
    mkdir -p "$LOGS"
    for run in ${BENCH_RUNS:-llama-3.2-1b:best qwen3-8b:seed}; do
      shape=${run%%:*}; setting=${run##*:}
      for name in before after after before; do
        tag=$shape-$setting-$name-$(date +%s)
        mkdir -p "$LOGS/$tag"
        python3 "$TREES/after/bench/bench.py" --finetune "$TREES/$name/build-gpu/finetune" --shapes "$shape" \
          --settings "$setting" --skip_reference --steps "${BENCH_STEPS:-40}" --work /tmp/bench --out "$LOGS/$tag" \
          > "$LOGS/$tag.log" 2>&1
        python3 - "$LOGS/$tag/bench-$shape.json" "$name $shape $setting" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    ours = json.load(open(sys.argv[1]))[0]["ours"]
    print(f"{sys.argv[2]}: {ours['tokens_per_s_per_gpu']:.0f} tok/s/GPU, peak {ours['peak_memory_gib']} GiB")
except Exception as e:  # the run failed: its log is under $LOGS
    print(f"{sys.argv[2]}: FAILED ({e})")
PY
      done
    done
    ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
