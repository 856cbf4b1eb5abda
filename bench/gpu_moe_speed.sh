#!/usr/bin/env bash
# Issue 28's speed checks in one device call (carry .deps): this tree built by
# `bench/gpu_step_planning.sh build` (skipped with REUSE_BUILD=1 on a machine still warm from it),
# the GPU test suite on that build (bench/gpu_cuda_tests.sh: every tests/cuda case, the fused q/k
# norm + RoPE and the graphed MoE micro-steps among them), then bench/moe_flop_efficiency.py on
# SHAPE (default qwen3-30b-a3b-8l: Qwen3-30B-A3B's per-layer shapes) at each of DEPTHS (default
# "2 8" layers) for each of VARIANTS (default "eager graphed aten"):
#   eager     FINETUNE_CUDA_GRAPH_MAX_TOKENS=2048: 4 packed rows of 2048 run without CUDA graphs
#   graphed   the default: mixture-of-experts micro-steps graphed up to 16,384 tokens, Qwen3's q/k
#             RMSNorm + RoPE as one kernel
#   normrope  FINETUNE_NORM_ROPE_KERNEL=fused (the default since it was measured against aten)
#   rows8     graphed at 8 packed rows of 2048 a micro-step
#   aten      FINETUNE_NORM_ROPE_KERNEL=aten (ATen's q/k RMSNorm, then the fused RoPE)
# A variant may join parts with +: normrope+rows8.
# A step's time and FLOPs are a per-token constant (embedding, LM head, optimizer) plus one term
# per layer, so two depths give each variant's ratio at FULL_LAYERS (default 48, the real model's):
# (a + b L) / (c + d L) from the two measured depths, in $OUT/summary.txt. PROFILE=1 also profiles
# the last variant at the last depth (steps 10-11: kernel_summary in $OUT). After the first variant
# (unless SKIP_PARITY=1), bench/gpu_parity.py on the shallowest model with the ATen q/k norms and
# with FINETUNE_NORM_ROPE_KERNEL=fused.
#   bash bench/gpu_moe_speed.sh
#   REUSE_BUILD=1 SKIP_TESTS=1 VARIANTS="graphed normrope" bash bench/gpu_moe_speed.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu_moe_speed}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
TREE=/tmp/step_planning_work/tree
FINETUNE=$TREE/build-gpu/finetune
SHAPE=${SHAPE:-qwen3-30b-a3b-8l}
FULL_LAYERS=${FULL_LAYERS:-48}
read -ra DEPTH_LIST <<< "${DEPTHS:-2 8}"
read -ra VARIANT_LIST <<< "${VARIANTS:-eager graphed aten}"

if [ -z "${REUSE_BUILD:-}" ]; then
  # With the bench's models of INPUT_SHAPES (default qwen3-8b: what bench/gpu_rank_contention.sh
  # runs next on the same warm machine), made beside the build.
  RUNS=${INPUT_SHAPES:-qwen3-8b} bash "$ROOT/bench/gpu_step_planning.sh" build > "$OUT/build-start.txt" 2>&1
fi
WAIT_S=${WAIT_S:-480} OUT=$OUT bash "$ROOT/bench/gpu_step_planning.sh" wait > "$OUT/wait.txt" 2>&1 ||
  { echo "build failed or unfinished: $OUT/wait.txt, $OUT/build.log"; exit 1; }
# shellcheck disable=SC1091
source "$TREE/build-gpu/env.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
  SKIP_BUILD=1 BUILD_DIR=$TREE/build-gpu PARITY_SHAPES=${PARITY_SHAPES-} OUT=$OUT/cuda \
    bash "$ROOT/bench/gpu_cuda_tests.sh" > "$OUT/cuda.txt" 2>&1
  status=$?
  passed=$(grep -c '^PASS' "$OUT/cuda/summary.txt")
  failed=$(grep -c '^FAIL' "$OUT/cuda/summary.txt")
  echo "gpu_cuda_tests: exit $status ($passed PASS, $failed FAIL)" | tee -a "$OUT/summary.txt"
fi

# variant_settings VARIANT: the variant's environment into VARIANT_ENV and its packed rows a micro-step
# into VARIANT_ROWS (a variant may join parts with +, e.g. normrope+rows8).
variant_settings() {
  local part
  VARIANT_ENV=() VARIANT_ROWS=4
  for part in ${1//+/ }; do
    case "$part" in
      eager) VARIANT_ENV+=(FINETUNE_CUDA_GRAPH_MAX_TOKENS=2048) ;;
      graphed) ;;
      normrope) VARIANT_ENV+=(FINETUNE_NORM_ROPE_KERNEL=fused) ;;
      aten) VARIANT_ENV+=(FINETUNE_NORM_ROPE_KERNEL=aten) ;;
      rows8) VARIANT_ROWS=8 ;;
      *) echo "unknown variant part $part" >&2; return 2 ;;
    esac
  done
}

variant_run() {  # variant_run VARIANT DEPTH: one efficiency measurement, its JSON in $OUT
  local variant=$1 depth=$2
  variant_settings "$variant" || return 2
  env "${VARIANT_ENV[@]}" python3 "$ROOT/bench/moe_flop_efficiency.py" --finetune "$FINETUNE" --shape "$SHAPE" \
    --layers "$depth" --rows "$VARIANT_ROWS" --steps 30 --logging_steps 5 --work /tmp/moe_speed \
    > "$OUT/$variant-$depth.json" 2> "$OUT/$variant-$depth.err"
  python3 - "$OUT/$variant-$depth.json" "$variant" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
ours = d["ours"] or {}
print(f"{sys.argv[2]} {d['layers']} layers: {ours.get('tokens_per_s', 0):,.0f} tok/s, peak {ours.get('peak_memory_gib')}"
      f" GiB, ratio to FLOP time {d.get('ratio_to_flop_time', float('nan')):.3f} (GEMM rate {d['gemm_rate_tflops']:.0f})")
PY
}

parity() {  # parity DEPTH: bf16 logits against transformers on the DEPTH-layer model, with the ATen
  # q/k norms and with the fused norm + RoPE (bench/gpu_parity.py's ratio to transformers' bf16 error)
  local dir=/tmp/moe_speed/$SHAPE-$1layers kernel
  for kernel in aten fused; do
    FINETUNE_NORM_ROPE_KERNEL=$kernel python3 "$ROOT/bench/gpu_parity.py" --finetune "$FINETUNE" \
      --model "$dir/model" --data "$dir/rows.jsonl" --work "/tmp/moe_speed_parity_$kernel" \
      > "$OUT/parity-$kernel.json" 2> "$OUT/parity-$kernel.err"
    echo "parity, q/k norms $kernel: exit $? $(tail -c 300 "$OUT/parity-$kernel.json")" | tee -a "$OUT/summary.txt"
  done
}

for variant in "${VARIANT_LIST[@]}"; do
  for depth in "${DEPTH_LIST[@]}"; do variant_run "$variant" "$depth"; done
  [ "$variant" = "${VARIANT_LIST[0]}" ] && [ -z "${SKIP_PARITY:-}" ] && parity "${DEPTH_LIST[0]}"
  if [ "${#DEPTH_LIST[@]}" -ge 2 ]; then
    python3 - "$OUT/$variant-${DEPTH_LIST[0]}.json" "$OUT/$variant-${DEPTH_LIST[-1]}.json" "$FULL_LAYERS" "$variant" \
      <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
full = int(sys.argv[3])
la, lb = a["layers"], b["layers"]
ta, tb = 1 / a["ours"]["tokens_per_s"], 1 / b["ours"]["tokens_per_s"]  # seconds a token
fa, fb = a["flops"], b["flops"]                                            # FLOPs a token
rate = max(a["gemm_rate_tflops"], b["gemm_rate_tflops"]) * 1e12
per_layer_t, per_layer_f = (tb - ta) / (lb - la), (fb - fa) / (lb - la)
t = ta + per_layer_t * (full - la)
f = fa + per_layer_f * (full - la)
print(f"{sys.argv[4]} at {full} layers (from {la} and {lb}): {1 / t:,.0f} tok/s, ratio to FLOP time "
      f"{t / (f / rate):.3f}; one layer alone {per_layer_t / (per_layer_f / rate):.3f}")
PY
  fi
done

if [ -n "${PROFILE:-}" ]; then
  last=${VARIANT_LIST[-1]}
  depth=${DEPTH_LIST[-1]}
  # The measured run's command with 14 steps, into its own directory, steps 10-11 profiled.
  command=$(python3 - "$OUT/$last-$depth.json" <<'PY'
import json, sys
cmd = [str(c) for c in json.load(open(sys.argv[1]))["ours"]["command"]]
cmd[cmd.index("--max_steps") + 1] = "14"
cmd[cmd.index("--output_dir") + 1] = "/tmp/moe_speed_profile"
print(" ".join(cmd + ["--profile_start_step", "10", "--profile_steps", "2"]))
PY
)
  variant_settings "$last"
  # shellcheck disable=SC2086
  env "${VARIANT_ENV[@]}" $command > "$OUT/profile.log" 2>&1
  cp /tmp/moe_speed_profile/kernel_summary-rank0.txt "$OUT/kernel_summary-$last-$depth.txt"
  head -8 "$OUT/kernel_summary-$last-$depth.txt" | tee -a "$OUT/summary.txt"
fi
