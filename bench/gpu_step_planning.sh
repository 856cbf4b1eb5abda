#!/usr/bin/env bash
# --step_planning on the GPU machine (issue 25): the seed setting (batch 1 x accumulation 4) of
# both bench shapes on 1 and 2 GPUs, literal against balanced, each run timed over STEPS steps
# after a 10-step warm-up window (bench/bench.py, planning chosen through FINETUNE_STEP_PLANNING).
# Carry .deps (headers for the build). The device receives the session's own checkout: from a
# helper's worktree, copy the tree (git archive + .deps) into a git-ignored folder of that
# checkout (e.g. build-step-plan-src/, ignored as build*/), carry it and run the script from it.
#   bash bench/gpu_step_planning.sh build   build this tree and make the models and rows, detached
#                                           (setsid), so the command returns at once
#   bash bench/gpu_step_planning.sh wait    wait for both (up to WAIT_S, default 520 s)
#   bash bench/gpu_step_planning.sh bench   RUNS (default "qwen3-8b llama-3.2-1b") x GPUS (default
#                                           "1 2") x PLANNINGS (default "literal balanced"); the widest
#                                           run is timed over STEPS steps after 10, a run on g GPUs over
#                                           STEPS x widest/g after 10 x widest/g: the same samples
#   bash bench/gpu_step_planning.sh profile RUNS x GPUS, balanced seed setting: 10 steps from PROFILE_START
#                                           (default 21) profiled
#                                           (kernel summary per rank, rank 0's Chrome trace gzipped,
#                                           metrics.jsonl) under $OUT/profile-<shape>-<gpus>/
# Results under $OUT: summary.txt (one line per run: tokens/s per GPU, peak GiB, mean rank_imbalance;
# then the scaling = each GPU count's tokens/s per GPU over 1-GPU tokens/s) and the build log.
set -uo pipefail
phase=${1:?build|wait|bench}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/step_planning}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FINETUNE_SKIP_APT=1 FINETUNE_CMAKE_ARGS=${FINETUNE_CMAKE_ARGS:--DTORCH_CUDA_ARCH_LIST=9.0}
WORK=/tmp/step_planning_work
TREE=$WORK/tree
BENCH=/tmp/bench
SHAPES=${RUNS:-qwen3-8b llama-3.2-1b}

build_tree() {
  (cd "$TREE" && PCRE2_ROOT=$TREE/.deps GLOO_ROOT=$TREE/.deps CURL_ROOT=$TREE/.deps FINETUNE_BUILD_DIR=$TREE/build-gpu \
     FINETUNE_JOBS=${JOBS:-14} bash scripts/setup.sh) > "$WORK/build.log" 2>&1
  echo $? > "$WORK/build.rc"
}

make_inputs() {  # the bench's random-init models and log-normal rows, as bench/bench.py makes them
  (cd "$TREE/bench" && python3 - $SHAPES <<'PY'
import json, os, sys
import shapes
os.makedirs("/tmp/bench", exist_ok=True)
for shape in sys.argv[1:]:
    shapes.make_model(shape, f"/tmp/bench/{shape}")
    data = f"/tmp/bench/{shape}.jsonl"
    if not os.path.exists(data):
        with open(data, "w") as f:
            for row in shapes.make_rows(4000, shapes.SHAPES[shape][2]["vocab_size"]):
                f.write(json.dumps(row) + "\n")
PY
  ) > "$WORK/inputs.log" 2>&1
  echo $? > "$WORK/inputs.rc"
}

case "$phase" in
  build)
    rm -rf "$WORK" && mkdir -p "$TREE"
    tar -C "$ROOT" --exclude=./.before --exclude='./build*' -cf - . | tar -C "$TREE" -xf -
    export -f build_tree make_inputs; export TREE WORK SHAPES
    setsid nohup bash -c 'build_tree & make_inputs & wait' > "$WORK/jobs.log" 2>&1 < /dev/null &
    echo "build and inputs started in $WORK"
    ;;
  wait)
    deadline=$(( $(date +%s) + ${WAIT_S:-520} ))
    while [ ! -f "$WORK/build.rc" ] || [ ! -f "$WORK/inputs.rc" ]; do
      [ "$(date +%s)" -ge "$deadline" ] && { echo "still running"; tail -3 "$WORK/build.log" "$WORK/inputs.log"; exit 1; }
      sleep 5
    done
    echo "build: exit $(cat "$WORK/build.rc"), inputs: exit $(cat "$WORK/inputs.rc")" | tee -a "$OUT/summary.txt"
    tail -c 30000 "$WORK/build.log" > "$OUT/build.log"
    tail -20 "$WORK/inputs.log"
    grep -q '^0$' "$WORK/build.rc" && grep -q '^0$' "$WORK/inputs.rc"
    ;;
  bench)
    LOGS=$WORK/logs
    mkdir -p "$LOGS"
    FINETUNE=$TREE/build-gpu/finetune
    most_gpus=1
    for gpus in ${GPUS:-1 2}; do [ "$gpus" -gt "$most_gpus" ] && most_gpus=$gpus; done
    for shape in $SHAPES; do
      for gpus in ${GPUS:-1 2}; do
        for planning in ${PLANNINGS:-literal balanced}; do
          tag=$shape-$gpus-$planning
          mkdir -p "$LOGS/$tag"  # bench.py writes its JSON there
          # Every GPU count is timed over the same samples: a run on fewer GPUs takes proportionally
          # more steps (and warm-up steps), so that its timed steps cover exactly the global batches
          # the widest run times. Otherwise the runs compare different rows, whose mean length alone
          # moves tokens/s by several percent over 60 steps of 4 samples.
          factor=$(( most_gpus / gpus ))
          FINETUNE_STEP_PLANNING=$planning python3 "$TREE/bench/bench.py" --finetune "$FINETUNE" --shapes "$shape" \
            --settings seed --gpus "$gpus" --skip_reference --steps $(( ${STEPS:-60} * factor )) \
            --warmup $(( 10 * factor )) --work "$BENCH" \
            --out "$LOGS/$tag" > "$LOGS/$tag.log" 2>&1
          python3 - "$LOGS/$tag/bench-$shape.json" "$BENCH/ours-$shape-seed-lora-$gpus/metrics.jsonl" \
            "$shape $gpus $planning" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    ours = json.load(open(sys.argv[1]))[0]["ours"]
    lines = [json.loads(l) for l in open(sys.argv[2])][1:]  # after the warm-up window
    imbalance = sum(l["rank_imbalance"] for l in lines) / len(lines)
    print(f"{sys.argv[3]}: {ours['tokens_per_s_per_gpu']:.0f} tok/s/GPU, peak {ours['peak_memory_gib']} GiB, "
          f"rank_imbalance {imbalance:.3f}")
except Exception as e:  # the run failed: its log is under $LOGS
    print(f"{sys.argv[3]}: FAILED ({e})")
PY
          grep -h "step planning" "$BENCH/ours-$shape-seed-lora-$gpus.log" 2>/dev/null | head -1
        done
      done
    done
    python3 - "$OUT/summary.txt" <<'PY' | tee -a "$OUT/summary.txt"
import re, sys
speed = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\d) (\w+): (\d+) tok/s/GPU", line)
    if m:
        speed[(m.group(1), int(m.group(2)), m.group(3))] = float(m.group(4))
for (shape, gpus, planning), value in sorted(speed.items()):
    one = speed.get((shape, 1, planning))
    if gpus > 1 and one:
        print(f"scaling {shape} {planning} {gpus} GPUs: {value / one:.3f} ({gpus}-GPU {value:.0f} / 1-GPU {one:.0f} tok/s/GPU)")
PY
    for f in "$LOGS"/*.log; do echo "===== $f"; tail -c 3000 "$f"; done > "$OUT/bench_logs.txt"
    ;;
  profile)
    for shape in $SHAPES; do
      for gpus in ${GPUS:-1 2}; do
        run=$WORK/profile-$shape-$gpus
        launch=(); [ "$gpus" -gt 1 ] && launch=(torchrun --no-python --standalone --nproc_per_node="$gpus")
        "${launch[@]}" "$TREE/build-gpu/finetune" --model_name "$BENCH/$shape" --dataset "$BENCH/$shape.jsonl" \
          --max_steps $(( ${PROFILE_START:-21} + 9 )) --per_device_train_batch_size 1 --gradient_accumulation_steps 4 --learning_rate 2e-4 \
          --max_seq_length 2048 --warmup_steps 5 --logging_steps 10 --output_dir "$run" --overwrite_output_dir \
          --dtype bfloat16 --use_gradient_checkpointing true --profile_start_step "${PROFILE_START:-21}" --profile_steps 10 \
          ${EXTRA_ARGS:-} > "$run.log" 2>&1
        mkdir -p "$OUT/profile-$shape-$gpus"
        cp "$run"/kernel_summary-rank0.txt "$OUT/profile-$shape-$gpus/" 2>/dev/null
        tail -c 4000 "$run.log" >> "$OUT/profile-$shape-$gpus/kernel_summary-rank0.txt"
        gzip -c "$run/profile/profile-rank0.json" > "$OUT/profile-$shape-$gpus/profile-rank0.json.gz" 2>/dev/null ||
          gzip -c "$(find "$run" -name 'profile-rank0.json' | head -1)" > "$OUT/profile-$shape-$gpus/profile-rank0.json.gz"
        echo "== $shape $gpus GPU"; head -12 "$OUT/profile-$shape-$gpus/kernel_summary-rank0.txt"
      done
    done
    ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
