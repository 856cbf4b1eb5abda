#!/usr/bin/env bash
# Ours against the real peers (Unsloth; transformers + PEFT + Liger kernels) on the GPU machine, in the
# same call, one shape per device call (results under $OUT). Carry .whl (bench/peer_wheels.sh fills it
# here) and .deps (the build's headers):
#   bash bench/gpu_peers.sh 1b      build (incremental), then bench.py on the Llama-3.2-1B shape
#   bash bench/gpu_peers.sh 8b      the same on the Qwen3-8B shape
# BENCH_SETTINGS (default seed,best), BENCH_VARIANTS (lora), BENCH_PEERS (unsloth,liger), BENCH_STEPS (20),
# BENCH_REF_STEPS (10), BENCH_TIMEOUT (300 s per run: a stuck peer is recorded as failed, inside the device
# call's 10 minutes) and BENCH_FLAGS (e.g. --peer_quick: one "best" configuration per peer) pass through.
set -uo pipefail
phase=${1:?1b|8b}
OUT=${OUT:-/tmp/gpu_peers}
mkdir -p "$OUT"
export PCRE2_ROOT=$PWD/.deps GLOO_ROOT=$PWD/.deps CURL_ROOT=$PWD/.deps FINETUNE_SKIP_APT=1 NCCL_NVLS_ENABLE=0
export FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
export LD_LIBRARY_PATH=$PWD/.deps/lib:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
start=$(date +%s)
bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { echo "FAIL: build"; tail -40 "$OUT/setup.log"; exit 1; }
echo "build seconds $(( $(date +%s) - start ))"
# The peers' wheels; --target keeps them out of the machine's own site-packages (nothing there is replaced).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || { echo "FAIL: pip install of .whl (see pip.log)"; tail -5 "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 - <<'EOF' | tee "$OUT/versions.txt"
import importlib.metadata as m
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "MISSING"
names = ("unsloth", "unsloth_zoo", "liger_kernel", "trl", "datasets", "bitsandbytes", "torchao", "transformers",
         "peft", "torch")
print("packages:", ", ".join(f"{n} {version(n)}" for n in names))
EOF
source build/env.sh
case "$phase" in
  1b) shape=llama-3.2-1b ;;
  8b) shape=qwen3-8b ;;
  *) echo "unknown phase $phase (1b, 8b)"; exit 2 ;;
esac
python3 bench/bench.py --finetune "$FINETUNE_BIN" --shapes "$shape" --settings "${BENCH_SETTINGS:-seed,best}" \
  --variants "${BENCH_VARIANTS:-lora}" --peers "${BENCH_PEERS:-unsloth,liger}" --gpus 1 --steps "${BENCH_STEPS:-20}" \
  --warmup 5 --ref_steps "${BENCH_REF_STEPS:-10}" --timeout "${BENCH_TIMEOUT:-300}" --work "${BENCH_WORK:-/tmp/bench}" \
  --out "$OUT" ${BENCH_FLAGS:-} 2>&1 \
  | tee "$OUT/bench-$phase.txt" | tail -40
status=${PIPESTATUS[0]}
# The peers' logs stay on the machine: keep the lines that say which paths Unsloth chose, and each log's end.
for log in "${BENCH_WORK:-/tmp/bench}"/{unsloth,liger}-"$shape"-*.log; do
  [ -f "$log" ] || continue
  { echo "== $log"; grep -a -E "^(🦥|Unsloth)" "$log" | head -15; echo "-- last lines"; tail -n 25 "$log"; } \
    >> "$OUT/peer-logs.txt"
done
[ "$status" = 0 ] && echo "PASS: bench finished ($shape)" || echo "FAIL: bench exited $status ($shape)"
exit "$status"
