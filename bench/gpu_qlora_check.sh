#!/usr/bin/env bash
# Issue 12 on the GPU machine, in phases that each fit one device call (results under $OUT):
#   bash bench/gpu_qlora_check.sh build   build, then the CUDA unit tests (NF4 and blockwise kernels
#                                         vs the CPU path, 8-bit AdamW kernel) and a QLoRA DDP-free smoke run
#   bash bench/gpu_qlora_check.sh 1b      QLoRA correctness check + benchmark, Llama-3.2-1B shape
#   bash bench/gpu_qlora_check.sh 8b      the same, Qwen3-8B shape (+ memory at 2048 tokens)
# (1b/8b: BENCH_SETTINGS, BENCH_VARIANTS, BENCH_STEPS, BENCH_REF_STEPS, BENCH_FLAGS pass through to bench.py;
#  BENCH_QLORA_CHECK=0 skips the correctness check, e.g. on a second call for the same shape.)
# bitsandbytes is not installed there: its wheel, stripped to the CPU and CUDA 13.0 libraries, is
# carried in .deps/py (git-ignored), with trl.
set -uo pipefail
phase=${1:?build|1b|8b}
OUT=${OUT:-/tmp/gpu_qlora}
mkdir -p "$OUT"
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1 NCCL_NVLS_ENABLE=0
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
export LD_LIBRARY_PATH=$PWD/.deps/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$PWD/.deps/py:${PYTHONPATH:-}
WORK=${BENCH_WORK:-/tmp/bench}
case "$phase" in
  build)
    start=$(date +%s)
    bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
    echo "build seconds $(( $(date +%s) - start ))" | tee "$OUT/build.txt"
    python3 -c "import bitsandbytes, torch; print('bitsandbytes', bitsandbytes.__version__, 'torch', torch.__version__)" \
      | tee -a "$OUT/build.txt"
    source build/env.sh
    export FINETUNE_FIXTURES=$PWD/build/fixtures
    for module in quant adamw8bit dora; do
      [ -f "tests/reference/make_${module}_fixtures.py" ] || continue
      python3 "tests/reference/make_${module}_fixtures.py" "$FINETUNE_FIXTURES/$module" > "$OUT/fixtures-$module.log" 2>&1 \
        || echo "fixture generator $module failed: see fixtures-$module.log"
    done
    TORCH_SHOW_CPP_STACKTRACES=1 build/finetune_core_tests --gtest_brief=1 \
      --gtest_filter='Nf4*:Blockwise*:Quant*:AdamW8bit*:*Cuda*:*Gpu*:HalfPrecision*:Dora*' > "$OUT/unit.txt" 2>&1
    grep -v "unknown function" "$OUT/unit.txt" | tail -40
    for shape in llama-3.2-1b qwen3-8b; do  # one optimizer step: fused 32-bit vs 8-bit AdamW
      build/finetune_optimizer_bench --shape "$shape" --steps 200 | tee -a "$OUT/optimizer_step.json"
    done
    ;;
  1b|8b)
    source build/env.sh
    shape=$([ "$phase" = 1b ] && echo llama-3.2-1b || echo qwen3-8b)
    python3 bench/bench.py --finetune "$FINETUNE_BIN" --shapes "$shape" --settings "${BENCH_SETTINGS:-seed,best}" \
      --variants "${BENCH_VARIANTS:-lora,qlora,qlora8}" $([ "${BENCH_QLORA_CHECK:-1}" = 1 ] && echo --qlora_check) --gpus 1 --steps "${BENCH_STEPS:-20}" \
      --warmup 5 --ref_steps "${BENCH_REF_STEPS:-6}" --work "$WORK" --out "$OUT" ${BENCH_FLAGS:-} 2>&1 | tail -60 \
      | tee "$OUT/bench-$phase.txt"
    # load time and load peak memory of each of our runs (the banner's first line)
    grep -H "finetune | model" "$WORK"/ours-"$shape"-*.log 2>/dev/null | tee "$OUT/load-$phase.txt"
    ;;
esac
