#!/usr/bin/env bash
# Issue 14 on the GPU machine, in one device call (results under $OUT):
#   bash bench/gpu_generate_check.sh [build] [unit] [bench]   (default: all three, in this order)
#     build   scripts/setup.sh with the carried headers (.deps: PCRE2, Gloo, libcurl; git-ignored)
#     unit    the CUDA unit tests of generation (cached vs uncached forward in bf16) and the model
#     bench   bench/gpu_generate.py: decode tokens/s, Llama-3.2-1B and Qwen3-8B shapes, batch 1 and
#             16, ours vs transformers' generate in the same run (BENCH_SHAPES, BENCH_BATCHES to
#             narrow; BENCH_FLAGS="--profile" adds a decode-step profile, "--skip_reference" ours only)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_generate}
mkdir -p "$OUT"
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1 NCCL_NVLS_ENABLE=0
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
phases=${*:-build unit bench}
for phase in $phases; do
  case "$phase" in
    build)
      start=$(date +%s)
      bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
      echo "build seconds $(( $(date +%s) - start ))" | tee "$OUT/build.txt"
      ;;
    unit)
      source build/env.sh
      # (the NF4/blockwise CUDA tests need bitsandbytes' fixtures: bench/gpu_qlora_check.sh runs them)
      build/finetune_core_tests --gtest_brief=1 --gtest_filter='KVCache*:*Cuda*:*Gpu*:-Nf4Cuda*:Blockwise8bitCuda*' \
        > "$OUT/unit.txt" 2>&1
      grep -E "^\[ *(PASSED|FAILED|SKIPPED) |Failure|error" "$OUT/unit.txt" | head -30
      ;;
    bench)
      source build/env.sh
      python3 bench/gpu_generate.py --finetune "$FINETUNE_BIN" --shapes "${BENCH_SHAPES:-llama-3.2-1b,qwen3-8b}" \
        --batches "${BENCH_BATCHES:-1,16}" --out "$OUT" ${BENCH_FLAGS:-} 2>&1 | tail -40 | tee "$OUT/bench.txt"
      for summary in "$OUT"/profile-*/kernel_summary-rank0.txt; do
        [ -f "$summary" ] && { echo "== $summary"; head -30 "$summary"; }
      done
      ;;
    *) echo "unknown phase $phase (build, unit, bench)"; exit 2 ;;
  esac
done
