#!/usr/bin/env bash
# The GPU test suite, in one device call (logs, gtest JSON and parity JSON under $OUT):
#   1. build: scripts/setup.sh into $BUILD_DIR (ninja, Release, the carried .deps headers);
#      SKIP_BUILD=1 when another script of the same call has built that directory already
#   2. finetune_cuda_tests (tests/cuda/): the fused kernels against their ATen compositions, fused
#      AdamW, the NCCL communicator with every visible GPU as a rank (its collective cases need 2);
#      CUDA_TEST_FILTER (a gtest filter) runs some of them
#   3. the CUDA cases of finetune_core_tests (--gtest_filter='*Cuda*': the 8-bit AdamW kernel, the
#      NF4 and blockwise 8-bit kernels, the KV-cache forward, DoRA); those that compare with
#      bitsandbytes' fixtures only where bitsandbytes imports (carried in .deps/py)
#   4. bench/gpu_parity.py: bf16 logits against transformers in bf16 and fp32, for PARITY_SHAPES
#      (default llama-3.2-1b; empty: skipped), models and rows made under $BENCH_WORK
# One PASS/FAIL line per step (also in $OUT/summary.txt); exits non-zero if any step failed.
#   bash bench/gpu_cuda_tests.sh
#   SKIP_BUILD=1 BUILD_DIR=build-gpu bash bench/gpu_cuda_tests.sh
#   CUDA_TEST_FILTER='FusedNormRope.*:*MicroStepGraphs*' bash bench/gpu_cuda_tests.sh   (step 2's cases
#   by a gtest filter; the script takes no arguments)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-/tmp/gpu_cuda_tests}
BUILD_DIR=${BUILD_DIR:-build-gpu}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
WORK=${BENCH_WORK:-/tmp/bench}
PARITY_SHAPES=${PARITY_SHAPES-llama-3.2-1b}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}  # seconds per test binary: a hang becomes a FAIL, not a lost call
mkdir -p "$OUT" "$WORK"
: > "$OUT/summary.txt"
export PCRE2_ROOT=$ROOT/.deps GLOO_ROOT=$ROOT/.deps CURL_ROOT=$ROOT/.deps FINETUNE_SKIP_APT=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # NVLink multicast stays off
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
export LD_LIBRARY_PATH=$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}
export PYTHONPATH=$ROOT/.deps/py:${PYTHONPATH:-}
export FINETUNE_BUILD_DIR=$BUILD_DIR

failed=()
result() {  # step name, exit status
  local line="PASS $1"
  if [ "$2" -ne 0 ]; then
    line="FAIL $1 (exit $2)"
    failed+=("$1")
  fi
  echo "$line" | tee -a "$OUT/summary.txt"
}
# A gtest log's outcome: the first message line of each failure or skip (which check, or why
# skipped), then gtest's closing summary (counts, failed and skipped cases), or the log's last
# lines where the binary died before it.
gtest_outcome() {
  grep -E -A1 ": (Failure|Skipped)$" "$1" | grep -v "^--$" | head -40
  if grep -q '^\[==========\] .* ran\.' "$1"; then sed -n '/^\[==========\] .* ran\./,$p' "$1"; else tail -5 "$1"; fi
}

{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"; } \
  > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
if ! grep -q "^GPU " "$OUT/machine.txt"; then  # every step below would only skip
  result "a GPU is visible (nvidia-smi -L)" 1
  exit 1
fi

# 1. build
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  start=$(date +%s)
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1
  status=$?
  echo "build seconds $(( $(date +%s) - start )) ($BUILD_DIR)" | tee -a "$OUT/summary.txt"
  result build "$status"
  if [ "$status" -ne 0 ]; then
    tail -40 "$OUT/setup.log"
    exit 1
  fi
fi
if [ -f "$BUILD_DIR/env.sh" ]; then
  # shellcheck disable=SC1091
  source "$BUILD_DIR/env.sh"
fi
PYTHON=${FINETUNE_PYTHON:-python3}
FINETUNE_BIN=${FINETUNE_BIN:-$BUILD_DIR/finetune}
export FINETUNE_FIXTURES=$BUILD_DIR/fixtures
mkdir -p "$FINETUNE_FIXTURES"

# 2. tests/cuda
if [ -x "$BUILD_DIR/finetune_cuda_tests" ]; then
  timeout -k 10 "$TEST_TIMEOUT" "$BUILD_DIR/finetune_cuda_tests" --gtest_filter="${CUDA_TEST_FILTER:-*}" \
    --gtest_output="json:$OUT/finetune_cuda_tests.json" > "$OUT/finetune_cuda_tests.log" 2>&1
  status=$?
  gtest_outcome "$OUT/finetune_cuda_tests.log"
  result finetune_cuda_tests "$status"
else
  echo "no $BUILD_DIR/finetune_cuda_tests: is FINETUNE_WITH_CUDA on? ($(grep -s '^NCCL_LIBRARY' "$BUILD_DIR/CMakeCache.txt"))"
  result finetune_cuda_tests 1
fi

# 3. the CUDA cases of finetune_core_tests
filter='*Cuda*'
if "$PYTHON" -c "import bitsandbytes" > /dev/null 2>&1; then
  "$PYTHON" tests/reference/make_quant_fixtures.py "$FINETUNE_FIXTURES/quant" > "$OUT/fixtures-quant.log" 2>&1 \
    || echo "quant fixture generator failed: see fixtures-quant.log (its tests will fail)"
else
  filter="$filter-Nf4Cuda.DequantizeEqualsCpu:Nf4Cuda.QuantizeIsBitsandbytesOnCuda:Blockwise8bitCuda.*"
  echo "NOT RUN Nf4Cuda.DequantizeEqualsCpu, Nf4Cuda.QuantizeIsBitsandbytesOnCuda, Blockwise8bitCuda.*:" \
    "bitsandbytes does not import (carry .deps/py; bench/gpu_qlora_check.sh runs them)" | tee -a "$OUT/summary.txt"
fi
timeout -k 10 "$TEST_TIMEOUT" "$BUILD_DIR/finetune_core_tests" --gtest_filter="$filter" \
  --gtest_output="json:$OUT/finetune_core_tests_cuda.json" > "$OUT/finetune_core_tests_cuda.log" 2>&1
status=$?
gtest_outcome "$OUT/finetune_core_tests_cuda.log"
result "finetune_core_tests --gtest_filter='$filter'" "$status"

# 4. logits parity with transformers
for shape in ${PARITY_SHAPES//,/ }; do
  "$PYTHON" bench/shapes.py model --shape "$shape" --out "$WORK/$shape" > "$OUT/make-$shape.log" 2>&1 \
    && { [ -f "$WORK/$shape.jsonl" ] || "$PYTHON" bench/shapes.py data --shape "$shape" --out "$WORK/$shape.jsonl"; } \
    && "$PYTHON" bench/gpu_parity.py --finetune "$FINETUNE_BIN" --model "$WORK/$shape" --data "$WORK/$shape.jsonl" \
         --work "$WORK" > "$OUT/parity-$shape.json" 2> "$OUT/parity-$shape.log"
  status=$?
  tail -3 "$OUT/parity-$shape.log"
  result "gpu_parity $shape" "$status"
done

echo "----" | tee -a "$OUT/summary.txt"
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu_cuda_tests: all steps passed" | tee -a "$OUT/summary.txt"
  exit 0
fi
echo "gpu_cuda_tests: FAILED: ${failed[*]}" | tee -a "$OUT/summary.txt"
exit 1
