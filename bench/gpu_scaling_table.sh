#!/usr/bin/env bash
# Issue 25's table in one device call per shape: ours, the transformers + PEFT loop and Unsloth at
# the seed setting (batch 1 x accumulation 4) on 1 and 2 GPUs, and ours alone at EXTRA_SETTINGS
# (e.g. "qlora:seed lora:best"). Every GPU count of ours is timed over the same samples: the one-GPU
# run takes twice the timed and warm-up steps of the two-rank run (bench/gpu_step_planning.sh's
# rule). The loop and Unsloth time PEER_STEPS steps after their warm-up, on 1 and on 2 GPUs. Unsloth's
# peak memory is over its 5 warm-up + PEER_STEPS steps, so ours is also given at that step, over the
# same samples: the default PEER_STEPS 15 makes it 20, a step that ours logs on 1 GPU (every 20) and
# on 2 (every 10).
# Needs the tree of `bench/gpu_step_planning.sh build` (FINETUNE) and carries .whl (the peers'
# wheels, installed under /tmp/site, nothing in the machine's site-packages replaced).
#   SHAPE=qwen3-8b EXTRA_SETTINGS="qlora:seed lora:best" bash bench/gpu_scaling_table.sh
#   SHAPE=llama-3.2-1b PEERS=unsloth bash bench/gpu_scaling_table.sh
#   SKIP_LOOP=1 SHAPE=qwen3-8b bash bench/gpu_scaling_table.sh     (Unsloth without the loop)
# Results: $OUT/table-$SHAPE.txt (one line per run and the scaling of each), the JSON of each run.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/gpu_scaling_table}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
FINETUNE=${FINETUNE:-/tmp/step_planning_work/tree/build-gpu/finetune}
SHAPE=${SHAPE:-qwen3-8b}
STEPS=${STEPS:-60}
PEER_STEPS=${PEER_STEPS:-15}
BENCH=${BENCH:-/tmp/bench}
TABLE=$OUT/table-$SHAPE.txt

if [ -n "${PEERS-unsloth}" ] && [ ! -d /tmp/site/unsloth ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.whl/*.whl > "$OUT/pip.log" 2>&1 || { echo "FAIL: pip install of .whl (see pip.log)"; exit 1; }
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

run_bench() {  # run_BENCH TAG GPUS VARIANT SETTING [bench.py flags...]: one bench.py run, its rows in TABLE
  local tag=$1 gpus=$2 variant=$3 setting=$4
  shift 4
  local factor=$(( 2 / gpus ))
  python3 "$ROOT/bench/bench.py" --finetune "$FINETUNE" --shapes "$SHAPE" --settings "$setting" \
    --variants "$variant" --gpus "$gpus" --steps $(( STEPS * factor )) --warmup $(( 10 * factor )) \
    --ref_steps "$PEER_STEPS" --timeout "${BENCH_TIMEOUT:-300}" --work "$BENCH" --out "$OUT/$tag" "$@" \
    > "$OUT/$tag.log" 2>&1
  python3 - "$OUT/$tag/bench-$SHAPE.json" "$SHAPE $setting $variant $gpus" <<'PY' | tee -a "$TABLE"
import json, sys
try:
    row = json.load(open(sys.argv[1]))[0]
except Exception as e:  # the run failed: its log is beside the JSON
    print(f"{sys.argv[2]}: FAILED ({e})")
    sys.exit()
parts = []
for name in ("ours", "reference", "unsloth"):
    r = row.get(name) or {}
    if "tokens_per_s_per_gpu" in r:
        parts.append(f"{name} {r['tokens_per_s_per_gpu']:.0f} tok/s/GPU peak {r.get('peak_memory_gib')} GiB")
        steps_run = (row.get("unsloth") or {}).get("steps_run")
        if name == "ours" and steps_run:  # JSON keys are strings
            at = r.get("peak_memory_gib_by_step", {}).get(str(steps_run), "not logged")
            parts.append(f"ours peak over unsloth's {steps_run} steps {at} GiB")
    elif name in row:
        parts.append(f"{name} FAILED ({str(r.get('error', r))[:160]})")
print(f"{sys.argv[2]}: " + "; ".join(parts))
PY
}

peer_flags=(--peers "${PEERS-unsloth}")
[ -z "${PEERS-unsloth}" ] && peer_flags=(--skip_reference)
[ -n "${SKIP_LOOP:-}" ] && peer_flags+=(--skip_reference)  # the peers without the loop
for gpus in 1 2; do run_bench "seed-lora-$gpus" "$gpus" lora seed "${peer_flags[@]}"; done
for extra in ${EXTRA_SETTINGS:-}; do
  for gpus in 1 2; do run_bench "${extra/:/-}-$gpus" "$gpus" "${extra%%:*}" "${extra#*:}" --skip_reference; done
done
python3 - "$TABLE" <<'PY' | tee -a "$TABLE"
import re, sys
speed = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+ \S+ \S+) (\d): (.*)", line)
    if not m:
        continue
    for name, value in re.findall(r"(\w+) (\d+) tok/s/GPU", m.group(3)):
        speed[(m.group(1), int(m.group(2)), name)] = float(value)
for (run, gpus, name), value in sorted(speed.items()):
    one = speed.get((run, 1, name))
    if gpus == 2 and one:
        print(f"scaling {run} {name}: {value / one:.3f} ({one:.0f} -> {value:.0f} tok/s/GPU)")
PY
